"""Routing from the registry: a verifier of this model with the most free KV slots (then the
least load), and the drafter with the fewest sessions among those serving the method. A verifier that just failed is avoided
for a while."""

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

    def _usable(self, kind: str) -> list[registry.ServiceInfo]:
        now = time.monotonic()
        return [
            s for s in registry.live_services(self.client, self.keys, kind)
            if s.fields.get("model_id") == self.model_id and self._avoid.get(s.address, 0) < now
            and s.fields.get("accepting", "1") == "1"
        ]

    def verifier(self) -> str | None:
        candidates = self._usable("verifier")
        best = max(candidates, key=lambda s: (s.number("kv_free"), -s.number("load")), default=None)
        return best.address if best else None

    def drafter(self, method: str) -> str | None:
        """The least busy drafter that serves `method` (EAGLE only where a head is loaded)."""
        now = time.monotonic()
        avoided = [address for address, until in self._avoid.items() if until > now]
        return registry.least_busy_drafter(self.client, self.keys, self.model_id, method, exclude=avoided)
