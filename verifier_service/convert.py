"""Protobuf <-> specmesh types for the verifier service (the only module that converts)."""

from __future__ import annotations

import ctypes

import numpy as np
import torch

from specmesh.drafting import DRAFTERS, Feedback
from specmesh.model.config import ModelConfig
from specmesh.sampling import SamplingParams
from specmesh.serving import invalid
from specmesh.tree import DraftTree
from specmesh.v1 import common_pb2, drafter_pb2, verifier_pb2
from verifier_service.session import Finished, SessionSpec, StepEvent


def session_spec(start: verifier_pb2.SessionStart, config: ModelConfig, max_context: int) -> SessionSpec:
    """Validate a SessionStart; every problem raises INVALID_ARGUMENT naming the field."""
    if not start.request_id:
        raise invalid("request_id must not be empty")
    prompt, generated = list(start.prompt_token_ids), list(start.generated_token_ids)
    if not prompt:
        raise invalid("prompt_token_ids must not be empty")
    for name, ids in (("prompt_token_ids", prompt), ("generated_token_ids", generated)):
        bad = next((i for i, t in enumerate(ids) if not 0 <= t < config.vocab_size), None)
        if bad is not None:
            raise invalid(f"{name}[{bad}]={ids[bad]} is out of range [0, {config.vocab_size})")
    if start.max_new_tokens <= len(generated):
        raise invalid(f"max_new_tokens={start.max_new_tokens} must exceed the {len(generated)} generated tokens")
    if len(prompt) + start.max_new_tokens > max_context:
        raise invalid(f"max_new_tokens={start.max_new_tokens} with a {len(prompt)}-token prompt exceeds the context window of {max_context}")
    if start.drafter_method not in DRAFTERS:
        raise invalid(f"drafter_method must be one of {', '.join(DRAFTERS)}, got {start.drafter_method!r}")
    if start.budget < 0:
        raise invalid(f"budget must be >= 0, got {start.budget}")
    return SessionSpec(start.request_id, prompt, generated, start.max_new_tokens, sampling(start.sampling),
                       start.drafter_method, start.drafter_address, start.budget, start.epoch,
                       start.stream_interval_ms / 1000)


def sampling(message: common_pb2.SamplingParams) -> SamplingParams:
    top_p = message.top_p if message.HasField("top_p") else 1.0
    seed = message.seed if message.HasField("seed") else None
    try:
        params = SamplingParams(message.temperature, top_p, message.top_k, seed)
    except ValueError as error:
        raise invalid(f"sampling.{error}") from None
    if not params.greedy and seed is None:
        raise invalid("sampling.seed must be set when temperature > 0 (the orchestrator draws one)")
    return params


def event_to_proto(event: StepEvent | Finished) -> verifier_pb2.SessionEvent:
    if isinstance(event, Finished):
        return verifier_pb2.SessionEvent(finished=verifier_pb2.SessionFinished(finish_reason=event.finish_reason))
    steps = [common_pb2.StepStats(
        tree_size=s.tree_size, accepted=s.accepted, batch_size=s.batch_size, budget=s.budget,
        draft_ms=s.draft_s * 1000, verify_ms=s.verify_s * 1000, forward_index=s.forward_index,
        batch_tree_tokens=s.batch_tree_tokens, batch_kv_tokens=s.batch_kv_tokens, path_probs=s.path_probs,
        batch_speculating=s.batch_speculating, cycle_ms=s.cycle_s * 1000,
    ) for s in event.steps]
    return verifier_pb2.SessionEvent(step=verifier_pb2.StepEvent(index=event.index, token_ids=event.token_ids, steps=steps,
                                                                  kv_length=event.kv_length))


def feedback_to_proto(feedback: Feedback, budget: int) -> drafter_pb2.DraftFeedback:
    rows = feedback.recycling_rows
    message = drafter_pb2.DraftFeedback(
        tree_tokens=feedback.tree_tokens, accepted_tokens=feedback.accepted_tokens,
        recycling_rows=b"" if rows is None else np.ascontiguousarray(rows, dtype="<i4").tobytes(),
        recycling_k=0 if rows is None else rows.shape[1], budget=budget,
    )
    if feedback.hidden is not None:
        message.hidden.CopyFrom(features_to_proto(feedback.hidden))
    return message


def features_to_proto(hidden: torch.Tensor) -> drafter_pb2.Features:
    """Target features on the wire: bf16 bytes, half the size of fp32 and plenty for drafting.
    A contiguous bf16 tensor in CPU memory (what a bf16 forward gives) is copied out as it lies,
    without a torch op: right after the forward the caches are cold, and the conversion ops took
    ~80 us where this takes ~35 (a step's feedback, 2-core Xeon)."""
    if not (hidden.is_cpu and hidden.dtype is torch.bfloat16 and hidden.is_contiguous()):
        hidden = hidden.detach().to("cpu", torch.bfloat16).contiguous()
    data = ctypes.string_at(hidden.data_ptr(), hidden.nbytes) if hidden.nbytes else b""
    return drafter_pb2.Features(data=data, hidden_size=hidden.shape[-1], dtype="bfloat16")


def tree_from_proto(tree: common_pb2.DraftTree) -> DraftTree:
    return DraftTree(tuple(tree.tokens), tuple(tree.parents), tuple(tree.scores))
