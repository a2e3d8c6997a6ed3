"""The OpenAI-compatible HTTP API through the official `openai` client, against a real stack (the
real SmolLM2, fp32). The oracle is the gRPC API: the same greedy request gives the same tokens."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest
from service_stack import no_sessions_left, start_stack, wait_until

from specmesh.client import Client
from specmesh.text import TextCodec

API_KEY = "test-key"
QUESTION = "What is the capital of France?"
CONVERSATION = [
    {"role": "system", "content": "You answer in one short sentence."},
    {"role": "user", "content": "Name a primary colour."},
    {"role": "assistant", "content": "Red."},
    {"role": "user", "content": "Name another one."},
]
AS_PARTS = [*CONVERSATION[:-1], {"role": "user", "content": [{"type": "text", "text": "Name another one."}]}]
COUNTING = "1, 2, 3, 4, 5, 6, 7,"
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def stack(tmp_path_factory, redis_client, default_model_dir):
    stack = start_stack(tmp_path_factory, redis_client, verifiers=1, drafters=1, dtype="float32", drafter="ngram",
                        api_key=API_KEY)
    yield stack
    stack.stop()
    stack.forget()


@pytest.fixture(scope="module")
def api(stack):
    with openai.OpenAI(base_url=stack.http_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def grpc_client(stack):
    with Client(stack.address, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def codec(default_model_dir) -> TextCodec:
    return TextCodec.from_dir(default_model_dir)


def test_models_lists_the_served_model_and_accepts_its_names(api, default_model_dir):
    (model,) = api.models.list().data
    assert model.id.startswith(default_model_dir.name) and model.owned_by == "specmesh"
    for name in (model.id, default_model_dir.name, "default"):
        assert api.models.retrieve(name).id == model.id
    with pytest.raises(openai.NotFoundError) as error:
        api.models.retrieve("gpt-4o")
    assert error.value.code == "model_not_found"


@pytest.mark.parametrize("conversation", [False, True], ids=["question", "conversation"])
def test_chat_completion_equals_the_grpc_greedy_result(api, grpc_client, codec, conversation):
    if conversation:
        messages = AS_PARTS
        expected = grpc_client.generate(token_ids=codec.chat_token_ids(CONVERSATION), max_new_tokens=NEW_TOKENS)
    else:
        messages = [{"role": "user", "content": QUESTION}]
        expected = grpc_client.generate(prompt=QUESTION, chat=True, max_new_tokens=NEW_TOKENS)
    reply = api.chat.completions.create(model="default", messages=messages, max_tokens=NEW_TOKENS, temperature=0)
    (choice,) = reply.choices
    assert choice.message.content == expected.text and choice.message.role == "assistant"
    assert choice.finish_reason == expected.finish_reason and reply.object == "chat.completion"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (expected.stats.prompt_tokens, len(expected.token_ids))
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert grpc_client.get_request(reply.id.removeprefix("chatcmpl-")).token_ids == expected.token_ids


def test_streamed_chat_adds_up_to_the_whole_completion(api):
    request = dict(model="default", messages=[{"role": "user", "content": QUESTION}], max_completion_tokens=NEW_TOKENS,
                   temperature=0, extra_body={"drafter": "ngram", "budget": 4})
    whole = api.chat.completions.create(**request)
    chunks = list(api.chat.completions.create(**request, stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage


def test_completion_of_a_text_prompt_and_of_token_ids(api, grpc_client, codec):
    expected = grpc_client.generate(prompt=COUNTING, max_new_tokens=NEW_TOKENS)
    for prompt in (COUNTING, codec.encode(COUNTING)):
        reply = api.completions.create(model="default", prompt=prompt, max_tokens=NEW_TOKENS, temperature=0)
        assert reply.object == "text_completion" and reply.choices[0].text == expected.text
        assert reply.choices[0].finish_reason == expected.finish_reason == "length"
        assert reply.usage.completion_tokens == NEW_TOKENS


@pytest.mark.parametrize("stream", [False, True])
def test_stop_strings_end_the_text_before_them(api, grpc_client, stream):
    text = grpc_client.generate(prompt=COUNTING, max_new_tokens=NEW_TOKENS).text
    stop = text[text.index("9") : text.index("9") + 3]  # e.g. "9, ": some way in, never at the start
    request = dict(model="default", prompt=COUNTING, max_tokens=NEW_TOKENS, temperature=0, stop=[stop, "never seen"])
    if stream:
        chunks = list(api.completions.create(**request, stream=True))
        got, finish = "".join(c.choices[0].text for c in chunks), chunks[-1].choices[0].finish_reason
    else:
        choice = api.completions.create(**request).choices[0]
        got, finish = choice.text, choice.finish_reason
    assert (got, finish) == (text[: text.index(stop)], "stop")


@pytest.mark.parametrize("params, param", [
    (dict(n=2), "n"),
    (dict(logprobs=True), "logprobs"),
    (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]), "tools"),
    (dict(max_tokens=0), "max_tokens"),
    (dict(max_completion_tokens=10**6), "max_completion_tokens"),
    (dict(temperature=-1), "temperature"),
    (dict(top_p=0), "top_p"),
    (dict(seed=-1), "seed"),
    (dict(stop=[""]), "stop"),
    (dict(extra_body={"drafter": "medusa"}), "drafter"),
    (dict(extra_body={"budget": -2}), "budget"),
    (dict(messages=[{"role": "tool", "content": "x"}]), "messages[0].role"),
])
def test_bad_params_are_400_naming_the_param(api, params, param):
    request = {"model": "default", "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 4, **params}
    with pytest.raises(openai.BadRequestError) as error:
        api.chat.completions.create(**request)
    assert error.value.param == param and param in error.value.message
    assert error.value.type == "invalid_request_error"


def test_unknown_model_is_404(api):
    with pytest.raises(openai.NotFoundError) as error:
        api.completions.create(model="gpt-4o", prompt=COUNTING, max_tokens=4)
    assert error.value.code == "model_not_found" and error.value.param == "model"


def test_bad_json_is_400(stack):
    request = urllib.request.Request(stack.http_url + "/v1/completions", data=b"{not json", method="POST",
                                     headers={"Authorization": f"Bearer {API_KEY}"})
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request)
    assert error.value.code == 400 and json.loads(error.value.read())["error"]["type"] == "invalid_request_error"


def test_the_api_key_is_required_but_not_for_health(stack):
    with openai.OpenAI(base_url=stack.http_url + "/v1", api_key="wrong", max_retries=0) as client:
        with pytest.raises(openai.AuthenticationError) as error:
            client.models.list()
    assert error.value.code == "invalid_api_key"
    with urllib.request.urlopen(stack.http_url + "/healthz") as health:
        assert health.status == 200


def test_a_client_that_disconnects_mid_stream_cancels_the_request(api, grpc_client, redis_client, stack):
    stream = api.completions.create(model="default", prompt=COUNTING, max_tokens=400, temperature=0, stream=True)
    first = next(chunk for chunk in stream if chunk.choices[0].text)
    request_id = first.id.removeprefix("cmpl-")
    stream.close()
    request = lambda: grpc_client.get_request(request_id)  # noqa: E731
    wait_until(lambda: request().status == "cancelled", what="the request to be cancelled",
               seen=lambda: f"status {request().status}, {len(request().token_ids)} tokens")
    wait_until(lambda: no_sessions_left(redis_client, stack), what="verifier and drafter to free the session")
    assert len(request().token_ids) < 400
