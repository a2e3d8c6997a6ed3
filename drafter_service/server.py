"""`specmesh serve drafter`: the drafter process. It loads no model weights (recycling, n-gram
and none only need the vocabulary size) and imports no torch."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

import grpc
import redis
import redis.asyncio as aioredis

from drafter_service.servicer import DrafterServicer
from drafter_service.shared_table import SharedTable
from specmesh.drafting import DRAFTERS
from specmesh.model.config import ModelConfig
from specmesh.model.fetch import is_fetched
from specmesh.model.identity import model_id
from specmesh.paths import default_model_dir
from specmesh.serving import Health, serve_until_signal
from specmesh.store import registry
from specmesh.store.keys import Keys, redis_url
from specmesh.v1 import drafter_pb2_grpc

log = logging.getLogger("specmesh.drafter")


def model_dir(model: str) -> Path:
    path = default_model_dir() if model in ("", "default") else Path(model).expanduser()
    if not (path / "config.json").exists() and not is_fetched(path):
        raise SystemExit(f"no model at {path}: run `specmesh fetch-model` first")
    return path


async def run(args: argparse.Namespace) -> None:
    path = model_dir(args.model)
    keys, address = Keys(args.redis_prefix), f"{args.advertise_host}:{args.port}"
    shared = SharedTable(aioredis.Redis.from_url(args.redis_url, socket_timeout=2.0), keys, model_id(path),
                         ModelConfig.from_dir(path).vocab_size)
    servicer = DrafterServicer(shared)
    server = grpc.aio.server()
    health = Health(server)
    drafter_pb2_grpc.add_DrafterServicer_to_server(servicer, server)
    server.add_insecure_port(f"0.0.0.0:{args.port}")
    await server.start()
    try:
        await shared.load()
    except aioredis.RedisError as error:
        log.warning("starting with a cold recycling table: %s", error)
    sync = redis.Redis.from_url(args.redis_url, socket_timeout=1.0, socket_connect_timeout=1.0)
    tasks = [asyncio.create_task(shared.follow()), asyncio.create_task(_heartbeat(sync, keys, address, servicer, shared))]
    await health.serving()
    log.info("drafter %s serving %s", address, shared.hash_key)
    await serve_until_signal(server, health, drain=lambda: asyncio.to_thread(registry.withdraw, sync, keys, "drafter", address), grace_s=2.0)
    for task in tasks:
        task.cancel()


async def _heartbeat(client: redis.Redis, keys: Keys, address: str, servicer: DrafterServicer, shared: SharedTable) -> None:
    while True:
        fields = {"model_id": shared.model_id, "sessions": len(servicer.sessions),
                  "methods": ",".join(DRAFTERS), "recycling_rows": int(shared.table.filled.sum())}
        try:
            await asyncio.to_thread(registry.publish, client, keys, "drafter", address, fields)
        except redis.RedisError as error:
            log.warning("registry heartbeat failed: %s", error)
        await asyncio.sleep(1.0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specmesh serve drafter", description="The drafter service.")
    parser.add_argument("--port", type=int, default=50071)
    parser.add_argument("--model", default="default", help="'default' or a HF checkpoint dir (for its vocabulary)")
    parser.add_argument("--redis-url", default=redis_url())
    parser.add_argument("--redis-prefix", default="", help="key prefix (default $SPECMESH_REDIS_PREFIX or 'specmesh')")
    parser.add_argument("--advertise-host", default="127.0.0.1", help="host other services use to reach this one")
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(run(build_parser().parse_args(argv)))
    return 0
