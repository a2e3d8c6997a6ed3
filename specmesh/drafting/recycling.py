"""Token Recycling (Luo et al., 2408.08696; papers.md §11): train-free drafting from the
candidates every verification step would otherwise throw away.

Glossary:
- successor table: `vocab × k` (k = 8) token ids; row t holds the target's top-k next tokens
  the last time t was in a verified tree. Every verification overwrites the rows of all tree
  tokens, accepted or not (the recycling rows). The table is global: it persists across
  requests and can be saved, loaded and shared.
- drafting: BFS over the static template pruned to the budget; a node's token is entry `rank`
  of its parent token's row. Nodes under a token whose row was never filled are dropped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specmesh.drafting.base import Feedback, StatelessDrafter
from specmesh.drafting.template import pruned_template
from specmesh.tree import DraftTree

TOP_K = 8


class RecyclingTable:
    """The shared successor table."""

    def __init__(self, vocab_size: int, k: int = TOP_K):
        self.successors = np.zeros((vocab_size, k), dtype=np.int64)  # [vocab, k]
        self.filled = np.zeros(vocab_size, dtype=bool)  # [vocab]

    @property
    def vocab_size(self) -> int:
        return self.successors.shape[0]

    @property
    def k(self) -> int:
        return self.successors.shape[1]

    def update(self, tokens: np.ndarray, rows: np.ndarray) -> None:
        """Overwrite the rows of `tokens` [m] with `rows` [m, k] (a repeated token: last write wins)."""
        self.successors[tokens] = rows[:, : self.k]
        self.filled[tokens] = True

    def save(self, path: str | Path) -> None:
        np.savez(path, successors=self.successors, filled=self.filled)

    @classmethod
    def load(cls, path: str | Path) -> "RecyclingTable":
        with np.load(path, allow_pickle=False) as data:
            table = cls(*data["successors"].shape)
            table.successors[:] = data["successors"]
            table.filled[:] = data["filled"]
        return table


class RecyclingDrafter(StatelessDrafter):
    name = "recycling"
    wants_recycling_rows = True

    def __init__(self, table: RecyclingTable):
        self.table = table

    def propose(self, request_id: str, context: list[int], budget: int) -> DraftTree:
        template = pruned_template(budget)
        if template.num_nodes == 0 or not self.table.filled[context[-1]]:
            return DraftTree.empty()
        parents = np.asarray(template.parents, dtype=np.int64)
        tokens = np.empty(template.num_nodes, dtype=np.int64)
        live = np.zeros(template.num_nodes, dtype=bool)
        root = context[-1]
        for level in template.levels:
            par = parents[level]
            par_tokens = np.where(par < 0, root, tokens[np.maximum(par, 0)])
            tokens[level] = self.table.successors[par_tokens, template.ranks[level]]
            par_live = np.where(par < 0, True, live[np.maximum(par, 0)])
            live[level] = par_live & self.table.filled[par_tokens]
        return _keep_live(tokens, parents, template.log_prior, live)

    def observe(self, request_id: str, feedback: Feedback) -> None:
        if feedback.recycling_rows is not None:
            self.table.update(np.asarray(feedback.tree_tokens, dtype=np.int64), feedback.recycling_rows)


def _keep_live(tokens: np.ndarray, parents: np.ndarray, scores: np.ndarray, live: np.ndarray) -> DraftTree:
    """The subtree of live nodes, re-indexed (a live node's parent is always live)."""
    kept = np.flatnonzero(live)
    new_index = np.full(len(tokens) + 1, -1, dtype=np.int64)
    new_index[kept] = np.arange(len(kept))
    new_parents = np.where(parents[kept] < 0, -1, new_index[parents[kept]])
    return DraftTree(tuple(tokens[kept].tolist()), tuple(new_parents.tolist()), tuple(scores[kept].tolist()))
