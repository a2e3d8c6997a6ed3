"""The transformers fallback runner behaves like our own runner behind the same interface."""

import torch

from specmesh.drafting import make_drafter
from specmesh.engine import Engine
from specmesh.model.hf_runner import HFRunner
from specmesh.model.loading import RunnerConfig, load_runner, load_tokenizer
from specmesh.model.runner import ForwardItem
from specmesh.tree import DraftTree


def test_tree_forward_and_commit_match_our_runner(tiny_model_dir, tiny_hf_model):
    ours, config, _ = load_runner(RunnerConfig(model=str(tiny_model_dir), dtype="float32", num_slots=2, max_context=64, max_forward_tokens=32))
    fallback = HFRunner(tiny_hf_model, num_slots=2, max_len=96)
    tree = DraftTree(tokens=(5, 6, 7, 8), parents=(-1, -1, 0, 1))
    item_tokens = (2, *tree.tokens)
    outputs = []
    for runner in (ours, fallback):
        slot = runner.allocate_slot()
        runner.forward([ForwardItem(slot, [1, 2, 3, 4, 5], logits="none")])
        runner.commit(slot, range(5))
        (tree_out,) = runner.forward([ForwardItem(slot, item_tokens, tree.topology.depths, tree.topology.ancestor_mask)])
        runner.commit(slot, [0, 2, 4])
        (after,) = runner.forward([ForwardItem(slot, [9, 10])])
        assert runner.slot_length(slot) == 8
        outputs.append((tree_out.logits, after.logits))
    for a, b in zip(*outputs):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=0)


def test_engine_on_the_fallback_runner_generates_the_same_tokens(tiny_model_dir, tiny_hf_model):
    reference = Engine.from_pretrained(str(tiny_model_dir), drafter="none", dtype="float32", max_context=64)
    expected = reference.generate([3, 1, 4, 1, 5], max_new_tokens=24).token_ids
    fallback = Engine(
        HFRunner(tiny_hf_model, num_slots=2, max_len=128), load_tokenizer(tiny_model_dir), reference.model_config,
        make_drafter("recycling", reference.model_config.vocab_size), budget=8, prefill_chunk=32,
    )
    assert fallback.generate([3, 1, 4, 1, 5], max_new_tokens=24).token_ids == expected
