"""The service tests' local stack: started on free ports under its own Redis key prefix (Redis is
shared), its keys deleted after, and checks on it while it runs."""

from __future__ import annotations

import time
import uuid

from specmesh.stack import LocalStack, StackConfig
from specmesh.store import registry
from specmesh.store.keys import Keys


def start_stack(tmp_path_factory, redis_client, **overrides) -> LocalStack:
    """A stack on free ports; its requests speculate at a fixed budget of 8 unless `budget` is given
    (-1: the goodput controller), so that tests of the data plane see trees every step."""
    prefix = f"test-{uuid.uuid4().hex[:10]}"
    settings = {"budget": 8, **overrides}
    config = StackConfig(port=0, http_port=0, verifier_port=0, drafter_port=0, redis_prefix=prefix,
                         log_dir=str(tmp_path_factory.mktemp("stack-logs")), **settings)
    return LocalStack(config).start()


def services(redis_client, stack, kind: str) -> list[registry.ServiceInfo]:
    return registry.live_services(redis_client, Keys(stack.config.redis_prefix), kind)


def wait_until(condition, timeout_s: float = 10.0, what: str = "", seen=None) -> None:
    """Polls `condition` until it holds; past the timeout an AssertionError names `what` and, if
    `seen` is given, what `seen()` returns then (the state the condition was waiting on)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f" (now: {seen()})" if seen else ""))
        time.sleep(0.2)


def no_sessions_left(redis_client, stack) -> bool:
    live = services(redis_client, stack, "verifier") + services(redis_client, stack, "drafter")
    return all(s.number("sessions") == 0 for s in live)
