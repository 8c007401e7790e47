"""The dashboard's routes on the catalog's admin API: the history and the proxy."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.params import Depends
from fastapi.responses import JSONResponse

from zbus.dashboard.history import History
from zbus.dashboard.proxy import MAX_BODY_BYTES, AdminProxy

__all__ = ["add_routes"]


async def _bounded_body(request: Request) -> bytes | None:
    """The request's body, or None past :data:`MAX_BODY_BYTES` (read no further)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return None
    return bytes(body)


def add_routes(app: FastAPI, history: History, proxy: AdminProxy, token: Depends) -> None:
    """Serve ``/api/v1/history``, ``/api/v1/history/topics`` and the proxy on ``app``.

    Args:
        app: the catalog's admin app.
        history: the sampled history.
        proxy: the admin API proxy.
        token: the dependency that checks the catalog's admin token (actions only).
    """

    @app.get("/api/v1/history", tags=["dashboard"])
    async def history_view() -> dict[str, Any]:
        """Cluster-wide events/s, jobs/s, errors/s and heartbeats/s of the last 15
        minutes (one point per sample), and the latest in/out rates of every queue."""
        return history.view()

    @app.get("/api/v1/history/topics", tags=["dashboard"])
    async def topic_rates(service: str, prefix: str = "") -> dict[str, Any]:
        """The latest events/s of each topic of the event bus ``service`` (the first
        1,000 topics by name) under ``prefix``."""
        return {"service": service, "rates": history.topics(service, prefix)}

    @app.get("/api/v1/proxy/{service}/{path:path}", tags=["dashboard"])
    async def proxy_get(service: str, path: str, request: Request) -> JSONResponse:
        """A read of a registered service's admin API (allowed paths only)."""
        answer = await proxy.forward(service, "GET", path, query=request.url.query)
        return JSONResponse(answer.body, status_code=answer.status)

    @app.post("/api/v1/proxy/{service}/{path:path}", dependencies=[token], tags=["dashboard"])
    async def proxy_post(service: str, path: str, request: Request) -> JSONResponse:
        """An action on a registered service's admin API (allowed paths only); the
        ``Authorization`` header goes along, for the service's own token check."""
        body = await _bounded_body(request)
        if body is None:
            answer = proxy.too_large()
        else:
            answer = await proxy.forward(
                service,
                "POST",
                path,
                query=request.url.query,
                body=body,
                authorization=request.headers.get("authorization"),
            )
        return JSONResponse(answer.body, status_code=answer.status)
