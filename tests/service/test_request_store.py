"""The request record's event commits on the real Redis, through the blocking client and the
async one the orchestrator's event loop uses: each (epoch, event) is appended once, in order,
whichever client sends it, and a retry or a gap is refused."""

from __future__ import annotations

import asyncio

import redis.asyncio

from specmesh.store.keys import redis_url
from specmesh.store.requests import NewRequest, RequestStore


def test_event_commits_are_exactly_once_through_either_client(redis_client, keys):
    async def scenario() -> list[bool]:
        async_client = redis.asyncio.Redis.from_url(redis_url())
        store = RequestStore(redis_client, keys, async_client)
        store.create(NewRequest("r", [1, 2, 3], 16, 0.0, 1.0, 0, 0, (), "none", 0))
        try:
            return [
                await store.commit_event_async("r", 0, 0, [7], 0, 0),  # the prefill's token
                await store.commit_event_async("r", 0, 0, [7], 0, 0),  # a duplicate
                store.commit_event("r", 0, 1, [8, 9], 1, 1),  # the other client, the next event
                await store.commit_event_async("r", 0, 1, [8, 9], 1, 1),  # a retry of it
                await store.commit_event_async("r", 0, 3, [11], 1, 0),  # a gap
                await store.commit_event_async("r", 1, 0, [10], 1, 0),  # a new epoch starts at 0
            ]
        finally:
            await async_client.aclose()

    assert asyncio.run(scenario()) == [True, False, True, False, False, True]
    record = RequestStore(redis_client, keys).get("r")
    assert record.token_ids == [7, 8, 9, 10] and record.epoch == 1
    assert (record.fields["steps"], record.fields["accepted"]) == ("2", "1")  # only the taken events count
