"""Lossless verification: the greedy walk, and exactness of the sampling rule."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from specmesh.sampling import SamplingParams, row_argmax, target_probs
from specmesh.tree import DraftTree
from specmesh.verify import verify_tree

GREEDY = SamplingParams()


def one_hot_logits(argmaxes: list[int], vocab: int = 16) -> torch.Tensor:
    logits = torch.zeros(len(argmaxes), vocab)
    logits[torch.arange(len(argmaxes)), torch.tensor(argmaxes)] = 5.0
    return logits


def test_greedy_follows_the_matching_child_to_the_end():
    # root -> {7, 3}; 7 -> {4, 9}; 3 -> {1}; 9 -> {2}
    tree = DraftTree(tokens=(7, 3, 4, 9, 1, 2), parents=(-1, -1, 0, 0, 1, 3))
    # target argmax at each flattened row (root first): 7 after root, 9 after 7, 2 after 9, 5 after 2
    logits = one_hot_logits([7, 9, 0, 0, 2, 0, 5])
    verdict = verify_tree(tree, logits, GREEDY, root_position=10)
    assert verdict.accepted == (1, 4, 6)
    assert verdict.tokens == (7, 9, 2, 5)
    assert verdict.bonus == 5 and verdict.path == (0, 1, 4, 6)


def test_greedy_with_no_match_returns_only_the_bonus():
    tree = DraftTree(tokens=(1, 2), parents=(-1, -1))
    verdict = verify_tree(tree, one_hot_logits([3, 0, 0]), GREEDY, root_position=0)
    assert verdict.accepted == () and verdict.tokens == (3,)


def test_empty_tree_is_plain_decoding():
    verdict = verify_tree(DraftTree.empty(), one_hot_logits([6]), GREEDY, root_position=0)
    assert verdict.tokens == (6,) and verdict.path == (0,)


@pytest.mark.parametrize("params", [SamplingParams(1.0), SamplingParams(0.7, top_p=0.8, top_k=6)])
def test_sampled_first_token_is_distributed_as_p(params):
    """Whatever the children, the first emitted token (accepted child or bonus) ~ p(root)."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 16, generator=gen) * 2
    tree = DraftTree(tokens=(3, 5, 8), parents=(-1, -1, -1))  # three children of the root
    p = target_probs(logits[0], params).double().numpy()
    draws = 20000
    counts = np.zeros(16)
    accepted = 0
    for seed in range(draws):
        verdict = verify_tree(tree, logits, SamplingParams(params.temperature, params.top_p, params.top_k, seed), 0)
        counts[verdict.tokens[0]] += 1
        accepted += verdict.num_accepted
    support = p > 0
    assert counts[~support].sum() == 0
    expected = p[support] / p[support].sum() * draws
    assert chisquare(counts[support], expected).pvalue > 0.001
    # a child is accepted exactly when the sample is one of the children
    assert abs(accepted / draws - p[[3, 5, 8]].sum()) < 4 * np.sqrt(0.25 / draws)


def test_sampling_is_a_function_of_seed_and_position():
    logits = torch.randn(3, 16, generator=torch.Generator().manual_seed(3))
    wide = DraftTree(tokens=(1, 2), parents=(-1, -1))
    narrow = DraftTree.empty()
    params = SamplingParams(1.0, seed=42)
    first = verify_tree(wide, logits, params, 5).tokens[0]
    assert first == verify_tree(narrow, logits[:1], params, 5).tokens[0]
    others = {verify_tree(narrow, logits[:1], params, pos).tokens[0] for pos in range(5, 40)}
    assert len(others) > 1


@pytest.mark.parametrize(
    "kwargs, name",
    [({"temperature": -0.1}, "temperature"), ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"),
     ({"top_k": -1}, "top_k"), ({"seed": -3}, "seed")],
)
def test_bad_sampling_params_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SamplingParams(**kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_argmax_is_torchs_argmax_ties_included(dtype):
    """The greedy rule's argmax (kernels/topk.c at k = 1, torch.max where it does not apply) picks what
    torch.argmax picks, the first of tied maxima included (bf16 logits over a vocabulary tie
    often), at a row's tail beyond its vector width, and a NaN where a row has one."""
    gen = torch.Generator().manual_seed(3)
    for _ in range(20):
        x = (torch.randn(5, 49152, generator=gen) * 3).round().to(dtype)  # integer logits: many ties
        x[:, 7] = x[:, 40000] = x.max() + 1  # a tie at the top, far apart
        assert row_argmax(x) == x.argmax(dim=-1).tolist() == [7] * 5
        y = torch.randn(3, 1003, generator=gen).to(dtype)
        y[0, 1001] = y.max() + 1  # the top in the tail
        assert row_argmax(y) == y.argmax(dim=-1).tolist()
        assert row_argmax(y.t().contiguous().t()) == y.argmax(dim=-1).tolist()  # not contiguous: torch's
    z = torch.full((3, 100), float("-inf"), dtype=dtype)
    z[1, 50], z[2, 3] = float("nan"), 2.0
    assert row_argmax(z) == z.argmax(dim=-1).tolist() == [0, 50, 3]
