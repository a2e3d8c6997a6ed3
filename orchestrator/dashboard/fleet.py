"""The fleet as the dashboard shows it: every live verifier and drafter, read from the Redis
registry the router reads (specmesh/store/registry.py), their heartbeat fields as numbers.

Glossary:
- verifier load: sessions holding a KV slot, sessions waiting for one, KV slots in use of all
  (`kv_slots` − `kv_free`), `load` = sessions / slots, `accepting` (0 while draining).
- drafter load: open Draft streams (`sessions`), the methods it serves, filled rows of its copy
  of the shared token-recycling table.
- age: seconds since the service's last heartbeat (it leaves the registry after 3 s without).
"""

from __future__ import annotations

import redis

from specmesh.store import registry
from specmesh.store.keys import Keys

NUMBERS = {
    "verifier": ("sessions", "waiting", "kv_slots", "kv_free", "load", "accepting", "max_context"),
    "drafter": ("sessions", "recycling_rows"),
}


def describe(service: registry.ServiceInfo, now: float) -> dict:
    numbers = {name: service.number(name) for name in NUMBERS[service.kind]}
    described = {"address": service.address, "model_id": service.fields.get("model_id", ""),
                 "age_s": now - service.number("heartbeat", now), **numbers}
    if service.kind == "verifier":
        described["kv_used"] = numbers["kv_slots"] - numbers["kv_free"]
    else:
        described["methods"] = [m for m in service.fields.get("methods", "").split(",") if m]
    return described


def fleet(client: redis.Redis, keys: Keys, now: float) -> dict:
    """{"verifiers": [...], "drafters": [...]}, each sorted by address."""
    return {f"{kind}s": [describe(s, now) for s in registry.live_services(client, keys, kind)] for kind in NUMBERS}
