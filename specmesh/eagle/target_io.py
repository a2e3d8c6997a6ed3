"""The two target tensors an EAGLE head needs: the token embedding and the LM head, read from
the checkpoint alone (a drafter needs no copy of the rest of the target)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from specmesh.model import cpu_ops
from specmesh.model.config import ModelConfig
from specmesh.model.weights import checkpoint_files

EMBEDDING = "model.embed_tokens.weight"
LM_HEAD = "lm_head.weight"


@dataclass(frozen=True)
class TargetIO:
    embedding: torch.Tensor  # [vocab, hidden], frozen
    lm_head: torch.Tensor  # [vocab, hidden], frozen (the embedding itself when tied)

    @classmethod
    def from_checkpoint(cls, path: Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> "TargetIO":
        found: dict[str, torch.Tensor] = {}
        for file in checkpoint_files(path):
            with safe_open(str(file), framework="pt") as f:
                for name in {EMBEDDING, LM_HEAD} & set(f.keys()):
                    found[name] = f.get_tensor(name).to(device=device, dtype=dtype)
        if ModelConfig.from_dir(path).tie_word_embeddings and found:  # a tied checkpoint stores either name
            shared = found.get(EMBEDDING, found.get(LM_HEAD))
            return cls(shared, shared)
        missing = {EMBEDDING, LM_HEAD} - set(found)
        if missing:
            raise ValueError(f"{path} has no {', '.join(sorted(missing))}")
        return cls(found[EMBEDDING], found[LM_HEAD])

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.embedding[token_ids]

    def restricted(self, token_ids: torch.Tensor) -> "TargetIO":
        """The same, scoring only `token_ids` (logits index i is token token_ids[i])."""
        return TargetIO(self.embedding, self.lm_head[token_ids])

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return cpu_ops.linear(features.to(self.lm_head.dtype), self.lm_head)
