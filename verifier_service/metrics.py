"""The verifier's metrics (specmesh/telemetry/metrics.py has the instruments), served at /metrics
on `--metrics-port` (0 = no metrics at all).

Glossary, per verification step of a session (its StepStats, from the engine loop's thread):
- goodput tokens: the tokens the step emitted (accepted + bonus, cut at EOS or max_new_tokens),
  labelled with this verifier's address; the token a prefill produces is not counted.
- accepted tokens per step: draft nodes accepted (0 for a step without a tree); acceptance by
  depth d: steps that accepted at least d; wasted draft tokens: tree nodes not accepted.
- drafter latency: how long the step's tree took to arrive (StepStats.draft_s), for steps that
  asked a drafter for one (budget > 0), labelled with the drafter method.
- gauges, read at each scrape: sessions holding a KV slot (active sessions), sessions waiting
  for one (queue depth), KV slots in use.
The loop calls `step` once per session per step: counters are plain tallies, attribute dicts are
built once; two histogram records are the SDK's whole share of the hot path.
"""

from __future__ import annotations

from specmesh.stats import StepStats
from specmesh.telemetry.metrics import Metrics, method_attributes

_sink: VerifierMetrics | None = None


class VerifierMetrics:
    def __init__(self, metrics: Metrics, address: str, loop, runner, slots: int):
        self.metrics, self.address = metrics, address
        metrics.goodput_tokens.add(0, address)
        metrics.wasted_draft_tokens.add(0)
        metrics.gauge("active_sessions", lambda: len(loop.sessions))
        metrics.gauge("queue_depth", lambda: len(loop.waiting))
        metrics.gauge("kv_slots_used", lambda: slots - runner.free_slots)

    def step(self, session, stats: StepStats, emitted: int) -> None:
        m = self.metrics
        m.goodput_tokens.add(emitted, self.address)
        m.accepted_tokens_per_step.record(stats.accepted)
        for depth in range(1, stats.accepted + 1):
            m.acceptance_by_depth.add(1, depth)
        if stats.tree_size:
            m.wasted_draft_tokens.add(stats.tree_size - stats.accepted)
        if stats.budget > 0:
            m.drafter_latency.record(stats.draft_s, method_attributes(session.spec.drafter_method))


def setup(port: int, address: str, loop, runner, slots: int) -> VerifierMetrics | None:
    """Serves the verifier's metrics on `port` (0: none, and every hook stays a no-op)."""
    global _sink
    if port <= 0:
        return None
    metrics = Metrics("verifier")
    _sink = VerifierMetrics(metrics, address, loop, runner, slots)
    metrics.serve(port)
    return _sink


def step(session, stats: StepStats, emitted: int) -> None:
    """A session's verification step (engine loop thread)."""
    if _sink is not None:
        _sink.step(session, stats, emitted)
