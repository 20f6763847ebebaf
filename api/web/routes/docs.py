"""The API's documentation page, ``/docs`` (Swagger UI), served with its script and style
sheet from this service: it works on a network without internet.

The assets are the Swagger UI bundle the ``fastapi-offline`` package ships (pinned in the
``service`` extra); this module mounts its files at :data:`ASSETS` and uses nothing else of it.
There is no ``/redoc``: ReDoc loads its logo from its own CDN.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS", "install"]

ASSETS = "/docs-assets"
# Swagger UI's default sends the address of the API description to validator.swagger.io and
# shows the badge it gets back: another host, and no internet needed here.
_SWAGGER_PARAMETERS = {"validatorUrl": None}


def install(app: FastAPI) -> None:
    """Serve ``/docs`` from bundled assets (create the app with ``docs_url=None`` and
    ``redoc_url=None``: FastAPI's own pages load from CDNs)."""
    bundle = files("fastapi_offline") / "static"
    app.mount(ASSETS, StaticFiles(directory=str(bundle)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")  # behind a proxy that mounts the service under a path
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title}: API",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
            swagger_ui_parameters={**(app.swagger_ui_parameters or {}), **_SWAGGER_PARAMETERS},
        )

