"""The drafter interface: propose a draft tree within a budget, observe the verification.

Glossary:
- budget: the most nodes a draft tree may have (the root excluded); 0 = no speculation.
- context: the sequence so far, prompt + generated tokens; its last token is the root.
- feedback: what verification tells the drafter after a step: the accepted tokens and the
  bonus token, and, for drafters that learn from the target (token recycling), the target's
  top-k successors of every tree token (the "recycling rows"), and for drafters that read the
  target's features (EAGLE), the features of the root and the accepted nodes. The feedback of
  consecutive steps can travel as one (`merge_feedback`): a drafter that is asked for no tree
  only needs to have caught up by the time it is asked for one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specmesh.tree import DraftTree


@dataclass(frozen=True)
class Feedback:
    """One verification step, as a drafter sees it."""

    tree_tokens: tuple[int, ...]  # [num_nodes + 1] root, then the tree's node tokens (of each step, when merged)
    accepted_tokens: tuple[int, ...]  # [num_accepted + 1] accepted node tokens, then the bonus token
    recycling_rows: np.ndarray | None = None  # [num_nodes + 1, k] int64 target top-k after each tree token
    hidden: object | None = None  # [num_accepted + 1, hidden] tensor/array: features of the root and accepted nodes


def merge_feedback(steps: list[Feedback]) -> Feedback:
    """Consecutive steps' feedback as one, which leaves a drafter where observing them one by
    one does: tree tokens with their recycling rows, and accepted tokens with their features, in
    order (a step's root is the previous step's bonus token)."""
    if len(steps) == 1:
        return steps[0]
    rows = None if steps[0].recycling_rows is None else np.concatenate([s.recycling_rows for s in steps])
    hidden = None if steps[0].hidden is None else _concatenate([s.hidden for s in steps])
    return Feedback(tuple(t for s in steps for t in s.tree_tokens), tuple(t for s in steps for t in s.accepted_tokens),
                    rows, hidden)


def _concatenate(parts: list):
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts)
    import torch  # features are torch tensors wherever a drafter reads them

    return torch.cat(parts)


class Drafter(Protocol):
    name: str
    wants_recycling_rows: bool  # the verifier computes top-k successors only for drafters that use them
    wants_hidden: bool  # ... and sends the target's features only to drafters that read them

    def start(self, request_id: str, context: list[int], hidden=None) -> None:
        """A new sequence: `context` is the prompt plus its first generated token; `hidden`
        [len(context) - 1, hidden] the prompt's features, for drafters that want them."""

    def propose(self, request_id: str, context: list[int], budget: int) -> DraftTree:
        """A draft tree rooted at context[-1] with at most `budget` nodes."""

    def observe(self, request_id: str, feedback: Feedback) -> None:
        """The result of verifying the last proposal."""

    def finish(self, request_id: str) -> None:
        """The sequence ended; drop its per-sequence state."""


class StatelessDrafter:
    """Default no-op lifecycle for drafters that keep no per-sequence state."""

    wants_recycling_rows = False
    wants_hidden = False

    def start(self, request_id: str, context: list[int], hidden=None) -> None:
        pass

    def observe(self, request_id: str, feedback: Feedback) -> None:
        pass

    def finish(self, request_id: str) -> None:
        pass


class NoDrafter(StatelessDrafter):
    """`none`: plain decoding through the same engine (every tree is empty)."""

    name = "none"

    def propose(self, request_id: str, context: list[int], budget: int) -> DraftTree:
        return DraftTree.empty()
