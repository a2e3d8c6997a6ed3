"""Request validation, before any work: every problem is INVALID_ARGUMENT naming the field."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

from specmesh.drafting import DRAFTERS
from specmesh.goodput import ADAPTIVE, AUTO_METHOD
from specmesh.serving import invalid
from specmesh.store.requests import NewRequest
from specmesh.v1 import orchestrator_pb2

DEFAULT_MAX_NEW_TOKENS = 128
METHODS = (*DRAFTERS, AUTO_METHOD)  # what a request may ask for


@dataclass(frozen=True)
class Limits:
    vocab_size: int
    max_context: int  # prompt + generated tokens
    max_new_tokens: int  # the most one request may ask for
    default_drafter: str
    default_budget: int  # ADAPTIVE (-1): the goodput controller chooses


def validate(request: orchestrator_pb2.GenerateRequest, prompt_ids: list[int], limits: Limits) -> NewRequest:
    """`prompt_ids`: the request's token ids, or its prompt already tokenized."""
    if not prompt_ids:
        raise invalid("prompt must not be empty" if request.WhichOneof("input") == "prompt" else "token_ids must not be empty")
    bad = next((i for i, t in enumerate(prompt_ids) if not 0 <= t < limits.vocab_size), None)
    if bad is not None:
        raise invalid(f"token_ids[{bad}]={prompt_ids[bad]} is out of range [0, {limits.vocab_size})")
    max_new = request.max_new_tokens if request.HasField("max_new_tokens") else DEFAULT_MAX_NEW_TOKENS
    if max_new <= 0:
        raise invalid(f"max_new_tokens must be > 0, got {max_new}")
    if max_new > limits.max_new_tokens:
        raise invalid(f"max_new_tokens={max_new} is over the limit of {limits.max_new_tokens}")
    if len(prompt_ids) + max_new > limits.max_context:
        raise invalid(f"the prompt ({len(prompt_ids)} tokens) + max_new_tokens={max_new} exceeds the context window of {limits.max_context}")
    return NewRequest(
        request_id=request.request_id or uuid.uuid4().hex,
        prompt_token_ids=prompt_ids,
        max_new_tokens=max_new,
        **_sampling(request.sampling),
        stop=tuple(_stops(request.stop)),
        drafter=_drafter(request.drafter, limits.default_drafter),
        budget=_budget(request, limits.default_budget),
    )


def _sampling(params) -> dict:
    top_p = params.top_p if params.HasField("top_p") else 1.0
    if not params.temperature >= 0:
        raise invalid(f"sampling.temperature must be >= 0, got {params.temperature}")
    if not 0.0 < top_p <= 1.0:
        raise invalid(f"sampling.top_p must be in (0, 1], got {top_p}")
    if params.top_k < 0:
        raise invalid(f"sampling.top_k must be >= 0, got {params.top_k}")
    seed = params.seed if params.HasField("seed") else int.from_bytes(os.urandom(8), "little") >> 1
    if seed >= 2**63:
        raise invalid(f"sampling.seed must be < 2**63, got {seed}")
    return {"temperature": params.temperature, "top_p": top_p, "top_k": params.top_k, "seed": seed}


def _stops(stops) -> list[str]:
    if any(not s for s in stops):
        raise invalid("stop strings must not be empty")
    return list(stops)


def _drafter(name: str, default: str) -> str:
    name = name or default
    if name not in METHODS:
        raise invalid(f"drafter must be one of {', '.join(METHODS)}, got {name!r}")
    return name


def _budget(request, default: int) -> int:
    budget = request.budget if request.HasField("budget") else default
    if budget < ADAPTIVE:
        raise invalid(f"budget must be >= 0, or -1 for adaptive, got {budget}")
    return budget

