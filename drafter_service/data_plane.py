"""The drafter's data plane: the Draft exchange (drafter.proto) on plain TCP, one connection per
session, each message a length-prefixed frame (specmesh/frames.py).

Why beside gRPC: a step's critical path is the verifier's feedback to its drafter and the tree
back. Through gRPC's asyncio stack each message crosses three or four threads on its way in
(gRPC's event engine, its completion-queue poller, the event loop); here the event loop reads the
socket itself, and the verifier writes from its engine thread. A session that breaks the contract
gets a last DraftResponse naming the problem in `error`, then the connection closes.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing

from drafter_service.servicer import DrafterServicer, Refused
from specmesh import frames
from specmesh.v1 import drafter_pb2


class DataPlane:
    def __init__(self, servicer: DrafterServicer):
        self.servicer = servicer
        self.server: asyncio.Server | None = None
        self.connections: set[asyncio.StreamWriter] = set()

    async def start(self, port: int) -> int:
        """Listens on `port` (0 = any free port); returns the port."""
        self.server = await asyncio.start_server(self._serve, "0.0.0.0", port)
        return self.server.sockets[0].getsockname()[1]

    async def stop(self, grace_s: float = 0.0) -> None:
        """Takes no new sessions; the running ones may go on for `grace_s`, then they end (their
        verifiers see the drafter lost and move them on)."""
        if self.server is not None:
            self.server.close()
        deadline = asyncio.get_running_loop().time() + grace_s
        while self.connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        for writer in list(self.connections):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.add(writer)
        try:
            async with aclosing(self.servicer.session(_requests(reader), "data_plane")) as responses:
                async for response in responses:
                    writer.write(frames.encode(response))
                    await writer.drain()
        except Refused as refused:
            writer.write(frames.encode(drafter_pb2.DraftResponse(error=str(refused))))
        except frames.FrameError as error:
            writer.write(frames.encode(drafter_pb2.DraftResponse(error=f"INVALID_ARGUMENT: {error}")))
        except ConnectionError:
            pass
        finally:
            self.connections.discard(writer)
            writer.close()


async def _requests(reader: asyncio.StreamReader):
    while (request := await frames.read(reader, drafter_pb2.DraftRequest.FromString)) is not None:
        yield request
