"""Target features for EAGLE training: one forward of the target over each conversation (the
responses are not regenerated, papers.md §1), keeping the last hidden state of every position.

Written to disk in chunks (`features-NNNNN.safetensors`: the token ids, the offset of each
conversation, and the features in bf16), so training can run many epochs over them without the
target; an interrupted extraction resumes at the first missing chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from tqdm import tqdm

from specmesh.eagle.ragged import flatten, save_whole
from specmesh.model.runner import ForwardItem


@dataclass(frozen=True)
class FeatureChunk:
    token_ids: torch.Tensor  # [total_tokens] int64
    offsets: torch.Tensor  # [conversations + 1] int64
    features: torch.Tensor  # [total_tokens, hidden] bf16

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def conversation(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.token_ids[lo:hi], self.features[lo:hi]

    def save(self, path: Path) -> None:
        save_whole({"token_ids": self.token_ids, "offsets": self.offsets, "features": self.features}, path)

    @staticmethod
    def count(path: Path) -> int:
        """The number of conversations in a chunk file, read without its features."""
        with safe_open(str(path), framework="pt") as f:
            return len(f.get_tensor("offsets")) - 1

    @classmethod
    def load(cls, path: Path) -> "FeatureChunk":
        tensors = load_file(str(path))
        return cls(tensors["token_ids"], tensors["offsets"], tensors["features"])


def chunk_paths(directory: Path) -> list[Path]:
    return sorted(directory.glob("features-*.safetensors"))


@torch.inference_mode()
def target_features(runner, conversations: list[list[int]]) -> list[torch.Tensor]:
    """Last hidden states [len, hidden] of each conversation in bf16 (as stored), all in one batched forward."""
    items = [ForwardItem(slot, ids, logits="none", hidden=True) for slot, ids in enumerate(conversations)]
    return [result.hidden.to(torch.bfloat16).cpu() for result in runner.forward(items)]


def extract_features(runner, conversations, directory: Path, total: int, chunk_size: int, batch: int) -> list[Path]:
    """Features of `total` conversations from the iterator, `chunk_size` per file."""
    directory.mkdir(parents=True, exist_ok=True)
    done = len(chunk_paths(directory))
    stream = islice(conversations, done * chunk_size, total)
    with tqdm(total=total, initial=min(done * chunk_size, total), desc="target features", unit="conv") as bar:
        for index in range(done, -(-total // chunk_size)):
            convs = list(islice(stream, chunk_size))
            if not convs:
                break
            feats = []
            for start in range(0, len(convs), batch):
                feats += target_features(runner, convs[start : start + batch])
                bar.update(len(convs[start : start + batch]))
            FeatureChunk(*flatten(convs), torch.cat(feats)).save(directory / f"features-{index:05d}.safetensors")
    return chunk_paths(directory)
