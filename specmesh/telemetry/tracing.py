"""End-to-end tracing with OpenTelemetry: one trace per request, across the client SDK, the
orchestrator, the verifier and the drafter.

Glossary:
- trace context: the W3C `traceparent` (+ `tracestate`) of a span; it crosses a process boundary
  as gRPC metadata (the Generate call, the Session stream, the Draft stream) and is stored in the
  request's Redis record, so a request resumed after a failover or an orchestrator restart joins
  the trace it started in.
- carrier: the trace context as a dict of header name -> value (inject / extract).
- span at: a span made after the fact with an explicit parent context and explicit start and end
  times (the verifier's engine loop is a thread: its spans come from its own timings).
- setup: per process, from the standard variables: OTEL_SDK_DISABLED (`true` = no tracing at
  all), OTEL_SERVICE_NAME (default specmesh-<role>), OTEL_TRACES_SAMPLER (+ _ARG; default
  parentbased_always_on), OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (OTLP
  over gRPC; unset = no OTLP export), OTEL_TRACES_EXPORTER=none (no OTLP even with an endpoint).
  Spans always go to the Redis span store (span_store.py). Every exporter sits behind its own
  BatchSpanProcessor: export runs on the processor's thread, a full queue drops spans, and an
  unreachable collector costs a request nothing (OTLP timeout 2 s unless OTEL_EXPORTER_OTLP_TIMEOUT).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping

from opentelemetry import propagate, trace
from opentelemetry.context import Context

log = logging.getLogger("specmesh.tracing")
TRACER_NAME = "specmesh"
STORE_DELAY_MS = 1000  # the span store is written at least once a second
OTLP_TIMEOUT_S = 2.0
_enabled = False
_tracer: trace.Tracer | None = None


def sdk_disabled() -> bool:
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def enabled() -> bool:
    """True once `setup` installed a tracer provider in this process."""
    return _enabled


def tracer() -> trace.Tracer:
    return _tracer or trace.get_tracer(TRACER_NAME)


def setup(role: str, redis_url: str, keys, instance: str = "") -> bool:
    """Install this process's tracer provider (role: orchestrator, verifier, drafter); False when
    OTEL_SDK_DISABLED=true. Call once, at service start."""
    global _enabled, _tracer
    if sdk_disabled():
        return False
    import redis
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from specmesh.telemetry.span_store import RedisSpanExporter

    provider = TracerProvider(resource=_resource(role, instance))  # the sampler comes from OTEL_TRACES_SAMPLER
    client = redis.Redis.from_url(redis_url, socket_timeout=1.0, socket_connect_timeout=1.0)
    provider.add_span_processor(BatchSpanProcessor(RedisSpanExporter(client, keys), schedule_delay_millis=STORE_DELAY_MS))
    otlp = _otlp_exporter()
    if otlp is not None:
        provider.add_span_processor(BatchSpanProcessor(otlp))
    trace.set_tracer_provider(provider)
    _enabled, _tracer = True, provider.get_tracer(TRACER_NAME)
    log.info("tracing on (%s%s)", "Redis span store", " + OTLP" if otlp is not None else "")
    return True


def _resource(role: str, instance: str):
    from opentelemetry.sdk.resources import Resource

    detected = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    ours = {"service.instance.id": instance} if instance else {}
    if str(detected.attributes.get("service.name", "")).startswith("unknown_service"):
        ours["service.name"] = f"specmesh-{role}"
    return detected.merge(Resource(ours))


def _otlp_exporter():
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not endpoint or os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return None
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    timeout_set = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or os.environ.get("OTEL_EXPORTER_OTLP_TIMEOUT")
    # its retries log a warning each; the final failure of a batch is still logged as an error
    logging.getLogger("opentelemetry.exporter.otlp.proto.grpc.exporter").setLevel(logging.ERROR)
    try:
        return OTLPSpanExporter(timeout=None if timeout_set else OTLP_TIMEOUT_S)
    except Exception as error:  # a bad OTEL_* setting: serve on, spans go to the Redis store only
        log.error("no OTLP export to %s: %s", endpoint, error)
        return None


# ---- trace context across processes ----------------------------------------------------------------


def carrier_of(metadata: Iterable | Mapping | None) -> dict[str, str]:
    """The text headers of gRPC metadata (pairs or a mapping) as a carrier dict."""
    if not metadata:
        return {}
    pairs = metadata.items() if isinstance(metadata, Mapping) else metadata
    return {str(k).lower(): v for k, v in pairs if isinstance(v, str)}


def extract(metadata: Iterable | Mapping | None) -> Context | None:
    """The parent context carried by metadata/headers; None when they carry none."""
    carrier = carrier_of(metadata)
    return propagate.extract(carrier) if "traceparent" in carrier else None


def inject(context: Context | None) -> dict[str, str]:
    """The carrier of `context` (of the current context when None)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    return carrier


def metadata(context: Context | None) -> tuple[tuple[str, str], ...] | None:
    """gRPC metadata carrying `context`, or None when tracing is off."""
    if not _enabled or context is None:
        return None
    return tuple(inject(context).items()) or None


def trace_id_of(carrier: Mapping[str, str]) -> str:
    """The 32-hex trace id in a carrier's traceparent ("" if none)."""
    parts = carrier.get("traceparent", "").split("-")
    return parts[1] if len(parts) == 4 else ""


# ---- spans made from a thread's own timings ------------------------------------------------------


def span_at(name: str, parent: Context, start_ns: int, end_ns: int, attributes: dict) -> None:
    """A finished span with an explicit parent and explicit times (thread-safe)."""
    span = tracer().start_span(name, context=parent, start_time=start_ns, attributes=attributes)
    span.end(end_time=end_ns)
