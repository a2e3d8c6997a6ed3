"""Observability sinks: tracing (tracing.py, span_store.py) and metrics; off the request path."""
