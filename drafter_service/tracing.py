"""The drafter's spans (specmesh/telemetry/tracing.py has the set-up).

Glossary: the verifier opens a session's Draft stream with the trace context of the
orchestrator's `session` span; each proposal becomes a `draft` span under it (request.id,
drafter.method, draft.budget, draft.tree_size), timed around the drafter's own work. A stream
without a trace context makes no spans.
"""

from __future__ import annotations

import time

from specmesh.telemetry import tracing


class DraftTrace:
    def __init__(self, metadata, request_id: str, method: str):
        self.parent = tracing.extract(metadata) if tracing.enabled() else None
        self.request_id, self.method = request_id, method

    def propose(self, drafter, context_ids: list[int], budget: int):
        """drafter.propose(...), traced."""
        if self.parent is None:
            return drafter.propose(self.request_id, context_ids, budget)
        started = time.time_ns()
        tree = drafter.propose(self.request_id, context_ids, budget)
        tracing.span_at("draft", self.parent, started, time.time_ns(), {
            "request.id": self.request_id, "drafter.method": self.method, "draft.budget": budget,
            "draft.tree_size": tree.num_nodes, "draft.context_tokens": len(context_ids),
        })
        return tree
