"""Lossless verification of a draft tree: which nodes are accepted, and the bonus token.

Glossary (papers.md §0; EAGLE-2 2406.16858, SpecInfer 2305.09781):
- accepted: a node whose token equals the token the target model emits at that position,
  given that its parent was accepted. Accepted nodes form one root-to-node path.
- bonus token: the target's own token after the last accepted node; it becomes the next root.
- greedy rule: the target token is argmax p; follow the child equal to it.
- sampling rule (EAGLE-2's point-mass rule): at a node, try its children in draft-score order;
  accept child x with probability p(x), else set p(x) = 0, renormalise and try the next; when
  none is accepted, the bonus token is sampled from what is left of p. We realise exactly this
  rule with one exponential race per position (sampling.py): the target token y is an exact
  sample from p, child x is accepted iff x == y (probability p(x), then p(x | not the earlier
  children), ...), and when no child matches, y is an exact sample from the residual. The walk
  is the same for both rules; only how the target token is drawn differs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specmesh.sampling import SamplingParams, row_argmax, target_tokens
from specmesh.tree import DraftTree


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying one draft tree."""

    accepted: tuple[int, ...]  # [num_accepted] flattened indices of accepted nodes, root excluded
    tokens: tuple[int, ...]  # [num_accepted + 1] accepted node tokens, then the bonus token

    @property
    def num_accepted(self) -> int:
        return len(self.accepted)

    @property
    def bonus(self) -> int:
        return self.tokens[-1]

    @property
    def path(self) -> tuple[int, ...]:
        """Flattened indices whose KV is kept: the root, then the accepted nodes."""
        return (0, *self.accepted)


def verify_tree(
    tree: DraftTree,
    logits: torch.Tensor,  # [tree.num_nodes + 1, vocab], row 0 = root
    params: SamplingParams,
    root_position: int,  # absolute position of the root token in the sequence
) -> Verdict:
    """Walk the tree from the root, following the child equal to the target token."""
    topology = tree.topology
    greedy_tokens = row_argmax(logits) if params.greedy else None
    accepted: list[int] = []
    tokens: list[int] = []
    node = 0
    while True:
        if greedy_tokens is not None:
            target = greedy_tokens[node]
        else:
            position = root_position + int(topology.depths[node]) + 1
            target = target_tokens(logits[node : node + 1], params, [position])[0]
        tokens.append(target)
        match = next((c for c in topology.children[node] if tree.tokens[c - 1] == target), None)
        if match is None:
            return Verdict(tuple(accepted), tuple(tokens))
        accepted.append(match)
        node = match
