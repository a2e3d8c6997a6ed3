"""Routing from the registry: a verifier of this model with the most free KV slots (then the
least load), and the drafter with the fewest sessions among those serving the method. A
service that just failed is avoided for a while."""

from __future__ import annotations

import time

import redis

from specmesh.store import registry
from specmesh.store.keys import Keys

AVOID_S = 10.0


class Router:
    def __init__(self, client: redis.Redis, keys: Keys, model_id: str):
        self.client, self.keys, self.model_id = client, keys, model_id
        self._avoid: dict[str, float] = {}

    def avoid(self, address: str) -> None:
        self._avoid[address] = time.monotonic() + AVOID_S

    def _avoided(self) -> list[str]:
        now = time.monotonic()
        return [address for address, until in self._avoid.items() if until > now]

    def verifier(self) -> str | None:
        candidates = registry.usable_services(self.client, self.keys, "verifier", self.model_id, self._avoided())
        best = max(candidates, key=lambda s: (s.number("kv_free"), -s.number("load")), default=None)
        return best.address if best else None

    def methods(self) -> list[str]:
        """The drafter methods the usable drafters serve."""
        drafters = registry.usable_services(self.client, self.keys, "drafter", self.model_id, self._avoided())
        return sorted({m for s in drafters for m in s.fields.get("methods", "").split(",") if m})

    def drafter(self, method: str) -> str | None:
        """The least busy drafter that serves `method` (EAGLE only where a head is loaded)."""
        return registry.least_busy_drafter(self.client, self.keys, self.model_id, method, self._avoided())
