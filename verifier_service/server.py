"""`specmesh serve verifier`: the verifier process.

Start-up: the gRPC server answers health checks (NOT_SERVING) while the model loads; a warm-up
step and the step-time profile (profile.py) run; then SERVING. Every second it publishes itself
to the registry (model, KV slots and their use, load, the profile) and each session's KV-cache
metadata, with TTLs. On SIGTERM it drains: no new sessions, the running ones get `drain_s` to
finish, the rest are cut off (UNAVAILABLE) so that the orchestrator resumes them elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time

import grpc
import redis

from specmesh.goodput import encode_profile, fit_step_cost
from specmesh.model.identity import model_id
from specmesh.model.loading import RunnerConfig, load_runner
from specmesh.model.passing_thread import run_in_passing_thread
from specmesh.model.runner import ForwardItem
from specmesh.serving import Health, serve_until_signal, start_service_process
from specmesh.store import registry
from specmesh.store.keys import Keys, redis_url
from specmesh.telemetry import tracing
from specmesh.v1 import verifier_pb2_grpc
from verifier_service.drafters import DrafterHub
from verifier_service import metrics
from verifier_service.loop import VerifierLoop
from verifier_service.profile import profile_steps
from verifier_service.servicer import VerifierServicer

log = logging.getLogger("specmesh.verifier")
PREFILL_CHUNK = 256


def warm_up(runner) -> None:
    """One prefill and one tree step, so the first request pays no first-call costs."""
    slot = runner.allocate_slot()
    runner.forward([ForwardItem(slot, list(range(1, 9)), logits="last")])
    runner.commit(slot, range(8))
    runner.forward([ForwardItem(slot, [1, 2, 3])])
    runner.release_slot(slot)


class Verifier:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.address = f"{args.advertise_host}:{args.port}"
        self.keys = Keys(args.redis_prefix)
        self.redis = redis.Redis.from_url(args.redis_url, socket_timeout=1.0, socket_connect_timeout=1.0)
        self.accepting = True
        self.data_addresses: dict[str, str] = {}  # drafter address -> its data plane's (registry, each heartbeat)

    def _data_address(self, drafter_address: str) -> str:
        """Where a session reaches its drafter's data plane (the registry's, refreshed at each
        heartbeat; a drafter not seen yet is looked up once); "" = on the Draft gRPC stream (a
        drafter without a data plane, Redis unreachable, or --drafter-transport grpc)."""
        if self.args.drafter_transport == "grpc":
            return ""
        known = self.data_addresses.get(drafter_address)
        if known is None:
            try:
                known = registry.service_field(self.redis, self.keys, "drafter", drafter_address, "data_address")
            except redis.RedisError:
                known = ""
            self.data_addresses[drafter_address] = known
        return known

    def _pick_drafter(self, method: str, exclude: set[str]) -> str | None:
        try:
            return registry.least_busy_drafter(self.redis, self.keys, self.model_id, method, exclude)
        except redis.RedisError:
            return None

    async def run(self) -> None:
        tracing.setup("verifier", self.args.redis_url, self.keys, self.address)
        server = grpc.aio.server()
        health = Health(server)
        servicer = VerifierServicer(self.args.max_context, lambda: self.accepting)
        verifier_pb2_grpc.add_VerifierServicer_to_server(servicer, server)
        server.add_insecure_port(f"0.0.0.0:{self.args.port}")
        await server.start()
        config = RunnerConfig(self.args.model, self.args.dtype, self.args.device, self.args.threads,
                              self.args.slots, self.args.max_context, PREFILL_CHUNK)
        runner, model_config, path, self.step_profile = await run_in_passing_thread(self._prepare, config)
        self.model_id, self.runner = model_id(path), runner
        self.hub = DrafterHub(asyncio.get_running_loop(), lambda command: self.loop.submit(command), self._pick_drafter,
                              self._data_address)
        self.loop = VerifierLoop(runner, model_config, self.hub, PREFILL_CHUNK, PREFILL_CHUNK)
        metrics.setup(self.args.metrics_port, self.address, self.loop, runner, self.args.slots)
        self.loop.start()
        servicer.attach(self.loop, model_config)
        heartbeat = asyncio.create_task(self._heartbeat())
        await health.serving()
        log.info("verifier %s serving %s", self.address, self.model_id)
        await serve_until_signal(server, health, self._drain, grace_s=1.0)
        heartbeat.cancel()
        self.loop.stop()
        await self.hub.aclose()

    def _prepare(self, config: RunnerConfig):
        """Load, warm up and profile the model: all the torch work before the engine loop, in one
        thread that exits (see passing_thread.py)."""
        runner, model_config, path = load_runner(config)
        warm_up(runner)
        return runner, model_config, path, self._profile(runner)

    def _profile(self, runner) -> str:
        if not self.args.profile:
            return ""
        shapes, seconds = profile_steps(runner)
        log.info("step-time profile: %s", fit_step_cost(shapes, seconds))
        return encode_profile(shapes, seconds)

    async def _drain(self) -> None:
        self.accepting = False
        deadline = time.monotonic() + self.args.drain_s
        while (self.loop.sessions or self.loop.waiting) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.to_thread(registry.withdraw, self.redis, self.keys, "verifier", self.address)

    async def _heartbeat(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self._publish)
                if self.args.drafter_transport == "auto":
                    await asyncio.to_thread(self._refresh_data_addresses)
            except redis.RedisError as error:
                log.warning("registry heartbeat failed: %s", error)
            await asyncio.sleep(1.0)

    def _publish(self) -> None:
        sessions = self.loop.snapshot()
        slots = self.runner.free_slots + len(sessions)
        registry.publish(self.redis, self.keys, "verifier", self.address, {
            "model_id": self.model_id, "kv_slots": slots, "kv_free": self.runner.free_slots,
            "sessions": len(sessions), "waiting": len(self.loop.waiting), "load": len(sessions) / max(slots, 1),
            "max_context": self.args.max_context, "accepting": int(self.accepting), "step_profile": self.step_profile,
        })
        with self.redis.pipeline() as pipe:
            for request_id, slot, kv_length, epoch in sessions:
                key = self.keys.session(request_id)
                pipe.hset(key, mapping={"verifier": self.address, "slot": slot, "kv_length": kv_length, "epoch": epoch})
                pipe.pexpire(key, int(registry.HEARTBEAT_TTL_S * 1000))
            pipe.execute()

    def _refresh_data_addresses(self) -> None:
        """Every live drafter's data address, replacing the cache at once (the engine loop reads it)."""
        self.data_addresses = {d.address: d.fields.get("data_address", "")
                               for d in registry.live_services(self.redis, self.keys, "drafter")}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specmesh serve verifier", description="The verifier service.")
    parser.add_argument("--port", type=int, default=50061)
    parser.add_argument("--metrics-port", type=int, default=8061, help="HTTP port of /metrics (Prometheus); 0 = no metrics")
    parser.add_argument("--model", default="default", help="'default' or a Hugging Face checkpoint dir")
    parser.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"])
    parser.add_argument("--device", default="", help="cpu or cuda (default: $SPECMESH_DEVICE, else cuda if present)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: all cores)")
    parser.add_argument("--slots", type=int, default=8, help="KV-cache slots: sessions served at once")
    parser.add_argument("--max-context", type=int, default=2048, help="prompt + generated tokens per session")
    parser.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True,
                        help="time a sweep of step shapes at warm-up for the goodput controller (a few seconds)")
    parser.add_argument("--drain-s", type=float, default=30.0, help="on SIGTERM, how long running sessions may finish")
    parser.add_argument("--redis-url", default=redis_url())
    parser.add_argument("--redis-prefix", default="", help="key prefix (default $SPECMESH_REDIS_PREFIX or 'specmesh')")
    parser.add_argument("--advertise-host", default="127.0.0.1", help="host other services use to reach this one")
    parser.add_argument("--drafter-transport", default="auto", choices=["auto", "grpc"],
                        help="auto: each session reaches its drafter on the drafter's data plane where the registry "
                             "lists one (plain TCP, fewer thread hand-offs a step), else on the Draft gRPC stream; "
                             "grpc: always the gRPC stream")
    return parser


GIL_SWITCH_INTERVAL_S = 0.0005  # Python's default, 5 ms, is paid at every loop <-> gRPC thread handoff


def main(argv: list[str] | None = None) -> int:
    start_service_process()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    asyncio.run(Verifier(build_parser().parse_args(argv)).run())
    return 0
