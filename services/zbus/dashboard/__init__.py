"""The cluster dashboard: one static page the catalog serves at ``/dashboard``.

The page is plain HTML, JavaScript and CSS (no build step, nothing fetched from
elsewhere). It reads the catalog's admin API only: ``/api/v1/services``,
``/api/v1/cluster`` (each service's own admin API, asked by the catalog, see
:mod:`zbus.dashboard.cluster`) and ``/api/v1/logs``.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["STATIC_DIR", "mount"]

STATIC_DIR = Path(__file__).parent / "static"

# The page loads its own script and style and talks to its own origin, nothing else.
_PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}


def mount(app: FastAPI, *, path: str = "/dashboard") -> None:
    """Serve the dashboard on ``app``: the page at ``path``, its files under
    ``path/static/``, and a redirect from ``/`` to the page.

    Args:
        app: the admin app of the service that serves the dashboard (the catalog).
        path: where the page lives; no trailing slash.
    """
    index = STATIC_DIR / "index.html"

    @app.get(path, include_in_schema=False)
    async def dashboard() -> FileResponse:
        return FileResponse(index, media_type="text/html; charset=utf-8", headers=_PAGE_HEADERS)

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse(path)

    app.mount(f"{path}/static", StaticFiles(directory=STATIC_DIR), name="dashboard-static")
