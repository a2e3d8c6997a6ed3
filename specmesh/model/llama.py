"""The Llama family (Llama, SmolLM2, Mistral, Qwen2) with batched tree attention over KV slots.

Glossary:
- forward batch: B sequences, each adding up to T new tokens (a prefill chunk, or the root and
  nodes of a draft tree), right-padded to T. Every sequence attends to its own KV slot through
  an explicit mask; its positions are explicit too (context length + node depth), so a draft
  tree is just tokens, positions and a mask (gpt-fast style: nothing hidden in the model).
- hidden states: the output of the final norm, before the LM head; logits are computed only for
  the rows a caller asks for.
Weights follow Hugging Face's layout; q/k/v and gate/up are fused into one matmul each.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from specmesh.model.config import ModelConfig
from specmesh.model import cpu_ops
from specmesh.model.cpu_ops import Linear
from specmesh.model.kv_cache import KVCache
from specmesh.model.rope import RotaryTables


@dataclass(frozen=True)
class ForwardBatch:
    token_ids: torch.Tensor  # [B, T] long, right-padded
    positions: torch.Tensor  # [B, T] long, rotary position of each token
    write_positions: torch.Tensor  # [B, T] long, cache offset each token's KV is written to
    slots: torch.Tensor  # [B] long, the KV slot of each sequence
    key_len: int  # L: attention reads cache offsets [0, L) of every slot
    mask: torch.Tensor | None  # [B, 1, T, L] bool, True = may attend; None = attend to all L
    slot_start: int | None = None  # set when slots == range(slot_start, slot_start + B)
    write_start: int | None = None  # set when B == 1: its tokens go to [write_start, write_start + T)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        q_size = config.num_heads * config.head_dim
        kv_size = config.num_kv_heads * config.head_dim
        self.qkv_proj = Linear(config.hidden_size, q_size + 2 * kv_size, bias=config.attention_bias)
        self.o_proj = Linear(q_size, config.hidden_size, bias=False)

    def forward(self, x, cos, sin, batch: ForwardBatch, keys: torch.Tensor, values: torch.Tensor):
        """x [B, T, hidden]; keys/values: this layer's cache [slots, kv_heads, max_len, head_dim]."""
        bsz, seq, _ = x.shape
        qkv = self.qkv_proj(x)
        start = (batch.slot_start, batch.write_start) if batch.write_start is not None else None
        q = cpu_ops.rotary_kv(qkv, cos, sin, batch.slots, batch.write_positions, keys, values, self.num_heads,
                              self.num_kv_heads, start)
        if cpu_ops.tree_attention_applies(q):
            out = cpu_ops.tree_attention(q, keys, values, batch.slots, batch.key_len, batch.mask)  # [B, T, heads, head_dim]
        else:
            k_all, v_all = _read_slots(keys, batch), _read_slots(values, batch)
            out = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=batch.mask, enable_gqa=True).transpose(1, 2)
        return self.o_proj(out.reshape(bsz, seq, -1))


def _read_slots(cache: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
    """[B, kv_heads, L, head_dim]: a view when the slots are contiguous, else a gather."""
    head = cache[:, :, : batch.key_len]
    if batch.slot_start is not None:
        return head[batch.slot_start : batch.slot_start + batch.slots.shape[0]]
    return head.index_select(0, batch.slots)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_up_proj = Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(cpu_ops.silu_mul(self.gate_up_proj(x)))


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.eps = config.rms_norm_eps
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = nn.Parameter(torch.ones(config.hidden_size))
        self.post_attention_layernorm = nn.Parameter(torch.ones(config.hidden_size))

    def forward(self, x, normed, next_norm: torch.Tensor, cos, sin, batch: ForwardBatch, keys, values):
        """x: the residual stream, normed: x through this layer's input norm (the layer before
        computed it with its own residual add). Returns the stream after this layer and it through
        `next_norm` (the next layer's input norm, or the model's final one)."""
        x, normed = cpu_ops.add_rms_norm(x, self.self_attn(normed, cos, sin, batch, keys, values), self.post_attention_layernorm, self.eps)
        return cpu_ops.add_rms_norm(x, self.mlp(normed), next_norm, self.eps)


class LlamaModel(nn.Module):
    """Decoder stack + final norm + LM head. `forward` returns hidden states, `logits` the head."""

    def __init__(self, config: ModelConfig, rotary: RotaryTables):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = nn.Parameter(torch.ones(config.hidden_size))
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.rotary = rotary

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch, cache: KVCache) -> torch.Tensor:
        """Writes the batch's KV into its slots and returns hidden states [B, T, hidden]."""
        x = self.embed_tokens(batch.token_ids)
        cos, sin = self.rotary.gather(batch.positions, x.dtype)
        layers = list(self.layers)  # a list: slicing a ModuleList builds a new one (~0.05 ms a forward)
        next_norms = [layer.input_layernorm for layer in layers[1:]] + [self.norm]
        normed = cpu_ops.rms_norm(x, layers[0].input_layernorm, self.config.rms_norm_eps)
        for layer, next_norm, keys, values in zip(layers, next_norms, cache.layer_keys, cache.layer_values):
            x, normed = layer(x, normed, next_norm, cos, sin, batch, keys, values)
        return normed

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [..., hidden] -> logits [..., vocab]."""
        return self.lm_head(hidden)
