"""The Verifier gRPC servicer: thin. It converts the session stream to commands for the engine
loop and the loop's events back to protobuf; errors become gRPC status codes here."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc

from specmesh.model.config import ModelConfig
from specmesh.serving import ServiceError
from specmesh.v1 import verifier_pb2_grpc
from verifier_service import convert, tracing
from verifier_service.loop import Admit, Cancel, SetBudget, VerifierLoop
from verifier_service.session import Finished, Session


class VerifierServicer(verifier_pb2_grpc.VerifierServicer):
    """Registered before the model loads (so health checks answer); `attach` makes it work."""

    def __init__(self, max_context: int, accepting: Callable[[], bool]):
        self.max_context, self.accepting = max_context, accepting
        self.loop: VerifierLoop | None = None
        self.model_config: ModelConfig | None = None

    def attach(self, loop: VerifierLoop, model_config: ModelConfig) -> None:
        self.loop, self.model_config = loop, model_config

    async def Session(self, request_iterator, context: grpc.aio.ServicerContext):
        first = await anext(aiter(request_iterator), None)
        if first is None:
            return
        if self.loop is None or not self.accepting():
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this verifier is loading or draining")
        if first.WhichOneof("kind") != "start":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message of a session must be `start`")
        try:
            spec = convert.session_spec(first.start, self.model_config, self.max_context)
        except ServiceError as error:
            await context.abort(error.code, str(error))
        events: asyncio.Queue = asyncio.Queue()
        aio_loop = asyncio.get_running_loop()
        session = Session(spec, emit=lambda event: aio_loop.call_soon_threadsafe(events.put_nowait, event),
                          trace=tracing.session_trace(context.invocation_metadata()))
        self.loop.submit(Admit(session))
        controls = asyncio.create_task(self._controls(request_iterator, spec.request_id))
        finished = False
        try:
            while not finished:
                event = await events.get()
                finished = isinstance(event, Finished)
                yield convert.event_to_proto(event)
        finally:
            controls.cancel()
            if not finished:  # the orchestrator went away (cancel, deadline, crash): free the slot
                self.loop.submit(Cancel(spec.request_id))

    async def _controls(self, request_iterator, request_id: str) -> None:
        async for message in request_iterator:
            kind = message.WhichOneof("kind")
            if kind == "budget":
                self.loop.submit(SetBudget(request_id, max(0, message.budget.budget)))
            elif kind == "cancel":
                self.loop.submit(Cancel(request_id))
