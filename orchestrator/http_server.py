"""The orchestrator's HTTP port: one aiohttp application on the orchestrator's event loop.

Glossary:
- route module: a module with `add_routes(app, ...)` that puts its endpoints on the application
  built here (openai_api.py: /v1/...; metrics.py: /metrics; dashboard/api.py: / and /api/...).
  Handlers reach the orchestrator as `request.config_dict[ORCHESTRATOR]`.
- health: GET /healthz is 200 while Redis is reachable, 503 otherwise (as gRPC health); no auth.
- client gone: a client that disconnects cancels its handler (aiohttp's handler_cancellation),
  so its request is cancelled exactly as a cancelled gRPC call is (lifecycle.py).
- stop: as gRPC's server.stop(grace): no new requests, running ones get the grace, then their
  handlers are cancelled (before the orchestrator closes its channels to the verifiers).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from orchestrator.app import Orchestrator

ORCHESTRATOR = web.AppKey("orchestrator", Orchestrator)
RUNNING = web.AppKey("running", set)  # the handler tasks of the requests in progress


def build_app(orchestrator: Orchestrator) -> web.Application:
    app = web.Application(middlewares=[_track])
    app[ORCHESTRATOR], app[RUNNING] = orchestrator, set()
    app.router.add_get("/healthz", _healthz)
    return app


async def serve(app: web.Application, port: int) -> web.AppRunner:
    """Starts serving `app` on 0.0.0.0:`port`; `stop(runner, grace_s)` stops it."""
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner


async def stop(runner: web.AppRunner, grace_s: float) -> None:
    """Takes no new requests, gives the running ones `grace_s`, then cancels them."""
    for site in list(runner.sites):
        await site.stop()
    running = runner.app[RUNNING]
    if running:
        await asyncio.wait(set(running), timeout=grace_s)
    for task in list(running):
        task.cancel()
    await runner.cleanup()


@web.middleware
async def _track(request: web.Request, handler) -> web.StreamResponse:
    running, task = request.config_dict[RUNNING], asyncio.current_task()
    running.add(task)
    try:
        return await handler(request)
    finally:
        running.discard(task)


async def _healthz(request: web.Request) -> web.Response:
    serving = request.app[ORCHESTRATOR].redis_ok
    return web.json_response({"status": "SERVING" if serving else "NOT_SERVING"}, status=200 if serving else 503)
