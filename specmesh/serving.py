"""What every gRPC service shares: the health service, graceful shutdown on SIGTERM, and how
errors become gRPC status codes (raise ServiceError anywhere below a servicer)."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import random
import signal
import socket
import sys
from collections.abc import Awaitable, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc


PARENT_PID_ENV = "SPECMESH_PARENT_PID"  # set by LocalStack: the process whose death stops a service
PR_SET_PDEATHSIG = 1  # prctl(2)


def start_service_process() -> None:
    """What every service's main does first: log with time and logger name, and, where a
    LocalStack started it, exit with that stack's process."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    _exit_with_parent()


def _exit_with_parent() -> None:
    """Ask the kernel for SIGTERM when the process named by $SPECMESH_PARENT_PID dies (Linux
    only), and leave at once if it already has. Asked here, at start, not in a `preexec_fn`:
    forking a process whose gRPC threads are busy runs gRPC's fork handlers in the child, which
    aborted ~0.5% of children before exec ('epoll_wait error: Bad file descriptor', SIGABRT; a
    bench-load run lost its drafter so on its 19th restart). Without a preexec_fn, subprocess
    spawns with vfork, and no fork handler runs."""
    parent = os.environ.get(PARENT_PID_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(parent):
        os.kill(os.getpid(), signal.SIGTERM)


class ServiceError(Exception):
    """An error with the gRPC status code it maps to; the message names the field or cause."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code


def invalid(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.INVALID_ARGUMENT, message)


_LOWEST_PICKED_PORT = 10000
_picked_ports: set[int] = set()
_port_picker = random.Random()  # its own generator: a test seeding `random` must not make two processes pick alike


def free_port() -> int:
    """A port nothing holds, for a service about to start. Picked below the kernel's ephemeral
    range, where outgoing connections take their local ports: a port from that range can be some
    client's by the time a slow-starting service binds it (CI saw a drafter's data port lost so).
    Never the same port twice in one process."""
    low = _ephemeral_range_start()
    for _ in range(1000):
        port = _port_picker.randrange(_LOWEST_PICKED_PORT, low) if low > _LOWEST_PICKED_PORT + 1000 else _kernel_port()
        if port not in _picked_ports and not port_taken(port):
            _picked_ports.add(port)
            return port
    raise RuntimeError("no free port found")


def port_taken(port: int) -> bool:
    """Whether something holds `port` on any interface (a closed connection's TIME_WAIT does not count)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def _ephemeral_range_start() -> int:
    try:
        return int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0  # not Linux: let the kernel pick


def _kernel_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _StartsNotServing(health.aio.HealthServicer):
    """grpc's servicer reports SERVING from construction; ours only once we say so."""

    def __init__(self) -> None:
        super().__init__()
        self._server_status[""] = health_pb2.HealthCheckResponse.NOT_SERVING


class Health:
    """grpc.health.v1 for one server: NOT_SERVING until `serving()` is called."""

    def __init__(self, server: grpc.aio.Server):
        self.servicer = _StartsNotServing()
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)

    async def set(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        await self.servicer.set("", status)

    async def serving(self) -> None:
        await self.set(True)

    async def not_serving(self) -> None:
        await self.set(False)


async def wait_for_sigterm() -> None:
    """Returns on SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def serve_until_signal(server: grpc.aio.Server, health_state: Health, drain: Callable[[], Awaitable[None]], grace_s: float = 30.0) -> None:
    """Run until SIGTERM; then stop taking work (NOT_SERVING), drain, and stop the server."""
    await wait_for_sigterm()
    await health_state.not_serving()
    await drain()
    await server.stop(grace_s)


def check_health(address: str, timeout_s: float = 1.0) -> bool:
    """True when the service at `address` answers SERVING."""
    try:
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        return reply.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.RpcError:
        return False
