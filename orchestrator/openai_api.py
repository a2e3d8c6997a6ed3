"""The OpenAI-compatible API on the HTTP port: GET /v1/models, POST /v1/completions and
POST /v1/chat/completions (https://platform.openai.com/docs/api-reference).

Glossary:
- request path: the orchestrator's own, as the gRPC servicer's: body -> GenerateRequest
  (openai_request.py), Orchestrator.admit, then lifecycle.drive to the end; no gRPC loopback.
- stream: server-sent events, `data: {chunk}` per chunk and `data: [DONE]` at the end. The
  response starts with the request's first tokens, so a request that fails before any gets a
  plain HTTP error; a later failure is an `{"error": ...}` event.
- API key: when one is set, every /v1 request needs `Authorization: Bearer <key>` (401 otherwise).
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import AsyncIterator
from contextlib import aclosing

from aiohttp import web

from orchestrator.driver import Chunk
from orchestrator.http_server import ORCHESTRATOR
from orchestrator.lifecycle import drive
from orchestrator.openai_errors import ApiError, from_service_error
from orchestrator.openai_reply import Reply
from orchestrator.openai_request import OpenAIRequest, ServedModel, chat_request, completion_request
from specmesh.serving import ServiceError

MODEL = web.AppKey("model", ServedModel)
API_KEY = web.AppKey("api_key", str)
DONE = b"data: [DONE]\n\n"


def add_routes(app: web.Application, model: ServedModel, api_key: str = "") -> None:
    """Mounts the API at /v1 of `app` (http_server.build_app); `api_key` "" = no auth."""
    v1 = web.Application(middlewares=[_errors, _auth])
    v1[MODEL], v1[API_KEY] = model, api_key
    v1.router.add_get("/models", _models)
    v1.router.add_get("/models/{model}", _model)
    v1.router.add_post("/completions", _completions)
    v1.router.add_post("/chat/completions", _chat_completions)
    app.add_subapp("/v1", v1)


@web.middleware
async def _errors(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as error:
        return web.json_response(error.body(), status=error.status)
    except web.HTTPException as error:  # no such route, or method, under /v1
        return web.json_response(ApiError(error.status, error.reason).body(), status=error.status)


@web.middleware
async def _auth(request: web.Request, handler) -> web.StreamResponse:
    key = request.app[API_KEY]
    if key and not hmac.compare_digest(request.headers.get("Authorization", "").encode(), f"Bearer {key}".encode()):
        raise ApiError(401, "a valid API key is required: Authorization: Bearer <key>", code="invalid_api_key")
    return await handler(request)


def _model_object(model: ServedModel) -> dict:
    return {"id": model.id, "object": "model", "created": model.created, "owned_by": "specmesh"}


async def _models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [_model_object(request.app[MODEL])]})


async def _model(request: web.Request) -> web.Response:
    model = request.app[MODEL]
    model.check(request.match_info["model"])
    return web.json_response(_model_object(model))


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, completion_request(await _body(request), request.app[MODEL]))


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    codec, body = request.config_dict[ORCHESTRATOR].codec, await _body(request)
    return await _generate(request, await asyncio.to_thread(chat_request, body, codec, request.app[MODEL]))


async def _body(request: web.Request) -> dict:
    try:
        body = await request.json()
    except ValueError as error:
        raise ApiError(400, f"the request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


async def _generate(request: web.Request, incoming: OpenAIRequest) -> web.StreamResponse:
    orchestrator = request.config_dict[ORCHESTRATOR]
    try:
        driver = await orchestrator.admit(incoming.generate, None, request.headers)  # headers: a trace context to join
        reply = Reply(incoming.chat, driver.request.request_id, request.app[MODEL].id, incoming.include_usage)
        if incoming.stream:
            return await _stream(request, drive(orchestrator, driver), reply, incoming.params)
        return web.json_response(reply.complete([chunk async for chunk in drive(orchestrator, driver)]))
    except ServiceError as error:
        raise from_service_error(error, incoming.params) from None


async def _stream(request: web.Request, chunks: AsyncIterator[Chunk], reply: Reply, params: dict) -> web.StreamResponse:
    """Server-sent events; a client that stops reading cancels the request (drive settles it)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    try:
        async with aclosing(chunks):
            async for chunk in chunks:
                if not response.prepared:
                    await _open(request, response, reply)
                for event in reply.events(chunk):
                    await response.write(_event(event))
        await response.write(DONE)
    except ServiceError as error:
        if not response.prepared:
            raise  # nothing sent yet: a plain HTTP error
        await response.write(_event(from_service_error(error, params).body()))
    except ConnectionResetError:
        pass  # the client went away
    return response


async def _open(request: web.Request, response: web.StreamResponse, reply: Reply) -> None:
    await response.prepare(request)
    for event in reply.opening():
        await response.write(_event(event))


def _event(data: dict) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()
