"""The Redis-shared token-recycling table: replicas converge on the hash, and start warm."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import redis.asyncio as aioredis

from drafter_service.shared_table import SharedTable
from specmesh.store.keys import redis_url

VOCAB = 64


def rows_for(tokens, offset):
    return (np.asarray(tokens)[:, None] + offset + np.arange(8)[None, :]) % VOCAB


async def converged(client, *replicas: SharedTable) -> bool:
    """Every replica's table equals the hash (filled rows and their values)."""
    stored = await client.hgetall(replicas[0].hash_key)
    from_hash = {int(k): np.frombuffer(v, dtype="<i4").tolist() for k, v in stored.items()}
    return all(sorted(from_hash) == np.flatnonzero(r.table.filled).tolist()
               and all(r.table.successors[t].tolist() == row for t, row in from_hash.items()) for r in replicas)


async def converge(keys) -> None:
    client = aioredis.Redis.from_url(redis_url())
    a, b = (SharedTable(client, keys, "model-x", VOCAB) for _ in range(2))
    await a.load()
    await b.load()
    followers = [asyncio.create_task(t.follow()) for t in (a, b)]
    # both replicas write rows, some for the same tokens, interleaved
    for step in range(20):
        tokens = np.array([step % 7, (step * 3) % 11, 40 + step % 5])
        for replica, offset in ((a, 1), (b, 2)):
            replica.table.update(tokens, rows_for(tokens, offset + step))
            replica.publish(tokens, rows_for(tokens, offset + step))
        await asyncio.sleep(0.01)
    deadline = time.monotonic() + 10
    while not await converged(client, a, b):
        assert time.monotonic() < deadline, "the replicas did not converge on the hash"
        await asyncio.sleep(0.1)
    late = SharedTable(client, keys, "model-x", VOCAB)
    await late.load()
    assert (late.table.successors == a.table.successors).all() and (late.table.filled == a.table.filled).all()
    for task in followers:
        task.cancel()
    await client.aclose()


def test_replicas_converge_on_the_shared_table_and_a_new_one_starts_warm(keys):
    asyncio.run(converge(keys))
