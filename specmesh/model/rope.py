"""Rotary position embeddings (RoFormer 2104.09864) with the Llama-3 and linear scalings.

Positions are explicit per token (context length + node depth for a draft tree), so the
tables are gathered by position rather than sliced.
"""

from __future__ import annotations

import math

import torch

from specmesh.model.config import ModelConfig


def inverse_frequencies(config: ModelConfig) -> torch.Tensor:
    """[head_dim // 2] fp32, after the configured rope scaling."""
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scaling = dict(config.rope_scaling)
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind is None:
        return inv_freq
    if kind == "linear":
        return inv_freq / float(scaling["factor"])
    if kind == "llama3":
        return _llama3_frequencies(inv_freq, scaling)
    raise ValueError(f"rope_scaling type {kind!r} is not supported")


def _llama3_frequencies(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    factor = float(scaling["factor"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    original = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > original / low, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= original / high) & (wavelen <= original / low)
    return torch.where(medium, smoothed, scaled)


class RotaryTables:
    """cos/sin tables [max_positions, head_dim] in fp32, gathered by explicit positions."""

    def __init__(self, config: ModelConfig, max_positions: int, device: torch.device):
        inv_freq = inverse_frequencies(config)
        positions = torch.arange(max_positions, dtype=torch.int64).float()
        freqs = torch.outer(positions, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        half = inv_freq.shape[0]
        self.cos = emb.cos().to(device)
        # sin with the sign of rotate_half folded in: rotate_half(x) * sin == roll(x) * signed_sin
        self.signed_sin = torch.cat((-emb[:, :half].sin(), emb[:, half:].sin()), dim=-1).to(device)

    def gather(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [B, T] -> cos, signed sin [B, 1, T, head_dim] in `dtype` (broadcast over heads)."""
        return self.cos[positions].unsqueeze(1).to(dtype), self.signed_sin[positions].unsqueeze(1).to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x [B, heads, T, head_dim] rotated by position: x * cos + rotate_half(x) * sin."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin
