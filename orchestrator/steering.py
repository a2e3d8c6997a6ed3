"""Steering: the goodput controller (controller.py) wired to the running requests. It seeds a
verifier's cost model from the profile the verifier published in the registry, feeds the
controller every step event, pushes changed budgets down the requests' verifier sessions (the
verifier hands them to the drafter with the next feedback) and records each decision in the
Redis records of the requests it changed."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import redis

from orchestrator import convert
from orchestrator.controller import BudgetController
from specmesh.goodput import decode_profile
from specmesh.store import registry
from specmesh.store.keys import Keys
from specmesh.store.requests import RequestStore
from specmesh.v1 import verifier_pb2

log = logging.getLogger("specmesh.orchestrator")


class Steered(Protocol):
    def set_budget(self, budget: int) -> None: ...


class Steering:
    def __init__(self, client: redis.Redis, keys: Keys, store: RequestStore, controller: BudgetController | None = None):
        self.client, self.keys, self.store = client, keys, store
        self.controller = controller or BudgetController()
        self.steered: dict[str, Steered] = {}
        self.pushed: dict[str, int] = {}

    async def start(self, request_id: str, steered: Steered, verifier: str, method: str, budget: int, kv_tokens: int) -> int:
        """A request's session opens on `verifier`; returns the budget it starts with."""
        if not self.controller.knows_verifier(verifier):
            self.controller.add_verifier(verifier, await asyncio.to_thread(self._profile, verifier))
        self.steered[request_id] = steered
        self.pushed[request_id] = self.controller.join(request_id, verifier, method, budget, kv_tokens)
        return self.pushed[request_id]

    async def step(self, request_id: str, event: verifier_pb2.StepEvent) -> None:
        """Feed the controller a step event's steps, in order."""
        for report in convert.step_reports(event):
            decision = self.controller.observe(request_id, report)
            if decision is not None:
                await self._apply(decision)

    async def _apply(self, decision) -> None:
        """Push the budgets a decision changed; record it with each request it changed."""
        changed = [r for r, b in zip(decision.request_ids, decision.budgets) if self.pushed.get(r, b) != b]
        for request_id, budget in zip(decision.request_ids, decision.budgets):
            if request_id in changed:
                self.pushed[request_id] = budget
                self.steered[request_id].set_budget(budget)
        try:
            await asyncio.to_thread(self.store.record_decision, changed, decision.to_json())
        except redis.RedisError as error:
            log.warning("could not record a controller decision: %s", error)

    def stop(self, request_id: str):
        """The session ended (finished, cancelled or lost); returns the request's tracking."""
        self.steered.pop(request_id, None)
        self.pushed.pop(request_id, None)
        tracked = self.controller.requests.get(request_id)
        self.controller.leave(request_id)
        return tracked

    def _profile(self, verifier: str) -> tuple[list, list]:
        try:
            found = [s for s in registry.live_services(self.client, self.keys, "verifier") if s.address == verifier]
        except redis.RedisError:
            found = []
        return decode_profile(found[0].fields.get("step_profile", "")) if found else ([], [])
