"""Links from the verifier to drafter services: one bidirectional Draft stream per speculating
session, on the asyncio loop. The engine loop (another thread) calls open / feedback / close;
trees come back to it as TreeReady commands, and a broken stream as DrafterLost, after which
the session moves to another drafter (`pick`) or decodes on without speculation."""

from __future__ import annotations

import asyncio

import grpc

from specmesh.drafting import Feedback
from specmesh.v1 import drafter_pb2, drafter_pb2_grpc
from verifier_service import convert, tracing
from verifier_service.loop import DrafterLost, TreeReady
from verifier_service.session import Session


class _Link:
    def __init__(self, request_id: str, stub: drafter_pb2_grpc.DrafterStub, submit, metadata=None):
        self.request_id, self.stub, self.submit, self.metadata = request_id, stub, submit, metadata
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.closed = False
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _requests(self):
        while (message := await self.outbox.get()) is not None:
            yield message

    async def _run(self) -> None:
        try:
            async for response in self.stub.Draft(self._requests(), metadata=self.metadata):
                self.submit(TreeReady(self.request_id, convert.tree_from_proto(response.tree), response.wants_recycling_rows))
        except (grpc.aio.AioRpcError, asyncio.CancelledError, ValueError):  # ValueError: a malformed tree
            pass
        if not self.closed:
            self.submit(DrafterLost(self.request_id))

    def close(self) -> None:
        self.closed = True
        self.outbox.put_nowait(None)


class DrafterHub:
    def __init__(self, aio_loop: asyncio.AbstractEventLoop, submit, pick=lambda method, exclude: None):
        self.aio_loop, self.submit = aio_loop, submit
        self.pick = pick  # (method, addresses to exclude) -> another live drafter's address, or None
        self.channels: dict[str, grpc.aio.Channel] = {}
        self.links: dict[str, _Link] = {}

    # ---- thread-safe, called by the engine loop -----------------------------------------------

    def open(self, session: Session, budget: int) -> None:
        start = drafter_pb2.DraftStart(request_id=session.request_id, method=session.spec.drafter_method,
                                       context=session.context, budget=budget)
        if session.prompt_features is not None:
            start.hidden.CopyFrom(convert.features_to_proto(session.prompt_features))
            session.prompt_features = None
        self.aio_loop.call_soon_threadsafe(self._open, session.request_id, session.drafter_address, start,
                                           tracing.drafter_metadata(session))

    def feedback(self, session: Session, feedback: Feedback, budget: int) -> None:
        message = drafter_pb2.DraftRequest(feedback=convert.feedback_to_proto(feedback, budget))
        self.aio_loop.call_soon_threadsafe(self._send, session.request_id, message)

    def close(self, session: Session) -> None:
        self.aio_loop.call_soon_threadsafe(self._close, session.request_id)

    # ---- on the asyncio loop --------------------------------------------------------------------

    def _open(self, request_id: str, address: str, start: drafter_pb2.DraftStart, metadata=None) -> None:
        if address not in self.channels:
            self.channels[address] = grpc.aio.insecure_channel(address)
        link = _Link(request_id, drafter_pb2_grpc.DrafterStub(self.channels[address]), self.submit, metadata)
        self.links[request_id] = link
        link.outbox.put_nowait(drafter_pb2.DraftRequest(start=start))

    def _send(self, request_id: str, message: drafter_pb2.DraftRequest) -> None:
        link = self.links.get(request_id)
        if link is not None and not link.closed:
            link.outbox.put_nowait(message)

    def _close(self, request_id: str) -> None:
        link = self.links.pop(request_id, None)
        if link is not None:
            link.close()

    async def aclose(self) -> None:
        for request_id in list(self.links):
            self._close(request_id)
        for channel in self.channels.values():
            await channel.close()
