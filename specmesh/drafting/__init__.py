"""Drafters: each proposes draft trees for the verifier (see base.py for the interface)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specmesh.drafting.base import Drafter, Feedback, NoDrafter, merge_feedback
from specmesh.drafting.ngram import NgramDrafter
from specmesh.drafting.recycling import RecyclingDrafter, RecyclingTable

DRAFTERS = ("eagle", "hybrid", "recycling", "ngram", "none")


@dataclass(frozen=True)
class DraftTarget:
    """What a drafter that reads the target's weights (EAGLE) needs to find them."""

    path: Path  # the target checkpoint (its embedding and LM head)
    dtype: str = "float32"
    device: str = "cpu"
    eagle_head: Path | None = None  # default: the head shipped for this target

    @classmethod
    def from_config(cls, path: Path, config, eagle_head: Path | None = None) -> "DraftTarget":
        """The target at `path`, with the dtype and device a RunnerConfig resolves to."""
        dtype = str(config.torch_dtype()).removeprefix("torch.")
        return cls(path, dtype, str(config.resolved_device()), eagle_head)

    def has_eagle_head(self) -> bool:
        from specmesh.eagle.checkpoint import shipped_head_dir

        return self.eagle_head is not None or shipped_head_dir(self.path) is not None


def make_drafter(name: str, vocab_size: int, recycling_table: RecyclingTable | None = None,
                 target: DraftTarget | None = None) -> Drafter:
    if name == "eagle":
        if target is None:
            raise ValueError("the eagle drafter needs the target checkpoint (DraftTarget)")
        import torch

        from specmesh.drafting.eagle import EagleDrafter

        return EagleDrafter.for_target(target.path, target.eagle_head, getattr(torch, target.dtype), target.device)
    if name == "hybrid":  # n-gram matches merged into EAGLE's tree, or recycling's without a head
        from specmesh.drafting.hybrid import HybridDrafter

        primary = "eagle" if target is not None and target.has_eagle_head() else "recycling"
        return HybridDrafter(make_drafter(primary, vocab_size, recycling_table, target), NgramDrafter())
    if name == "recycling":
        return RecyclingDrafter(recycling_table or RecyclingTable(vocab_size))
    if name == "ngram":
        return NgramDrafter()
    if name == "none":
        return NoDrafter()
    raise ValueError(f"drafter must be one of {', '.join(DRAFTERS)}, got {name!r}")


__all__ = ["DRAFTERS", "DraftTarget", "Drafter", "Feedback", "NgramDrafter", "NoDrafter", "RecyclingDrafter", "RecyclingTable", "make_drafter", "merge_feedback"]
