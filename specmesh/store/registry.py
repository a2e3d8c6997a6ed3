"""Service registry: each service publishes a hash with a TTL and refreshes it (heartbeat);
a service that stops refreshing disappears from `live_services` within the TTL."""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from specmesh.store.keys import Keys

HEARTBEAT_TTL_S = 3.0


@dataclass(frozen=True)
class ServiceInfo:
    kind: str
    address: str
    fields: dict[str, str]

    def number(self, name: str, default: float = 0.0) -> float:
        try:
            return float(self.fields.get(name, default))
        except ValueError:
            return default


def publish(client: redis.Redis, keys: Keys, kind: str, address: str, fields: dict, ttl_s: float = HEARTBEAT_TTL_S) -> None:
    key = keys.service(kind, address)
    values = {k: str(v) for k, v in fields.items()} | {"address": address, "heartbeat": f"{time.time():.3f}"}
    with client.pipeline() as pipe:
        pipe.hset(key, mapping=values)
        pipe.pexpire(key, int(ttl_s * 1000))
        pipe.sadd(keys.services(kind), address)
        pipe.execute()


def withdraw(client: redis.Redis, keys: Keys, kind: str, address: str) -> None:
    with client.pipeline() as pipe:
        pipe.delete(keys.service(kind, address))
        pipe.srem(keys.services(kind), address)
        pipe.execute()


def live_services(client: redis.Redis, keys: Keys, kind: str) -> list[ServiceInfo]:
    addresses = sorted(a.decode() for a in client.smembers(keys.services(kind)))
    with client.pipeline() as pipe:
        for address in addresses:
            pipe.hgetall(keys.service(kind, address))
        records = pipe.execute()
    return [
        ServiceInfo(kind, address, {k.decode(): v.decode() for k, v in record.items()})
        for address, record in zip(addresses, records)
        if record
    ]


def service_field(client: redis.Redis, keys: Keys, kind: str, address: str, name: str) -> str:
    """One field of a live service's record; "" where it has none (or is not live)."""
    value = client.hget(keys.service(kind, address), name)
    return value.decode() if value else ""


def usable_services(client: redis.Redis, keys: Keys, kind: str, model_id: str, exclude=()) -> list[ServiceInfo]:
    """Live services of `kind` for this model that take new work, but those in `exclude`."""
    return [
        s for s in live_services(client, keys, kind)
        if s.fields.get("model_id") == model_id and s.address not in exclude and s.fields.get("accepting", "1") == "1"
    ]


def least_busy_drafter(client: redis.Redis, keys: Keys, model_id: str, method: str, exclude=()) -> str | None:
    """The usable drafter serving `method` with the fewest sessions, or None."""
    serving = [s for s in usable_services(client, keys, "drafter", model_id, exclude)
               if method in s.fields.get("methods", "").split(",")]
    best = min(serving, key=lambda s: s.number("sessions"), default=None)
    return best.address if best else None
