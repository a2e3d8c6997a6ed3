"""The orchestrator's spans of one request (specmesh/telemetry/tracing.py has the set-up).

Glossary:
- request span: the root of the request's spans here, a child of the caller's span when the
  client sent a trace context, or, for a request resumed by id, of the request span that first
  admitted it (its context is stored in the Redis record): one trace per request, however often it
  is resumed. Attributes: request.id, request.prompt_tokens, request.max_new_tokens,
  request.drafter_method, request.budget, request.resumed, and at the end request.status,
  request.finish_reason, request.generated_tokens, request.steps, request.accepted_tokens,
  request.failovers, goodput.predicted_accepted / goodput.observed_accepted (per speculating step).
- admission span: from the call's arrival (validation, the Redis record) until the first verifier
  session opens; a rejected request ends here with the error.
- session span: one per verifier epoch (session.epoch, session.verifier, session.drafter,
  drafter.method, session.budget, session.outcome = finished | lost | cancelled | error). Its
  context goes to the verifier, whose prefill and step spans (and the drafter's draft spans)
  are its children. Each committed step adds a `step` event with the goodput controller's
  prediction for it (goodput.predicted_accepted) next to what was accepted.
Spans use explicit parent contexts, never the ambient one, so concurrent requests on the event
loop cannot mix; with tracing off every call here is a no-op on non-recording spans.
"""

from __future__ import annotations

import json
import sys
import time

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from specmesh.serving import ServiceError
from specmesh.store.requests import NewRequest
from specmesh.telemetry import tracing

_OUTCOMES = {"VerifierLost": "lost", "CancelledError": "cancelled", "GeneratorExit": "cancelled"}


class RequestTrace:
    def __init__(self, carrier=None):
        """`carrier`: the caller's gRPC metadata or HTTP headers (its trace context, if any)."""
        self.started_ns = time.time_ns()
        self.parent = tracing.extract(carrier) if tracing.enabled() else None
        self.request: trace.Span = trace.INVALID_SPAN
        self.admission: trace.Span | None = None
        self.session: trace.Span | None = None
        self._context: Context | None = None

    def open(self, stored: str | None = None) -> dict[str, str]:
        """Start the request and admission spans; `stored`: a resumed request's trace context from
        its record (JSON carrier; "" if it has none), else the caller's is the parent. Returns the
        carrier to store in a new record."""
        if self._context is not None or not tracing.enabled():
            return {}
        parent = _stored_parent(stored) if stored else None
        resumed = stored is not None
        self.request = tracing.tracer().start_span("request", context=parent or self.parent, kind=SpanKind.SERVER,
                                                   start_time=self.started_ns, attributes={"request.resumed": resumed})
        self._context = trace.set_span_in_context(self.request)
        self.admission = tracing.tracer().start_span("admission", context=self._context, start_time=self.started_ns)
        return tracing.inject(self._context)

    def describe(self, request: NewRequest) -> None:
        if self.request.is_recording():
            self.request.set_attributes({
                "request.id": request.request_id, "request.prompt_tokens": len(request.prompt_token_ids),
                "request.max_new_tokens": request.max_new_tokens, "request.drafter_method": request.drafter,
                "request.budget": request.budget,
            })

    def fail(self, error: ServiceError) -> None:
        """Admission refused the request."""
        self.open()
        self.end("rejected", error.code.name.lower(), {}, error)

    # ---- sessions -------------------------------------------------------------------------------

    def session_started(self, epoch: int, verifier: str, drafter: str, method: str, budget: int,
                        generated: int) -> tuple[tuple[str, str], ...] | None:
        """A session opens on `verifier`; returns the gRPC metadata that carries its context."""
        if self._context is None:
            return None
        self._end(self.admission)
        self.admission = None
        self.request.set_attribute("request.drafter_method", method)  # "auto" resolved
        self.session = tracing.tracer().start_span("session", context=self._context, kind=SpanKind.CLIENT, attributes={
            "session.epoch": epoch, "session.verifier": verifier, "session.drafter": drafter, "drafter.method": method,
            "session.budget": budget, "session.resumed_tokens": generated,
        })
        return tracing.metadata(trace.set_span_in_context(self.session))

    def step(self, s, steering, request_id: str) -> None:
        """A committed step (common_pb2.StepStats), with the controller's prediction for it (read
        before the controller learns from the step)."""
        if self.session is None or not self.session.is_recording():
            return
        attributes = {"batch.forward_index": s.forward_index, "step.budget": s.budget,
                      "step.tree_size": s.tree_size, "step.accepted_tokens": s.accepted}
        predicted = _predicted(steering, request_id, s.budget)
        if predicted is not None:
            attributes["goodput.predicted_accepted"] = predicted
        self.session.add_event("step", attributes)

    def session_ended(self) -> None:
        """Call in the session's `finally`: the exception on its way out, if any, is the outcome."""
        if self.session is None:
            return
        error = sys.exc_info()[1]
        outcome = "finished" if error is None else _OUTCOMES.get(type(error).__name__, "error")
        self.session.set_attribute("session.outcome", outcome)
        if outcome in ("lost", "error"):
            self.session.set_status(Status(StatusCode.ERROR, f"{outcome}: {type(error).__name__} {error}".strip()))
        self.session.end()
        self.session = None

    # ---- the end --------------------------------------------------------------------------------

    def end(self, status: str, reason: str, stats: dict, error: ServiceError | None = None) -> None:
        """The request settled (finished, cancelled, failed) or was rejected."""
        if self._context is None:
            return
        if self.session is not None:  # the session's generator was not closed first (a client gone)
            self.session.set_attribute("session.outcome", status)
        for span in (self.admission, self.session):
            self._end(span, error)
        self.admission = self.session = None
        if self.request.is_recording():
            self.request.set_attributes({"request.status": status, "request.finish_reason": reason, **_stats(stats)})
            if status in ("failed", "rejected"):
                self.request.set_status(Status(StatusCode.ERROR, str(error) if error else reason))
        self.request.end()
        self._context = None

    @staticmethod
    def _end(span: trace.Span | None, error: ServiceError | None = None) -> None:
        if span is not None:
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, f"{error.code.name}: {error}"))
            span.end()


def _stored_parent(stored: str) -> Context | None:
    try:
        return tracing.extract(json.loads(stored))
    except (ValueError, TypeError, AttributeError):  # a damaged record starts a new trace
        return None


def _predicted(steering, request_id: str, budget: int) -> float | None:
    """The acceptance model's expected accepted tokens at `budget` (None: not speculating, or not tracked)."""
    try:
        tracked = steering.controller.requests.get(request_id)
        return tracked.acceptance.expected(budget) if tracked is not None and budget > 0 else None
    except (AttributeError, ValueError):  # tracing never breaks a request
        return None


def _stats(stats: dict) -> dict:
    keys = {"generated_tokens": "request.generated_tokens", "steps": "request.steps", "accepted_tokens": "request.accepted_tokens",
            "failovers": "request.failovers", "predicted_accepted": "goodput.predicted_accepted",
            "observed_accepted": "goodput.observed_accepted", "mean_budget": "request.mean_budget"}
    return {name: stats[key] for key, name in keys.items() if key in stats}
