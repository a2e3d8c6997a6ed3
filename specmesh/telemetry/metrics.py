"""Metrics with OpenTelemetry, exposed for Prometheus at `/metrics` on every service.

Glossary:
- contract: the Prometheus names below (PROMETHEUS); the Grafana dashboard and the k8s tests
  query exactly these. The OTel instrument names are dotted and carry a unit; the Prometheus
  exporter turns `specmesh.ttft` with unit `s` into `specmesh_ttft_seconds`, appends `_total` to
  counters and drops annotation units such as `{token}`.
- service label: every series carries `service` = orchestrator | verifier | drafter, a resource
  attribute copied onto each series by the exporter (so recording passes no attribute for it).
- tally: a counter kept as plain numbers on the hot path (adding is a dict update) and reported
  to OTel by an observable (asynchronous) counter when Prometheus scrapes. Histograms record
  through the SDK (a few µs each).
- gauge: an observable gauge; the service gives a function read at every scrape.
Stats stay plain dataclasses elsewhere (DESIGN.md §2); the per-service sinks that read them are
orchestrator/metrics.py, verifier_service/metrics.py and drafter_service/metrics.py.
OTEL_SDK_DISABLED=true turns metrics off with the rest of the SDK (`/metrics` answers, empty).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.exposition import choose_encoder

log = logging.getLogger("specmesh.metrics")
SERVICES = ("orchestrator", "verifier", "drafter")
SERVICE_LABEL = "service"
METER_NAME = "specmesh"

# The contract: Prometheus name -> type (the Grafana dashboard in k8s/ queries these; its test checks).
PROMETHEUS = {
    "specmesh_goodput_tokens_total": "counter",
    "specmesh_accepted_tokens_per_step": "histogram",
    "specmesh_acceptance_by_depth_total": "counter",
    "specmesh_wasted_draft_tokens_total": "counter",
    "specmesh_draft_sessions_total": "counter",
    "specmesh_ttft_seconds": "histogram",
    "specmesh_tpot_seconds": "histogram",
    "specmesh_e2e_latency_seconds": "histogram",
    "specmesh_queue_depth": "gauge",
    "specmesh_active_sessions": "gauge",
    "specmesh_kv_slots_used": "gauge",
    "specmesh_drafter_latency_seconds": "histogram",
    "specmesh_budget": "histogram",
}

LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TPOT_BUCKETS_S = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
DRAFT_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
TOKEN_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32, 64)
BUDGET_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128)

GAUGES = {  # name -> (OTel instrument, unit, description)
    "queue_depth": ("specmesh.queue_depth", "{request}",
                    "orchestrator: requests admitted with no verifier yet; verifier: sessions waiting for a KV slot"),
    "active_sessions": ("specmesh.active_sessions", "{session}",
                        "orchestrator: requests running; verifier: sessions holding a KV slot; drafter: draft streams open"),
    "kv_slots_used": ("specmesh.kv_slots_used", "{slot}", "verifier: KV-cache slots in use"),
}


@functools.cache
def method_attributes(method: str) -> dict:
    """{"method": method}, built once per drafter method: a histogram record on a step's path
    takes a ready attribute dict (the SDK neither copies nor changes it)."""
    return {"method": method}


class Tally:
    """A monotonic count per value of one label (or none), reported by an observable counter.
    `add` is a dict update: safe from any one thread while another scrapes (the GIL)."""

    def __init__(self, label: str | None = None):
        self.label = label
        self.counts: dict = {}
        self._attributes: dict = {}  # label value -> its attribute dict, built once

    def add(self, amount: float, key=None) -> None:
        self.counts[key] = self.counts.get(key, 0) + amount

    def observe(self, options: CallbackOptions | None = None) -> list[Observation]:
        return [Observation(value, self._attributes_of(key)) for key, value in list(self.counts.items())]

    def _attributes_of(self, key) -> dict | None:
        if self.label is None:
            return None
        if key not in self._attributes:
            self._attributes[key] = {self.label: key}
        return self._attributes[key]


class Metrics:
    """One service's instruments, its OTel meter provider and the Prometheus registry it feeds."""

    def __init__(self, service: str):
        if service not in SERVICES:
            raise ValueError(f"service must be one of {SERVICES}, got {service!r}")
        self.service = service
        self.registry = CollectorRegistry(auto_describe=True)
        reader = PrometheusMetricReader(registry=self.registry, scope_info_enabled=False,
                                        resource_attribute_filter=lambda key: key == SERVICE_LABEL)
        self.provider = MeterProvider(metric_readers=[reader], resource=_resource(service))
        meter = self.meter = self.provider.get_meter(METER_NAME)
        self._server = None

        self.goodput_tokens = self._tally("specmesh.goodput_tokens", "{token}", "verifier",
                                          "tokens produced by verification steps (accepted + bonus, as delivered)")
        self.acceptance_by_depth = self._tally("specmesh.acceptance_by_depth", "{step}", "depth",
                                               "verification steps that accepted at least `depth` draft tokens")
        self.wasted_draft_tokens = self._tally("specmesh.wasted_draft_tokens", "{token}", None,
                                               "draft tree nodes verified but not accepted")
        self.draft_sessions = self._tally("specmesh.draft_sessions", "{session}", "transport",
                                          "drafter: sessions begun, by transport (grpc: the Draft stream; data_plane: plain TCP)")
        self.accepted_tokens_per_step = meter.create_histogram(
            "specmesh.accepted_tokens_per_step", "{token}", "draft tokens accepted by one verification step",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS)
        self.ttft = meter.create_histogram("specmesh.ttft", "s", "time to first token, per request",
                                           explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S)
        self.tpot = meter.create_histogram("specmesh.tpot", "s", "time per output token after the first, per request",
                                           explicit_bucket_boundaries_advisory=TPOT_BUCKETS_S)
        self.e2e_latency = meter.create_histogram("specmesh.e2e_latency", "s", "admission to last token, per request",
                                                  explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S)
        self.drafter_latency = meter.create_histogram(
            "specmesh.drafter_latency", "s", "verifier: wait for a draft tree; drafter: time to propose one",
            explicit_bucket_boundaries_advisory=DRAFT_BUCKETS_S)
        self.budget = meter.create_histogram("specmesh.budget", "{node}", "draft nodes asked for per step (0 = none)",
                                             explicit_bucket_boundaries_advisory=BUDGET_BUCKETS)

    def _tally(self, name: str, unit: str, label: str | None, description: str) -> Tally:
        tally = Tally(label)
        self.meter.create_observable_counter(name, [tally.observe], unit, description)
        return tally

    def gauge(self, name: str, read: Callable[[], float | Iterable[tuple[float, dict]]]) -> None:
        """An observable gauge of GAUGES; `read()` gives a number, or (value, attributes) pairs."""
        instrument, unit, description = GAUGES[name]

        def observe(options: CallbackOptions) -> list[Observation]:
            value = read()
            if isinstance(value, (int, float)):
                return [Observation(value)]
            return [Observation(v, attributes) for v, attributes in value]

        self.meter.create_observable_gauge(instrument, [observe], unit, description)

    # ---- exposition -------------------------------------------------------------------------------

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """(body, content type) for a scrape with this Accept header: the Prometheus text format,
        or OpenMetrics when asked for (as prometheus_client's own server answers)."""
        encode, content_type = choose_encoder(accept)
        return encode(self.registry), content_type

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        """Serves /metrics on `port` from a daemon thread (the verifier and the drafter)."""
        self._server, _ = start_http_server(port, host, registry=self.registry)
        log.info("metrics at http://%s:%s/metrics", host, port)

    def close(self) -> None:
        if self._server is not None:
            threading.Thread(target=self._server.shutdown, daemon=True).start()
            self._server = None
        self.provider.shutdown()


def _resource(service: str) -> Resource:
    detected = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    ours = {SERVICE_LABEL: service}
    if str(detected.attributes.get("service.name", "")).startswith("unknown_service"):
        ours["service.name"] = f"specmesh-{service}"
    return detected.merge(Resource(ours))
