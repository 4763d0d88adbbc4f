"""Builds the dashboard: JSON API routers, HTML pages, static files, and the guards around them.

    app = create_app("memprof-runs", "scenarios")     # then: uvicorn.run(app)

Nothing a page loads comes from outside the server: plotly.js is served from the installed
plotly package, and the Content-Security-Policy header forbids any other origin.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memprof import __version__
from memprof.reports.html import TEMPLATES_DIR, plotly_js_path, template_environment
from memprof.reports.store import clean_orphans
from web.cache import RunCache, UnreadableReport
from web.jobs import JobManager
from web.routers import advice, history, jobs, pages, runs, scenarios, timeline
from web.scenario_files import ScenarioFolder

HERE = Path(__file__).parent
MAX_BODY_BYTES = 64 * 1024
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def create_app(
    runs_dir: str | Path = "memprof-runs",
    scenarios_dir: str | Path = "scenarios",
    *,
    allowed_hosts: Iterable[str] | None = None,
    warm_cache: bool = True,
    real_devices: bool = False,
    job_memory_limit: int | None = None,
) -> FastAPI:
    """The dashboard over `runs_dir`, able to run the scenario files under `scenarios_dir`.

    `allowed_hosts` limits the Host header (`memprof serve` passes the loopback names when it
    listens on loopback, so other sites cannot reach it through DNS rebinding); `warm_cache`
    parses the reports in the background at startup so the first page is fast.
    `real_devices`: whether scenario runs started here may use cpu / cuda (default: meta only,
    which measures without computing); `job_memory_limit`: bytes such a run may allocate
    (default: half the machine's memory).
    """
    cache = RunCache(runs_dir)
    clean_orphans(runs_dir)  # .tmp files of writers killed mid-write

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        if warm_cache:
            threading.Thread(target=_warm, args=(cache,), name="memprof-warm", daemon=True).start()
        yield

    app = FastAPI(
        title="memprof dashboard",
        version=__version__,
        description="Runs, allocation timelines and peaks of memprof reports.",
        docs_url=None,  # the Swagger and ReDoc pages load scripts from a CDN
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.cache = cache
    app.state.scenarios = ScenarioFolder(Path(scenarios_dir))
    app.state.jobs = JobManager(
        runs_dir,
        real_devices=real_devices,
        memory_limit=job_memory_limit,
        scenarios_dir=scenarios_dir,
    )
    app.state.templates = Jinja2Templates(env=template_environment([HERE / "templates"]))

    for module in (runs, advice, timeline, history, jobs, scenarios, pages):
        app.include_router(module.router)
    _add_assets(app)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if _wants_json(request):
            return await http_exception_handler(request, exc)
        return _error_page(request, exc.status_code, exc.detail)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        bad_json = next((e for e in errors if e.get("type") == "json_invalid"), None)
        if bad_json is not None:
            reason = (bad_json.get("ctx") or {}).get("error", "invalid JSON")
            return JSONResponse(
                {"detail": f"the request body is not valid JSON: {reason}"}, status_code=400
            )
        return JSONResponse({"detail": _plain_json(jsonable_encoder(errors))}, status_code=422)

    @app.exception_handler(UnreadableReport)
    async def unreadable(request: Request, exc: UnreadableReport) -> Response:
        if _wants_json(request):
            return JSONResponse({"detail": str(exc)}, status_code=500)
        return _error_page(request, 500, str(exc), title="Unreadable report")

    _document_errors(app)
    app.add_middleware(BodySizeLimit, max_bytes=MAX_BODY_BYTES)
    app.add_middleware(SameOrigin)
    if allowed_hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))
    app.add_middleware(SecurityHeaders)
    return app


def _document_errors(app: FastAPI) -> None:
    """Make /openapi.json say what the error answers are: a 422 carries either FastAPI's list
    of validation errors or one message (a bad timeline window, an unreadable scenario); a body
    that is not JSON is a 400; every route may answer 500 for an unreadable report file."""
    original = app.openapi

    def openapi() -> dict:
        if app.openapi_schema:
            return app.openapi_schema
        schema = original()
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        if "HTTPValidationError" in schemas:
            schemas["HTTPValidationError"]["properties"]["detail"] = {
                "title": "Detail",
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"$ref": "#/components/schemas/ValidationError"}},
                ],
            }
        message = {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}}
        either = {
            "application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}
        }
        for operations in schema.get("paths", {}).values():
            for op in operations.values():
                responses = op.setdefault("responses", {})
                if "422" in responses and "HTTPValidationError" in schemas:
                    responses["422"]["content"] = either
                if "requestBody" in op:
                    responses.setdefault(
                        "400", {"description": "the body is not valid JSON", "content": message}
                    )
        app.openapi_schema = schema
        return schema

    app.openapi = openapi


def _plain_json(value):
    """`value` with what JSON cannot hold (NaN, infinities: Python's json reads them in request
    bodies) written as text, so a 422 can echo any input."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [_plain_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain_json(v) for k, v in value.items()}
    return value


def _wants_json(request: Request) -> bool:
    """API paths answer JSON; pages answer an HTML error page to browsers."""
    return request.url.path.startswith("/api") or "text/html" not in request.headers.get(
        "accept", ""
    )


def _error_page(request: Request, status_code: int, detail: str, title: str = "") -> Response:
    return request.app.state.templates.TemplateResponse(
        request,
        "error.html",
        {"status_code": status_code, "detail": detail, "title": title},
        status_code=status_code,
    )


def _add_assets(app: FastAPI) -> None:
    plotly_js = plotly_js_path()
    cached = {"Cache-Control": "public, max-age=86400"}

    @app.get("/static/plotly.min.js", include_in_schema=False)
    def plotly() -> FileResponse:
        return FileResponse(plotly_js, media_type="text/javascript", headers=cached)

    @app.get("/static/report.css", include_in_schema=False)
    def report_css() -> FileResponse:
        return FileResponse(TEMPLATES_DIR / "report.css", media_type="text/css")

    @app.get("/static/report.js", include_in_schema=False)
    def report_js() -> FileResponse:
        return FileResponse(TEMPLATES_DIR / "report.js", media_type="text/javascript")

    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")


def _warm(cache: RunCache) -> None:
    with contextlib.suppress(Exception):  # a bad file shows up on the runs page instead
        cache.summaries()


class BodySizeLimit:
    """Answer 413 to request bodies over `max_bytes`, declared or streamed."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._reject(send)
            return
        received = 0
        started = rejected = False

        async def limited_receive() -> Message:
            nonlocal received, rejected
            if rejected:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes and not started:
                    # Answer now; the app sees a client that went away and its answer is dropped.
                    rejected = True
                    await self._reject(send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if rejected:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, limited_receive, guarded_send)

    async def _reject(self, send: Send) -> None:
        response = JSONResponse(
            {"detail": f"request body larger than {self.max_bytes} bytes"}, status_code=413
        )
        await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


class SameOrigin:
    """Refuse state-changing requests (POST, PUT, PATCH, DELETE) that a browser sends from
    another site: `Sec-Fetch-Site` other than same-origin / none, or an `Origin` whose host is
    not the Host the request was sent to. Requests without either header (curl, scripts) pass;
    the Host check (TrustedHostMiddleware) and the loopback address keep other machines out."""

    SAFE = {"GET", "HEAD", "OPTIONS"}

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in self.SAFE:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        reason = self._cross_site(headers)
        if reason is None:
            await self.app(scope, receive, send)
            return
        response = JSONResponse(
            {"detail": f"cross-site request refused: {reason}"}, status_code=403
        )
        await response(scope, receive, send)

    @staticmethod
    def _cross_site(headers: dict[str, str]) -> str | None:
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return f"Sec-Fetch-Site is {site!r}"
        origin = headers.get("origin")
        if origin is None:
            return None
        parsed = urlsplit(origin)
        host = headers.get("host", "")
        if origin == "null" or not parsed.netloc:
            return f"Origin is {origin!r}"
        default = {"http": 80, "https": 443}.get(parsed.scheme)
        if _host_port(parsed.netloc, default) != _host_port(host, default):
            return f"Origin {origin!r} is not this server ({host})"
        return None


def _host_port(netloc: str, default: int | None) -> tuple[str, int | None]:
    parsed = urlsplit(f"//{netloc}")
    try:
        port = parsed.port
    except ValueError:
        return (netloc.lower(), None)
    return ((parsed.hostname or "").lower(), port if port is not None else default)


class SecurityHeaders:
    """Content-Security-Policy (same origin only) and friends on every response."""

    HEADERS = [
        (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"x-frame-options", b"DENY"),
    ]

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + self.HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)
