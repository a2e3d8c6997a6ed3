"""The gRPC client SDK for the orchestrator (the public API). Imports no torch.

    from specmesh.client import Client
    with Client("localhost:50051") as client:
        result = client.generate(prompt="Hello!", chat=True, max_new_tokens=64)
        for chunk in client.generate_stream(token_ids=[...], temperature=0.8, seed=7):
            print(chunk.text, end="")

`generate` gets the whole answer in one message at the end (`whole=True`), `generate_stream` a
chunk per step the orchestrator commits. `timeout` (seconds) becomes the gRPC deadline; closing a
stream early, or cancelling the task of an AsyncClient call, cancels the request on the server.
Server errors raise SpecmeshError with the gRPC status code (INVALID_ARGUMENT names the bad field).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, fields

import grpc

from specmesh.v1 import common_pb2, orchestrator_pb2, orchestrator_pb2_grpc


class SpecmeshError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code, self.message = code, message


@dataclass(frozen=True)
class Stats:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    steps: int = 0
    accepted_tokens: int = 0
    mean_tokens_per_step: float = 0.0
    ttft_ms: float = 0.0
    total_ms: float = 0.0
    seed: int = 0
    verifier: str = ""
    drafter: str = ""
    failovers: int = 0
    mean_budget: float = 0.0  # draft nodes per step (the goodput controller's choice when adaptive)
    predicted_accepted: float = 0.0  # per speculating step: what the acceptance model predicted ...
    observed_accepted: float = 0.0  # ... and what was accepted


@dataclass(frozen=True)
class Chunk:
    request_id: str
    token_ids: list[int]
    text: str
    finish_reason: str = ""  # set on the last chunk
    stats: Stats | None = None  # set on the last chunk


@dataclass(frozen=True)
class Result:
    request_id: str
    token_ids: list[int]
    text: str
    finish_reason: str
    stats: Stats


@dataclass(frozen=True)
class RequestInfo:
    request_id: str
    status: str
    token_ids: list[int]
    finish_reason: str
    stats: Stats


# ---- the one place that converts protobuf ---------------------------------------------------------


def build_request(prompt=None, token_ids=None, max_new_tokens=128, temperature=0.0, top_p=1.0, top_k=0, seed=None,
                  stop=(), drafter="", budget=None, chat=False, request_id="", whole=False) -> orchestrator_pb2.GenerateRequest:
    if (prompt is None) == (token_ids is None):
        raise ValueError("give exactly one of prompt and token_ids")
    sampling = common_pb2.SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed)
    request = orchestrator_pb2.GenerateRequest(
        request_id=request_id, chat=chat, max_new_tokens=max_new_tokens, sampling=sampling, stop=list(stop),
        drafter=drafter, budget=budget, whole=whole,
    )
    if prompt is not None:
        request.prompt = prompt
    else:
        request.token_ids.ids.extend(token_ids)
    return request


def _stats(message: orchestrator_pb2.RequestStats) -> Stats:
    return Stats(**{f.name: getattr(message, f.name) for f in fields(Stats)})


def _chunk(message: orchestrator_pb2.GenerateResponse) -> Chunk:
    stats = _stats(message.stats) if message.HasField("stats") else None
    return Chunk(message.request_id, list(message.token_ids), message.text, message.finish_reason, stats)


def _info(message: orchestrator_pb2.RequestInfo) -> RequestInfo:
    return RequestInfo(message.request_id, message.status, list(message.token_ids), message.finish_reason, _stats(message.stats))


def _assemble(chunks: list[Chunk]) -> Result:
    last = chunks[-1]
    return Result(last.request_id, [t for c in chunks for t in c.token_ids], "".join(c.text for c in chunks),
                  last.finish_reason, last.stats or Stats())


def _error(error: grpc.RpcError) -> SpecmeshError:
    return SpecmeshError(error.code(), error.details() or "")


_propagate = None  # opentelemetry.propagate once looked up; False when OpenTelemetry is not installed


def _trace_metadata() -> tuple[tuple[str, str], ...] | None:
    """The caller's current trace context (W3C traceparent), so the request's spans join the
    caller's trace; None without OpenTelemetry or without a current span."""
    global _propagate
    if _propagate is None:
        try:
            from opentelemetry import propagate
        except ImportError:
            propagate = False
        _propagate = propagate
    if not _propagate:
        return None
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    return tuple(carrier.items()) or None


# ---- clients --------------------------------------------------------------------------------------


class Client:
    def __init__(self, address: str = "localhost:50051", timeout: float | None = None):
        self.timeout = timeout
        self._channel = grpc.insecure_channel(address)
        self._stub = orchestrator_pb2_grpc.OrchestratorStub(self._channel)

    def generate_stream(self, *, timeout: float | None = None, **kwargs) -> Iterator[Chunk]:
        call = self._stub.Generate(build_request(**kwargs), timeout=timeout or self.timeout, metadata=_trace_metadata())
        try:
            for message in call:
                yield _chunk(message)
        except grpc.RpcError as error:
            raise _error(error) from None
        finally:
            call.cancel()  # a no-op once the stream is complete; cancels the request if we stop early

    def generate(self, *, timeout: float | None = None, **kwargs) -> Result:
        return _assemble(list(self.generate_stream(timeout=timeout, whole=True, **kwargs)))

    def cancel(self, request_id: str) -> bool:
        try:
            return self._stub.Cancel(orchestrator_pb2.CancelRequest(request_id=request_id), timeout=self.timeout).cancelled
        except grpc.RpcError as error:
            raise _error(error) from None

    def get_request(self, request_id: str) -> RequestInfo:
        try:
            return _info(self._stub.GetRequest(orchestrator_pb2.GetRequestRequest(request_id=request_id), timeout=self.timeout))
        except grpc.RpcError as error:
            raise _error(error) from None

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncClient:
    def __init__(self, address: str = "localhost:50051", timeout: float | None = None):
        self.timeout = timeout
        self._channel = grpc.aio.insecure_channel(address)
        self._stub = orchestrator_pb2_grpc.OrchestratorStub(self._channel)

    async def generate_stream(self, *, timeout: float | None = None, **kwargs) -> AsyncIterator[Chunk]:
        call = self._stub.Generate(build_request(**kwargs), timeout=timeout or self.timeout, metadata=_trace_metadata())
        try:
            async for message in call:
                yield _chunk(message)
        except grpc.aio.AioRpcError as error:
            raise _error(error) from None
        finally:
            call.cancel()

    async def generate(self, *, timeout: float | None = None, **kwargs) -> Result:
        return _assemble([chunk async for chunk in self.generate_stream(timeout=timeout, whole=True, **kwargs)])

    async def cancel(self, request_id: str) -> bool:
        try:
            reply = await self._stub.Cancel(orchestrator_pb2.CancelRequest(request_id=request_id), timeout=self.timeout)
        except grpc.aio.AioRpcError as error:
            raise _error(error) from None
        return reply.cancelled

    async def get_request(self, request_id: str) -> RequestInfo:
        try:
            reply = await self._stub.GetRequest(orchestrator_pb2.GetRequestRequest(request_id=request_id), timeout=self.timeout)
        except grpc.aio.AioRpcError as error:
            raise _error(error) from None
        return _info(reply)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
