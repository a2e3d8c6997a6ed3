"""Protobuf <-> specmesh types for the drafter service (the only module that converts)."""

from __future__ import annotations

import numpy as np

from specmesh.drafting import Feedback
from specmesh.tree import DraftTree
from specmesh.v1 import common_pb2, drafter_pb2


def tree_to_proto(tree: DraftTree) -> drafter_pb2.DraftResponse:
    return drafter_pb2.DraftResponse(tree=common_pb2.DraftTree(tokens=tree.tokens, parents=tree.parents, scores=tree.scores))


def feedback(message: drafter_pb2.DraftFeedback) -> Feedback:
    rows = None
    if message.recycling_k:
        rows = np.frombuffer(message.recycling_rows, dtype="<i4").astype(np.int64).reshape(-1, message.recycling_k)
        if rows.shape[0] != len(message.tree_tokens):
            raise ValueError("recycling_rows must have one row per tree token")
    return Feedback(tuple(message.tree_tokens), tuple(message.accepted_tokens), rows)
