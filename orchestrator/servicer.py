"""The Orchestrator gRPC servicer (the public API): thin; errors become status codes here."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import grpc
import redis

from orchestrator import convert
from orchestrator.app import Orchestrator
from orchestrator.driver import Chunk
from orchestrator.lifecycle import drive
from specmesh.serving import ServiceError
from specmesh.v1 import orchestrator_pb2, orchestrator_pb2_grpc


class OrchestratorServicer(orchestrator_pb2_grpc.OrchestratorServicer):
    def __init__(self, app: Orchestrator):
        self.app = app

    async def Generate(self, request, context: grpc.aio.ServicerContext):
        try:
            driver = await self.app.admit(request, context.time_remaining(), context.invocation_metadata())
            async with aclosing(drive(self.app, driver)) as chunks:
                if request.whole:  # one message at the end: a caller that wants the answer, not a stream
                    yield convert.response(driver.request.request_id, Chunk.joined([chunk async for chunk in chunks]))
                    return
                async for chunk in chunks:
                    yield convert.response(driver.request.request_id, chunk)
        except ServiceError as error:
            await context.abort(error.code, str(error))

    async def Cancel(self, request, context):
        return orchestrator_pb2.CancelResponse(cancelled=self.app.cancel(request.request_id))

    async def GetRequest(self, request, context):
        try:
            record = await asyncio.to_thread(self.app.store.get, request.request_id)
        except redis.RedisError as error:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"request state store (Redis): {error}")
        if record is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no request {request.request_id!r}")
        return convert.request_info(record)
