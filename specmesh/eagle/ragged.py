"""Conversations of different lengths stored as one flat tensor of token ids plus offsets
(conversation i is ids[offsets[i]:offsets[i + 1]]), the layout of the token and feature files of
`specmesh train-eagle`, and the write that leaves either the whole file or none of it."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file


def flatten(conversations: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [total] int64, offsets [len + 1] int64) of the conversations."""
    lengths = torch.tensor([0] + [len(c) for c in conversations])
    return torch.tensor([t for c in conversations for t in c], dtype=torch.int64), lengths.cumsum(0)


def save_whole(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    """safetensors written beside `path`, then renamed onto it: an interrupted write leaves no file."""
    partial = path.with_suffix(".partial")
    save_file(tensors, str(partial), metadata=metadata)
    partial.rename(path)
