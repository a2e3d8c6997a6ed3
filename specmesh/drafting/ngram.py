"""n-gram drafting / prompt lookup (Saxena's prompt-lookup decoding; papers.md §13).

Glossary:
- suffix match: an earlier occurrence, in prompt + output, of the last n tokens of the context;
  the tokens that followed it are the continuation, proposed as a draft path.
- several matches -> a tree: continuations are merged into a trie (shared prefixes share
  nodes), longer matches first, then the most recent, until the budget is spent.
The index of n-gram positions is kept per sequence and extended as the context grows.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from specmesh.drafting.base import Feedback
from specmesh.tree import DraftTree


@dataclass
class _SequenceIndex:
    """For each n, the n-gram -> positions just after its occurrences (ascending)."""

    max_n: int
    tokens: list[int] = field(default_factory=list)
    after: dict[tuple[int, ...], list[int]] = field(default_factory=lambda: defaultdict(list))

    def extend(self, context: list[int]) -> None:
        if context[: len(self.tokens)] != self.tokens:  # the context was rewritten: start over
            self.tokens, self.after = [], defaultdict(list)
        for end in range(len(self.tokens) + 1, len(context) + 1):
            for n in range(1, min(self.max_n, end) + 1):
                self.after[tuple(context[end - n : end])].append(end)
        self.tokens = list(context)


class NgramDrafter:
    name = "ngram"
    wants_recycling_rows = False
    wants_hidden = False

    def __init__(self, max_n: int = 3, min_n: int = 1, max_matches: int = 4, max_continuation: int = 10):
        if not 1 <= min_n <= max_n:
            raise ValueError("ngram drafter: need 1 <= min_n <= max_n")
        self.max_n, self.min_n, self.max_matches = max_n, min_n, max_matches
        self.max_continuation = max_continuation  # PLD's num_pred_tokens
        self._sequences: dict[str, _SequenceIndex] = {}

    def start(self, request_id: str, context: list[int], hidden=None) -> None:
        self._sequences[request_id] = _SequenceIndex(self.max_n)

    def finish(self, request_id: str) -> None:
        self._sequences.pop(request_id, None)

    def observe(self, request_id: str, feedback: Feedback) -> None:
        pass

    def propose(self, request_id: str, context: list[int], budget: int) -> DraftTree:
        if budget <= 0:
            return DraftTree.empty()
        index = self._sequences.setdefault(request_id, _SequenceIndex(self.max_n))
        index.extend(context)
        return _trie(self._continuations(index, budget), budget)

    def _continuations(self, index: _SequenceIndex, budget: int) -> list[list[int]]:
        """Continuations of suffix matches: longest n first, then the most recent."""
        size = len(index.tokens)
        found: list[list[int]] = []
        for n in range(min(self.max_n, size - 1), self.min_n - 1, -1):
            starts = index.after.get(tuple(index.tokens[size - n :]), [])
            for start in reversed(starts[:-1] if starts and starts[-1] == size else starts):
                found.append(index.tokens[start : start + min(budget, self.max_continuation)])
                if len(found) >= self.max_matches:
                    return found
        return found


def _trie(paths: list[list[int]], budget: int) -> DraftTree:
    """Merge token paths into a tree of at most `budget` nodes, first paths first."""
    tokens: list[int] = []
    parents: list[int] = []
    children: dict[tuple[int, int], int] = {}
    for path in paths:
        node = -1
        for token in path:
            if (node, token) in children:
                node = children[(node, token)]
                continue
            if len(tokens) == budget:
                break
            children[(node, token)] = len(tokens)
            tokens.append(token)
            parents.append(node)
            node = len(tokens) - 1
    return DraftTree(tuple(tokens), tuple(parents))
