"""`hybrid`: an n-gram match (prompt lookup, papers.md §13) merged into the tree of a model-based
drafter (EAGLE or token recycling) within the same budget.

Glossary: the n-gram drafter proposes first, with up to half the budget; the primary drafter's
tree fills the rest. Merging is a trie union: a node whose token already hangs under the same
parent is shared, so a match that agrees with the primary costs nothing extra.
"""

from __future__ import annotations

from specmesh.drafting.base import Feedback
from specmesh.tree import DraftTree


def merge_trees(first: DraftTree, second: DraftTree, budget: int) -> DraftTree:
    """The union of two trees rooted at the same token, at most `budget` nodes: all of `first`
    that fits, then `second`'s nodes whose parent made it in."""
    index: dict[tuple[int, int], int] = {}  # (parent in the merge, token) -> node in the merge
    tokens: list[int] = []
    parents: list[int] = []
    for tree in (first, second):
        placed: list[int | None] = []  # this tree's node -> node in the merge (None = dropped)
        for token, parent in zip(tree.tokens, tree.parents):
            merged_parent = -1 if parent < 0 else placed[parent]
            key = (merged_parent, token)
            if merged_parent is None or (key not in index and len(tokens) >= budget):
                placed.append(None)
                continue
            if key not in index:
                index[key] = len(tokens)
                tokens.append(token)
                parents.append(merged_parent)
            placed.append(index[key])
    return DraftTree(tuple(tokens), tuple(parents))


class HybridDrafter:
    name = "hybrid"

    def __init__(self, primary, ngram):
        self.primary, self.ngram = primary, ngram
        self.wants_recycling_rows = primary.wants_recycling_rows
        self.wants_hidden = primary.wants_hidden

    def start(self, request_id: str, context: list[int], hidden=None) -> None:
        self.primary.start(request_id, context, hidden)
        self.ngram.start(request_id, context)

    def propose(self, request_id: str, context: list[int], budget: int) -> DraftTree:
        if budget <= 0:
            return DraftTree.empty()
        match = self.ngram.propose(request_id, context, max(1, budget // 2))
        return merge_trees(match, self.primary.propose(request_id, context, budget), budget)

    def observe(self, request_id: str, feedback: Feedback) -> None:
        self.primary.observe(request_id, feedback)
        self.ngram.observe(request_id, feedback)

    def finish(self, request_id: str) -> None:
        self.primary.finish(request_id)
        self.ngram.finish(request_id)
