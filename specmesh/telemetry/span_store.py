"""The Redis span store: every service's finished spans as JSON, one list per trace, for the ops
dashboard (and tests) to read without a tracing backend.

Glossary:
- span dict: one span as plain JSON (never pickle): trace_id (32 hex), span_id (16 hex),
  parent_span_id (16 hex or None for a root), name, service (the resource's service.name),
  instance (service.instance.id: the service's address), kind, start_ns / end_ns (unix ns),
  attributes, status {code: UNSET|OK|ERROR, description}, events [{name, time_ns, attributes}]
  (the newest OTEL_SPAN_EVENT_COUNT_LIMIT, 128 by default) and dropped_events (the older ones).
- store key: `{prefix}:trace:{trace_id}` (Keys.trace), a list appended to by every service that
  took part in the trace, with a TTL refreshed on every append, and at most MAX_SPANS_PER_TRACE.
- export path: a SpanExporter under a BatchSpanProcessor (tracing.py), so the Redis writes happen
  on the processor's thread, off the request path; a failed write drops that batch.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence

import redis
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from specmesh.store.keys import Keys

log = logging.getLogger("specmesh.tracing")
DEFAULT_TTL_S = 3600
MAX_SPANS_PER_TRACE = 20_000


def ttl_s() -> int:
    """How long a trace stays in Redis after its last span ($SPECMESH_TRACE_TTL_S, default 1 h)."""
    return int(os.environ.get("SPECMESH_TRACE_TTL_S", "") or DEFAULT_TTL_S)


def _hex_trace(trace_id: int) -> str:
    return f"{trace_id:032x}"


def _hex_span(span_id: int) -> str:
    return f"{span_id:016x}"


def _plain(attributes) -> dict:
    """OTel attribute values are str, bool, int, float or sequences of those: JSON as they are."""
    return {k: list(v) if isinstance(v, (tuple, list)) else v for k, v in (attributes or {}).items()}


def span_to_dict(span: ReadableSpan) -> dict:
    context, resource = span.context, span.resource.attributes if span.resource else {}
    return {
        "trace_id": _hex_trace(context.trace_id),
        "span_id": _hex_span(context.span_id),
        "parent_span_id": _hex_span(span.parent.span_id) if span.parent is not None else None,
        "name": span.name,
        "service": resource.get("service.name", ""),
        "instance": resource.get("service.instance.id", ""),
        "kind": span.kind.name,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "attributes": _plain(span.attributes),
        "status": {"code": span.status.status_code.name, "description": span.status.description or ""},
        "events": [{"name": e.name, "time_ns": e.timestamp, "attributes": _plain(e.attributes)} for e in span.events],
        "dropped_events": span.dropped_events,  # the oldest, past the span's event limit
    }


class RedisSpanExporter(SpanExporter):
    """Appends each finished span, as JSON, to its trace's list in Redis."""

    def __init__(self, client: redis.Redis, keys: Keys, ttl: int | None = None):
        self.client, self.keys, self.ttl = client, keys, ttl or ttl_s()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        by_trace: dict[str, list[str]] = {}
        for span in spans:
            record = span_to_dict(span)
            by_trace.setdefault(record["trace_id"], []).append(json.dumps(record, separators=(",", ":")))
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for trace_id, records in by_trace.items():
                    key = self.keys.trace(trace_id)
                    pipe.rpush(key, *records)
                    pipe.ltrim(key, -MAX_SPANS_PER_TRACE, -1)
                    pipe.expire(key, self.ttl)
                pipe.execute()
        except redis.RedisError as error:
            log.warning("span store: dropped %d spans: %s", len(spans), error)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.client.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def spans_of_trace(client: redis.Redis, keys: Keys, trace_id: str) -> list[dict]:
    """Every stored span of a trace (from all services), oldest start first."""
    spans = [json.loads(raw) for raw in client.lrange(keys.trace(trace_id.lower()), 0, -1)]
    return sorted(spans, key=lambda s: (s["start_ns"], s["end_ns"] or 0))


def trace_id_of_request(client: redis.Redis, keys: Keys, request_id: str) -> str | None:
    """The trace id recorded in a request's Redis record (None: no record, or traced off)."""
    value = client.hget(keys.request(request_id), "trace_id")
    return value.decode() if value else None
