"""OpenAI request bodies -> GenerateRequest, and our errors -> OpenAI errors, without a server.
The oracles: transformers' chat template for the prompt, validation.py for the errors."""

from __future__ import annotations

import grpc
import pytest

from orchestrator.openai_errors import ApiError, from_service_error
from orchestrator.openai_request import ServedModel, chat_request, completion_request
from orchestrator.validation import Limits, validate
from specmesh.serving import ServiceError
from specmesh.text import TextCodec

MODEL = ServedModel("SmolLM2-135M-Instruct-0123456789ab", ("default", "SmolLM2-135M-Instruct"), 0)
LIMITS = Limits(vocab_size=49152, max_context=2048, max_new_tokens=2048, default_drafter="recycling", default_budget=-1)
CONVERSATION = [
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Name a colour."},
]


@pytest.fixture(scope="module")
def codec(default_model_dir) -> TextCodec:
    return TextCodec.from_dir(default_model_dir)


def test_a_conversation_is_rendered_with_the_models_chat_template(codec, default_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    as_transformers = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi\nthere"}, *CONVERSATION[2:]]
    expected = tokenizer.apply_chat_template(as_transformers, add_generation_prompt=True, tokenize=False)
    request = chat_request({"model": MODEL.id, "messages": CONVERSATION}, codec, MODEL)
    assert list(request.generate.token_ids.ids) == tokenizer.encode(expected, add_special_tokens=False)
    assert request.chat and not request.stream


def test_parameters_map_to_the_generate_request():
    body = {"model": "default", "prompt": "Once", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "seed": 3,
            "stop": "\n", "stream": True, "stream_options": {"include_usage": True}, "drafter": "ngram",
            "budget": "adaptive", "top_k": 5, "user": "ignored", "n": 1, "logprobs": None}
    request = completion_request(body, MODEL)
    generate = request.generate
    assert (generate.prompt, generate.max_new_tokens, list(generate.stop), generate.drafter, generate.budget) == ("Once", 7, ["\n"], "ngram", -1)
    assert (generate.sampling.temperature, generate.sampling.top_p, generate.sampling.seed, generate.sampling.top_k) == (0.5, pytest.approx(0.9), 3, 5)
    assert request.stream and request.include_usage and not request.chat and not generate.whole


def test_defaults_are_openais():
    generate = completion_request({"model": "SmolLM2-135M-Instruct", "prompt": [[1, 2, 3]]}, MODEL).generate
    assert list(generate.token_ids.ids) == [1, 2, 3] and generate.sampling.temperature == 1.0
    assert generate.whole  # not streamed: the reply is built at the end, the verifier may hold steps
    assert not generate.HasField("max_new_tokens") and not generate.sampling.HasField("seed") and not generate.HasField("budget")


@pytest.mark.parametrize("body, param", [
    ({"n": 3}, "n"),
    ({"logprobs": 2}, "logprobs"),
    ({"echo": True}, "echo"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": [1, True]}, "prompt"),
    ({"max_tokens": "10"}, "max_tokens"),
    ({"max_tokens": 2**40}, "max_tokens"),
    ({"temperature": "hot"}, "temperature"),
    ({"seed": -1}, "seed"),
    ({"stop": [1]}, "stop"),
    ({"budget": "lots"}, "budget"),
])
def test_bad_bodies_name_the_param(body, param):
    with pytest.raises(ApiError) as error:
        completion_request({"prompt": "x", **body}, MODEL)
    assert (error.value.status, error.value.param) == (400, param) and param in error.value.message


@pytest.mark.parametrize("messages, param", [
    ([], "messages"),
    ([{"role": "tool", "content": "x"}], "messages[0].role"),
    ([{"role": "user", "content": "x"}, {"role": "user", "content": None}], "messages[1].content"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], "messages[0].content"),
])
def test_bad_messages_name_the_message(codec, messages, param):
    with pytest.raises(ApiError) as error:
        chat_request({"messages": messages}, codec, MODEL)
    assert error.value.param == param


def test_an_unknown_model_is_404():
    with pytest.raises(ApiError) as error:
        completion_request({"model": "gpt-4o", "prompt": "x"}, MODEL)
    assert (error.value.status, error.value.code, error.value.param) == (404, "model_not_found", "model")


@pytest.mark.parametrize("body, param", [
    ({"prompt": ""}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, 10**6]}, "prompt"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 4000}, "max_tokens"),
    ({"prompt": [1] * 2000, "max_tokens": 100}, "prompt"),
    ({"temperature": -1}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_k": -1}, "top_k"),
    ({"stop": ["ok", ""]}, "stop"),
    ({"drafter": "medusa"}, "drafter"),
    ({"budget": -2}, "budget"),
])
def test_validation_errors_name_the_openai_param(body, param):
    request = completion_request({"prompt": [1, 2], **body}, MODEL)
    prompt_ids = list(request.generate.token_ids.ids) if request.generate.WhichOneof("input") == "token_ids" else []
    with pytest.raises(ServiceError) as error:
        validate(request.generate, prompt_ids, LIMITS)
    api_error = from_service_error(error.value, request.params)
    assert (api_error.status, api_error.param, api_error.type) == (400, param, "invalid_request_error")
    assert "max_new_tokens" not in api_error.message and "sampling." not in api_error.message


def test_chat_errors_use_the_chat_param_names(codec):
    request = chat_request({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0}, codec, MODEL)
    with pytest.raises(ServiceError) as error:
        validate(request.generate, list(request.generate.token_ids.ids), LIMITS)
    assert from_service_error(error.value, request.params).param == "max_completion_tokens"


@pytest.mark.parametrize("code, status, kind", [
    (grpc.StatusCode.RESOURCE_EXHAUSTED, 429, "rate_limit_error"),
    (grpc.StatusCode.UNAVAILABLE, 503, "server_error"),
    (grpc.StatusCode.DEADLINE_EXCEEDED, 504, "server_error"),
    (grpc.StatusCode.INTERNAL, 500, "server_error"),
])
def test_other_failures_map_to_http_statuses(code, status, kind):
    error = from_service_error(ServiceError(code, "why"), {})
    assert (error.status, error.type, error.code) == (status, kind, code.name.lower())
    assert error.body() == {"error": {"message": "why", "type": kind, "param": None, "code": code.name.lower()}}
