"""What happens when parts fail: Redis, the orchestrator, a draining verifier, admission.
A tiny random model keeps these fast; the in-process engine is the greedy oracle."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest
import redis

from specmesh import Engine
from specmesh.client import Client, SpecmeshError
from specmesh.serving import check_health, free_port
from specmesh.stack import LocalStack, StackConfig
from specmesh.store import registry
from specmesh.store.keys import Keys
from service_stack import wait_until

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


@pytest.fixture(scope="module")
def oracle(tiny_model_dir):
    return Engine.from_pretrained(str(tiny_model_dir), drafter="none", dtype="float32", max_context=256)


def tiny_config(tiny_model_dir, tmp_path, **overrides) -> StackConfig:
    config = dict(model=str(tiny_model_dir), dtype="float32", port=0, http_port=0, verifier_port=0, drafter_port=0,
                  redis_prefix=f"test-{time.time_ns()}", max_context=256, log_dir=str(tmp_path))
    return StackConfig(**(config | overrides))


@contextmanager
def tiny_stack(tiny_model_dir, tmp_path, **overrides) -> Iterator[LocalStack]:
    """A running stack of the tiny model on the shared Redis; its keys are deleted after."""
    stack = LocalStack(tiny_config(tiny_model_dir, tmp_path, **overrides))
    try:
        with stack:
            yield stack
    finally:
        stack.forget()


def private_redis(port: int) -> subprocess.Popen:
    process = subprocess.Popen([shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1",
                                "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(100):
        try:
            redis.Redis.from_url(url).ping()
            return process
        except redis.RedisError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not start")


def test_without_redis_health_is_not_serving_and_requests_fail_fast(tiny_model_dir, tmp_path, oracle):
    port = free_port()
    server = private_redis(port)
    stack = LocalStack(tiny_config(tiny_model_dir, tmp_path, redis_url=f"redis://127.0.0.1:{port}/0", drafters=0)).start()
    try:
        with Client(stack.address, timeout=30) as client:
            assert client.generate(token_ids=PROMPT, max_new_tokens=8).token_ids == oracle.generate(PROMPT, max_new_tokens=8).token_ids
            server.kill()
            server.wait()
            deadline = time.monotonic() + 5
            while check_health(stack.address) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not check_health(stack.address)
            started = time.monotonic()
            with pytest.raises(SpecmeshError) as error:
                client.generate(token_ids=PROMPT, max_new_tokens=8)
            assert error.value.code == grpc.StatusCode.UNAVAILABLE and time.monotonic() - started < 2.0
            server = private_redis(port)  # Redis is back: so is the service, once the verifier's
            stack.wait_healthy(stack.by_name("orchestrator"), timeout_s=10)  # next heartbeat registers it
            fresh = redis.Redis.from_url(f"redis://127.0.0.1:{port}/0")
            wait_until(lambda: registry.live_services(fresh, Keys(stack.config.redis_prefix), "verifier"), 10, "re-registration")
            assert client.generate(token_ids=PROMPT, max_new_tokens=8).finish_reason == "length"
    finally:
        stack.stop()
        server.kill()


def test_admission_limit_gives_resource_exhausted(tiny_model_dir, tmp_path):
    with tiny_stack(tiny_model_dir, tmp_path, max_active=1, drafters=0) as stack, Client(stack.address, timeout=60) as client:
        running = client.generate_stream(token_ids=PROMPT, max_new_tokens=200)
        next(running)
        with pytest.raises(SpecmeshError) as error:
            client.generate(token_ids=PROMPT, max_new_tokens=4)
        assert error.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        running.close()
        time.sleep(0.5)
        assert client.generate(token_ids=PROMPT, max_new_tokens=4).finish_reason == "length"


def test_orchestrator_restart_resumes_the_request_by_id(tiny_model_dir, tmp_path, oracle):
    expected = oracle.generate(PROMPT, max_new_tokens=150).token_ids
    with tiny_stack(tiny_model_dir, tmp_path) as stack:
        with Client(stack.address, timeout=60) as client:
            stream = client.generate_stream(token_ids=PROMPT, max_new_tokens=150, request_id="resume-me")
            seen = next(stream).token_ids
            (orchestrator,) = stack.by_name("orchestrator")
            orchestrator.kill()
            with pytest.raises(SpecmeshError):
                for chunk in stream:
                    seen += chunk.token_ids
        stack.restart(orchestrator)
        with Client(stack.address, timeout=60) as client:
            resumed = client.generate(token_ids=PROMPT, max_new_tokens=150, request_id="resume-me")
            assert resumed.token_ids == expected
            assert resumed.token_ids[: len(seen)] == seen
            assert client.get_request("resume-me").status == "finished"


def test_a_draining_verifier_finishes_its_sessions_and_takes_no_new_ones(tiny_model_dir, tmp_path, oracle):
    expected = oracle.generate(PROMPT, max_new_tokens=120).token_ids
    with tiny_stack(tiny_model_dir, tmp_path, verifiers=2) as stack, Client(stack.address, timeout=60) as client:
        stream = client.generate_stream(token_ids=PROMPT, max_new_tokens=120, drafter="recycling")
        first = next(stream)
        serving = next(s for s in stack.by_name("verifier")
                       if s.address == redis.Redis.from_url(stack.redis_url).hget(
                           f"{stack.config.redis_prefix}:req:{first.request_id}", "verifier").decode())
        serving.process.send_signal(signal.SIGTERM)
        tokens = first.token_ids + [t for chunk in stream for t in chunk.token_ids]
        assert tokens == expected
        other = client.generate(token_ids=PROMPT, max_new_tokens=20)
        assert other.token_ids == expected[:20] and other.stats.verifier != serving.address
        serving.process.wait(timeout=30)
