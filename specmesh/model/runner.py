"""Model runner: one forward pass over a ragged batch of sequences, each in its own KV slot.

Glossary:
- forward item: what one sequence adds in a forward pass: a prefill chunk (a chain of tokens)
  or a draft tree's root and nodes, described by token ids, node depths and an ancestor mask.
  Its tokens go to positions slot length + depth, and their KV to offsets [length, length + n).
- commit: after verification, keep the accepted offsets (see kv_cache.py).
Sequences of different lengths and tree sizes share one forward via right-padding and an
explicit [B, 1, T, L] mask; a padded row only sees itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from specmesh.model.config import ModelConfig
from specmesh.model.kv_cache import KVCache
from specmesh.model.llama import ForwardBatch, LlamaModel


@dataclass(frozen=True)
class ForwardItem:
    slot: int
    token_ids: tuple[int, ...] | list[int]  # [n]
    depths: np.ndarray | None = None  # [n] int64; None = a chain (prefill): 0, 1, ..., n-1
    ancestor_mask: np.ndarray | None = None  # [n, n] bool; None = causal (a chain)
    logits: str = "all"  # which rows get logits: "all", "last" or "none"
    hidden: bool = False  # also return the hidden states of every row


@dataclass(frozen=True)
class ForwardResult:
    logits: torch.Tensor | None  # [rows, vocab] for the rows asked for
    hidden: torch.Tensor | None  # [n, hidden] when asked for


class ModelRunner:
    def __init__(self, model: LlamaModel, cache: KVCache):
        self.model = model
        self.cache = cache
        self.config: ModelConfig = model.config
        self.device = cache.keys.device

    @property
    def max_len(self) -> int:
        return self.cache.max_len

    @property
    def free_slots(self) -> int:
        return self.cache.free_slots

    def allocate_slot(self) -> int:
        return self.cache.allocate()

    def release_slot(self, slot: int) -> None:
        self.cache.release(slot)

    def slot_length(self, slot: int) -> int:
        return self.cache.lengths[slot]

    def commit(self, slot: int, kept: list[int] | tuple[int, ...]) -> None:
        self.cache.commit(slot, kept)

    def forward(self, items: list[ForwardItem]) -> list[ForwardResult]:
        batch = self._build_batch(items)
        hidden = self.model(batch, self.cache)  # [B, T, hidden]
        spans = [self._logit_span(item) for item in items]
        wanted = torch.cat([hidden[b, lo:hi] for b, (lo, hi) in enumerate(spans)])
        logits = self.model.logits(wanted).split([hi - lo for lo, hi in spans])
        return [
            ForwardResult(
                logits=logits[b] if item.logits != "none" else None,
                hidden=hidden[b, : len(item.token_ids)] if item.hidden else None,
            )
            for b, item in enumerate(items)
        ]

    @staticmethod
    def _logit_span(item: ForwardItem) -> tuple[int, int]:
        n = len(item.token_ids)
        return {"all": (0, n), "last": (n - 1, n), "none": (0, 0)}[item.logits]

    def _build_batch(self, items: list[ForwardItem]) -> ForwardBatch:
        lengths = [self.cache.lengths[item.slot] for item in items]
        sizes = [len(item.token_ids) for item in items]
        seq = max(sizes)
        key_len = max(lengths) + seq
        if key_len > self.cache.max_len:
            raise ValueError(f"forward needs {key_len} cache positions, the slots hold {self.cache.max_len}")
        bsz = len(items)
        token_ids = torch.zeros(bsz, seq, dtype=torch.long)
        write_positions = torch.tensor(lengths).unsqueeze(1) + torch.arange(seq)  # [B, T]
        positions = write_positions.clone()
        for b, item in enumerate(items):
            token_ids[b, : sizes[b]] = torch.as_tensor(item.token_ids)
            if item.depths is not None:
                positions[b, : sizes[b]] = lengths[b] + torch.tensor(item.depths)
        mask = self._mask(items, lengths, sizes, seq, key_len)
        slots = [item.slot for item in items]
        contiguous = slots == list(range(slots[0], slots[0] + bsz))
        return ForwardBatch(
            token_ids=token_ids.to(self.device),
            positions=positions.to(self.device),
            write_positions=write_positions.to(self.device),
            slots=torch.tensor(slots, device=self.device),
            key_len=key_len,
            mask=mask,
            slot_start=slots[0] if contiguous else None,
            write_start=lengths[0] if bsz == 1 else None,
        )

    def _mask(self, items, lengths, sizes, seq, key_len) -> torch.Tensor | None:
        """[B, 1, T, L] bool: prefix + own ancestors; a padded row sees only itself."""
        if seq == 1 and len(set(lengths)) == 1:
            return None
        mask = torch.zeros(len(items), seq, key_len, dtype=torch.bool)
        causal = torch.ones(seq, seq, dtype=torch.bool).tril()
        for b, item in enumerate(items):
            n, start = sizes[b], lengths[b]
            mask[b, :n, :start] = True
            own = causal[:n, :n] if item.ancestor_mask is None else torch.tensor(item.ancestor_mask)
            mask[b, :n, start : start + n] = own
            pad = torch.arange(n, seq)
            mask[b, pad, start + pad] = True
        return mask.unsqueeze(1).to(self.device)
