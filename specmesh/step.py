"""The verifier's work: prefill a prompt, and verify a batch of draft trees in one forward.

Glossary (papers.md §0): each sequence contributes its root (the last accepted token, not yet
in the KV cache) and its draft tree's nodes; one forward computes logits for all of them; each
tree is verified on its own rows; the accepted path's KV is committed to the slot. For
drafters that learn from the target, the top-k successors of every tree token (the recycling
rows, papers.md §11) come out of the same logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from specmesh.model.cpu_ops import top_indices
from specmesh.model.runner import ForwardItem
from specmesh.sampling import SamplingParams, target_tokens
from specmesh.tree import DraftTree
from specmesh.verify import Verdict, verify_tree


@dataclass(frozen=True)
class StepInput:
    slot: int
    root: int  # the last accepted token; its position is the slot's length
    tree: DraftTree
    params: SamplingParams
    recycling_k: int = 0  # > 0: also return the target's top-k after every tree token


@dataclass(frozen=True)
class StepOutcome:
    verdict: Verdict
    recycling_rows: np.ndarray | None  # [num_nodes + 1, k] int64, or None when not asked for
    hidden: torch.Tensor | None  # [num_accepted + 1, hidden] states of the root and accepted nodes


@dataclass(frozen=True)
class PrefillInput:
    slot: int
    token_ids: list[int]  # the prompt (or, on a resumed request, prompt + tokens so far)
    params: SamplingParams


@dataclass(frozen=True)
class Prefilled:
    first: int  # the next token, sampled from the prompt's last logits
    hidden: torch.Tensor | None  # [prompt_len, hidden] the prompt's features, when asked for


def prefill(runner, inputs: list[PrefillInput], chunk: int, hidden: bool = False) -> list[Prefilled]:
    """Fill each slot with its prompt, `chunk` tokens per sequence per forward, all sequences in
    the same forwards; each sequence's next token is sampled from its last logits."""
    first: list[int] = [0] * len(inputs)
    features: list[list[torch.Tensor]] = [[] for _ in inputs]
    for start in range(0, max(len(p.token_ids) for p in inputs), chunk):
        live = [i for i, p in enumerate(inputs) if start < len(p.token_ids)]
        items = []
        for i in live:
            piece = inputs[i].token_ids[start : start + chunk]
            last = start + chunk >= len(inputs[i].token_ids)
            items.append(ForwardItem(inputs[i].slot, piece, logits="last" if last else "none", hidden=hidden))
        for i, item, result in zip(live, items, runner.forward(items)):
            runner.commit(item.slot, range(len(item.token_ids)))
            if hidden:
                features[i].append(result.hidden)
            if item.logits == "last":
                first[i] = target_tokens(result.logits, inputs[i].params, [len(inputs[i].token_ids)])[0]
    return [Prefilled(f, torch.cat(h) if hidden else None) for f, h in zip(first, features)]


def verify_batch(runner, inputs: list[StepInput], hidden: bool = False) -> list[StepOutcome]:
    """One forward over every sequence's root + tree; verify, commit and report each."""
    items = []
    for step in inputs:
        topology = step.tree.topology
        items.append(
            ForwardItem(step.slot, (step.root, *step.tree.tokens), topology.depths, topology.ancestor_mask, hidden=hidden)
        )
    root_positions = [runner.slot_length(step.slot) for step in inputs]
    results = runner.forward(items)
    outcomes = []
    for step, result, position in zip(inputs, results, root_positions):
        verdict = verify_tree(step.tree, result.logits, step.params, position)
        runner.commit(step.slot, verdict.path)
        rows = top_indices(result.logits, step.recycling_k).numpy() if step.recycling_k else None
        kept = result.hidden[list(verdict.path)] if hidden else None
        outcomes.append(StepOutcome(verdict, rows, kept))
    return outcomes
