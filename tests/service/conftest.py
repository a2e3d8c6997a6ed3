"""Service tests: real processes, real gRPC on loopback, the real Redis at $SPECMESH_REDIS_URL
(shared, so every test run uses its own key prefix and deletes only its own keys)."""

from __future__ import annotations

import uuid

import pytest
import redis
from service_stack import start_stack

from specmesh.store.keys import Keys, delete_prefix, redis_url


@pytest.fixture(scope="session")
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(redis_url())


@pytest.fixture
def keys(redis_client):
    keys = Keys(f"test-{uuid.uuid4().hex[:10]}")
    yield keys
    delete_prefix(redis_client, keys.prefix)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, redis_client, default_model_dir):
    """2 verifiers (fp32, the real SmolLM2), 2 drafters, an orchestrator."""
    stack = start_stack(tmp_path_factory, redis_client, verifiers=2, drafters=2, dtype="float32", model="default")
    yield stack
    stack.stop()
    stack.forget()
