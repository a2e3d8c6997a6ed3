"""`specmesh up` as a user runs it: it reports the stack up, and however it is stopped (SIGTERM
as `kill` sends, or kill -9 of `up` itself) none of the services it started outlives it."""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from specmesh.store.keys import delete_prefix


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as listing:
        return [int(child) for child in listing.read().split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.fixture
def up(tiny_model_dir, redis_client, tmp_path):
    """A running `specmesh up` on free ports; yields (process, the pids of its services)."""
    prefix = f"test-{uuid.uuid4().hex[:10]}"
    command = [sys.executable, "-m", "specmesh.cli", "up", "--model", str(tiny_model_dir), "--threads", "1",
               "--port", "0", "--http-port", "0", "--verifier-port", "0", "--drafter-port", "0",
               "--redis-prefix", prefix, "--log-dir", str(tmp_path)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("Ctrl-C stops everything"):
            break
    assert any(line.startswith("specmesh is up") and "dashboard http://" in line for line in lines), "".join(lines)
    services = _children(process.pid)
    assert len(services) == 3  # orchestrator, verifier, drafter (Redis is the shared one)
    yield process, services
    for pid in services:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    process.kill()
    process.wait()
    delete_prefix(redis_client, prefix)


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(map(_alive, pids)):
        time.sleep(0.2)
    return [pid for pid in pids if _alive(pid)]


def test_sigterm_stops_every_service(up):
    process, services = up
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    assert _wait_gone(services, 5) == []


def test_services_do_not_outlive_a_killed_up(up):
    process, services = up
    process.kill()
    process.wait()
    assert _wait_gone(services, 60) == []


def _niceness_of_threads(pid: int) -> set[int]:
    values = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as stat:
            values.add(int(stat.read().split(")")[-1].split()[16]))  # field 19, nice
    return values


def test_the_orchestrator_yields_the_cores_to_verifier_and_drafter(up):
    _, services = up
    ours = os.nice(0)
    by_role = {}
    for pid in services:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            by_role[cmdline.read().split(b"\0")[2].decode()] = pid  # python -m <package>
    assert _niceness_of_threads(by_role["orchestrator"]) == {min(19, ours + 19)}  # its gRPC and Redis threads too
    assert _niceness_of_threads(by_role["verifier_service"]) == {ours}
    assert _niceness_of_threads(by_role["drafter_service"]) == {ours}
