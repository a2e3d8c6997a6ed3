"""Protobuf <-> specmesh types for the drafter service (the only module that converts)."""

from __future__ import annotations

import numpy as np

from specmesh.drafting import Feedback
from specmesh.tree import DraftTree
from specmesh.v1 import common_pb2, drafter_pb2


def tree_to_proto(tree: DraftTree, wants_recycling_rows: bool) -> drafter_pb2.DraftResponse:
    return drafter_pb2.DraftResponse(tree=common_pb2.DraftTree(tokens=tree.tokens, parents=tree.parents, scores=tree.scores),
                                     wants_recycling_rows=wants_recycling_rows)


def feedback(message: drafter_pb2.DraftFeedback) -> Feedback:
    rows = None
    if message.recycling_k:
        rows = np.frombuffer(message.recycling_rows, dtype="<i4").astype(np.int64).reshape(-1, message.recycling_k)
        if rows.shape[0] != len(message.tree_tokens):
            raise ValueError("recycling_rows must have one row per tree token")
    return Feedback(tuple(message.tree_tokens), tuple(message.accepted_tokens), rows, features(message.hidden))


WIRE_ITEM_BYTES = {"bfloat16": 2, "float32": 4}


def features(message: drafter_pb2.Features):
    """[rows, hidden_size] torch tensor of target features, or None when the message carries none
    (torch is imported only here: drafters without EAGLE never need it)."""
    if not message.hidden_size:
        return None
    item_bytes = WIRE_ITEM_BYTES.get(message.dtype)
    if item_bytes is None:
        raise ValueError(f"hidden.dtype must be one of {', '.join(WIRE_ITEM_BYTES)}, got {message.dtype!r}")
    if len(message.data) % (item_bytes * message.hidden_size):
        raise ValueError(f"hidden.data holds {len(message.data)} bytes, not rows of hidden_size={message.hidden_size} "
                         f"{message.dtype} values")
    import torch

    dtype = getattr(torch, message.dtype)
    values = torch.frombuffer(bytearray(message.data), dtype=dtype) if message.data else torch.empty(0, dtype=dtype)
    return values.view(-1, message.hidden_size)
