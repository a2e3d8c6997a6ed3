"""Drafters: each proposes draft trees for the verifier (see base.py for the interface)."""

from __future__ import annotations

from specmesh.drafting.base import Drafter, Feedback, NoDrafter
from specmesh.drafting.ngram import NgramDrafter
from specmesh.drafting.recycling import RecyclingDrafter, RecyclingTable

DRAFTERS = ("recycling", "ngram", "none")


def make_drafter(name: str, vocab_size: int, recycling_table: RecyclingTable | None = None) -> Drafter:
    if name == "recycling":
        return RecyclingDrafter(recycling_table or RecyclingTable(vocab_size))
    if name == "ngram":
        return NgramDrafter()
    if name == "none":
        return NoDrafter()
    raise ValueError(f"drafter must be one of {', '.join(DRAFTERS)}, got {name!r}")


__all__ = ["DRAFTERS", "Drafter", "Feedback", "NgramDrafter", "NoDrafter", "RecyclingDrafter", "RecyclingTable", "make_drafter"]
