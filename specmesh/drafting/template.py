"""Token Recycling's static draft-tree template "2.2.2" (papers.md §11), pruned to a budget.

Glossary:
- template node: a path of candidate ranks from the root; [0, 1] is the rank-1 successor of
  the rank-0 successor of the root. 80 nodes over 6 levels (8/21/25/15/8/3).
- prior: how likely a template node is to be accepted before anything is measured, the product
  of a per-rank factor along its path. Pruning to a budget keeps the nodes with the largest
  prior; a child's prior never exceeds its parent's, so the kept set is always a tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np


def _expand(prefix: tuple[int, ...], ranks) -> list[tuple[int, ...]]:
    return [(*prefix, r) for r in ranks]


def _level(*groups: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    return [node for group in groups for node in group]


TEMPLATE_2_2_2: tuple[tuple[int, ...], ...] = tuple(
    _level(_expand((), range(8)))
    + _level(
        _expand((0,), range(8)), _expand((1,), range(4)), _expand((2,), range(3)),
        _expand((3,), range(2)), *[_expand((r,), [0]) for r in range(4, 8)],
    )
    + _level(
        _expand((0, 0), range(8)), _expand((0, 1), range(3)), _expand((0, 2), range(2)),
        *[_expand((0, r), [0]) for r in range(3, 8)],
        [(1, 0, 0), (1, 0, 1), (1, 1, 0)], *[_expand((r, 0), [0]) for r in range(2, 6)],
    )
    + _level(
        _expand((0, 0, 0), range(5)), _expand((0, 0, 1), range(2)),
        *[_expand((0, 0, r), [0]) for r in range(2, 5)],
        [(0, 1, 0, 0), (0, 2, 0, 0)], *[_expand((r, 0, 0), [0]) for r in range(1, 4)],
    )
    + _level(
        _expand((0, 0, 0, 0), range(3)),
        [(0, 0, 0, 1, 0), (0, 0, 0, 2, 0), (0, 0, 1, 0, 0), (0, 1, 0, 0, 0), (1, 0, 0, 0, 0)],
    )
    + [(0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 1), (0, 0, 0, 1, 0, 0)]
)

# Prior acceptance factor of the candidate at each rank (rank 0 = the target's argmax last time).
RANK_PRIOR = (0.55, 0.15, 0.08, 0.05, 0.04, 0.03, 0.025, 0.02)


@dataclass(frozen=True)
class PrunedTemplate:
    """The template nodes kept for a budget, grouped into levels for a BFS gather."""

    parents: tuple[int, ...]  # [num_nodes] parent node index, -1 = root
    ranks: np.ndarray  # [num_nodes] int64 candidate rank within the parent's row
    log_prior: np.ndarray  # [num_nodes] float64 log prior of the path
    levels: tuple[np.ndarray, ...]  # per depth: [nodes at that depth] node indices

    @property
    def num_nodes(self) -> int:
        return len(self.parents)


def _log_prior(path: tuple[int, ...]) -> float:
    return float(sum(np.log(RANK_PRIOR[r]) for r in path))


@lru_cache(maxsize=None)
def pruned_template(budget: int, template: tuple[tuple[int, ...], ...] = TEMPLATE_2_2_2) -> PrunedTemplate:
    """The `budget` template nodes with the largest prior, in BFS (topological) order."""
    order = sorted(range(len(template)), key=lambda i: (-_log_prior(template[i]), len(template[i]), i))
    kept = sorted(order[: max(0, budget)], key=lambda i: (len(template[i]), i))
    index = {template[i]: n for n, i in enumerate(kept)}
    paths = [template[i] for i in kept]
    parents = tuple(index[p[:-1]] if len(p) > 1 else -1 for p in paths)
    depth = np.array([len(p) for p in paths], dtype=np.int64)
    levels = tuple(np.flatnonzero(depth == d) for d in range(1, int(depth.max(initial=0)) + 1))
    return PrunedTemplate(
        parents=parents,
        ranks=np.array([p[-1] for p in paths], dtype=np.int64),
        log_prior=np.array([_log_prior(p) for p in paths]),
        levels=levels,
    )
