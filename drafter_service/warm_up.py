"""A new drafter replica's warm-up: before it reports SERVING, it plays a verifier to itself, one
synthetic `hybrid` session over its own gRPC server, so that its first real session pays no
first-call costs (the gRPC stream and message paths; with EAGLE, oneDNN's kernels built per
matmul shape, packed weights and buffers made and paged in). Measured through a local stack on a
2-core AMX Xeon, `fixed:15` ShareGPT requests right after a drafter restart against the same
requests repeated: 1.10x the time without this warm-up, 1.01x with it (restarts with and without
alternating); warming only the EAGLE calls in process had left 1.04x.

The session proposes at every budget of the controller's ladder, each tree answered with feedback
that accepts a different number of tokens (the head's commit shapes); the features are random:
the shapes are what counts, not the trees. It runs before the metrics start, so it counts in none.
"""

from __future__ import annotations

import asyncio

import grpc
import numpy as np

from specmesh.goodput import LADDER
from specmesh.v1 import drafter_pb2, drafter_pb2_grpc

WARM_UP_ID = "drafter-warm-up"
CONTEXT_TOKENS = 64
ROUNDS = 2  # proposals at each budget


async def warm_up(address: str, vocab_size: int, hidden_size: int) -> None:
    """One synthetic session through the drafter serving at `address`, on token ids below
    `vocab_size`; `hidden_size` > 0 sends features (for an EAGLE-based hybrid)."""
    rng = np.random.default_rng(0)
    budgets = [b for b in LADDER if b > 0 for _ in range(ROUNDS)]
    context = [int(t) for t in rng.integers(0, vocab_size, CONTEXT_TOKENS)]
    outbox: asyncio.Queue = asyncio.Queue()
    outbox.put_nowait(drafter_pb2.DraftRequest(start=drafter_pb2.DraftStart(
        request_id=WARM_UP_ID, method="hybrid", context=context, budget=budgets[0],
        hidden=_features(rng, len(context) - 1, hidden_size))))

    async def requests():
        while (message := await outbox.get()) is not None:
            yield message

    async with grpc.aio.insecure_channel(address) as channel:
        step = -1
        async for reply in drafter_pb2_grpc.DrafterStub(channel).Draft(requests()):
            step += 1
            if step + 1 == len(budgets):
                outbox.put_nowait(None)  # the last tree: end the session; the stream ends after it
                continue
            accepted = [*reply.tree.tokens[: step % 4], context[step % CONTEXT_TOKENS]]  # 0-3 nodes, then a bonus token
            outbox.put_nowait(drafter_pb2.DraftRequest(feedback=drafter_pb2.DraftFeedback(
                tree_tokens=[context[-1], *reply.tree.tokens], accepted_tokens=accepted, budget=budgets[step + 1],
                hidden=_features(rng, len(accepted), hidden_size))))
            context += accepted


def _features(rng: np.random.Generator, rows: int, hidden_size: int) -> drafter_pb2.Features:
    """Random features, encoded as the verifier sends them (none where `hidden_size` is 0: a
    drafter without EAGLE, which need not import torch)."""
    if not hidden_size:
        return drafter_pb2.Features()
    import torch

    from verifier_service.convert import features_to_proto  # this session plays the verifier

    return features_to_proto(torch.from_numpy(rng.standard_normal((rows, hidden_size), dtype=np.float32)))
