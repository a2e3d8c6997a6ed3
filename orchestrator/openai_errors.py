"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}` with the HTTP status.

Glossary: param: the OpenAI request parameter an error is about. Our validation (validation.py)
names GenerateRequest fields (`max_new_tokens`, `sampling.top_p`, ...); `from_service_error`
translates them to the parameters the client sent (`max_tokens`, `top_p`, ...).
"""

from __future__ import annotations

import re

import grpc

from specmesh.serving import ServiceError

HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429, grpc.StatusCode.UNAVAILABLE: 503, grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    @property
    def type(self) -> str:
        return "invalid_request_error" if self.status < 429 else "rate_limit_error" if self.status == 429 else "server_error"

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_param(param: str, message: str) -> ApiError:
    return ApiError(400, message, param)


def field_params(prompt: str, max_tokens: str) -> dict[str, str]:
    """GenerateRequest field (as validation.py names it) -> the OpenAI parameter."""
    return {"sampling.temperature": "temperature", "sampling.top_p": "top_p", "sampling.top_k": "top_k",
            "sampling.seed": "seed", "max_new_tokens": max_tokens, "token_ids": prompt, "prompt": prompt,
            "stop": "stop", "drafter": "drafter", "budget": "budget"}


def from_service_error(error: ServiceError, params: dict[str, str]) -> ApiError:
    """`params`: field_params() of the request, to name the parameter of an INVALID_ARGUMENT."""
    status = HTTP_STATUS.get(error.code, 500)
    if error.code != grpc.StatusCode.INVALID_ARGUMENT:
        return ApiError(status, str(error), code=error.code.name.lower())
    fields = re.compile(r"\b(" + "|".join(map(re.escape, params)) + r")\b")
    named = fields.search(str(error))
    return bad_param(params[named.group(1)] if named else None, fields.sub(lambda m: params[m.group(1)], str(error)))
