"""One request, from admission to its last token: the orchestrator's per-request driver.

Glossary:
- session: the request's stream to a verifier (verifier.proto); the verifier talks to the
  drafter itself, so the orchestrator stays off the per-step critical path.
- commit: each step event's tokens go to the Redis record (atomically, with its (epoch, event)
  index) before they are streamed to the client. An event carries one verification step, or
  several when the verifier coalesces them (the stream interval, verifier_service/session.py).
- failover: when the verifier is lost (the stream breaks or ends unfinished), the request is
  re-opened on another verifier with the prompt + the tokens committed so far, under the next
  epoch. Sampling is keyed by (seed, position), so the continuation is the same as without
  the failure, greedy or not.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import grpc

from orchestrator import convert, metrics
from orchestrator.routing import Router
from orchestrator.steering import Steering
from orchestrator.tracing import RequestTrace
from specmesh.goodput import AUTO_METHOD
from specmesh.serving import ServiceError
from specmesh.store.requests import NewRequest, RequestStore
from specmesh.text import IncrementalDecoder, TextCodec, find_stop
from specmesh.v1 import verifier_pb2, verifier_pb2_grpc

MAX_FAILOVERS = 3


class VerifierLost(Exception):
    pass


@dataclass(frozen=True)
class Chunk:
    token_ids: list[int]
    text: str
    finish_reason: str = ""
    stats: dict | None = None

    @staticmethod
    def joined(chunks: list[Chunk]) -> Chunk:
        """Consecutive chunks as one: every token and all the text, the last one's finish and stats."""
        last = chunks[-1]
        return Chunk([t for c in chunks for t in c.token_ids], "".join(c.text for c in chunks), last.finish_reason, last.stats)


class RequestDriver:
    def __init__(self, request: NewRequest, committed: list[int], epoch: int, store: RequestStore, router: Router,
                 steering: Steering, codec: TextCodec, channels, deadline: float | None, stream_interval_ms: int = 0):
        self.request, self.store, self.router, self.codec, self.channels = request, store, router, codec, channels
        self.steering = steering
        self.tokens = list(committed)
        self.epoch = epoch
        self.deadline = deadline  # time.monotonic() by which the client wants its answer
        self.stream_interval_ms = stream_interval_ms  # how long the verifier may hold a step's tokens (coalescing)
        self.decoder = IncrementalDecoder(codec)
        self.text = ""  # everything decoded so far
        self.sent = 0  # how much of it the client has; a possible stop-string prefix is held back
        self.finish_reason: str | None = None
        self.started = time.monotonic()
        self.first_token_at: float | None = None
        self.steps = self.accepted = self.failovers = self.budget_sum = 0
        self.predicted = self.observed = 0.0  # accepted tokens the acceptance model predicted / observed
        self.speculating_steps = 0
        self.verifier = self.drafter = ""
        self.method = request.drafter  # "auto" is resolved at the first routing
        self._controls: asyncio.Queue | None = None
        self.cancelled = False
        self.trace = RequestTrace()  # the orchestrator's spans (set by admission; off until then)

    async def run(self):
        """Yields Chunks; the last one has the finish reason and the stats."""
        if self.tokens:  # a resumed request: replay what the client may not have seen
            yield self._chunk(list(self.tokens))  # a copy: self.tokens grows, a held chunk must not
        while self.finish_reason is None:
            address = self._route()
            try:
                async for chunk in self._session(address):
                    yield chunk
            except VerifierLost:
                self.failovers += 1
                self.router.avoid(address)
                if self.failovers > MAX_FAILOVERS:
                    raise ServiceError(grpc.StatusCode.UNAVAILABLE, f"request lost {self.failovers} verifiers") from None
        self.text += self.decoder.flush()
        yield Chunk([], self._text_delta(final=True), self.finish_reason, self.stats())

    def set_budget(self, budget: int) -> None:
        """The goodput controller's new budget, for the session's next tree."""
        if self._controls is not None:
            self._controls.put_nowait(convert.budget_update(budget))

    def cancel(self) -> None:
        self.cancelled = True
        if self._controls is not None:
            self._controls.put_nowait(verifier_pb2.SessionRequest(cancel=verifier_pb2.SessionCancel()))

    def _route(self) -> str:
        address = self.router.verifier()
        if address is None:
            raise ServiceError(grpc.StatusCode.UNAVAILABLE, "no verifier is available for this model")
        self.verifier = address
        if self.method == AUTO_METHOD:
            self.method = self.steering.controller.choose_method(self.router.methods())
        self.drafter = (self.router.drafter(self.method) or "") if self.method != "none" else ""
        self.epoch += 1
        self.store.update(self.request.request_id, verifier=address, drafter_address=self.drafter, failovers=self.failovers)
        return address

    async def _session(self, address: str):
        self._controls = asyncio.Queue()
        request_id, method = self.request.request_id, self.method if self.drafter else "none"
        kv_tokens = len(self.request.prompt_token_ids) + len(self.tokens)
        budget = await self.steering.start(request_id, self, address, method, self.request.budget, kv_tokens)
        self._controls.put_nowait(convert.session_start(self.request, self.tokens, self.drafter, method, self.epoch, budget,
                                                       self.stream_interval_ms))
        if self.cancelled:
            self.cancel()
        metadata = self.trace.session_started(self.epoch, address, self.drafter, method, budget, len(self.tokens))
        call = verifier_pb2_grpc.VerifierStub(self.channels(address)).Session(self._requests(), timeout=self._timeout(),
                                                                              metadata=metadata)
        try:
            async for event in call:
                if event.WhichOneof("kind") == "finished":
                    self.finish_reason = event.finished.finish_reason
                    return
                chunk = await self._commit(event.step)
                if chunk is not None:
                    yield chunk
                if self.finish_reason is not None:  # a stop string
                    return
            raise VerifierLost()
        except grpc.aio.AioRpcError as error:
            self._raise_for(error)
        finally:
            call.cancel()
            self._stop_steering()
            self.trace.session_ended()

    def _stop_steering(self) -> None:
        tracked = self.steering.stop(self.request.request_id)
        if tracked is not None:
            model = tracked.acceptance
            self.predicted, self.observed = self.predicted + model.predicted_total, self.observed + model.observed_total
            self.speculating_steps += model.steps

    async def _requests(self):
        while True:
            yield await self._controls.get()

    def _raise_for(self, error: grpc.aio.AioRpcError) -> None:
        code = error.code()
        if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED):
            raise ServiceError(code, error.details() or code.name)
        raise VerifierLost() from None

    def _timeout(self) -> float | None:
        if self.deadline is None:
            return None
        return max(0.001, self.deadline - time.monotonic())

    async def _commit(self, event: verifier_pb2.StepEvent) -> Chunk | None:
        """Cut at a stop string, write the event's steps to Redis, and make the chunk for the client."""
        tokens = self._cut_at_stop(list(event.token_ids))
        accepted = sum(step.accepted for step in event.steps)
        fresh = await self.store.commit_event_async(self.request.request_id, self.epoch, event.index, tokens,
                                                    len(event.steps), accepted)
        if not fresh:
            return None  # a duplicate: already committed and streamed
        if event.steps:  # not the prefill's token
            self.steps, self.accepted = self.steps + len(event.steps), self.accepted + accepted
            for step in event.steps:
                self.budget_sum += step.budget
                self.trace.step(step, self.steering, self.request.request_id)
            metrics.step(self.verifier, len(tokens), [step.budget for step in event.steps])
            await self.steering.step(self.request.request_id, event)
        self.tokens += tokens
        return self._chunk(tokens)

    def _cut_at_stop(self, tokens: list[int]) -> list[int]:
        if not self.request.stop:
            return tokens
        for end in range(1, len(tokens) + 1):
            if find_stop(self.codec.decode(self.tokens + tokens[:end]), self.request.stop) is not None:
                self.finish_reason = "stop"
                return tokens[:end]
        return tokens

    def _chunk(self, tokens: list[int]) -> Chunk:
        if self.first_token_at is None and tokens:
            self.first_token_at = time.monotonic()
        self.text += self.decoder.push(tokens)
        return Chunk(tokens, self._text_delta(final=False))

    def _text_delta(self, final: bool) -> str:
        """New text for the client: never the stop string, nor, before the end, what could
        still turn out to be the start of one."""
        limit = len(self.text)
        if self.request.stop:
            cut = find_stop(self.text, self.request.stop)
            held = 0 if final else max(map(len, self.request.stop)) - 1
            limit = cut if cut is not None else max(self.sent, limit - held)
        delta, self.sent = self.text[self.sent : limit], max(self.sent, limit)
        return delta

    def stats(self) -> dict:
        return {
            "prompt_tokens": len(self.request.prompt_token_ids), "generated_tokens": len(self.tokens),
            "steps": self.steps, "accepted_tokens": self.accepted,
            "mean_tokens_per_step": (self.accepted + self.steps) / self.steps if self.steps else 0.0,
            "ttft_ms": ((self.first_token_at or time.monotonic()) - self.started) * 1000,
            "total_ms": (time.monotonic() - self.started) * 1000, "seed": self.request.seed,
            "verifier": self.verifier, "drafter": self.drafter, "failovers": self.failovers,
            "mean_budget": self.budget_sum / self.steps if self.steps else 0.0,
            "predicted_accepted": self.predicted / self.speculating_steps if self.speculating_steps else 0.0,
            "observed_accepted": self.observed / self.speculating_steps if self.speculating_steps else 0.0,
        }
