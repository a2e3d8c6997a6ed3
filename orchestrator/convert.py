"""Protobuf <-> orchestrator types (the only module of the orchestrator that converts)."""

from __future__ import annotations

from orchestrator.controller import StepReport
from specmesh.acceptance import Observation
from specmesh.goodput import StepShape
from specmesh.store.requests import NewRequest, RequestRecord
from specmesh.v1 import common_pb2, orchestrator_pb2, verifier_pb2


def session_start(request: NewRequest, generated: list[int], drafter_address: str, method: str, epoch: int,
                  budget: int, stream_interval_ms: int) -> verifier_pb2.SessionRequest:
    start = verifier_pb2.SessionStart(
        request_id=request.request_id, prompt_token_ids=request.prompt_token_ids, generated_token_ids=generated,
        max_new_tokens=request.max_new_tokens,
        sampling=common_pb2.SamplingParams(temperature=request.temperature, top_p=request.top_p,
                                           top_k=request.top_k, seed=request.seed),
        drafter_method=method if drafter_address else "none", drafter_address=drafter_address,
        budget=budget, epoch=epoch, stream_interval_ms=stream_interval_ms,
    )
    return verifier_pb2.SessionRequest(start=start)


def budget_update(budget: int) -> verifier_pb2.SessionRequest:
    return verifier_pb2.SessionRequest(budget=verifier_pb2.BudgetUpdate(budget=budget))


def step_reports(event: verifier_pb2.StepEvent) -> list[StepReport]:
    """One report per verification step of the event. The event gives the KV length after its
    last step; each step before it had 1 + accepted fewer (the root and the accepted nodes
    enter the KV cache, the bonus token with the next step)."""
    reports, kv_tokens = [], event.kv_length
    for s in reversed(event.steps):
        reports.append(StepReport(
            observation=Observation(s.budget, s.tree_size, s.accepted, tuple(s.path_probs)),
            kv_tokens=kv_tokens, forward_index=s.forward_index, batch_size=s.batch_size,
            batch=StepShape(s.batch_size, s.batch_tree_tokens, s.batch_kv_tokens, s.batch_speculating),
            cycle_s=s.cycle_ms / 1000,
        ))
        kv_tokens -= 1 + s.accepted
    return reports[::-1]


def stats(values: dict) -> orchestrator_pb2.RequestStats:
    return orchestrator_pb2.RequestStats(**values)


def response(request_id: str, chunk) -> orchestrator_pb2.GenerateResponse:
    message = orchestrator_pb2.GenerateResponse(request_id=request_id, token_ids=chunk.token_ids, text=chunk.text,
                                                finish_reason=chunk.finish_reason)
    if chunk.stats is not None:
        message.stats.CopyFrom(stats(chunk.stats))
    return message


def request_info(record: RequestRecord) -> orchestrator_pb2.RequestInfo:
    f = record.fields
    steps, accepted = int(f.get("steps", 0)), int(f.get("accepted", 0))
    created = int(f["created_ms"])
    end = int(f.get("finished_ms", 0)) or None
    first = int(f.get("first_token_ms", 0)) or None
    values = {
        "prompt_tokens": len(record.request.prompt_token_ids), "generated_tokens": len(record.token_ids),
        "steps": steps, "accepted_tokens": accepted,
        "mean_tokens_per_step": (accepted + steps) / steps if steps else 0.0,
        "ttft_ms": (first - created) if first else 0.0, "total_ms": (end - created) if end else 0.0,
        "seed": record.request.seed, "verifier": f.get("verifier", ""), "drafter": f.get("drafter_address", ""),
        "failovers": int(f.get("failovers", 0)),
    }
    return orchestrator_pb2.RequestInfo(request_id=record.request.request_id, status=record.status,
                                        token_ids=record.token_ids, finish_reason=record.finish_reason,
                                        stats=stats(values))
