"""The Redis key schema. Every key starts with a prefix (SPECMESH_REDIS_PREFIX, default
"specmesh") so that several deployments, or test runs, can share one Redis."""

from __future__ import annotations

import os
from dataclasses import dataclass


def default_prefix() -> str:
    return os.environ.get("SPECMESH_REDIS_PREFIX", "specmesh")


def redis_url() -> str:
    return os.environ.get("SPECMESH_REDIS_URL", "redis://127.0.0.1:6379/0")


def delete_prefix(client, prefix: str) -> None:
    """Delete every key under `prefix`: the private prefix of a benchmark's or a test's stack on
    a shared Redis (never a deployment's)."""
    for key in client.scan_iter(f"{prefix}:*", count=1000):
        client.delete(key)


@dataclass(frozen=True)
class Keys:
    prefix: str = ""

    def __post_init__(self) -> None:
        if not self.prefix:
            object.__setattr__(self, "prefix", default_prefix())

    def request(self, request_id: str) -> str:
        """Hash: the request record (prompt, params, status, assignment, timestamps, stats)."""
        return f"{self.prefix}:req:{request_id}"

    def request_tokens(self, request_id: str) -> str:
        """List: the generated token ids, append-only, written before they reach the client."""
        return f"{self.prefix}:req:{request_id}:tokens"

    def request_decisions(self, request_id: str) -> str:
        """List: the goodput controller's decisions that changed the request's budget (JSON)."""
        return f"{self.prefix}:req:{request_id}:decisions"

    def service(self, kind: str, address: str) -> str:
        """Hash with a TTL: one live service of `kind` ("verifier", "drafter", "orchestrator")."""
        return f"{self.prefix}:{kind}:{address}"

    def services(self, kind: str) -> str:
        """Set: addresses of every service of `kind` that ever registered (live ones have a hash)."""
        return f"{self.prefix}:{kind}s"

    def session(self, request_id: str) -> str:
        """Hash with a TTL: the KV-cache metadata of a request's session on its verifier."""
        return f"{self.prefix}:session:{request_id}"

    def trace(self, trace_id: str) -> str:
        """List with a TTL: the finished spans of one trace as JSON, from every service (span_store.py)."""
        return f"{self.prefix}:trace:{trace_id}"

    def recycling_table(self, model_id: str) -> str:
        """Hash: token id -> packed int32 successor row, the shared token-recycling table."""
        return f"{self.prefix}:recycling:{model_id}:v1"

    def recycling_log(self, model_id: str) -> str:
        """Stream: row updates in the order they were applied to the table."""
        return f"{self.prefix}:recycling:{model_id}:v1:log"
