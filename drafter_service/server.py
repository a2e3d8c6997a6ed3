"""`specmesh serve drafter`: the drafter process. Recycling, n-gram and none need only the
vocabulary size (no torch, no weights); EAGLE, when a head exists for the model, loads the head
and the target's embedding and LM head, nothing else of the target."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

import grpc
import redis
import redis.asyncio as aioredis

from drafter_service import metrics
from drafter_service.data_plane import DataPlane
from drafter_service.servicer import DrafterServicer
from drafter_service.shared_table import SharedTable
from drafter_service.warm_up import warm_up
from specmesh.model.config import ModelConfig
from specmesh.model.fetch import is_fetched
from specmesh.model.identity import model_id
from specmesh.paths import default_model_dir
from specmesh.serving import Health, serve_until_signal, start_service_process
from specmesh.store import registry
from specmesh.store.keys import Keys, redis_url
from specmesh.telemetry import tracing
from specmesh.v1 import drafter_pb2_grpc

log = logging.getLogger("specmesh.drafter")
GRACE_S = 2.0  # on SIGTERM, how long running sessions may go on (gRPC streams and the data plane's)


def model_dir(model: str) -> Path:
    path = default_model_dir() if model in ("", "default") else Path(model).expanduser()
    if not (path / "config.json").exists() and not is_fetched(path):
        raise SystemExit(f"no model at {path}: run `specmesh fetch-model` first")
    return path


async def run(args: argparse.Namespace) -> None:
    path = model_dir(args.model)
    keys, address = Keys(args.redis_prefix), f"{args.advertise_host}:{args.port}"
    tracing.setup("drafter", args.redis_url, keys, address)
    config = ModelConfig.from_dir(path)
    shared = SharedTable(aioredis.Redis.from_url(args.redis_url, socket_timeout=2.0), keys, model_id(path), config.vocab_size)
    servicer = DrafterServicer(shared, _eagle(path, args))
    server = grpc.aio.server()
    health = Health(server)
    drafter_pb2_grpc.add_DrafterServicer_to_server(servicer, server)
    port = server.add_insecure_port(f"0.0.0.0:{args.port}")
    await server.start()
    try:
        await warm_up(f"127.0.0.1:{port}", config.vocab_size, config.hidden_size if servicer.drafters["hybrid"].wants_hidden else 0)
    except grpc.aio.AioRpcError as error:  # serve anyway: the first sessions pay the first calls
        log.warning("warm-up failed: %s %s", error.code().name, error.details())
    metrics.setup(args.metrics_port, servicer)
    data_plane = DataPlane(servicer)
    data_address = f"{args.advertise_host}:{await data_plane.start(args.data_port)}" if args.data_port >= 0 else ""
    try:
        await shared.load()
    except aioredis.RedisError as error:
        log.warning("starting with a cold recycling table: %s", error)
    sync = redis.Redis.from_url(args.redis_url, socket_timeout=1.0, socket_connect_timeout=1.0)
    tasks = [asyncio.create_task(shared.follow()),
             asyncio.create_task(_heartbeat(sync, keys, address, servicer, shared, data_address))]
    await health.serving()
    log.info("drafter %s serving %s (data plane %s)", address, shared.hash_key, data_address or "off")

    async def drain() -> None:
        await asyncio.to_thread(registry.withdraw, sync, keys, "drafter", address)
        await data_plane.stop(GRACE_S)

    await serve_until_signal(server, health, drain=drain, grace_s=GRACE_S)
    for task in tasks:
        task.cancel()


async def _heartbeat(client: redis.Redis, keys: Keys, address: str, servicer: DrafterServicer, shared: SharedTable,
                     data_address: str) -> None:
    while True:
        fields = {"model_id": shared.model_id, "sessions": len(servicer.sessions), "methods": ",".join(servicer.drafters),
                  "recycling_rows": int(shared.table.filled.sum()), "data_address": data_address}
        try:
            await asyncio.to_thread(registry.publish, client, keys, "drafter", address, fields)
        except redis.RedisError as error:
            log.warning("registry heartbeat failed: %s", error)
        await asyncio.sleep(1.0)


def _eagle(path: Path, args: argparse.Namespace):
    """The EAGLE drafter, if a head exists for this model (or --eagle-head names one)."""
    if args.eagle_head == "none":
        return None
    from specmesh.drafting import DraftTarget, make_drafter
    from specmesh.eagle.checkpoint import shipped_head_dir
    from specmesh.model import cpu_ops
    from specmesh.model.loading import RunnerConfig, set_threads

    head = Path(args.eagle_head) if args.eagle_head else shipped_head_dir(path)
    if head is None:
        log.info("no EAGLE head for %s: serving recycling, ngram and none", path.name)
        return None
    set_threads(args.threads)
    if cpu_ops.start_gemm_helper():
        log.info("one torch thread, with a GEMM helper thread for the cores' idle moments")
    target = DraftTarget.from_config(path, RunnerConfig(str(path), args.dtype, args.device), head)
    log.info("EAGLE head %s (%s on %s)", head, target.dtype, target.device)
    return make_drafter("eagle", 0, target=target)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specmesh serve drafter", description="The drafter service.")
    parser.add_argument("--port", type=int, default=50071)
    parser.add_argument("--metrics-port", type=int, default=8071, help="HTTP port of /metrics (Prometheus); 0 = no metrics")
    parser.add_argument("--data-port", type=int, default=50081,
                        help="TCP port of the data plane (the Draft exchange without gRPC's thread hand-offs, which "
                             "verifiers use when the registry lists it); 0 = any free port, -1 = none")
    parser.add_argument("--model", default="default", help="'default' or a HF checkpoint dir (for its vocabulary)")
    parser.add_argument("--redis-url", default=redis_url())
    parser.add_argument("--redis-prefix", default="", help="key prefix (default $SPECMESH_REDIS_PREFIX or 'specmesh')")
    parser.add_argument("--advertise-host", default="127.0.0.1", help="host other services use to reach this one")
    parser.add_argument("--eagle-head", default="", help="EAGLE head dir (default: the one shipped for the model; 'none' = off)")
    parser.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"], help="EAGLE compute dtype")
    parser.add_argument("--device", default="", help="EAGLE device: cpu or cuda (default: $SPECMESH_DEVICE, else cuda if present)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads for EAGLE (default: all cores; a session's drafting and its "
                             "verification take turns, so a drafter beside its verifier may use them all too)")
    return parser


def main(argv: list[str] | None = None) -> int:
    start_service_process()
    asyncio.run(run(build_parser().parse_args(argv)))
    return 0
