"""The Redis-shared token-recycling table: replicas converge on the hash, and start warm."""

from __future__ import annotations

import asyncio

import numpy as np
import redis.asyncio as aioredis

from drafter_service.shared_table import SharedTable
from specmesh.store.keys import redis_url

VOCAB = 64


def rows_for(tokens, offset):
    return (np.asarray(tokens)[:, None] + offset + np.arange(8)[None, :]) % VOCAB


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
    await asyncio.sleep(0.5)
    stored = await client.hgetall(a.hash_key)
    from_hash = {int(k): np.frombuffer(v, dtype="<i4").tolist() for k, v in stored.items()}
    for replica in (a, b):
        filled = np.flatnonzero(replica.table.filled).tolist()
        assert sorted(from_hash) == filled
        assert all(replica.table.successors[t].tolist() == row for t, row in from_hash.items())
    late = SharedTable(client, keys, "model-x", VOCAB)
    await late.load()
    assert (late.table.successors == a.table.successors).all() and (late.table.filled == a.table.filled).all()
    for task in followers:
        task.cancel()
    await client.aclose()


def test_replicas_converge_on_the_shared_table_and_a_new_one_starts_warm(keys):
    asyncio.run(converge(keys))
