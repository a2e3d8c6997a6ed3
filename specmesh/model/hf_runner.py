"""Fallback runner: any `AutoModelForCausalLM` behind the ModelRunner interface.

For architectures our own implementation (llama.py) does not cover. It runs one sequence per
forward (no ragged batching), keeps one Hugging Face DynamicCache per slot, passes the tree as
an explicit 4D mask with explicit position ids, and commits by rewriting each layer's cache.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from specmesh.model.runner import ForwardItem, ForwardResult


class HFRunner:
    def __init__(self, model, num_slots: int, max_len: int):
        self.model = model.eval()
        self.max_len = max_len
        self.device = next(model.parameters()).device
        self._caches: list[DynamicCache | None] = [None] * num_slots
        self._lengths = [0] * num_slots

    @property
    def free_slots(self) -> int:
        return sum(c is None for c in self._caches)

    def allocate_slot(self) -> int:
        for slot, cache in enumerate(self._caches):
            if cache is None:
                self._caches[slot] = DynamicCache(config=self.model.config)
                self._lengths[slot] = 0
                return slot
        raise RuntimeError("no free KV-cache slot")

    def release_slot(self, slot: int) -> None:
        self._caches[slot] = None

    def slot_length(self, slot: int) -> int:
        return self._lengths[slot]

    @torch.inference_mode()
    def forward(self, items: list[ForwardItem]) -> list[ForwardResult]:
        return [self._forward_one(item) for item in items]

    def _forward_one(self, item: ForwardItem) -> ForwardResult:
        start, n = self._lengths[item.slot], len(item.token_ids)
        if start + n > self.max_len:
            raise ValueError(f"forward needs {start + n} cache positions, the slots hold {self.max_len}")
        cache = self._caches[item.slot]
        if cache.get_seq_length() > start:  # entries of a forward that was never committed
            self._keep(item.slot, torch.arange(start, device=self.device))
        depths = torch.arange(n) if item.depths is None else torch.tensor(item.depths)
        own = torch.ones(n, n, dtype=torch.bool).tril() if item.ancestor_mask is None else torch.tensor(item.ancestor_mask)
        mask = torch.cat([torch.ones(n, start, dtype=torch.bool), own], dim=1)[None, None]
        out = self.model(
            torch.tensor([list(item.token_ids)], device=self.device),
            attention_mask=mask.to(self.device),
            position_ids=(start + depths).unsqueeze(0).to(self.device),
            cache=cache,
            use_cache=True,
            output_hidden_states=item.hidden,
        )
        logits = {"all": out.logits[0], "last": out.logits[0, -1:], "none": None}[item.logits]
        hidden = out.hidden_states[-1][0] if item.hidden else None
        return ForwardResult(logits, hidden)

    def commit(self, slot: int, kept: list[int] | tuple[int, ...]) -> None:
        start = self._lengths[slot]
        self._keep(slot, torch.tensor([*range(start), *(start + k for k in kept)], device=self.device))
        self._lengths[slot] = start + len(kept)

    def _keep(self, slot: int, index: torch.Tensor) -> None:
        for layer in self._caches[slot].layers:
            layer.keys = layer.keys.index_select(2, index)
            layer.values = layer.values.index_select(2, index)
