"""The FastAPI application, built by :func:`create_app` from settings (nothing at import time)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from api.config import Settings, get_settings
from api.store import crud
from api.store.db import make_engine, make_sessionmaker
from api.logs import install as redact_tokens_in_logs
from api.store.migrate import upgrade
from api.work.queue import make_queue
from api.web.forms import page
from api.web.hosting import NotHosted, host
from api.web.ratelimit import RateLimiter
from api.web.routes import class_stats, docs, golden, pages, previews, public, regrades, roster, similarity, staff, submissions
from grader import __version__

__all__ = ["create_app"]


def _describe(errors: list[dict]) -> str:
    parts = []
    for error in errors:
        where = ".".join(str(p) for p in error.get("loc", ()) if p not in ("body",)) or "request"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The app, its database migrated, its queue started with the app and stopped after it."""
    settings = settings or get_settings()
    hosting = host(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redact_tokens_in_logs()  # the server has set up its logging by now
        upgrade(settings.database_url)
        with app.state.make_session() as session:  # rows from when the service hosted one assignment
            crud.adopt_unnamed(session, assignment=hosting.default.name)
        app.state.queue.start()
        try:
            yield
        finally:
            app.state.queue.stop()
            app.state.engine.dispose()

    app = FastAPI(
        title="mutagrade",
        version=__version__,
        summary="Grades students' test suites for each module of a course by the mutants they kill.",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's own pages load from CDNs: docs.install serves them from here
        redoc_url=None,
    )
    engine = make_engine(settings.database_url)
    app.state.settings = settings
    app.state.engine = engine
    app.state.make_session = make_sessionmaker(engine)
    app.state.hosting = hosting
    app.state.limiter = RateLimiter(settings.rate_limit, settings.rate_window_s)
    app.state.preview_limiter = RateLimiter(settings.preview_rate_limit, settings.preview_rate_window_s)
    app.state.queue = make_queue(settings=settings, make_session=app.state.make_session)

    @app.exception_handler(NotHosted)
    async def _not_hosted(request: Request, exc: NotHosted) -> Response:
        # An unknown ?assignment= on a page is the refusal page; on the REST API, JSON.
        if request.url.path.startswith("/v1/"):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
        return page(request, "refused.html", {"user": None, "title": "No such assignment", "message": exc.detail},
                    exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _describe(exc.errors())}, status_code=422)

    for module in (submissions, staff, golden, public, pages, regrades, roster, class_stats, similarity, previews):
        app.include_router(module.router)
    docs.install(app)
    return app
