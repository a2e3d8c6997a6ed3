"""`specmesh serve orchestrator`: the control-plane process (gRPC API on --port; HTTP on --http-port:
the OpenAI-compatible API, metrics, the ops dashboard and health)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import time
from pathlib import Path

import grpc
import redis
import redis.asyncio
from aiohttp import web

from orchestrator import http_server, metrics, openai_api
from orchestrator.app import Orchestrator
from orchestrator.dashboard import api as dashboard
from orchestrator.openai_request import ServedModel
from orchestrator.servicer import OrchestratorServicer
from orchestrator.validation import METHODS, Limits
from specmesh.arguments import non_negative_int
from specmesh.goodput import parse_budget
from specmesh.model.fetch import is_fetched
from specmesh.model.identity import model_id
from specmesh.paths import default_model_dir
from specmesh.serving import Health, serve_until_signal, start_service_process
from specmesh.store.keys import Keys, redis_url
from specmesh.telemetry import tracing
from specmesh.text import TextCodec
from specmesh.v1 import orchestrator_pb2_grpc

log = logging.getLogger("specmesh.orchestrator")
GRACE_S = 5.0  # on SIGTERM, running requests get this long (HTTP, then gRPC) before they are cancelled


def model_dir(model: str) -> Path:
    """The checkpoint dir, without loading (or importing) anything that needs torch."""
    path = default_model_dir() if model in ("", "default") else Path(model).expanduser()
    if not is_fetched(path) and not (path / "config.json").exists():
        raise SystemExit(f"no model at {path}: run `specmesh fetch-model` first")
    return path


async def run(args: argparse.Namespace) -> None:
    path = model_dir(args.model)
    tracing.setup("orchestrator", args.redis_url, Keys(args.redis_prefix), f"{socket.gethostname()}:{args.port}")
    codec = TextCodec.from_dir(path)
    limits = Limits(codec.vocab_size, args.max_context, args.max_new_tokens_limit, args.drafter, args.budget)
    client = redis.Redis.from_url(args.redis_url, socket_timeout=2.0, socket_connect_timeout=1.0)
    async_client = redis.asyncio.Redis.from_url(args.redis_url, socket_timeout=2.0, socket_connect_timeout=1.0)
    app = Orchestrator(client, async_client, Keys(args.redis_prefix), codec, model_id(path), limits, args.max_active,
                       args.stream_interval_ms)
    server = grpc.aio.server()
    health = Health(server)
    orchestrator_pb2_grpc.add_OrchestratorServicer_to_server(OrchestratorServicer(app), server)
    server.add_insecure_port(f"0.0.0.0:{args.port}")
    await server.start()
    http = await http_server.serve(_http_app(app, path, args.api_key), args.http_port)
    watchers = [asyncio.create_task(app.watch_redis()), asyncio.create_task(_health_follows_redis(app, health))]
    log.info("orchestrator serving gRPC on port %s and HTTP on port %s for %s", args.port, args.http_port, model_id(path))
    await serve_until_signal(server, health, drain=lambda: http_server.stop(http, GRACE_S), grace_s=GRACE_S)
    for task in watchers:
        task.cancel()
    await app.aclose()
    await async_client.aclose()


async def _health_follows_redis(app: Orchestrator, health: Health) -> None:
    serving = None
    while True:
        if app.redis_ok != serving:
            serving = app.redis_ok
            await health.set(serving)
        await asyncio.sleep(0.25)


def _http_app(app: Orchestrator, path: Path, api_key: str) -> web.Application:
    http = http_server.build_app(app)
    openai_api.add_routes(http, ServedModel(model_id(path), ("default", path.name), int(time.time())), api_key)
    metrics.add_routes(http, app)
    dashboard.add_routes(http)
    return http


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specmesh serve orchestrator", description="The orchestrator (public gRPC and HTTP APIs).")
    parser.add_argument("--port", type=int, default=50051)
    parser.add_argument("--http-port", type=int, default=8080, help="HTTP: the OpenAI-compatible API (/v1/...), /metrics, the dashboard (/, /api/...), /healthz")
    parser.add_argument("--api-key", default=os.environ.get("SPECMESH_API_KEY", ""),
                        help="bearer token every /v1 request needs (default $SPECMESH_API_KEY; empty = no auth)")
    parser.add_argument("--model", default="default", help="'default' or a HF checkpoint dir (tokenizer and model id)")
    parser.add_argument("--max-context", type=int, default=2048, help="prompt + generated tokens (as the verifiers)")
    parser.add_argument("--max-new-tokens-limit", type=int, default=2048, help="the most a request may ask for")
    parser.add_argument("--drafter", default="recycling", choices=METHODS,
                        help="default drafter method; auto = chosen per request from observed acceptance")
    parser.add_argument("--budget", type=parse_budget, default="adaptive",
                        help="default draft nodes per step: a number, or 'adaptive' (goodput control, the default)")
    parser.add_argument("--max-active", type=int, default=64, help="requests at once; more get RESOURCE_EXHAUSTED")
    parser.add_argument("--stream-interval-ms", type=non_negative_int, default=0,
                        help="the verifiers hold a step's tokens up to this long to send the steps of that time in "
                             "one event: fewer wake-ups per token here, in Redis and in the client; the goodput "
                             "controller hears of steps that much later (default 0: every step at once)")
    parser.add_argument("--niceness", type=non_negative_int, default=0,
                        help="raise this process's niceness by this much at start (0-19): where the orchestrator "
                             "shares cores with a verifier, its per-step work then waits for the forward instead of "
                             "stalling it (`specmesh up` sets 19; default 0)")
    parser.add_argument("--redis-url", default=redis_url())
    parser.add_argument("--redis-prefix", default="", help="key prefix (default $SPECMESH_REDIS_PREFIX or 'specmesh')")
    return parser


def main(argv: list[str] | None = None) -> int:
    start_service_process()
    args = build_parser().parse_args(argv)
    _lower_priority(args.niceness)
    asyncio.run(run(args))
    return 0


def _lower_priority(niceness: int) -> None:
    """Niceness is per thread on Linux: every thread already running (numpy's BLAS pool starts at
    import) is reniced; those started later (gRPC, Redis, tracing) inherit it from this one."""
    if niceness <= 0:
        return
    if not os.path.isdir("/proc/self/task"):
        os.nice(niceness)
        return
    for tid in map(int, os.listdir("/proc/self/task")):
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + niceness)
