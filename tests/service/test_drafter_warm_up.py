"""A drafter replica's warm-up (drafter_service/warm_up.py) through the drafter's real servicer on a
gRPC server on loopback: one synthetic hybrid session that proposes at every budget of the
controller's ladder, with features of the right shapes when the drafter reads them, and leaves
no session and no recycling rows behind."""

from __future__ import annotations

import asyncio

import grpc
import pytest
import redis.asyncio as aioredis

from drafter_service.servicer import DrafterServicer
from drafter_service.shared_table import SharedTable
from drafter_service.warm_up import CONTEXT_TOKENS, ROUNDS, warm_up
from specmesh.goodput import LADDER
from specmesh.store.keys import redis_url
from specmesh.v1 import drafter_pb2_grpc

VOCAB = 32  # fewer token ids than the synthetic context has tokens (the tiny test models' vocabulary)


class Recording:
    """A drafter whose calls are recorded: the context it started on, the budgets it was asked
    for, the shapes of the features it got (start, then each feedback)."""

    def __init__(self, drafter):
        self.drafter, self.budgets, self.features, self.contexts = drafter, [], [], []

    def start(self, request_id, context, hidden=None):
        self.contexts.append(list(context))
        self.features.append(None if hidden is None else tuple(hidden.shape))
        self.drafter.start(request_id, context, hidden)

    def observe(self, request_id, feedback):
        self.features.append(None if feedback.hidden is None else tuple(feedback.hidden.shape))
        self.drafter.observe(request_id, feedback)

    def propose(self, request_id, context, budget):
        self.budgets.append(budget)
        return self.drafter.propose(request_id, context, budget)

    def __getattr__(self, name):
        return getattr(self.drafter, name)


async def warmed_up(keys, hidden_size: int) -> tuple[DrafterServicer, Recording]:
    servicer = DrafterServicer(SharedTable(aioredis.Redis.from_url(redis_url()), keys, "warm-up-test", VOCAB))
    recording = servicer.drafters["hybrid"] = Recording(servicer.drafters["hybrid"])
    server = grpc.aio.server()
    drafter_pb2_grpc.add_DrafterServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        await asyncio.wait_for(warm_up(f"127.0.0.1:{port}", VOCAB, hidden_size), timeout=30)
    finally:
        await server.stop(None)
    return servicer, recording


@pytest.mark.parametrize("hidden_size", [0, 64])
def test_warm_up_proposes_at_every_ladder_budget_and_leaves_nothing_behind(keys, hidden_size):
    servicer, recording = asyncio.run(warmed_up(keys, hidden_size))
    assert recording.budgets == [b for b in LADDER if b > 0 for _ in range(ROUNDS)]
    if hidden_size:
        assert recording.features[0] == (CONTEXT_TOKENS - 1, hidden_size)
        assert {shape[1] for shape in recording.features[1:]} == {hidden_size}
        assert len({shape[0] for shape in recording.features[1:]}) > 1  # commits of several lengths
    else:
        assert set(recording.features) == {None}
    assert len(recording.features) == len(recording.budgets)  # the start and a feedback per tree but the last
    assert all(0 <= t < VOCAB for t in recording.contexts[0])
    assert servicer.sessions == {}
    assert not servicer.shared.table.filled.any()
