"""Sampling parameters and the per-position target token.

Glossary:
- target distribution p: the target model's next-token distribution after temperature,
  top-k and top-p (nucleus) processing. Temperature 0 means greedy: p is a point mass on the
  argmax.
- target token: the token the target model itself emits at an output position. For sampling we
  draw it by the exponential race (Gumbel-max): argmax_x p(x) / E_x with E_x ~ Exp(1), the noise
  keyed by (seed, position). That is an exact sample from p, and it makes the output a function
  of (seed, position) only, whatever the draft tree, the budget or the rest of the batch.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import torch

from specmesh.model.cpu_ops import row_argmax


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k cut
    seed: int | None = None  # None = a random seed, drawn once per request

    def __post_init__(self) -> None:
        if not self.temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def with_seed(self) -> "SamplingParams":
        """These params with a concrete seed (drawn at random if none was given)."""
        if self.seed is not None:
            return self
        seed = int.from_bytes(os.urandom(8), "little") >> 1
        return SamplingParams(self.temperature, self.top_p, self.top_k, seed)


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """p after temperature, top-k and top-p. logits: [..., vocab] -> probs [..., vocab] in fp32."""
    logits = logits.float() / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(mass_before >= params.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def position_noise(seed: int, position: int, vocab_size: int) -> torch.Tensor:
    """Exp(1) noise [vocab] that depends only on (seed, position)."""
    key = hashlib.blake2b(f"{seed}:{position}".encode(), digest_size=8).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(key, "little") >> 1)
    return torch.empty(vocab_size).exponential_(generator=generator)


def target_tokens(logits: torch.Tensor, params: SamplingParams, positions: list[int]) -> list[int]:
    """The target token at each row. logits: [rows, vocab]; positions: [rows] output positions."""
    if params.greedy:
        return row_argmax(logits)
    if params.seed is None:
        raise ValueError("sampling needs a seed: use SamplingParams.with_seed()")
    probs = target_probs(logits, params)
    noise = torch.stack([position_noise(params.seed, p, logits.shape[-1]) for p in positions])
    return row_argmax(probs / noise.to(probs.device))
