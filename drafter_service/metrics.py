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

import time

from specmesh.telemetry.metrics import Metrics

_sink: DrafterMetrics | None = None


class DrafterMetrics:
    def __init__(self, metrics: Metrics, servicer):
        self.metrics = metrics
        metrics.gauge("active_sessions", lambda: len(servicer.sessions))
        for transport in ("grpc", "data_plane"):
            metrics.draft_sessions.add(0, transport)


class TimedDrafter:
    """A drafter whose `propose` is timed into the drafter latency histogram; everything else
    passes through."""

    def __init__(self, drafter, metrics: Metrics, method: str):
        self._drafter, self._histogram, self._attributes = drafter, metrics.drafter_latency, {"method": method}

    def propose(self, request_id: str, context_ids: list[int], budget: int):
        started = time.perf_counter()
        tree = self._drafter.propose(request_id, context_ids, budget)
        self._histogram.record(time.perf_counter() - started, self._attributes)
        return tree

    def __getattr__(self, name: str):
        return getattr(self._drafter, name)


def setup(port: int, servicer) -> DrafterMetrics | None:
    """Serves the drafter's metrics on `port` (0: none, and `timed` leaves drafters as they are)."""
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


def timed(drafter, method: str):
    """The drafter for one Draft stream, its proposals timed (as is when metrics are off)."""
    return drafter if _sink is None else TimedDrafter(drafter, _sink.metrics, method)
