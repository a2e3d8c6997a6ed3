"""End to end on the real SmolLM2-135M-Instruct in fp32: HF is the oracle for logits and for
greedy decoding; every speculative output must be token-identical to HF `generate`."""

import json
import subprocess
import sys

import pytest
import torch

from specmesh.datasets import chat_token_ids, load_prompts
from specmesh.engine import Engine
from specmesh.model.runner import ForwardItem
from specmesh.tree import DraftTree

MAX_NEW_TOKENS = 128


@pytest.fixture(scope="module")
def hf(default_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def engine(default_model_dir):
    return Engine.from_pretrained("default", drafter="none", dtype="float32", budget=0, num_slots=4)


def test_checkpoint_has_config_tokenizer_and_weights(default_model_dir):
    names = {p.name for p in default_model_dir.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= names
    config = json.loads((default_model_dir / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (30, 576, 49152)
    assert "quantization_config" not in config


def test_ragged_tree_batch_logits_match_hf(engine, hf):
    runner = engine.runner
    prompts = [chat_token_ids(engine.tokenizer, text) for text in ("Hi!", "Name three rivers in Europe.", "2+2=?")]
    trees = [
        DraftTree((28, 253, 1345, 314), (-1, -1, 0, 1)),
        DraftTree((504, 2436), (-1, 0)),
        DraftTree((33, 34, 35, 36, 37), (-1, -1, -1, 0, 3)),
    ]
    slots = []
    for ids in prompts:
        slot = runner.allocate_slot()
        runner.forward([ForwardItem(slot, ids[:-1], logits="none")])
        runner.commit(slot, range(len(ids) - 1))
        slots.append(slot)
    items = [ForwardItem(s, (ids[-1], *t.tokens), t.topology.depths, t.topology.ancestor_mask)
             for s, ids, t in zip(slots, prompts, trees)]
    for ids, tree, result in zip(prompts, trees, runner.forward(items)):
        flat = (ids[-1], *tree.tokens)
        for node in range(tree.num_nodes + 1):
            branch = ids[:-1] + [flat[i] for i in tree.topology.path_to(node)]
            with torch.inference_mode():
                expected = hf(torch.tensor([branch])).logits[0, -1]
            torch.testing.assert_close(result.logits[node], expected, atol=2e-3, rtol=0)
    for slot in slots:
        runner.release_slot(slot)


def benchmark_prompts(tokenizer) -> list[list[int]]:
    prompts = load_prompts("mtbench", 5) + load_prompts("humaneval", 5)
    return [chat_token_ids(tokenizer, p.text) for p in prompts]


@pytest.fixture(scope="module")
def hf_greedy(engine, hf):
    outputs = []
    for ids in benchmark_prompts(engine.tokenizer):
        inputs = torch.tensor([ids])
        with torch.inference_mode():
            out = hf.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=MAX_NEW_TOKENS,
                              do_sample=False, pad_token_id=hf.generation_config.eos_token_id)
        outputs.append(out[0, len(ids):].tolist())
    return outputs


@pytest.mark.parametrize("drafter, budget", [("recycling", 32), ("ngram", 16), ("eagle", 16), ("hybrid", 16)])
def test_greedy_generation_is_token_identical_to_hf(engine, hf_greedy, drafter, budget):
    speculative = engine.with_drafter(drafter, budget)
    accepted = 0
    for ids, expected in zip(benchmark_prompts(engine.tokenizer), hf_greedy):
        result = speculative.generate(ids, max_new_tokens=MAX_NEW_TOKENS)
        assert result.token_ids == expected
        accepted += result.stats.accepted_tokens
    assert accepted > 0  # the drafter really speculated


def test_cli_generate_json():
    out = subprocess.run(
        [sys.executable, "-m", "specmesh.cli", "generate", "What is 2+2?", "--dtype", "float32",
         "--max-new-tokens", "8", "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert len(result["token_ids"]) <= 8 and result["text"] and result["stats"]["steps"] >= 1


def test_cli_reports_bad_input_without_a_traceback():
    out = subprocess.run(
        [sys.executable, "-m", "specmesh.cli", "generate", "hi", "--top-p", "2", "--dtype", "float32"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 2 and "top_p" in out.stderr and "Traceback" not in out.stderr
