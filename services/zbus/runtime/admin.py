"""The admin HTTP API every service has: health, readiness, metrics, info.

Services add their own routes under ``/api/v1/``; routes that change state depend on
:func:`require_token`, which checks the bearer token when one is configured.
"""

from __future__ import annotations

import hmac
import logging
from typing import Annotated, Any, Protocol

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

from zbus.common.version import __version__

log = logging.getLogger(__name__)


class AdminSettings(Protocol):
    @property
    def admin_token(self) -> str | None: ...


class AdminHost(Protocol):
    """What the admin API needs of its service (``zbus.runtime.service.Service``)."""

    @property
    def name(self) -> str: ...
    @property
    def registry(self) -> CollectorRegistry: ...
    @property
    def settings(self) -> AdminSettings: ...
    @property
    def failure(self) -> str | None: ...
    def readiness(self) -> dict[str, bool]: ...
    def info(self) -> dict[str, Any]: ...
    def add_routes(self, app: FastAPI) -> None: ...


def create_admin_app(service: AdminHost) -> FastAPI:
    """The FastAPI app of ``service``: the common endpoints, then the service's own."""
    app = FastAPI(
        title=f"zbus {service.name} admin API",
        version=__version__,
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.service = service
    rejected = Counter(
        "zbus_admin_rejected_requests",
        "Admin API requests refused as malformed or unauthorised, by reason",
        ["reason"],
        registry=service.registry,
    )
    app.state.admin_rejected = rejected

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        rejected.labels("invalid").inc()
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in exc.errors()]
        log.warning(
            "admin request rejected",
            extra={"path": request.url.path, "reason": "invalid", "errors": errors},
        )
        return JSONResponse(status_code=422, content={"error": "invalid request", "detail": errors})

    @app.get("/healthz", tags=["health"])
    async def healthz() -> JSONResponse:
        """The process is up and its event loop answers; 503 once a part the service
        cannot serve without has failed (it is then stopping, to exit with status 1)."""
        if service.failure is not None:
            return JSONResponse(
                status_code=503, content={"status": "failing", "error": service.failure}
            )
        return JSONResponse(content={"status": "ok"})

    @app.get("/readyz", tags=["health"])
    async def readyz() -> JSONResponse:
        """Sockets bound, storage open and every readiness check of the service passing."""
        checks = service.readiness()
        ready = all(checks.values())
        return JSONResponse(
            status_code=200 if ready else 503,
            content={"ready": ready, "checks": checks},
        )

    @app.get("/metrics", tags=["health"])
    async def metrics() -> Response:
        """Prometheus text exposition of the service's own registry."""
        return Response(generate_latest(service.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/v1/info", tags=["info"])
    async def info() -> dict[str, Any]:
        """Name, version, uptime and endpoints of the service."""
        return service.info()

    service.add_routes(app)
    return app


def require_token(request: Request, authorization: Annotated[str | None, Header()] = None) -> None:
    """Dependency for state-changing routes: a bearer token when one is configured."""
    service: AdminHost = request.app.state.service
    expected = service.settings.admin_token
    if not expected:
        return
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), expected.encode()):
        request.app.state.admin_rejected.labels("unauthorised").inc()
        log.warning("admin request unauthorised", extra={"path": request.url.path})
        raise HTTPException(
            status_code=401,
            detail="a valid bearer token is required",
            headers={"WWW-Authenticate": "Bearer"},
        )


TokenRequired = Depends(require_token)
