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
from specmesh.model.rope import RotaryTables, apply_rotary

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
    keys: torch.Tensor  # [B, kv_heads, length, head_dim]
    values: torch.Tensor  # [B, kv_heads, length, head_dim]

    @property
    def length(self) -> int:
        return self.keys.shape[2]


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
        q = apply_rotary(self.q_proj(x).view(bsz, seq, c.num_heads, c.head_dim).transpose(1, 2), cos, sin)
        k = apply_rotary(self.k_proj(x).view(bsz, seq, c.num_kv_heads, c.head_dim).transpose(1, 2), cos, sin)
        v = self.v_proj(x).view(bsz, seq, c.num_kv_heads, c.head_dim).transpose(1, 2)
        if past is not None:
            if mask is None:
                mask = causal_after(past.length, seq, x.device)
            k, v = torch.cat((past.keys, k), dim=2), torch.cat((past.values, v), dim=2)
        if cpu_ops.tree_attention_applies(q):  # [B, T, heads, head_dim]
            visible = mask if mask is not None else causal_after(0, seq, x.device).expand(bsz, -1, -1, -1)
            attn = cpu_ops.tree_attention(q, k.contiguous(), v.contiguous(), torch.arange(bsz), k.shape[2], visible)
        else:
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=True).transpose(1, 2)
        x = x + self.o_proj(attn.reshape(bsz, seq, -1))
        y = cpu_ops.rms_norm(x, self.post_attention_layernorm, c.rms_norm_eps)
        x = x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))
        return x, DraftKV(k, v)
