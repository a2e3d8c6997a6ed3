"""A request's spans out of its trace (spans as span_store.py stores them).

Glossary: a trace holds one request, unless the caller sent the trace context of a span of its
own around several requests; then it holds several `request` spans (attribute `request.id`),
and a request's spans are those not under another request's `request` span. A span whose
parent is not stored yet (the `request` span is exported when the request ends) is kept.
"""

from __future__ import annotations


def request_spans(spans: list[dict], request_id: str) -> list[dict]:
    """The spans of `spans` that do not descend from the request span of another request."""
    by_id = {s["span_id"]: s for s in spans}
    others = {s["span_id"] for s in spans
              if s["name"] == "request" and s["attributes"].get("request.id", request_id) != request_id}

    def foreign(span: dict) -> bool:
        seen = set()
        while span is not None and span["span_id"] not in seen:
            if span["span_id"] in others:
                return True
            seen.add(span["span_id"])
            span = by_id.get(span["parent_span_id"])
        return False

    return [s for s in spans if not foreign(s)]
