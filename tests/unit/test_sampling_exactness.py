"""Speculative sampling through the whole engine is exact: a chi-square test of the first three
generated tokens against plain sampling from the Hugging Face model (the oracle)."""

import itertools

import numpy as np
import pytest
import torch
from tiny_models import build_tiny_model, random_eagle_head
from scipy.stats import chisquare

from specmesh import Engine

VOCAB = 16
PROMPT = [1, 2, 3, 4]
DRAWS = 20000


@pytest.fixture(scope="module")
def tiny16(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny16"), vocab_size=VOCAB, seed=7, initializer_range=0.5)


def plain_sampling_distribution(path, temperature, top_k, top_p) -> np.ndarray:
    """P(t1, t2, t3) [VOCAB ** 3] under plain sampling, with HF's own logits warpers."""
    from transformers import AutoModelForCausalLM
    from transformers.generation.logits_process import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))

    def next_probs(prefixes: list[list[int]]) -> np.ndarray:
        ids = torch.tensor([PROMPT + p for p in prefixes])
        with torch.inference_mode():
            logits = hf(ids).logits[:, -1].double()
        return torch.softmax(warpers(ids, logits), dim=-1).numpy()

    p1 = next_probs([[]])[0]
    p2 = next_probs([[a] for a in range(VOCAB)])
    pairs = list(itertools.product(range(VOCAB), repeat=2))
    p3 = next_probs([list(pair) for pair in pairs]).reshape(VOCAB, VOCAB, VOCAB)
    return (p1[:, None, None] * p2[:, :, None] * p3).reshape(-1)


def speculative_engine(path, drafter: str, tmp_path) -> tuple[Engine, float]:
    """The engine with the drafter under test, and the mean tree size its trees must reach."""
    engine = Engine.from_pretrained(str(path), drafter="recycling", dtype="float32", budget=80, num_slots=500, max_context=32)
    if drafter == "recycling":  # the 80-node template: many nodes, several children per node
        return engine, 40
    from specmesh.drafting.eagle import EagleDrafter
    from specmesh.eagle.checkpoint import load_head
    from specmesh.eagle.target_io import TargetIO

    eagle = EagleDrafter(load_head(random_eagle_head(path, tmp_path)), TargetIO.from_checkpoint(path), top_k=4, depth=3)
    return Engine(engine.runner, engine.tokenizer, engine.model_config, eagle, 12, engine.prefill_chunk), 8


@pytest.mark.parametrize("drafter", ["recycling", "eagle"])
@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.8, 10, 0.9)])
def test_first_three_tokens_match_plain_sampling(tiny16, temperature, top_k, top_p, drafter, tmp_path):
    engine, min_tree_size = speculative_engine(tiny16, drafter, tmp_path)
    requests = [engine.make_request(PROMPT, 3, temperature, top_p, top_k, seed) for seed in range(DRAWS)]
    results = engine.generate_many(requests)
    counts = np.zeros(VOCAB**3)
    for result in results:
        a, b, c = result.token_ids
        counts[(a * VOCAB + b) * VOCAB + c] += 1
    tree_sizes = [step.tree_size for r in results for step in r.stats.steps]
    assert np.mean(tree_sizes) > min_tree_size
    expected = plain_sampling_distribution(tiny16, temperature, top_k, top_p) * DRAWS
    assert counts[expected == 0].sum() == 0
    # pool the cells with small expected counts so that the chi-square approximation holds
    big, small = expected >= 5, (expected > 0) & (expected < 5)
    observed, wanted = counts[big], expected[big]
    if small.any():
        observed, wanted = np.append(observed, counts[small].sum()), np.append(wanted, expected[small].sum())
    result = chisquare(observed, wanted * observed.sum() / wanted.sum())
    assert result.pvalue > 0.001, result
