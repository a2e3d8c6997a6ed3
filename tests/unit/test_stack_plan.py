"""`specmesh up`'s plan: which processes it starts, with which options (nothing is started here)."""

import os
import socket

import pytest

from specmesh.model.kernels import library
from specmesh.serving import free_port
from specmesh.stack import LocalStack, StackConfig, co_located_drafter_threads


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "auto"])
def test_the_drafter_computes_in_the_stack_dtype_like_the_verifier(dtype):
    """An EAGLE head in another dtype than the verifier's would be slower for nothing (fp32 on a CPU
    without native bf16) or draft from rounded features."""
    stack = LocalStack(StackConfig(dtype=dtype, verifiers=2, drafters=2, port=0, verifier_port=0, drafter_port=0))
    plan = {service.name: service.command for service in stack._plan()}
    assert sorted(plan) == ["drafter-0", "drafter-1", "orchestrator", "verifier-0", "verifier-1"]
    for name in ("verifier-0", "verifier-1", "drafter-0", "drafter-1"):
        assert option(plan[name], "--dtype") == dtype


def test_drafters_get_their_own_thread_count():
    """A drafter shares the verifier's cores: one thread where its matmuls have the GEMM helper
    for a free core (wherever the C kernels run; co_located_drafter_threads says why), every core
    elsewhere, unless told otherwise."""
    def drafter_threads(**config) -> str:
        stack = LocalStack(StackConfig(port=0, verifier_port=0, drafter_port=0, threads=2, **config))
        return option({s.name: s.command for s in stack._plan()}["drafter-0"], "--threads")

    assert drafter_threads(drafter_threads=3) == "3"
    expected = 1 if library() is not None else os.cpu_count()
    assert drafter_threads() == str(expected) == str(co_located_drafter_threads())


@pytest.mark.parametrize("transport", ["auto", "grpc"])
def test_drafters_get_a_data_port_of_their_own_and_verifiers_the_transport(transport):
    """Each drafter's data plane listens on a port chosen once, in its command, so a restarted
    drafter keeps the data address verifiers have cached; verifiers get the transport to use."""
    stack = LocalStack(StackConfig(verifiers=2, drafters=2, port=0, verifier_port=0, drafter_port=0,
                                   drafter_transport=transport))
    plan = {service.name: service.command for service in stack._plan()}
    ports = {int(option(plan[name], "--data-port")) for name in ("drafter-0", "drafter-1")}
    assert len(ports) == 2 and all(port > 0 for port in ports)
    assert all(option(plan[name], "--drafter-transport") == transport for name in ("verifier-0", "verifier-1"))
    with pytest.raises(ValueError, match="drafter_transport"):
        StackConfig(drafter_transport="udp")


@pytest.mark.parametrize("taken, named", [("http_port", "orchestrator's HTTP port"), ("verifier_port", "verifier-0's gRPC port")])
def test_a_taken_port_is_refused_by_name_before_any_service_starts(taken, named):
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        stack = LocalStack(StackConfig(**{"port": 0, "http_port": 0, "verifier_port": 0, "drafter_port": 0, taken: port}))
        with pytest.raises(ValueError, match=rf"port {port} \({named}\) is in use"):
            stack.start()
    assert stack.services and all(service.process is None for service in stack.services)


def test_a_redis_url_that_does_not_answer_is_an_error_naming_it():
    url = f"redis://127.0.0.1:{free_port()}/0"  # a port nothing listens on
    with pytest.raises(RuntimeError, match=rf"Redis at {url} \(--redis-url\) does not answer"):
        LocalStack(StackConfig(redis_url=url, port=0, http_port=0, verifier_port=0, drafter_port=0)).start()
