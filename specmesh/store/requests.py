"""Request records: the orchestrator's source of truth for every request, in Redis.

Glossary:
- record: a hash with the prompt (packed int32), sampling params, status, the verifier and
  drafter assignment, timestamps and counters; the generated tokens are a separate
  append-only list. Every key has a TTL, refreshed on every commit.
- event commit: the tokens of one step event of the verifier (the prefill's token, or one or
  more verification steps coalesced), appended atomically with its (epoch, event) index.
  Epoch = how many times the request was (re)started on a verifier; within an epoch the
  verifier numbers its events 0, 1, ...; a commit is taken only if it is the next event, so a
  retried or duplicated event is never appended twice.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import numpy as np
import redis
import redis.asyncio

from specmesh.store.keys import Keys

RECORD_TTL_S = 24 * 3600
MAX_DECISIONS = 1000

_COMMIT = """
local epoch, event = tonumber(ARGV[1]), tonumber(ARGV[2])
local last_epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '-1')
local last_event = tonumber(redis.call('HGET', KEYS[1], 'event') or '-1')
if epoch < last_epoch or (epoch == last_epoch and event ~= last_event + 1) or (epoch > last_epoch and event ~= 0) then
  return -1
end
for i = 6, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('HSET', KEYS[1], 'epoch', epoch, 'event', event)
redis.call('HINCRBY', KEYS[1], 'steps', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'accepted', ARGV[4])
if redis.call('HEXISTS', KEYS[1], 'first_token_ms') == 0 then redis.call('HSET', KEYS[1], 'first_token_ms', ARGV[5]) end
redis.call('PEXPIRE', KEYS[1], %d)
redis.call('PEXPIRE', KEYS[2], %d)
return redis.call('LLEN', KEYS[2])
""" % (RECORD_TTL_S * 1000, RECORD_TTL_S * 1000)


def pack(ids: list[int]) -> bytes:
    return np.asarray(ids, dtype="<i4").tobytes()


def unpack(data: bytes | None) -> list[int]:
    return np.frombuffer(data or b"", dtype="<i4").tolist()


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class NewRequest:
    request_id: str
    prompt_token_ids: list[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int
    stop: tuple[str, ...]
    drafter: str
    budget: int


@dataclass(frozen=True)
class RequestRecord:
    request: NewRequest
    status: str
    token_ids: list[int]
    epoch: int
    finish_reason: str
    fields: dict[str, str]  # everything else: assignment, timestamps, counters


class RequestStore:
    """`async_client` (same server) serves the per-event commits of a service's event loop: a
    commit there costs one socket round trip, where a thread hop to the blocking client cost the
    orchestrator ~0.4 ms of CPU per event on 2 cores (the worker, its wake-ups, the loop's
    self-pipe), taken out of the verifier's forward when the services share a machine."""

    def __init__(self, client: redis.Redis, keys: Keys, async_client: redis.asyncio.Redis | None = None):
        self.client, self.keys = client, keys
        self._commit = client.register_script(_COMMIT)
        self._commit_async = async_client.register_script(_COMMIT) if async_client is not None else None

    def create(self, request: NewRequest, trace_context: dict[str, str] | None = None) -> bool:
        """Writes a new record; False if one with this id exists already. `trace_context` (W3C
        headers of the request's span) is kept so a resumed request joins the same trace."""
        key = self.keys.request(request.request_id)
        fields = {
            "prompt": pack(request.prompt_token_ids), "max_new_tokens": request.max_new_tokens,
            "temperature": request.temperature, "top_p": request.top_p, "top_k": request.top_k,
            "seed": request.seed, "stop": json.dumps(list(request.stop)), "drafter": request.drafter,
            "budget": request.budget, "status": "running", "created_ms": now_ms(), "steps": 0, "accepted": 0,
        }
        if trace_context:
            parts = trace_context.get("traceparent", "").split("-")  # version-trace_id-span_id-flags
            fields |= {"trace_context": json.dumps(trace_context), "trace_id": parts[1] if len(parts) == 4 else ""}
        if not self.client.hsetnx(key, "request_id", request.request_id):
            return False
        with self.client.pipeline() as pipe:
            pipe.hset(key, mapping=fields)
            pipe.expire(key, RECORD_TTL_S)
            pipe.execute()
        return True

    def commit_event(self, request_id: str, epoch: int, event: int, tokens: list[int], steps: int, accepted: int) -> bool:
        """Append an event's tokens if (epoch, event) is the next event; False for a duplicate.
        `steps`, `accepted`: its verification steps and the draft tokens they accepted."""
        return self._commit(**self._commit_call(request_id, epoch, event, tokens, steps, accepted)) >= 0

    async def commit_event_async(self, request_id: str, epoch: int, event: int, tokens: list[int], steps: int,
                                 accepted: int) -> bool:
        """commit_event on the async client (the store must have one)."""
        return await self._commit_async(**self._commit_call(request_id, epoch, event, tokens, steps, accepted)) >= 0

    def _commit_call(self, request_id: str, epoch: int, event: int, tokens: list[int], steps: int, accepted: int) -> dict:
        return {"keys": [self.keys.request(request_id), self.keys.request_tokens(request_id)],
                "args": [epoch, event, steps, accepted, now_ms(), *tokens]}

    def record_decision(self, request_ids: list[str], decision_json: str) -> None:
        """Append a controller decision to each request's list (the newest MAX_DECISIONS kept)."""
        with self.client.pipeline(transaction=False) as pipe:
            for request_id in request_ids:
                key = self.keys.request_decisions(request_id)
                pipe.rpush(key, decision_json)
                pipe.ltrim(key, -MAX_DECISIONS, -1)
                pipe.expire(key, RECORD_TTL_S)
            pipe.execute()

    def decisions(self, request_id: str) -> list[str]:
        return [d.decode() for d in self.client.lrange(self.keys.request_decisions(request_id), 0, -1)]

    def update(self, request_id: str, **fields) -> None:
        self.client.hset(self.keys.request(request_id), mapping={k: str(v) for k, v in fields.items()})

    def finish(self, request_id: str, status: str, finish_reason: str) -> None:
        self.update(request_id, status=status, finish_reason=finish_reason, finished_ms=now_ms())

    def get(self, request_id: str) -> RequestRecord | None:
        with self.client.pipeline() as pipe:
            pipe.hgetall(self.keys.request(request_id))
            pipe.lrange(self.keys.request_tokens(request_id), 0, -1)
            raw, tokens = pipe.execute()
        if not raw:
            return None
        f = {k.decode(): v for k, v in raw.items()}
        text = {k: v.decode(errors="replace") for k, v in f.items() if k != "prompt"}
        request = NewRequest(
            text["request_id"], unpack(f["prompt"]), int(text["max_new_tokens"]), float(text["temperature"]),
            float(text["top_p"]), int(text["top_k"]), int(text["seed"]), tuple(json.loads(text["stop"])),
            text["drafter"], int(text["budget"]),
        )
        return RequestRecord(request, text["status"], [int(t) for t in tokens], int(text.get("epoch", -1)),
                             text.get("finish_reason", ""), text)
