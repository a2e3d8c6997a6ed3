"""The ops dashboard's routes on the orchestrator's HTTP port (a route module, http_server.py):
the page at GET / (static/index.html and the files under /static/) and its JSON under /api.

Glossary:
- GET /api/summary?window=S: over the last S seconds (default 60): requests ended, goodput,
  accepted tokens per step, TTFT / TPOT / end-to-end p50 and p99, one point per bucket (history.py)
  for the charts; and the requests running now.
- GET /api/fleet: every live verifier and drafter with its load (fleet.py).
- GET /api/requests?limit=N&status=S: the requests running here, then the newest ended ones
  (N in all, default 50; S filters by status).
- GET /api/requests/{id}: one request, from this orchestrator's memory, else from its Redis record
  (a request another replica ran); GET /api/requests/{id}/spans: its trace from the Redis span store.
- errors: `{"error": {"message", "type", "param", "code"}}` as the OpenAI API's (openai_errors.py):
  400 naming the query parameter, 404 for an unknown request or path, 503 without Redis.
- replica: each orchestrator shows the requests it ran; the fleet and the spans are shared.
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

import redis
from aiohttp import web

from orchestrator.dashboard import recorder
from orchestrator.dashboard.fleet import fleet
from orchestrator.dashboard.history import History, RequestEntry, entry_from_record
from orchestrator.dashboard.traces import request_spans
from orchestrator.http_server import ORCHESTRATOR
from orchestrator.openai_errors import ApiError, bad_param
from specmesh.telemetry.span_store import spans_of_trace, trace_id_of_request

STATIC = Path(__file__).parent / "static"
HISTORY = web.AppKey("history", History)
STATUSES = ("running", "finished", "cancelled", "failed")
DEFAULT_WINDOW_S, DEFAULT_LIMIT = 60.0, 50


def add_routes(app: web.Application, history: History | None = None) -> None:
    """Serves the page at / and the JSON at /api of `app`; ended requests go into `history`."""
    history = history or History()
    recorder.attach(history)
    app.router.add_get("/", _index)
    app.router.add_static("/static", STATIC)
    api = web.Application(middlewares=[_errors])
    api[HISTORY] = history
    api.router.add_get("/summary", _summary)
    api.router.add_get("/fleet", _fleet)
    api.router.add_get("/requests", _requests)
    api.router.add_get("/requests/{request_id}", _request)
    api.router.add_get("/requests/{request_id}/spans", _spans)
    app.add_subapp("/api", api)


@web.middleware
async def _errors(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as error:
        return web.json_response(error.body(), status=error.status)
    except redis.RedisError as error:
        return web.json_response(ApiError(503, f"request state store (Redis): {error}").body(), status=503)
    except web.HTTPException as error:  # no such route, or method, under /api
        return web.json_response(ApiError(error.status, error.reason).body(), status=error.status)


def _query(request: web.Request, name: str, default: float, low: float, high: float, kind=float) -> float:
    """Query parameter `name` as a `kind` in [low, high]; 400 naming it otherwise."""
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise bad_param(name, f"{name} must be {'an integer' if kind is int else 'a number'}, got {raw!r}") from None
    if not (math.isfinite(value) and low <= value <= high):
        raise bad_param(name, f"{name} must be between {low:g} and {high:g}, got {raw!r}")
    return value


async def _index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


async def _summary(request: web.Request) -> web.Response:
    history = request.app[HISTORY]
    window = _query(request, "window", DEFAULT_WINDOW_S, history.bucket_s, history.span_s)
    running = len(request.config_dict[ORCHESTRATOR].active)
    return web.json_response(history.summary(time.time(), window) | {"running": running})


async def _fleet(request: web.Request) -> web.Response:
    store = request.config_dict[ORCHESTRATOR].store
    return web.json_response(await asyncio.to_thread(fleet, store.client, store.keys, time.time()))


async def _requests(request: web.Request) -> web.Response:
    history = request.app[HISTORY]
    limit = _query(request, "limit", DEFAULT_LIMIT, 1, history.capacity, int)
    status = request.query.get("status")
    if status is not None and status not in STATUSES:
        raise bad_param("status", f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    running = [recorder.entry_of(d, "running") for d in list(request.config_dict[ORCHESTRATOR].active.values())]
    entries = [e for e in running + history.recent(history.capacity) if status in (None, e.status)]
    return web.json_response({"requests": [e.to_json() for e in entries[:limit]]})


async def _request(request: web.Request) -> web.Response:
    return web.json_response((await _entry(request, request.match_info["request_id"])).to_json())


async def _entry(request: web.Request, request_id: str) -> RequestEntry:
    """From this orchestrator's memory (ended or running), else from the Redis record; 404 if none."""
    orchestrator = request.config_dict[ORCHESTRATOR]
    entry = request.app[HISTORY].get(request_id)
    if entry is not None:
        return entry
    if request_id in orchestrator.active:
        return recorder.entry_of(orchestrator.active[request_id], "running")
    record = await asyncio.to_thread(orchestrator.store.get, request_id)
    if record is None:
        raise ApiError(404, f"no request {request_id!r}", "request_id", "request_not_found")
    return entry_from_record(request_id, record.fields, len(record.request.prompt_token_ids), len(record.token_ids))


async def _spans(request: web.Request) -> web.Response:
    store, request_id = request.config_dict[ORCHESTRATOR].store, request.match_info["request_id"]
    trace_id = await asyncio.to_thread(trace_id_of_request, store.client, store.keys, request_id)
    if trace_id is None:
        raise ApiError(404, f"no trace of request {request_id!r} (unknown, or traced off)", "request_id", "trace_not_found")
    spans = await asyncio.to_thread(spans_of_trace, store.client, store.keys, trace_id)
    return web.json_response({"request_id": request_id, "trace_id": trace_id, "spans": request_spans(spans, request_id)})
