"""The orchestrator's state: admission, the drivers of running requests, and their records.

Glossary: admission checks Redis (the source of truth: without it nothing is admitted),
the concurrency limit (RESOURCE_EXHAUSTED beyond it) and the request itself (validation.py).
A Generate for the id of an unfinished request resumes it from its Redis record.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import redis
import redis.asyncio

from orchestrator import metrics
from orchestrator.dashboard import recorder as dashboard
from orchestrator.driver import RequestDriver
from orchestrator.routing import Router
from orchestrator.steering import Steering
from orchestrator.tracing import RequestTrace
from orchestrator.validation import Limits, validate
from specmesh.serving import ServiceError
from specmesh.store.keys import Keys
from specmesh.store.requests import RequestStore
from specmesh.text import TextCodec
from specmesh.v1 import orchestrator_pb2

# A whole answer (GenerateRequest.whole: Client.generate, an OpenAI request without `stream`) has
# no client waiting on its steps, so its verifier holds them up to this long and sends them as one
# event (the stream interval, README): each event costs the orchestrator's wake-up and Redis commit
# and the verifier's send, CPU that comes out of the forward where the services share cores.
# Measured on a 2-core Zen 5 (two stacks, an event every step and this, interleaved with the
# in-process engine, 6 MT-Bench + 6 HumanEval prompts): `none` 0.92x -> 0.96x of its tokens/s,
# EAGLE and hybrid within noise (their steps take ~18 ms). A lost verifier's held steps are
# recomputed by the next one, as with any stream interval.
WHOLE_ANSWER_INTERVAL_MS = 100


class Orchestrator:
    def __init__(self, client: redis.Redis, async_client: redis.asyncio.Redis, keys: Keys, codec: TextCodec, model_id: str,
                 limits: Limits, max_active: int, stream_interval_ms: int = 0):
        """`client` for admission and bookkeeping (in worker threads), `async_client` for the
        per-event commits on the event loop."""
        self.client, self.codec, self.limits, self.max_active = client, codec, limits, max_active
        self.stream_interval_ms = stream_interval_ms  # coalescing of streamed requests' step events (0 = none)
        self.store = RequestStore(client, keys, async_client)
        self.router = Router(client, keys, model_id)
        self.steering = Steering(client, keys, self.store)
        self.active: dict[str, RequestDriver] = {}
        self.redis_ok = True
        self._channels: dict[str, grpc.aio.Channel] = {}

    def channel(self, address: str) -> grpc.aio.Channel:
        if address not in self._channels:
            self._channels[address] = grpc.aio.insecure_channel(address)
        return self._channels[address]

    async def admit(self, request: orchestrator_pb2.GenerateRequest, time_remaining: float | None,
                    trace_carrier=None) -> RequestDriver:
        """`trace_carrier`: the caller's gRPC metadata or HTTP headers (a trace context to join)."""
        trace = RequestTrace(trace_carrier)
        try:
            driver = await self._admit(request, time_remaining, trace)
        except ServiceError as error:
            trace.fail(error)
            raise
        driver.trace = trace
        trace.describe(driver.request)
        return driver

    async def _admit(self, request: orchestrator_pb2.GenerateRequest, time_remaining: float | None,
                     trace: RequestTrace) -> RequestDriver:
        if not self.redis_ok:
            raise ServiceError(grpc.StatusCode.UNAVAILABLE, "request state store (Redis) is unreachable")
        if len(self.active) >= self.max_active:
            raise ServiceError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{self.max_active} requests are running; retry later")
        if request.request_id in self.active:
            raise ServiceError(grpc.StatusCode.ALREADY_EXISTS, f"request {request.request_id} is already running here")
        deadline = None if time_remaining is None else time.monotonic() + time_remaining
        driver = await asyncio.to_thread(self._driver, request, deadline, trace)
        self.active[driver.request.request_id] = driver
        return driver

    def _driver(self, request: orchestrator_pb2.GenerateRequest, deadline: float | None, trace: RequestTrace) -> RequestDriver:
        try:
            existing = self.store.get(request.request_id) if request.request_id else None
            if existing is not None:
                trace.open(existing.fields.get("trace_context", ""))  # a resumed request continues its trace
                if existing.status != "running":
                    raise ServiceError(grpc.StatusCode.ALREADY_EXISTS, f"request {request.request_id} already {existing.status}")
                return RequestDriver(existing.request, existing.token_ids, existing.epoch, self.store, self.router,
                                     self.steering, self.codec, self.channel, deadline, self._interval(request))
            new = validate(request, self._prompt_ids(request), self.limits)
            if not self.store.create(new, trace.open()):
                raise ServiceError(grpc.StatusCode.ALREADY_EXISTS, f"request {new.request_id} exists")
        except redis.RedisError as error:
            raise ServiceError(grpc.StatusCode.UNAVAILABLE, f"request state store (Redis): {error}") from None
        return RequestDriver(new, [], -1, self.store, self.router, self.steering, self.codec, self.channel, deadline,
                             self._interval(request))

    def _interval(self, request: orchestrator_pb2.GenerateRequest) -> int:
        """How long the request's verifier may hold a step (ms): a whole answer's steps wait for
        at least WHOLE_ANSWER_INTERVAL_MS."""
        return max(self.stream_interval_ms, WHOLE_ANSWER_INTERVAL_MS) if request.whole else self.stream_interval_ms

    def _prompt_ids(self, request: orchestrator_pb2.GenerateRequest) -> list[int]:
        if request.WhichOneof("input") == "token_ids":
            return list(request.token_ids.ids)
        if not request.prompt:
            return []
        return self.codec.chat_prompt(request.prompt) if request.chat else self.codec.encode(request.prompt)

    async def settle(self, driver: RequestDriver, status: str, reason: str) -> None:
        """Record how the request ended and forget its driver."""
        driver.trace.end(status, reason, driver.stats())
        metrics.request_ended(driver, status)
        dashboard.request_ended(driver, status, reason)
        self.active.pop(driver.request.request_id, None)
        try:  # shielded: a caller cancelled meanwhile (an HTTP client gone while its handler settles)
            # would cancel a to_thread job that no worker had started yet, leaving "running" for good
            await asyncio.shield(asyncio.to_thread(self.store.finish, driver.request.request_id, status, reason))
        except redis.RedisError:
            pass  # the record keeps "running"; a client can resume it by id

    def cancel(self, request_id: str) -> bool:
        driver = self.active.get(request_id)
        if driver is None:
            return False
        driver.cancel()
        return True

    async def watch_redis(self) -> None:
        """Keeps `redis_ok` current (health goes NOT_SERVING without Redis)."""
        while True:
            try:
                await asyncio.to_thread(self.client.ping)
                self.redis_ok = True
            except redis.RedisError:
                self.redis_ok = False
            await asyncio.sleep(0.5)

    async def aclose(self) -> None:
        for channel in self._channels.values():
            await channel.close()
