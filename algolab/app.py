"""The course site's HTTP app: the No.17 page, its static assets and the example-package API.

Routes (all GET; HEAD is answered like GET without a body)::

    /                                   -> 307 to /react-agent
    /react-agent, /labs/17              the No.17 lab page
    /static/{name}                      page assets (js, css)
    /api/react-agent/example/manifest   version, zip/tree SHA-256, bytes, generated_at, files[]
    /api/react-agent/example/file       ?path=<exact enumerated path>[&download=1]
    /api/react-agent/example.zip        deterministic ZIP rooted at react_agent_local/

Browser boundary (SECURITY 1-5), checked before routing by ``BoundaryMiddleware``: the Host must be
a loopback name with this server's port (else 421 ``forbidden_host``), an Origin header must be this
site's own origin (else 403 ``forbidden_origin``; CORS is never granted) -- the runner's checks, from
the same ``agent.runner.boundary.LoopbackGate`` -- and only GET/HEAD exist (else 405): nothing here changes
state. Every error is ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Awaitable, Callable
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from agent.runner.boundary import LoopbackGate, request_headers

from .package import (
    DEFAULT_PACKAGE_DIR,
    ZIP_ROOT,
    BadPath,
    ExamplePackage,
    PackageTooLarge,
    PackageUnavailable,
    check_request_path,
    is_text,
)

DEFAULT_PORT = 8017
STATIC_DIR = Path(__file__).resolve().parent / "static"
STATIC_FILES = {
    "react-agent.js": "text/javascript; charset=utf-8",
    "react-agent-workspace.js": "text/javascript; charset=utf-8",
    "react-agent.css": "text/css; charset=utf-8",
}

# The page talks to a runner on any loopback port. CSP host sources cannot name an IPv6 literal
# (Chrome drops "http://[::1]:*" as invalid), so connect-src allows plain http: and the page's own
# URL check is what restricts the runner to 127.0.0.1, localhost and [::1].
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self' http:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
COMMON_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status,
                        headers={**COMMON_HEADERS, **(headers or {})})


class BoundaryMiddleware:
    """Host allowlist, same-origin check and method allowlist, before any route runs."""

    def __init__(self, app: Callable[..., Awaitable[None]], port: int):
        self.app = app
        self.gate = LoopbackGate(port)  # this site's own origins only

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] == "websocket":  # none exist here; refuse before any handshake
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        refusal = self.gate.refusal(request_headers(scope))
        rejection: JSONResponse | None = None
        if refusal is not None:
            rejection = error_response(refusal.status, refusal.code, refusal.message)
        elif scope["method"] not in ("GET", "HEAD"):
            rejection = error_response(405, "method_not_allowed", "only GET is supported here",
                                       {"Allow": "GET, HEAD"})
        if rejection is not None:
            await rejection(scope, receive, send)
            return
        if scope["method"] == "HEAD":
            await self.app({**scope, "method": "GET"}, receive, _drop_body(send))
            return
        await self.app(scope, receive, send)


def _drop_body(send: Callable) -> Callable:
    async def wrapped(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)

    return wrapped


def create_app(package_dir: Path | str | None = None, port: int = DEFAULT_PORT) -> FastAPI:
    """Build the site for one package folder; ``port`` is the one the Host header must carry."""
    package = ExamplePackage(package_dir or DEFAULT_PACKAGE_DIR)
    app = FastAPI(title="AlgoLab No.17 course site", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.package = package

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = "no such page" if exc.status_code == 404 else str(exc.detail)
        return error_response(exc.status_code, code, message)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(400, "bad_request", "invalid query parameters")

    @app.exception_handler(PackageTooLarge)
    async def _too_large(request: Request, exc: PackageTooLarge) -> JSONResponse:
        return error_response(507, "package_too_large", str(exc))

    @app.exception_handler(PackageUnavailable)
    async def _unavailable(request: Request, exc: PackageUnavailable) -> JSONResponse:
        return error_response(503, "package_unavailable", str(exc))

    @app.get("/")
    def index() -> Response:
        return RedirectResponse("/react-agent", status_code=307, headers=COMMON_HEADERS)

    @app.get("/react-agent")
    @app.get("/labs/17")
    def page() -> Response:
        return FileResponse(STATIC_DIR / "react-agent.html", media_type="text/html; charset=utf-8",
                            headers={**COMMON_HEADERS, "Content-Security-Policy": PAGE_CSP})

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        media_type = STATIC_FILES.get(name)  # an allowlist: nothing else under static/ is served
        if media_type is None:
            return error_response(404, "not_found", "no such asset")
        return FileResponse(STATIC_DIR / name, media_type=media_type, headers=COMMON_HEADERS)

    @app.get("/api/react-agent/example/manifest")
    def manifest() -> Response:
        return JSONResponse(package.snapshot().manifest, headers=COMMON_HEADERS)

    @app.get("/api/react-agent/example/file")
    def file(request: Request) -> Response:
        query = request.query_params
        paths = query.getlist("path")
        if len(paths) > 1:
            return error_response(400, "invalid_path", "give exactly one path")
        try:
            path = check_request_path(paths[0] if paths else None)
        except BadPath as exc:
            return error_response(400, "invalid_path", exc.message)
        snapshot = package.snapshot()
        data = snapshot.files.get(path)
        if data is None:  # exact, case-sensitive membership in the live enumeration
            return error_response(404, "not_found", "no such file in the example package")
        download = query.get("download") in ("1", "true")
        text = is_text(data)
        name = path.rsplit("/", 1)[-1]
        headers = {
            **COMMON_HEADERS,
            "Content-Security-Policy": "default-src 'none'; sandbox",
            "Content-Disposition": _disposition("attachment" if download else "inline", name),
            "X-Content-SHA256": _sha_of(snapshot.manifest, path),
        }
        media_type = "text/plain; charset=utf-8" if text else "application/octet-stream"
        return Response(data, media_type=media_type, headers=headers)

    @app.get("/api/react-agent/example.zip")
    def example_zip() -> Response:
        snapshot = package.snapshot()
        version = snapshot.manifest.get("version") or "dev"
        safe_version = re.sub(r"[^A-Za-z0-9.\-]", "_", str(version))[:40]
        headers = {
            **COMMON_HEADERS,
            "Content-Disposition": _disposition("attachment", f"{ZIP_ROOT}-{safe_version}.zip"),
            "X-Content-SHA256": snapshot.manifest["zip_sha256"],
            "ETag": f'"{snapshot.manifest["zip_sha256"]}"',
        }
        return Response(snapshot.zip_bytes, media_type="application/zip", headers=headers)

    site = BoundaryMiddleware(app, port)
    site.package = package  # tests reach the package through the returned app
    return site  # type: ignore[return-value]


def _sha_of(manifest: dict[str, Any], path: str) -> str:
    for entry in manifest["files"]:
        if entry["path"] == path:
            return entry["sha256"]
    return ""


def _disposition(kind: str, filename: str) -> str:
    ascii_name = re.sub(r'[^A-Za-z0-9._\-]', "_", filename) or "download"
    return f"{kind}; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename, safe='')}"

