"""The in-process engine on a tiny random model: validation, stopping, streaming, batching."""

import pytest

from specmesh import Engine


@pytest.fixture(scope="module")
def engines(tiny_model_dir):
    """One engine per drafter; the recycling one verifies 16-node trees."""
    return {
        name: Engine.from_pretrained(str(tiny_model_dir), drafter=name, dtype="float32", budget=16, num_slots=6, max_context=128)
        for name in ("none", "ngram", "recycling")
    }


PROMPT = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]


def test_all_drafters_give_the_plain_greedy_output(engines):
    reference = engines["none"].generate(PROMPT, max_new_tokens=40).token_ids
    assert len(reference) == 40
    for name in ("ngram", "recycling"):
        for _ in range(2):  # the second run sees a warm recycling table
            assert engines[name].generate(PROMPT, max_new_tokens=40).token_ids == reference


def test_speculation_accepts_tokens(engines):
    engine = engines["recycling"]
    engine.generate(PROMPT, max_new_tokens=60)
    result = engine.generate(PROMPT, max_new_tokens=60)
    assert result.stats.mean_tokens_per_step > 1.2
    assert result.stats.num_steps < 59


def test_same_seed_same_output_whatever_the_batch_and_drafter(engines):
    solo = engines["none"].generate(PROMPT, max_new_tokens=30, temperature=1.0, seed=11).token_ids
    assert engines["recycling"].generate(PROMPT, max_new_tokens=30, temperature=1.0, seed=11).token_ids == solo
    engine = engines["ngram"]
    requests = [engine.make_request(PROMPT[: 3 + i], 30, 1.0, 1.0, 0, 100 + i) for i in range(5)]
    requests.insert(2, engine.make_request(PROMPT, 30, 1.0, 1.0, 0, 11))
    batched = engine.generate_many(requests)
    assert batched[2].token_ids == solo
    assert engines["none"].generate(PROMPT, max_new_tokens=30, temperature=1.0, seed=12).token_ids != solo


def test_more_requests_than_slots_all_complete(engines):
    engine = engines["recycling"]
    requests = [engine.make_request(PROMPT[: 2 + i % 9], 12) for i in range(14)]
    results = engine.generate_many(requests)
    for request, result in zip(requests, results):
        assert result.token_ids == engines["none"].generate(request.prompt_token_ids, max_new_tokens=12).token_ids
    assert engine.runner.free_slots == 6


def test_streamed_tokens_equal_the_result(engines):
    streamed = []
    result = engines["recycling"].generate(PROMPT, max_new_tokens=25, on_tokens=streamed.extend)
    assert streamed == result.token_ids and result.finish_reason == "length"


def test_stop_string_ends_generation(engines):
    engine = engines["none"]
    full = engine.generate(PROMPT, max_new_tokens=20)
    stop = engine.tokenizer.decode(full.token_ids[5:7])
    result = engine.generate(PROMPT, max_new_tokens=20, stop=[stop])
    assert result.finish_reason == "stop"
    assert result.token_ids == full.token_ids[: len(result.token_ids)]
    assert len(result.token_ids) <= 7 and stop not in result.text


def test_eos_ends_generation(tiny_model_dir, engines):
    full = engines["none"].generate(PROMPT, max_new_tokens=20).token_ids
    eos = full[4]
    engine = engines["recycling"]
    original = engine.model_config
    engine.model_config = original.__class__(**{**original.__dict__, "eos_token_ids": (eos,)})
    try:
        result = engine.generate(PROMPT, max_new_tokens=20)
    finally:
        engine.model_config = original
    first = full.index(eos)
    assert result.token_ids == full[: first + 1] and result.finish_reason == "stop"


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"prompt_token_ids": []}, "prompt_token_ids"),
        ({"prompt_token_ids": [1, 999]}, r"prompt_token_ids\[1\]"),
        ({"prompt_token_ids": [1, -1]}, r"prompt_token_ids\[1\]"),
        ({"temperature": -1.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.01}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": -5}, "max_new_tokens"),
        ({"max_new_tokens": 10_000}, "max_new_tokens.*context window"),
        ({"budget": -1}, "budget"),
    ],
)
def test_bad_input_raises_value_error_naming_the_parameter(engines, kwargs, name):
    args = {"prompt_token_ids": PROMPT, "max_new_tokens": 10, **kwargs}
    with pytest.raises(ValueError, match=name):
        engines["recycling"].generate(**args)
    assert engines["recycling"].runner.free_slots == 6


def test_text_prompt_is_tokenized(engines):
    result = engines["none"].generate("t3 t1 t4", max_new_tokens=5)
    assert result.token_ids == engines["none"].generate([3, 1, 4], max_new_tokens=5).token_ids
    assert result.text.split() == [f"t{t}" for t in result.token_ids]
