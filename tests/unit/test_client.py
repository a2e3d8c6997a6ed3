"""The client SDK's request building (the server side is tested in tests/service)."""

import pytest

from specmesh.client import build_request


def test_request_fields_and_unset_optionals():
    request = build_request(token_ids=[1, 2, 3], max_new_tokens=9, temperature=0.5, stop=["\n"], drafter="ngram")
    assert request.WhichOneof("input") == "token_ids" and list(request.token_ids.ids) == [1, 2, 3]
    assert request.max_new_tokens == 9 and request.sampling.temperature == 0.5 and list(request.stop) == ["\n"]
    assert not request.sampling.HasField("seed") and not request.HasField("budget") and not request.whole
    seeded = build_request(prompt="hi", chat=True, seed=7, budget=0, top_p=0.9)
    assert seeded.prompt == "hi" and seeded.chat and seeded.sampling.seed == 7
    assert seeded.HasField("budget") and seeded.budget == 0 and seeded.sampling.top_p == pytest.approx(0.9)
    assert build_request(token_ids=[1], whole=True).whole


@pytest.mark.parametrize("kwargs", [{}, {"prompt": "a", "token_ids": [1]}])
def test_exactly_one_of_prompt_and_token_ids(kwargs):
    with pytest.raises(ValueError, match="prompt and token_ids"):
        build_request(**kwargs)
