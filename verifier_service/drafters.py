"""Links from the verifier to drafter services: one per speculating session. The engine loop
(a thread) calls open / feedback / close; trees come back to it as TreeReady commands, and a
broken link as DrafterLost, after which the session moves to another drafter (`pick`) or decodes
on without speculation.

A link runs on the drafter's data plane (drafter_socket.py) where the registry lists one for the
drafter (`data_address`), else on the Draft gRPC stream, which lives on the asyncio loop."""

from __future__ import annotations

import asyncio

import grpc

from specmesh.drafting import Feedback
from specmesh.v1 import drafter_pb2, drafter_pb2_grpc
from verifier_service import convert, tracing
from verifier_service.drafter_socket import SocketLink
from verifier_service.loop import DrafterLost, TreeReady
from verifier_service.session import Session


class _StreamLink:
    """A session's Draft gRPC stream. Built and driven from the engine loop; everything it does
    runs on the asyncio loop (call_soon_threadsafe keeps the messages in order)."""

    def __init__(self, hub: "DrafterHub", request_id: str, address: str, start: drafter_pb2.DraftRequest, metadata=None):
        self.aio_loop, self.request_id, self.submit = hub.aio_loop, request_id, hub.submit
        self.closed = False
        self.aio_loop.call_soon_threadsafe(self._open, hub, address, start, metadata)

    def send(self, message: drafter_pb2.DraftRequest) -> None:
        self.aio_loop.call_soon_threadsafe(self.outbox.put_nowait, message)

    def close(self) -> None:
        self.closed = True
        self.aio_loop.call_soon_threadsafe(self.outbox.put_nowait, None)

    def _open(self, hub: "DrafterHub", address: str, start: drafter_pb2.DraftRequest, metadata) -> None:
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.outbox.put_nowait(start)
        self.task = self.aio_loop.create_task(self._run(drafter_pb2_grpc.DrafterStub(hub.channel(address)), metadata))

    async def _requests(self):
        while (message := await self.outbox.get()) is not None:
            yield message

    async def _run(self, stub: drafter_pb2_grpc.DrafterStub, metadata) -> None:
        try:
            async for response in stub.Draft(self._requests(), metadata=metadata):
                self.submit(TreeReady(self.request_id, convert.tree_from_proto(response.tree), response.wants_recycling_rows))
        except (grpc.aio.AioRpcError, asyncio.CancelledError, ValueError):  # ValueError: a malformed tree
            pass
        if not self.closed:
            self.submit(DrafterLost(self.request_id))


class DrafterHub:
    def __init__(self, aio_loop: asyncio.AbstractEventLoop, submit, pick=lambda method, exclude: None,
                 data_address=lambda address: ""):
        self.aio_loop, self.submit = aio_loop, submit
        self.pick = pick  # (method, addresses to exclude) -> another live drafter's address, or None
        self.data_address = data_address  # a drafter's address -> its data plane's, "" = none (use gRPC)
        self.channels: dict[str, grpc.aio.Channel] = {}  # on the asyncio loop
        self.links: dict[str, SocketLink | _StreamLink] = {}  # on the engine loop

    # ---- called by the engine loop ----------------------------------------------------------------

    def open(self, session: Session, budget: int) -> None:
        start = drafter_pb2.DraftStart(request_id=session.request_id, method=session.spec.drafter_method,
                                       context=session.context, budget=budget)
        if session.prompt_features is not None:
            start.hidden.CopyFrom(convert.features_to_proto(session.prompt_features))
            session.prompt_features = None
        self.close(session)
        metadata, data_address = tracing.drafter_metadata(session), self.data_address(session.drafter_address)
        if data_address:
            start.trace_context.update(dict(metadata or ()))
            link = SocketLink(session.request_id, data_address, self.submit, drafter_pb2.DraftRequest(start=start))
        else:
            link = _StreamLink(self, session.request_id, session.drafter_address, drafter_pb2.DraftRequest(start=start), metadata)
        self.links[session.request_id] = link

    def feedback(self, session: Session, feedback: Feedback, budget: int) -> None:
        link = self.links.get(session.request_id)
        if link is not None:
            link.send(drafter_pb2.DraftRequest(feedback=convert.feedback_to_proto(feedback, budget)))

    def close(self, session: Session) -> None:
        link = self.links.pop(session.request_id, None)
        if link is not None:
            link.close()

    # ---- on the asyncio loop ----------------------------------------------------------------------

    def channel(self, address: str) -> grpc.aio.Channel:
        if address not in self.channels:
            self.channels[address] = grpc.aio.insecure_channel(address)
        return self.channels[address]

    async def aclose(self) -> None:
        for link in list(self.links.values()):
            link.close()
        for channel in self.channels.values():
            await channel.close()
