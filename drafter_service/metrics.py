"""The drafter's metrics (specmesh/telemetry/metrics.py has the instruments), served at /metrics on
`--metrics-port` (0 = no metrics at all).

Glossary:
- drafter latency: the time one `propose` takes here (the drafter's own work, no network),
  labelled with the method; the verifier reports the same name for the whole round trip.
- active sessions: Draft streams open (one per verifier session that speculates), read at each
  scrape.
- draft sessions: sessions begun, by transport: `grpc` (the Draft stream) or `data_plane`
  (data_plane.py): a verifier that reaches this drafter over gRPC has not seen its data plane.
"""

from __future__ import annotations

from specmesh.telemetry.metrics import Metrics, method_attributes

_sink: DrafterMetrics | None = None


class DrafterMetrics:
    def __init__(self, metrics: Metrics, servicer):
        self.metrics = metrics
        metrics.gauge("active_sessions", lambda: len(servicer.sessions))
        for transport in ("grpc", "data_plane"):
            metrics.draft_sessions.add(0, transport)


def setup(port: int, servicer) -> DrafterMetrics | None:
    """Serves the drafter's metrics on `port` (0: none, and every hook stays a no-op)."""
    global _sink
    if port <= 0:
        return None
    metrics = Metrics("drafter")
    _sink = DrafterMetrics(metrics, servicer)
    metrics.serve(port)
    return _sink


def session_begun(transport: str) -> None:
    if _sink is not None:
        _sink.metrics.draft_sessions.add(1, transport)


def proposal(method: str, seconds: float) -> None:
    """One `propose` of a drafter of `method`, timed around the drafter's own work."""
    if _sink is not None:
        _sink.metrics.drafter_latency.record(seconds, method_attributes(method))
