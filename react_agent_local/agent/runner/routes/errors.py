"""Every error that leaves the runner's routes: ``ApiError`` and the app's exception handlers.

A route refuses by raising ``ApiError(status, code, message, **extra)``; the handlers here turn it,
a request body that fails validation, an HTTP error of the framework (404 for an unknown path, say)
and any other exception into the one body every refusal has, ``{"error": {"code", "message", ...}}``
(``boundary.error_body``, also used by the browser boundary before routing). Nothing a client sent
is echoed: validation errors keep field locations and messages, never input values, and every
message passes ``trace.redact``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from agent.runner.boundary import error_body
from agent.contracts.trace import redact

log = logging.getLogger(__name__)


class ApiError(Exception):
    """A refusal with a stable ``code``; ``extra`` fields ride along in the error object."""

    def __init__(self, status: int, code: str, message: str, **extra: Any):
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    """Every 4xx/5xx body."""

    error: ErrorDetail


#: The error body every route documents (the app's ``responses``).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (400, 403, 404, 405, 409, 413, 415, 421, 422, 429)
}
_STATUS_CODES = {
    400: "bad_request", 403: "forbidden", 404: "not_found", 405: "method_not_allowed", 409: "conflict",
    413: "payload_too_large", 415: "unsupported_media_type", 421: "forbidden_host", 422: "validation_error",
    429: "queue_full", 500: "internal_error", 503: "unavailable",
}


def error_response(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse(error_body(code, message, **extra), status_code=status)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    return error_response(exc.status, exc.code, exc.message, **exc.extra)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    # Field locations and messages only: input values (a model path, say) are never echoed.
    fields = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))[:200],
               "type": str(e.get("type", ""))} for e in exc.errors()[:20]]
    message = "; ".join(f"{'.'.join(f['loc'])}: {f['msg']}" for f in fields)[:600] or "invalid request"
    return error_response(422, "validation_error", redact(message), fields=redact(fields))


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = _STATUS_CODES.get(exc.status_code, "bad_request" if exc.status_code < 500 else "internal_error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    return JSONResponse(error_body(code, redact(message)), status_code=exc.status_code,
                        headers=getattr(exc, "headers", None))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error")
    return error_response(500, "internal_error", f"internal error ({type(exc).__name__})")
