"""Draft-tree topology, derived from parent indices alone.

Glossary (papers.md §0; SpecInfer 2305.09781, EAGLE 2401.15077):
- draft tree: the nodes a drafter proposes after the *root*. The root is the last accepted
  token (the previous bonus token), whose KV is not cached yet; it is verified together with
  the nodes in one forward pass.
- node: a proposed token. Nodes are listed in topological order (a parent comes before its
  children) and siblings in draft-score order (the most likely child first).
- parents: for node i, the index of its parent node, or -1 when its parent is the root.
- flattened layout: index 0 is the root, node i sits at index i + 1. Everything below uses
  the flattened layout, so that the forward pass, the mask and the verifier agree.
- depth: root 0, a child of the root 1, ...; position id = context length + depth.
- ancestor mask: row j sees column k iff k is j itself or one of j's ancestors.

Only token ids and parent indices cross the wire; both sides derive everything else here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class DraftTree:
    """A drafter's proposal for one sequence, rooted at the last accepted token."""

    tokens: tuple[int, ...]  # [num_nodes] proposed token ids
    parents: tuple[int, ...]  # [num_nodes] parent node index, -1 = the root
    scores: tuple[float, ...] = ()  # [num_nodes] draft log-probability of the path, optional

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.parents):
            raise ValueError("draft tree: tokens and parents must have the same length")
        if self.scores and len(self.scores) != len(self.tokens):
            raise ValueError("draft tree: scores must be empty or one per node")
        for i, p in enumerate(self.parents):
            if not -1 <= p < i:
                raise ValueError(f"draft tree: parents[{i}]={p} is not an earlier node or -1")

    @classmethod
    def empty(cls) -> "DraftTree":
        return cls((), ())

    @classmethod
    def chain(cls, tokens: list[int] | tuple[int, ...]) -> "DraftTree":
        """A single path: token i is the child of token i - 1."""
        return cls(tuple(tokens), tuple(range(-1, len(tokens) - 1)))

    @property
    def num_nodes(self) -> int:
        return len(self.tokens)

    @property
    def topology(self) -> "TreeTopology":
        return _topology(self.parents)


@dataclass(frozen=True)
class TreeTopology:
    """Root + nodes in the flattened layout (root at index 0)."""

    flat_parents: np.ndarray  # [num_nodes + 1] int64, -1 for the root
    depths: np.ndarray  # [num_nodes + 1] int64
    ancestor_mask: np.ndarray  # [num_nodes + 1, num_nodes + 1] bool
    children: tuple[tuple[int, ...], ...]  # per flattened index, children in draft-score order

    @classmethod
    def from_parents(cls, parents: tuple[int, ...] | list[int]) -> "TreeTopology":
        n = len(parents) + 1
        flat_parents = np.empty(n, dtype=np.int64)
        flat_parents[0] = -1
        flat_parents[1:] = np.asarray(parents, dtype=np.int64) + 1
        depths = np.zeros(n, dtype=np.int64)
        mask = np.eye(n, dtype=bool)
        children: list[list[int]] = [[] for _ in range(n)]
        for j in range(1, n):
            p = flat_parents[j]
            depths[j] = depths[p] + 1
            mask[j] |= mask[p]
            children[p].append(j)
        for array in (flat_parents, depths, mask):
            array.flags.writeable = False  # shared through the cache below
        return cls(flat_parents, depths, mask, tuple(tuple(c) for c in children))

    @property
    def size(self) -> int:
        """Root plus nodes: the number of tokens this tree adds to a forward pass."""
        return len(self.flat_parents)

    def path_to(self, index: int) -> list[int]:
        """Flattened indices from the root to `index`, both included."""
        path = []
        while index >= 0:
            path.append(index)
            index = int(self.flat_parents[index])
        return path[::-1]

    def leaf_paths(self) -> list[list[int]]:
        """Every root-to-leaf path (the tree-attention oracle decodes each one sequentially)."""
        return [self.path_to(j) for j in range(self.size) if not self.children[j]]


@lru_cache(maxsize=4096)
def _topology(parents: tuple[int, ...]) -> TreeTopology:
    """Drafters repeat shapes (a pruned template, a chain), so topologies are memoised."""
    return TreeTopology.from_parents(parents)
