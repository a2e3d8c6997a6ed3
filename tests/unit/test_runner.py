"""Our Llama-family runner against the Hugging Face model as the logits oracle (fp32)."""

import pytest
import torch
from tiny_models import build_tiny_model

from specmesh.model.loading import RunnerConfig, load_runner
from specmesh.model.runner import ForwardItem
from specmesh.tree import DraftTree

ATOL = 2e-4

VARIANTS = {
    "llama": dict(model_type="llama"),
    "llama-tied-rope-llama3": dict(
        model_type="llama", tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    ),
    "qwen2-qkv-bias": dict(model_type="qwen2"),
    "mistral": dict(model_type="mistral", sliding_window=None),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def pair(request, tmp_path_factory):
    """(our runner, the HF model) for one random tiny checkpoint."""
    from transformers import AutoModelForCausalLM

    path = build_tiny_model(tmp_path_factory.mktemp(request.param), seed=1, **VARIANTS[request.param])
    runner, _, _ = load_runner(RunnerConfig(model=str(path), dtype="float32", num_slots=4, max_context=256, max_forward_tokens=64))
    return runner, AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def hf_last_logits(hf, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return hf(torch.tensor([tokens])).logits[0, -1]


def prefill(runner, tokens):
    slot = runner.allocate_slot()
    runner.forward([ForwardItem(slot, tokens, logits="none")])
    runner.commit(slot, range(len(tokens)))
    return slot


def test_prefill_logits_match_hf(pair):
    runner, hf = pair
    tokens = torch.randint(0, 32, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    slot = runner.allocate_slot()
    (result,) = runner.forward([ForwardItem(slot, tokens)])
    with torch.inference_mode():
        expected = hf(torch.tensor([tokens])).logits[0]
    torch.testing.assert_close(result.logits, expected, atol=ATOL, rtol=0)
    runner.release_slot(slot)


TREES = [
    DraftTree(tokens=(3, 4, 5, 6, 7, 8), parents=(-1, -1, 0, 0, 1, 2)),
    DraftTree(tokens=(9, 10, 11), parents=(-1, 0, 1)),
    DraftTree(tokens=(12, 13, 14, 15, 16, 17, 18, 19), parents=(-1, -1, -1, 0, 0, 1, 3, 3)),
]


def test_ragged_batch_of_trees_matches_per_branch_oracle(pair):
    """3 sequences of different lengths, each with its own tree, in one forward pass."""
    runner, hf = pair
    gen = torch.Generator().manual_seed(1)
    prefixes = [torch.randint(0, 32, (n,), generator=gen).tolist() for n in (5, 23, 11)]
    roots = [1, 2, 0]
    slots = [prefill(runner, p) for p in prefixes]
    items = [
        ForwardItem(slot, (root, *tree.tokens), tree.topology.depths, tree.topology.ancestor_mask)
        for slot, root, tree in zip(slots, roots, TREES)
    ]
    results = runner.forward(items)
    for prefix, root, tree, result in zip(prefixes, roots, TREES, results):
        flat = (root, *tree.tokens)
        for node in range(tree.num_nodes + 1):
            branch = [flat[i] for i in tree.topology.path_to(node)]
            torch.testing.assert_close(result.logits[node], hf_last_logits(hf, prefix + branch), atol=ATOL, rtol=0)
    for slot in slots:
        runner.release_slot(slot)


def test_commit_then_continue_matches_sequential_cache(pair):
    """After keeping one path of a tree, decoding on continues as if built token by token."""
    runner, hf = pair
    prefix = list(range(7))
    tree = TREES[0]
    slot = prefill(runner, prefix)
    runner.forward([ForwardItem(slot, (1, *tree.tokens), tree.topology.depths, tree.topology.ancestor_mask)])
    path = tree.topology.path_to(6)  # root -> node 1 -> node 3 -> node 6 (flattened)
    runner.commit(slot, path)
    kept = [(1, *tree.tokens)[i] for i in path]
    assert runner.slot_length(slot) == len(prefix) + len(path)
    (result,) = runner.forward([ForwardItem(slot, [20, 21, 22])])
    with torch.inference_mode():
        expected = hf(torch.tensor([prefix + kept + [20, 21, 22]])).logits[0, -3:]
    torch.testing.assert_close(result.logits, expected, atol=ATOL, rtol=0)
    runner.release_slot(slot)


def test_hidden_states_are_the_final_normed_states(pair):
    runner, hf = pair
    tokens = [4, 5, 6, 7]
    slot = runner.allocate_slot()
    (result,) = runner.forward([ForwardItem(slot, tokens, logits="none", hidden=True)])
    assert result.logits is None
    with torch.inference_mode():
        expected = hf(torch.tensor([tokens]), output_hidden_states=True).hidden_states[-1][0]
    torch.testing.assert_close(result.hidden, expected, atol=ATOL, rtol=0)
    runner.release_slot(slot)


def test_forward_past_the_slot_end_is_refused(pair):
    runner, _ = pair
    slot = runner.allocate_slot()
    with pytest.raises(ValueError, match="cache positions"):
        runner.forward([ForwardItem(slot, [1] * (runner.max_len + 1))])
    runner.release_slot(slot)
