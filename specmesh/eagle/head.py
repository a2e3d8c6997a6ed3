"""The EAGLE draft head (papers.md §1, EAGLE 2401.15077).

Glossary:
- feature f_j: the target's last hidden state at position j (after its final norm, before the LM
  head); LM_head(f_j) are the target's logits for the token at j + 1.
- head input at j: FC(embed(t_{j+1}) ⊕ f_j), one Llama decoder layer on top; its output f̂_{j+1}
  predicts f_{j+1}, so LM_head(f̂_{j+1}) is the draft distribution of t_{j+2}.
- The target's embedding and LM head are frozen and shared (passed in, never stored here).
- Draft KV: the head's own keys and values, one entry per head input, rolled back to the
  accepted path after each verification (drafting/eagle.py).
- draft vocabulary (EAGLE-3, papers.md §3): the token ids the head may draft, the most frequent
  in its training data. Drafting scores only these rows of the LM head, which on a CPU is most
  of a drafting step's cost; an empty buffer means the whole vocabulary.

The head's config is a Hugging Face-style dict of the target's shape with one layer, so the
target's rotary tables apply unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from specmesh.model import cpu_ops
from specmesh.model.config import ModelConfig
from specmesh.model.cpu_ops import Linear
from specmesh.model.rope import RotaryTables

MIN_KV_CAPACITY = 256  # entries a session's first draft KV buffer holds

HEAD_CONFIG_KEYS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "rms_norm_eps", "rope_theta", "rope_scaling", "max_position_embeddings", "model_type",
)


def head_config_dict(target: dict) -> dict:
    """The head's config from the target's HF config: the same shape, one decoder layer."""
    config = {key: target[key] for key in HEAD_CONFIG_KEYS if key in target}
    rope = target.get("rope_parameters") or {}
    config.setdefault("rope_theta", rope.get("rope_theta", 10000.0))
    config.setdefault("head_dim", target["hidden_size"] // target["num_attention_heads"])
    return {**config, "num_hidden_layers": 1, "architecture": "eagle-1"}


@dataclass(frozen=True)
class DraftKV:
    """The head's keys/values: entries [0, length) of buffers with room for more, so that a step's
    new entries are written in place (a tree's scratch entries go after the committed ones and
    are overwritten by the next commit) instead of copying the whole KV every forward."""

    keys: torch.Tensor  # [B, kv_heads, capacity, head_dim]
    values: torch.Tensor  # [B, kv_heads, capacity, head_dim]
    length: int

    @classmethod
    def with_room(cls, past: "DraftKV | None", like: torch.Tensor, kv_heads: int, head_dim: int, new: int) -> "DraftKV":
        """`past`'s entries in buffers that can take `new` more (past's own buffers when they can;
        else twice as large, so a session's commits copy its KV a logarithmic number of times)."""
        length = 0 if past is None else past.length
        if past is not None and past.keys.shape[2] >= length + new:
            return past
        capacity = max(length + new, 2 * length, MIN_KV_CAPACITY)
        keys = like.new_empty(like.shape[0], kv_heads, capacity, head_dim)
        values = torch.empty_like(keys)
        if past is not None:
            keys[:, :, :length], values[:, :, :length] = past.keys[:, :, :length], past.values[:, :, :length]
        return cls(keys, values, length)

    def extended(self, new: int) -> "DraftKV":
        return DraftKV(self.keys, self.values, self.length + new)

    def valid(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.keys[:, :, : self.length], self.values[:, :, : self.length]


def causal_after(past: int, new: int, device: torch.device) -> torch.Tensor:
    """[1, 1, new, past + new] bool: every past entry, and the new inputs causally."""
    mask = torch.ones(1, 1, new, past + new, dtype=torch.bool, device=device)
    mask[0, 0, :, past:] = torch.ones(new, new, dtype=torch.bool, device=device).tril()
    return mask


class EagleHead(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        self.config_dict = dict(config)
        self.config = ModelConfig.from_hf_dict(config)
        c = self.config
        h, q, kv = c.hidden_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        self.fc = Linear(2 * h, h, bias=True)
        self.q_proj = Linear(h, q, bias=False)
        self.k_proj = Linear(h, kv, bias=False)
        self.v_proj = Linear(h, kv, bias=False)
        self.o_proj = Linear(q, h, bias=False)
        self.post_attention_layernorm = nn.Parameter(torch.ones(h))
        self.gate_proj = Linear(h, c.intermediate_size, bias=False)
        self.up_proj = Linear(h, c.intermediate_size, bias=False)
        self.down_proj = Linear(c.intermediate_size, h, bias=False)
        self.register_buffer("draft_vocab", torch.zeros(0, dtype=torch.long))  # [draft_vocab_size]
        self._rotary: RotaryTables | None = None
        self._fused_weights: dict[str, tuple] = {}  # name -> (the parts' versions, weight)

    def rotary(self, device: torch.device) -> RotaryTables:
        if self._rotary is None or self._rotary.cos.device != device:
            self._rotary = RotaryTables(self.config, self.config.max_position_embeddings, device)
        return self._rotary

    def forward(
        self,
        features: torch.Tensor,  # [B, T, hidden] f_j
        next_embeddings: torch.Tensor,  # [B, T, hidden] embed(t_{j+1})
        positions: torch.Tensor,  # [B, T] int64
        mask: torch.Tensor | None = None,  # [B, 1, T, past + T] bool; None = all of past, causal over T
        past: DraftKV | None = None,
    ) -> tuple[torch.Tensor, DraftKV]:
        """Returns f̂ [B, T, hidden] and the draft KV of past + these T inputs."""
        c = self.config
        x = self.fc(torch.cat((next_embeddings, features), dim=-1).to(self.fc.weight.dtype))
        bsz, seq, _ = x.shape
        cos, sin = self.rotary(x.device).gather(positions, x.dtype)
        kv = DraftKV.with_room(past, x, c.num_kv_heads, c.head_dim, seq)
        rows = torch.arange(bsz, device=x.device)
        writes = torch.arange(kv.length, kv.length + seq, device=x.device).expand(bsz, seq)
        qkv = cpu_ops.linear(x, self._fused("qkv", self.q_proj, self.k_proj, self.v_proj))
        q = cpu_ops.rotary_kv(qkv, cos, sin, rows, writes, kv.keys, kv.values, c.num_heads, c.num_kv_heads,
                              (0, kv.length) if bsz == 1 else None)
        if mask is None and past is not None:
            mask = causal_after(kv.length, seq, x.device)
        kv = kv.extended(seq)
        if cpu_ops.tree_attention_applies(q):  # [B, T, heads, head_dim]
            visible = mask if mask is not None else causal_after(0, seq, x.device).expand(bsz, -1, -1, -1)
            attn = cpu_ops.tree_attention(q, kv.keys, kv.values, rows, kv.length, visible)
        else:
            keys, values = kv.valid()
            attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=mask is None, enable_gqa=True).transpose(1, 2)
        x, y = cpu_ops.add_rms_norm(x, self.o_proj(attn.reshape(bsz, seq, -1)), self.post_attention_layernorm, c.rms_norm_eps)
        gate_up = cpu_ops.linear(y, self._fused("gate_up", self.gate_proj, self.up_proj))
        return x + self.down_proj(cpu_ops.silu_mul(gate_up)), kv

    def _fused(self, name: str, *parts: Linear) -> torch.Tensor:
        """The parts' weights stacked into one matmul's (q/k/v, gate/up): concatenated on every
        call while training (autograd sees the parts), else once and kept until a part changes
        (outside inference mode, so that cpu_ops keeps the packed layout it makes of it)."""
        if torch.is_grad_enabled() and any(p.weight.requires_grad for p in parts):
            return torch.cat([p.weight for p in parts])
        key = tuple((p.weight.data_ptr(), p.weight._version) for p in parts)
        cached = self._fused_weights.get(name)
        if cached is None or cached[0] != key:
            with torch.inference_mode(False):  # a normal tensor: cpu_ops keeps its packed layout on it
                cached = self._fused_weights[name] = (key, torch.cat([p.weight.detach() for p in parts]))
        return cached[1]
