"""A request's life after admission, shared by the gRPC servicer and the HTTP API: run its driver
to the end and settle it, however it ends.

Glossary:
- settle: record the request's final status in Redis ("finished", "cancelled" or "failed", with a
  reason) and forget its driver (Orchestrator.settle).
- client gone: the caller's task is cancelled (a cancelled gRPC call, a past deadline, an HTTP
  client that disconnected) or it stops reading the chunks. Either way the driver's verifier
  session is closed and the request settles as "cancelled".
- failure: leaves as a ServiceError (a Redis error becomes UNAVAILABLE), the request settled as
  "failed" with the status code as reason, so each transport maps it to its own error.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing

import grpc
import redis

from orchestrator.app import Orchestrator
from orchestrator.driver import Chunk, RequestDriver
from specmesh.serving import ServiceError


async def drive(orchestrator: Orchestrator, driver: RequestDriver) -> AsyncIterator[Chunk]:
    """Yields the driver's chunks; settles the request when they end, or when anything stops them."""
    status, reason = "failed", ""
    try:
        async with aclosing(driver.run()) as chunks:
            async for chunk in chunks:
                if chunk.finish_reason:
                    status, reason = ("cancelled" if chunk.finish_reason == "cancelled" else "finished"), chunk.finish_reason
                yield chunk
    except ServiceError as error:
        reason = error.code.name.lower()
        raise
    except redis.RedisError as error:
        reason = "redis"
        raise ServiceError(grpc.StatusCode.UNAVAILABLE, f"request state store (Redis): {error}") from None
    except (asyncio.CancelledError, GeneratorExit):
        if not reason:  # a client gone after the last chunk leaves the request finished
            status, reason = "cancelled", "cancelled"
        raise
    finally:
        await orchestrator.settle(driver, status, reason)
