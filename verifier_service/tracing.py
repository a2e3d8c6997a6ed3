"""The verifier's spans (specmesh/telemetry/tracing.py has the set-up).

Glossary:
- session trace: the trace context the orchestrator sent with the Session stream (its `session`
  span). The verifier's spans of that session are its children, and the session's Draft stream
  to the drafter carries the same context, so the drafter's spans join the trace too.
- prefill span: a session's prefill (request.id, session.epoch, prefill.tokens = prompt + the
  tokens generated before a failover, batch.size = sessions prefilled together).
- step span: one verification step of a session, the batched forward that verified its tree
  (request.id, session.epoch, step.index, step.budget, step.tree_size, step.accepted_tokens,
  batch.size, batch.forward_index, batch.tree_tokens, drafter.method, step.draft_ms).
The engine loop is a thread: these spans are made after the fact with the loop's own timings and
an explicit parent, never as context managers across threads. A session without a trace context
(tracing off here or at the orchestrator) makes no spans.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.context import Context

from specmesh.stats import StepStats
from specmesh.telemetry import tracing


@dataclass(frozen=True)
class SessionTrace:
    parent: Context  # the orchestrator's session span
    metadata: tuple[tuple[str, str], ...]  # the same context, for the session's Draft stream


def session_trace(metadata) -> SessionTrace | None:
    """From the Session stream's invocation metadata; None when it carries no trace context."""
    if not tracing.enabled():
        return None
    carrier = tracing.carrier_of(metadata)
    parent = tracing.extract(carrier)
    if parent is None:
        return None
    return SessionTrace(parent, tuple((k, carrier[k]) for k in ("traceparent", "tracestate") if k in carrier))


def drafter_metadata(session) -> tuple[tuple[str, str], ...] | None:
    trace = session.trace
    return trace.metadata if trace is not None else None


def prefill(sessions: list, start_ns: int, end_ns: int) -> None:
    for session in sessions:
        if session.trace is not None:
            spec = session.spec
            tracing.span_at("prefill", session.trace.parent, start_ns, end_ns, {
                "request.id": spec.request_id, "session.epoch": spec.epoch, "batch.size": len(sessions),
                "prefill.tokens": len(spec.prompt_token_ids) + len(spec.generated_token_ids),
            })


def step(session, stats: StepStats, step_index: int, start_ns: int, end_ns: int) -> None:
    if session.trace is None:
        return
    spec = session.spec
    tracing.span_at("step", session.trace.parent, start_ns, end_ns, {
        "request.id": spec.request_id, "session.epoch": spec.epoch, "step.index": step_index,
        "step.budget": stats.budget, "step.tree_size": stats.tree_size, "step.accepted_tokens": stats.accepted,
        "batch.size": stats.batch_size, "batch.forward_index": stats.forward_index,
        "batch.tree_tokens": stats.batch_tree_tokens, "drafter.method": spec.drafter_method if session.speculating else "none",
        "step.draft_ms": stats.draft_s * 1000,
    })
