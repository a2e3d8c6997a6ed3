"""OpenAI request bodies -> GenerateRequest: the one module that reads them.

Glossary:
- served model: the model this deployment serves; a request may name it by its id
  (specmesh.model.identity), its directory name, or "default".
- chat request (/v1/chat/completions): `messages` rendered with the model's chat template.
  Completion request (/v1/completions): `prompt`, a string or a list of token ids, as is.
- extensions: extra body fields with GenerateRequest's meaning: `drafter`, `budget` (a number of
  draft nodes, or -1 / "adaptive") and `top_k`.
- unsupported: parameters that would change the result (n > 1, logprobs, tools, penalties, ...)
  are refused with a 400 naming them; harmless ones (user, store, metadata, ...) are ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from orchestrator.openai_errors import ApiError, bad_param, field_params
from specmesh.text import TextCodec
from specmesh.v1 import common_pb2, orchestrator_pb2

INT32 = (-(2**31), 2**31 - 1)
UINT64 = (0, 2**64 - 1)
OPENAI_TEMPERATURE = 1.0  # OpenAI's default; 0 = greedy
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
# parameters we cannot honour -> the values that ask for nothing we lack
UNSUPPORTED = {
    "n": (None, 1), "best_of": (None, 1), "logprobs": (None, False), "top_logprobs": (None, 0), "echo": (None, False),
    "suffix": (None, ""), "tools": (None, []), "functions": (None, []), "logit_bias": (None, {}),
    "presence_penalty": (None, 0), "frequency_penalty": (None, 0), "response_format": (None, {"type": "text"}),
}


@dataclass(frozen=True)
class ServedModel:
    id: str
    aliases: tuple[str, ...]  # other names a request may use
    created: int  # unix time the server started

    def check(self, name) -> None:
        if name is not None and name != self.id and name not in self.aliases:
            raise ApiError(404, f"the model {name!r} does not exist; this server serves {self.id!r}", "model", "model_not_found")


@dataclass(frozen=True)
class OpenAIRequest:
    chat: bool
    generate: orchestrator_pb2.GenerateRequest
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage
    params: dict[str, str]  # GenerateRequest field -> the parameter the client used (for errors)


def chat_request(body: dict, codec: TextCodec, model: ServedModel) -> OpenAIRequest:
    _check(body, model)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_param("messages", "messages must be a non-empty list of {role, content} objects")
    try:
        prompt_ids = codec.chat_token_ids([_message(m, f"messages[{i}]") for i, m in enumerate(messages)])
    except ValueError as error:  # the chat template refused the conversation
        raise bad_param("messages", str(error)) from None
    generate = orchestrator_pb2.GenerateRequest(token_ids=orchestrator_pb2.TokenIds(ids=prompt_ids))
    max_tokens = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    return _request(body, generate, chat=True, params=field_params("messages", max_tokens))


def completion_request(body: dict, model: ServedModel) -> OpenAIRequest:
    _check(body, model)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one prompt
    if isinstance(prompt, str):
        generate = orchestrator_pb2.GenerateRequest(prompt=prompt)
    elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        generate = orchestrator_pb2.GenerateRequest(token_ids=orchestrator_pb2.TokenIds(ids=_token_ids(prompt)))
    else:
        raise bad_param("prompt", "prompt must be a string or a list of token ids (one prompt per request)")
    return _request(body, generate, chat=False, params=field_params("prompt", "max_tokens"))


def _check(body: dict, model: ServedModel) -> None:
    model.check(body.get("model"))
    for name, harmless in UNSUPPORTED.items():
        if body.get(name) not in harmless:
            raise bad_param(name, f"{name}={json.dumps(body[name])} is not supported; leave it out or use {json.dumps(harmless[1])}")


def _request(body: dict, generate: orchestrator_pb2.GenerateRequest, chat: bool, params: dict[str, str]) -> OpenAIRequest:
    max_tokens = _int(body, params["max_new_tokens"], INT32)
    if max_tokens is not None:
        generate.max_new_tokens = max_tokens
    generate.sampling.CopyFrom(_sampling(body))
    generate.stop.extend(_stop(body.get("stop")))
    generate.drafter = _string(body, "drafter")
    budget = -1 if body.get("budget") == "adaptive" else _int(body, "budget", INT32)
    if budget is not None:
        generate.budget = budget
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise bad_param("stream_options", "stream_options must be an object")
    stream = bool(body.get("stream"))
    generate.whole = not stream  # the reply is built once the request has finished
    return OpenAIRequest(chat, generate, stream=stream,
                         include_usage=bool(options.get("include_usage")), params=params)


def _message(message, where: str) -> dict:
    if not isinstance(message, dict):
        raise bad_param(where, f"{where} must be an object with role and content")
    if message.get("role") not in ROLES:
        raise bad_param(f"{where}.role", f"{where}.role must be one of {', '.join(ROLES)}, got {message.get('role')!r}")
    return {"role": ROLES[message["role"]], "content": _content(message.get("content"), f"{where}.content")}


def _content(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                                         for p in content):
        return "\n".join(p["text"] for p in content)
    raise bad_param(where, f"{where} must be a string or a list of text parts")


def _token_ids(ids: list[int]) -> list[int]:
    if any(not INT32[0] <= t <= INT32[1] for t in ids):
        raise bad_param("prompt", "prompt token ids must be 32-bit integers")
    return ids


def _sampling(body: dict) -> common_pb2.SamplingParams:
    temperature = _number(body, "temperature")
    sampling = common_pb2.SamplingParams(temperature=OPENAI_TEMPERATURE if temperature is None else temperature,
                                         top_k=_int(body, "top_k", INT32) or 0)
    if (top_p := _number(body, "top_p")) is not None:
        sampling.top_p = top_p
    if (seed := _int(body, "seed", UINT64)) is not None:
        sampling.seed = seed
    return sampling


def _stop(stop) -> list[str]:
    stops = [stop] if isinstance(stop, str) else [] if stop is None else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad_param("stop", "stop must be a string or a list of strings")
    return stops


def _int(body: dict, name: str, bounds: tuple[int, int]) -> int | None:
    value = body.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not bounds[0] <= value <= bounds[1]):
        raise bad_param(name, f"{name} must be an integer in [{bounds[0]}, {bounds[1]}], got {value!r}")
    return value


def _number(body: dict, name: str) -> float | None:
    value = body.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise bad_param(name, f"{name} must be a number, got {value!r}")
    return value


def _string(body: dict, name: str) -> str:
    value = body.get(name) or ""
    if not isinstance(value, str):
        raise bad_param(name, f"{name} must be a string, got {value!r}")
    return value
