"""The drafter's spans (specmesh/telemetry/tracing.py has the set-up).

Glossary: the verifier opens a session's Draft stream with the trace context of the
orchestrator's `session` span; each proposal becomes a `draft` span under it (request.id,
drafter.method, draft.budget, draft.tree_size), timed around the drafter's own work. A stream
without a trace context makes no spans.
"""

from __future__ import annotations

from specmesh.telemetry import tracing


def session_parent(metadata):
    """The span context a session's `draft` spans go under, or None (no spans)."""
    return tracing.extract(metadata) if tracing.enabled() else None


def draft(parent, request_id: str, method: str, budget: int, tree_size: int, context_tokens: int,
          started_ns: int, ended_ns: int) -> None:
    tracing.span_at("draft", parent, started_ns, ended_ns, {
        "request.id": request_id, "drafter.method": method, "draft.budget": budget,
        "draft.tree_size": tree_size, "draft.context_tokens": context_tokens,
    })
