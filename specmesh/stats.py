"""Per-step and per-request statistics: plain data; metrics exporters are separate sinks."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepStats:
    tree_size: int  # draft nodes verified (root excluded)
    accepted: int  # draft nodes accepted; the step emitted accepted + 1 tokens
    batch_size: int  # sequences in the forward pass
    draft_s: float
    verify_s: float
    budget: int = 0  # the budget the tree was drafted for
    forward_index: int = 0  # which forward of its verifier (steps of one batch share it)
    batch_tree_tokens: int = 0  # rows through that forward: Σ (1 + tree nodes) over the batch
    batch_kv_tokens: int = 0  # KV tokens of the batch before the step
    path_probs: tuple[float, ...] = ()  # [tree_size] draft path probabilities, best first (EAGLE)
    batch_speculating: int = 0  # sequences of that forward with a draft tree
    cycle_s: float = 0.0  # since the sequence's previous step ended, less the prefills meanwhile (0: its first step)


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    prefill_s: float = 0.0
    total_s: float = 0.0
    seed: int | None = None
    steps: list[StepStats] = field(default_factory=list)

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def accepted_tokens(self) -> int:
        return sum(s.accepted for s in self.steps)

    @property
    def mean_tokens_per_step(self) -> float:
        """Accepted draft tokens + the bonus token, per verification step."""
        return (self.accepted_tokens + self.num_steps) / self.num_steps if self.steps else 0.0

    @property
    def mean_tree_size(self) -> float:
        return sum(s.tree_size for s in self.steps) / self.num_steps if self.steps else 0.0

    @property
    def draft_s(self) -> float:
        return sum(s.draft_s for s in self.steps)

    @property
    def verify_s(self) -> float:
        return sum(s.verify_s for s in self.steps)

    def summary(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "steps": self.num_steps,
            "accepted_tokens": self.accepted_tokens,
            "mean_tokens_per_step": round(self.mean_tokens_per_step, 3),
            "mean_tree_size": round(self.mean_tree_size, 2),
            "prefill_s": round(self.prefill_s, 4),
            "draft_s": round(self.draft_s, 4),
            "verify_s": round(self.verify_s, 4),
            "total_s": round(self.total_s, 4),
            "seed": self.seed,
        }
