"""EAGLE drafter (papers.md §1–2): the draft head reads the target's features of the accepted
tokens and drafts an EAGLE-2 dynamic tree (dynamic_tree.py) for each step.

Glossary:
- committed draft KV: the head's keys/values for every head input (f_j, t_{j+1}) whose feature
  came from the target; one entry per position of the context but the last (the root).
- root output: the head's output at the last committed input; its LM-head distribution gives
  the root's children.
- rollback: the tree's own KV entries live in a scratch copy during `propose`; after
  verification the committed KV is extended with the accepted path re-read with the target's
  features (feedback.hidden), so rejected branches leave nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from specmesh.drafting.base import Feedback
from specmesh.drafting.dynamic_tree import Candidates, TreeShape
from specmesh.eagle.checkpoint import load_head, shipped_head_dir
from specmesh.eagle.head import DraftKV, EagleHead
from specmesh.eagle.target_io import TargetIO
from specmesh.model import cpu_ops
from specmesh.tree import DraftTree


@dataclass
class _Session:
    kv: DraftKV | None = None  # committed draft KV
    root_output: torch.Tensor | None = None  # [hidden]

    @property
    def length(self) -> int:
        return 0 if self.kv is None else self.kv.length


class EagleDrafter:
    name = "eagle"
    wants_recycling_rows = False
    wants_hidden = True  # feedback must carry the target's features of the root and accepted nodes

    def __init__(self, head: EagleHead, io: TargetIO, top_k: int = 8, depth: int = 6):
        self.head, self.io = head, io
        self.top_k, self.depth = top_k, depth
        self.vocab = head.draft_vocab if head.draft_vocab.numel() else None  # [V'] draftable token ids
        self.draft_io = io if self.vocab is None else io.restricted(self.vocab)
        self.sessions: dict[str, _Session] = {}

    @classmethod
    def for_target(cls, target: Path, head_dir: Path | None = None, dtype: torch.dtype = torch.float32,
                   device: str | torch.device = "cpu") -> "EagleDrafter":
        head_dir = head_dir or shipped_head_dir(target)
        if head_dir is None:
            raise ValueError(f"no EAGLE head for {target.name}: train one with `specmesh train-eagle --model {target}`")
        return cls(load_head(head_dir, dtype, device), TargetIO.from_checkpoint(target, dtype, device))

    def start(self, request_id: str, context: list[int], hidden: torch.Tensor | None = None) -> None:
        """`hidden` [len(context) - 1, hidden]: the target's features of every context token but
        the last (the prompt, when `context` is the prompt plus its first generated token)."""
        session = self.sessions[request_id] = _Session()
        self._commit(session, _required(hidden, len(context) - 1), context[1:])

    def observe(self, request_id: str, feedback: Feedback) -> None:
        """The root and accepted nodes' features pair with the accepted tokens and bonus token."""
        features = _required(feedback.hidden, len(feedback.accepted_tokens))
        self._commit(self.sessions[request_id], features, list(feedback.accepted_tokens))

    def finish(self, request_id: str) -> None:
        self.sessions.pop(request_id, None)

    @torch.inference_mode()
    @cpu_ops.gemm_burst()
    def propose(self, request_id: str, context: list[int], budget: int) -> DraftTree:
        if budget <= 0:
            return DraftTree.empty()
        session = self.sessions[request_id]
        shape = TreeShape.for_budget(budget, self.top_k, self.depth)
        candidates = Candidates()
        frontier = candidates.add_layer(self._log_probs(session.root_output[None]), [-1], shape.top_k, self.vocab)
        outputs: dict[int, torch.Tensor] = {-1: session.root_output}  # candidate -> head output after it
        rows: dict[int, int] = {}  # candidate -> its entry in the scratch KV
        scratch = session.kv
        for level in range(1, shape.depth):
            if not candidates.can_improve(frontier, budget):
                break
            features = torch.stack([outputs[candidates.parents[c]] for c in frontier])
            mask = self._tree_mask(session.length, scratch.length, frontier, candidates, rows)
            positions = torch.full((1, len(frontier)), session.length + level - 1, device=self.device)
            tokens = torch.tensor([[candidates.tokens[c] for c in frontier]], device=self.device)
            out, scratch = self.head(features[None], self.io.embed(tokens), positions, mask.to(self.device), scratch)
            for i, c in enumerate(frontier):
                outputs[c], rows[c] = out[0, i], scratch.length - len(frontier) + i
            frontier = candidates.add_layer(self._log_probs(out[0]), frontier, shape.top_k, self.vocab)
        return candidates.best_tree(budget)

    @property
    def device(self) -> torch.device:
        return self.io.embedding.device

    def _log_probs(self, outputs: torch.Tensor) -> torch.Tensor:
        """[n, V'] draft log-probabilities over the draft vocabulary."""
        return torch.log_softmax(self.draft_io.logits(outputs).float(), dim=-1)

    @staticmethod
    def _tree_mask(committed: int, past: int, frontier: list[int], candidates: Candidates, rows: dict[int, int]) -> torch.Tensor:
        """[1, 1, F, past + F]: the committed KV, the fed ancestors in the scratch KV, itself."""
        mask = torch.zeros(1, 1, len(frontier), past + len(frontier), dtype=torch.bool)
        mask[..., :committed] = True
        queries, entries = [], []
        for i, c in enumerate(frontier):
            fed = [rows[ancestor] for ancestor in candidates.ancestors(c)[:-1]] + [past + i]
            queries += [i] * len(fed)
            entries += fed
        mask[0, 0, queries, entries] = True
        return mask

    @torch.inference_mode()
    @cpu_ops.gemm_burst()
    def _commit(self, session: _Session, features: torch.Tensor, next_tokens: list[int]) -> None:
        """Run the head over new (feature, next token) inputs after the committed KV."""
        n = len(next_tokens)
        if n == 0:
            return
        start = session.length
        features = torch.as_tensor(features).to(device=self.device, dtype=self.io.embedding.dtype)
        tokens = torch.tensor([next_tokens], device=self.device)
        positions = torch.arange(start, start + n, device=self.device)[None]
        out, session.kv = self.head(features[None], self.io.embed(tokens), positions, past=session.kv)
        session.root_output = out[0, -1]


def _required(hidden, rows: int) -> torch.Tensor:
    if hidden is None or len(hidden) != rows:
        got = None if hidden is None else len(hidden)
        raise ValueError(f"the eagle drafter needs the target's features of {rows} tokens, got {got}")
    return torch.as_tensor(hidden)
