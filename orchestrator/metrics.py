"""The orchestrator's metrics (specmesh/telemetry/metrics.py has the instruments), served at
GET /metrics on its HTTP port.

Glossary:
- step event: one or more verification steps committed for the first time (not the prefill
  token of a session, not a replayed duplicate). Its tokens, as the client gets them (cut at a
  stop string), count as goodput for the verifier that made them
  (`specmesh_goodput_tokens_total{verifier}`); each step's budget, as the goodput controller chose
  it or the request fixed it, goes into `specmesh_budget`.
- request end (settle): TTFT = first token − admission, for every request that got a token;
  end-to-end latency = settle − admission and TPOT = (settle − first token) / (tokens − 1), for
  every request that finished (TPOT: with 2 tokens or more).
- queue depth: requests admitted that have no verifier yet; active sessions: requests running.
Hooks are no-ops until `add_routes` set the sink up (tests drive the orchestrator without it).
"""

from __future__ import annotations

import time

from aiohttp import web

from specmesh.telemetry.metrics import Metrics

_sink: OrchestratorMetrics | None = None


class OrchestratorMetrics:
    def __init__(self, metrics: Metrics, orchestrator):
        self.metrics = metrics
        metrics.gauge("active_sessions", lambda: len(orchestrator.active))
        metrics.gauge("queue_depth", lambda: sum(1 for d in list(orchestrator.active.values()) if not d.verifier))

    def step(self, verifier: str, tokens: int, budgets: list[int]) -> None:
        self.metrics.goodput_tokens.add(tokens, verifier)
        for budget in budgets:
            self.metrics.budget.record(budget)

    def request_ended(self, driver, status: str) -> None:
        now, m = time.monotonic(), self.metrics
        first = driver.first_token_at
        if first is not None:
            m.ttft.record(first - driver.started)
        if status != "finished":
            return
        m.e2e_latency.record(now - driver.started)
        if first is not None and len(driver.tokens) > 1:
            m.tpot.record((now - first) / (len(driver.tokens) - 1))


def add_routes(app: web.Application, orchestrator) -> None:
    """Sets up the orchestrator's metrics and serves them at GET /metrics (no auth)."""
    global _sink
    _sink = OrchestratorMetrics(Metrics("orchestrator"), orchestrator)
    app.router.add_get("/metrics", _serve)


async def _serve(request: web.Request) -> web.Response:
    body, content_type = _sink.metrics.exposition(request.headers.get("Accept", ""))
    response = web.Response(body=body)
    response.headers["Content-Type"] = content_type  # has a version parameter: not aiohttp's content_type=
    return response


# ---- hooks (driver.py, app.py) -------------------------------------------------------------------


def step(verifier: str, tokens: int, budgets: list[int]) -> None:
    """A committed step event: its tokens and the budget of each of its steps."""
    if _sink is not None:
        _sink.step(verifier, tokens, budgets)


def request_ended(driver, status: str) -> None:
    if _sink is not None:
        _sink.request_ended(driver, status)
