"""A local stack as processes: Redis (reused, or a private redis-server), an orchestrator, N
verifiers and M drafters. `specmesh up` runs one until Ctrl-C; the service tests use it too.

Each service runs as `python -m <package>`, so a test can kill -9 one and watch the rest
recover. `start()` returns once every service answers SERVING on grpc.health.v1. On Linux every
service gets SIGTERM when the process that started it dies, however it dies (kill -9 included),
so a stack never outlives its owner.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from specmesh import huge_pages
from specmesh.model.kernels import library
from specmesh.serving import PARENT_PID_ENV, check_health, free_port, port_taken
from specmesh.store.keys import delete_prefix, redis_url


# All services share this machine's cores: OpenMP threads that spin long after a parallel region
# (libgomp's default) hold a core the drafter and orchestrator need between the verifier's
# forwards, and threads that sleep at once must be woken for each of a forward's ~300 parallel
# regions. Measured through the stack on a 2-core Zen 4, interleaved runs, tokens/s against a
# spin of 20000: 5000 +5% (hybrid@4), +6-16% (no drafter), +3-13% (8 requests at once), -1-4%
# (recycling@8); 0 -7%, 100000 -8%, 300000 -14% (hybrid@4). Set in the environment to override.
CO_LOCATED_ENV = {"GOMP_SPINCOUNT": "5000"}

# The orchestrator is off a step's critical path (the verifier asks its drafter itself), but its
# work per step event (~1.2 ms of CPU: the Redis commit, the goodput controller, the client's
# chunk) arrives while the next forward runs, and at the default priority it preempts a forward
# thread, which stalls the other at the next barrier. At niceness 19 it waits for the gaps instead
# and catches up at once. Measured on a 2-core Zen 5 (12 MT-Bench + HumanEval prompts x 2,
# interleaved with a stack at niceness 0): `none` +7.7% / +5.2% tokens/s (either stack first),
# hybrid@8 +0.6%, adaptive budgets within noise (-0.6%); 8 requests at once `none` +15% tokens/s
# and TTFT 0.45 s against 0.50, hybrid@4 +2% (TTFT 0.52 against 0.56). At niceness 10: +1.3% `none`.
CO_LOCATED_ORCHESTRATOR_NICENESS = 19


@dataclass(frozen=True)
class StackConfig:
    verifiers: int = 1
    drafters: int = 1
    drafter: str = "recycling"  # default drafter method for requests
    budget: int = -1  # default draft nodes per step; -1 = adaptive (the goodput controller)
    model: str = "default"
    dtype: str = "auto"
    port: int = 50051  # orchestrator; 0 = any free port (as for the three below)
    http_port: int = 8080  # orchestrator HTTP: the OpenAI-compatible API, health
    verifier_port: int = 50061  # first verifier; the next ones count up
    drafter_port: int = 50071
    # /metrics (Prometheus) of the first verifier / drafter, the next ones count up (the orchestrator
    # serves it on http_port). None = 8061 / 8071 when the gRPC ports are fixed, free ports when
    # they are free (0); 0 = free ports.
    verifier_metrics_port: int | None = None
    drafter_metrics_port: int | None = None
    redis_url: str = ""  # "" = $SPECMESH_REDIS_URL if reachable, else a private redis-server
    redis_prefix: str = "specmesh"
    threads: int = 0  # torch threads per verifier; 0 = the cores shared among verifiers
    drafter_threads: int = 0  # torch threads per drafter; 0 = co_located_drafter_threads()
    slots: int = 8
    max_context: int = 2048
    max_active: int = 64  # requests the orchestrator runs at once
    stream_interval_ms: int = 0  # coalescing of step events (orchestrator --stream-interval-ms); 0 = none
    orchestrator_niceness: int = CO_LOCATED_ORCHESTRATOR_NICENESS  # orchestrator --niceness
    drafter_transport: str = "auto"  # verifier --drafter-transport: "auto" (drafters' data planes) or "grpc"
    log_dir: str = ""  # where each service's log goes ("" = a temporary directory)
    api_key: str = ""  # bearer token for the HTTP API ("" = $SPECMESH_API_KEY, if set, else none)
    env: dict[str, str] = field(default_factory=dict)  # extra environment for every service (e.g. OTEL_*)

    def __post_init__(self) -> None:
        if self.verifiers < 1 or self.drafters < 0:
            raise ValueError("need at least 1 verifier and 0 or more drafters")
        if self.drafter_transport not in ("auto", "grpc"):
            raise ValueError(f"drafter_transport must be 'auto' or 'grpc', got {self.drafter_transport!r}")


@dataclass
class Service:
    name: str
    address: str
    command: list[str]
    log_path: Path
    process: subprocess.Popen | None = None
    metrics_url: str = ""  # its Prometheus endpoint, http://127.0.0.1:PORT/metrics
    ports: dict[str, int] = field(default_factory=dict)  # what it listens on, by role ("gRPC": 50061, ...)

    def start(self, env: dict) -> None:
        self.process = subprocess.Popen(self.command, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT, env=env)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive():
            self.process.send_signal(sig)
            self.process.wait()


@dataclass
class LocalStack:
    config: StackConfig
    services: list[Service] = field(default_factory=list)
    redis_server: subprocess.Popen | None = None
    redis_url: str = ""
    log_dir: Path = Path()
    http_port: int = 0

    @property
    def address(self) -> str:
        return self.services[0].address

    @property
    def http_url(self) -> str:
        """The orchestrator's HTTP API, e.g. http://127.0.0.1:8080 (OpenAI base URL: + "/v1")."""
        return f"http://127.0.0.1:{self.http_port}"

    def by_name(self, prefix: str) -> list[Service]:
        return [s for s in self.services if s.name.startswith(prefix)]

    def start(self, timeout_s: float = 300.0) -> "LocalStack":
        """Starts everything and waits until every service is healthy; a stack that does not come
        up stops what it started (ValueError: a port it was given is taken; RuntimeError: a
        service exited, with its log's tail; TimeoutError)."""
        self.log_dir = Path(self.config.log_dir or tempfile.mkdtemp(prefix="specmesh-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.redis_url = self._redis()
            self.http_port = self.config.http_port or free_port()
            self.services = self._plan()
            _refuse_taken_ports(self.services)
            for service in self.services:
                service.start(self._env())
            self.wait_healthy(self.services, timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def add(self, kind: str, timeout_s: float = 300.0) -> Service:
        """Start one more verifier or drafter on a free port."""
        service = self._service(kind, len(self.by_name(kind)), free_port(), free_port())
        service.start(self._env())
        self.services.append(service)
        self.wait_healthy([service], timeout_s)
        return service

    def restart(self, service: Service, timeout_s: float = 300.0) -> None:
        """Start a stopped (or killed) service again, same port, same options."""
        service.kill()
        service.start(self._env())
        self.wait_healthy([service], timeout_s)

    def _env(self) -> dict:
        api_key = {"SPECMESH_API_KEY": self.config.api_key} if self.config.api_key else {}
        return huge_pages.environment({**CO_LOCATED_ENV, **os.environ, "SPECMESH_REDIS_URL": self.redis_url,
                "SPECMESH_REDIS_PREFIX": self.config.redis_prefix, PARENT_PID_ENV: str(os.getpid()), **api_key, **self.config.env})

    def wait_healthy(self, services: list[Service], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for service in services:
            while not check_health(service.address):
                if not service.alive():
                    raise RuntimeError(f"{service.name} exited; see {service.log_path}:\n{service.log_path.read_text()[-2000:]}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{service.name} not healthy after {timeout_s:.0f} s; see {service.log_path}")
                time.sleep(0.2)

    def stop(self) -> None:
        for service in self.services:
            if service.alive():
                service.process.send_signal(signal.SIGTERM)
        for service in self.services:
            if service.process is not None:
                try:
                    service.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    service.kill()
        if self.redis_server is not None:
            self.redis_server.terminate()
            self.redis_server.wait()

    def forget(self) -> None:
        """After `stop`: delete every key under the stack's prefix, for a benchmark's or a test's
        stack on a shared Redis (a private redis-server took its keys with it)."""
        if self.redis_url and self.redis_server is None:
            delete_prefix(redis.Redis.from_url(self.redis_url), self.config.redis_prefix)

    def __enter__(self) -> "LocalStack":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _redis(self) -> str:
        url = self.config.redis_url or redis_url()
        try:
            redis.Redis.from_url(url, socket_connect_timeout=1.0).ping()
            return url
        except redis.RedisError as error:
            if self.config.redis_url:
                raise RuntimeError(f"Redis at {url} (--redis-url) does not answer: {error}") from None
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(f"Redis at {url} is unreachable and there is no redis-server on PATH")
        port = free_port()
        self.redis_server = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=open(self.log_dir / "redis.log", "ab"), stderr=subprocess.STDOUT,
        )
        url = f"redis://127.0.0.1:{port}/0"
        for _ in range(100):
            try:
                redis.Redis.from_url(url).ping()
                return url
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError("the private redis-server did not start")

    def _plan(self) -> list[Service]:
        c = self.config
        services = [self._service("orchestrator", 0, c.port or free_port(), self.http_port)]
        verifier_metrics = _metrics_base(c.verifier_metrics_port, c.verifier_port, 8061)
        drafter_metrics = _metrics_base(c.drafter_metrics_port, c.drafter_port, 8071)
        services += [self._service("verifier", i, c.verifier_port + i if c.verifier_port else free_port(),
                                   verifier_metrics + i if verifier_metrics else free_port()) for i in range(c.verifiers)]
        services += [self._service("drafter", i, c.drafter_port + i if c.drafter_port else free_port(),
                                   drafter_metrics + i if drafter_metrics else free_port()) for i in range(c.drafters)]
        return services

    def _service(self, kind: str, index: int, port: int, metrics_port: int) -> Service:
        c = self.config
        common = ["--port", str(port), "--model", c.model, "--redis-url", self.redis_url, "--redis-prefix", c.redis_prefix]
        extra = {
            "orchestrator": ["--drafter", c.drafter, "--budget", "adaptive" if c.budget < 0 else str(c.budget), "--max-context", str(c.max_context),
                             "--max-active", str(c.max_active), "--http-port", str(self.http_port),
                             "--stream-interval-ms", str(c.stream_interval_ms), "--niceness", str(c.orchestrator_niceness)],
            "verifier": ["--dtype", c.dtype, "--threads", str(c.threads or max(1, (os.cpu_count() or 1) // c.verifiers)),
                         "--slots", str(c.slots), "--max-context", str(c.max_context), "--metrics-port", str(metrics_port),
                         "--drafter-transport", c.drafter_transport],
            "drafter": ["--dtype", c.dtype, "--threads", str(c.drafter_threads or co_located_drafter_threads()),
                        "--metrics-port", str(metrics_port), "--data-port", str(free_port())],  # kept across restarts
        }[kind]
        package = {"orchestrator": "orchestrator", "verifier": "verifier_service", "drafter": "drafter_service"}[kind]
        name = kind if kind == "orchestrator" else f"{kind}-{index}"
        command = [sys.executable, "-m", package, *common, *extra]
        return Service(name, f"127.0.0.1:{port}", command, self.log_dir / f"{name}.log",
                       metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
                       ports={"gRPC": port, "HTTP" if kind == "orchestrator" else "metrics": metrics_port})


def _refuse_taken_ports(services: list[Service]) -> None:
    """ValueError naming the first port of the plan that something else listens on, before any
    service starts (each would otherwise exit with a bind error deep in its log)."""
    for service in services:
        for what, port in service.ports.items():
            if port_taken(port):
                raise ValueError(f"port {port} ({service.name}'s {what} port) is in use: stop what holds it, or choose "
                                 f"other ports (specmesh up --port, --http-port, --verifier-port, --drafter-port; 0 = free ports)")


def co_located_drafter_threads() -> int:
    """Torch threads for a drafter on the verifier's cores: one, whose GEMMs take a free core when
    there is one through kernels/helper.c's helper thread (README "CPU kernels"); every core where
    the C kernels do not run (no helper). An OpenMP team of two waits at every parallel region's
    end for a thread the orchestrator or the verifier took. On a 2-core Xeon with AMX (CPU model
    167), `fixed:4` on the load benchmark's ShareGPT requests through the stack, one at a time and
    alternating with `none`: 0.63x `none`'s time a token with one drafter thread against 0.67x
    with two. On a 2-core Zen 4 (AVX-512 BF16), hybrid through the stack, the two alternating
    request by request: one thread with the helper took 0.92-0.97x the latency of two threads at
    budgets 4, 8 and 15. On a 2-core Zen 3 (AVX2, bf16 emulated), two stacks interleaved prompt by
    prompt with the in-process engine (4 MT-Bench + 4 HumanEval prompts, 3 rounds): the drafter's
    round trip 10.9 -> 9.1 ms (`eagle@4`) and 11.4 -> 9.4 ms (`hybrid@8`), tokens/s 1.054x and
    1.043x (+-0.02)."""
    return 1 if library() is not None else os.cpu_count() or 1


def _metrics_base(configured: int | None, grpc_port: int, default: int) -> int:
    """The first metrics port of a kind of service; 0 = free ports (see StackConfig)."""
    if configured is None:
        return default if grpc_port else 0
    return configured
