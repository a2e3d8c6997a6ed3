"""start_service_process: a service that a LocalStack started exits with the stack's process,
however that process dies, and one started any other way does not care who its parent is."""

import os
import signal
import subprocess
import sys
import time

import pytest
from service_stack import wait_until

from specmesh.serving import PARENT_PID_ENV

SERVICE = "from specmesh.serving import start_service_process; start_service_process(); import time; time.sleep(60)"
# A stack's process: starts a service as LocalStack does (its pid in the environment), says the
# service's pid, and waits to be killed.
STACK = f"""
import os, subprocess, sys, time
service = subprocess.Popen([sys.executable, "-c", {SERVICE!r}], env={{**os.environ, {PARENT_PID_ENV!r}: str(os.getpid())}})
print(service.pid, flush=True)
time.sleep(60)
"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux only")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_service_exits_when_the_stack_process_is_killed():
    stack = subprocess.Popen([sys.executable, "-c", STACK], stdout=subprocess.PIPE, text=True)
    service_pid = int(stack.stdout.readline())
    time.sleep(3)  # the service is past start_service_process (imports take ~1 s)
    assert _running(service_pid)
    stack.send_signal(signal.SIGKILL)
    stack.wait()
    wait_until(lambda: not _running(service_pid), 10, "the service to exit with the process that started it")


def test_a_service_whose_stack_died_before_it_started_exits_at_once():
    env = {**os.environ, PARENT_PID_ENV: str(os.getpid() + 1_000_000)}  # not its parent: that one is gone
    service = subprocess.run([sys.executable, "-c", SERVICE], env=env, timeout=30)
    assert service.returncode == -signal.SIGTERM


def test_a_service_started_by_hand_keeps_running():
    env = {key: value for key, value in os.environ.items() if key != PARENT_PID_ENV}
    service = subprocess.Popen([sys.executable, "-c", SERVICE], env=env)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            service.wait(timeout=3)
    finally:
        service.kill()
        service.wait()
