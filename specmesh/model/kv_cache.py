"""KV cache in preallocated slots: one slot per sequence, each with its own length.

Glossary:
- slot: a sequence's row of the cache, [max_len] positions per layer and KV head.
- length: how many leading positions of a slot hold committed KV. A forward pass writes its
  tokens at [length, length + n) without moving the length; `commit` then keeps the chosen
  positions (the accepted path of a draft tree) by moving them to [length, length + kept) and
  advancing the length. Rejected entries stay where they are and are overwritten later.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(
        self,
        num_layers: int,
        num_slots: int,
        num_kv_heads: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ):
        shape = (num_layers, num_slots, num_kv_heads, max_len, head_dim)
        # zeros, not empty: masked-out entries are multiplied by an attention weight of 0, and
        # 0 * NaN from uninitialised memory would still poison the output.
        self.keys = torch.zeros(shape, dtype=dtype, device=device)  # [layers, slots, kv_heads, max_len, head_dim]
        self.values = torch.zeros(shape, dtype=dtype, device=device)  # same
        # each layer's [slots, kv_heads, max_len, head_dim], as views made once (not per forward)
        self.layer_keys, self.layer_values = self.keys.unbind(0), self.values.unbind(0)
        self.max_len = max_len
        self.lengths = [0] * num_slots
        self._free = list(range(num_slots - 1, -1, -1))

    @property
    def num_slots(self) -> int:
        return len(self.lengths)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise RuntimeError("no free KV-cache slot")
        slot = self._free.pop()
        self.lengths[slot] = 0
        return slot

    def release(self, slot: int) -> None:
        if slot in self._free:
            raise ValueError(f"KV-cache slot {slot} is already free")
        self.lengths[slot] = 0
        self._free.append(slot)

    def commit(self, slot: int, kept: list[int] | tuple[int, ...]) -> None:
        """Keep the written entries at offsets `kept` (ascending, relative to the slot length)."""
        start = self.lengths[slot]
        count = len(kept)
        if start + count > self.max_len:
            raise ValueError("commit past the end of the KV-cache slot")
        if list(kept) != list(range(count)):
            src = torch.tensor(kept, device=self.keys.device) + start
            dst = slice(start, start + count)
            for cache in (self.keys, self.values):
                slot_view = cache[:, slot]  # [layers, kv_heads, max_len, head_dim]
                slot_view[:, :, dst] = slot_view[:, :, src]
        self.lengths[slot] = start + count

    def truncate(self, slot: int, length: int) -> None:
        """Forget everything from `length` on."""
        if not 0 <= length <= self.lengths[slot]:
            raise ValueError(f"cannot truncate slot {slot} of length {self.lengths[slot]} to {length}")
        self.lengths[slot] = length
