"""The job broker service: routing thread, durable job store, admin API, metrics."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid as uuidlib
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import asdict
from typing import Any, TypeVar

import zmq
import zmq.asyncio
from fastapi import FastAPI, HTTPException, Query
from pydantic import BaseModel, Field

from zbus.broker.core.broker import BrokerCore
from zbus.broker.core.errors import RangeError
from zbus.broker.core.model import Job, JobState
from zbus.broker.server.config import BrokerSettings
from zbus.broker.server.metrics import BrokerMetrics
from zbus.broker.server.router import Router
from zbus.broker.server.store import JobReader, JobStore, StoreError
from zbus.common.clock import Clock
from zbus.common.protocols import emqp
from zbus.common.settings import ConfigError
from zbus.common.sqlite import checkpoint
from zbus.runtime.admin import TokenRequired
from zbus.runtime.service import Service

log = logging.getLogger(__name__)
T = TypeVar("T")


class SubmitRequest(BaseModel):
    queue: str = Field("default", min_length=1)
    callable: str = Field(min_length=1, description="name of a registered job, or a function")
    path: str = Field("", description="module of the function (eventmq's 'path')")
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    id: str | None = Field(None, description="job id (idempotency key); new when absent")
    retries: int | None = Field(None, ge=0)
    timeout: float | None = Field(None, gt=0)
    delay: float | None = Field(None, ge=0)


def _body_json(body: bytes | None) -> Any:
    if body is None:
        return None
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return {"bytes": len(body)}


def job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "queue": job.queue,
        "state": job.state.value,
        "attempts": job.attempts,
        "max_retries": job.max_retries,
        "timeout": job.timeout,
        "headers": dict(job.headers),
        "request": _body_json(job.body),
        "created": job.created,
        "updated": job.updated,
        "started": job.started,
        "not_before": job.not_before,
        "worker": job.worker.hex() if job.worker else None,
        "result": _body_json(job.result),
        "error": job.error,
        "schedule_id": job.schedule_id,
    }


def _printable(identity: bytes) -> str | None:
    """A socket identity as the text a worker chose (eMQP workers use uuid4 text), or
    None when it is not printable text."""
    try:
        text = identity.decode("ascii")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() else None


class BrokerService(Service):
    name = "broker"

    def __init__(self, settings: BrokerSettings, *, clock: Clock | None = None) -> None:
        super().__init__(settings, clock=clock)
        self.settings: BrokerSettings = settings
        self.metrics = BrokerMetrics(self.registry)
        self.store_path = settings.data_dir / "jobs.db"

    async def start(self) -> None:
        try:
            self.store = await asyncio.to_thread(
                JobStore, self.store_path, fsync=self.settings.fsync, checkpoint_pages=0
            )
        except StoreError as exc:
            raise ConfigError(str(exc)) from None
        self.router = Router(
            zmq.Context.shadow(self.ctx),
            self.settings,
            self.store,
            self.metrics,
            self.clock,
            self.secure,
        )
        self.essential(self.router)  # no routing thread, no broker: fail, exit non-zero
        self.router.start()
        await asyncio.to_thread(self.router.ready.wait)
        if self.router.failed is not None:
            raise ConfigError(f"broker cannot start: {self.router.failed}")
        self.endpoints.update(self.router.endpoints)
        self.wake = self.ctx.socket(zmq.PUSH)
        self.own(self.wake)
        self.wake.connect(self.router.wake_endpoint)

    def background(self) -> Sequence[Coroutine[Any, Any, None]]:
        return [self._checkpoints()]

    async def _checkpoints(self) -> None:
        """Checkpoint the store's WAL once a second, off the routing thread, so a group
        commit never waits for a checkpoint's fsync."""
        while True:
            try:
                await asyncio.to_thread(checkpoint, self.store_path)
            except StoreError as exc:
                log.warning("checkpoint failed", extra={"error": str(exc)})
            await asyncio.sleep(1.0)

    def checks(self) -> dict[str, bool]:
        router = getattr(self, "router", None)
        return {
            "store_open": hasattr(self, "store"),
            "router_alive": bool(router is not None and router.is_alive()),
        }

    async def drain(self) -> None:
        if hasattr(self, "router"):  # not when the store failed to open
            self.router.stop()
            await asyncio.to_thread(self.router.join)

    async def close(self) -> None:
        if hasattr(self, "store"):
            await asyncio.to_thread(self.store.close)

    # ------------------------------------------------------------------ admin
    async def call(self, fn: Callable[[BrokerCore, float, float], T]) -> T:
        """Run ``fn(core, now, wall)`` in the routing thread (``now`` monotonic, ``wall`` wall
        time); its changes are stored on return."""
        future = self.router.submit_call(fn)
        await self.wake.send(b"")
        result: T = await asyncio.wrap_future(future)
        return result

    async def read(self, fn: Callable[[JobReader], T]) -> T:
        def run() -> T:
            reader = self.store.reader()
            try:
                return fn(reader)
            finally:
                reader.close()

        return await asyncio.to_thread(run)

    async def find(self, job_id: str) -> Job:
        job = await self.call(lambda core, now, wall: core.job(job_id))
        if job is None:
            job = await self.read(lambda r: r.get(job_id))
        if job is None:
            raise HTTPException(404, f"no job {job_id!r}")
        return job

    def add_routes(self, app: FastAPI) -> None:
        @app.get("/api/v1/queues", tags=["queues"])
        async def queues() -> dict[str, Any]:
            """Every queue: ready, waiting, running, consumers, and stored counts per state."""
            views = await self.call(lambda core, now, wall: core.queue_views())
            counts = await self.read(lambda r: r.counts())
            moves = self.metrics.transition_totals()
            names = sorted({v.name for v in views} | set(counts))
            by_name = {v.name: v for v in views}
            out = []
            for name in names:
                view = by_name.get(name)
                stored = counts.get(name, {})
                out.append(
                    {
                        "name": name,
                        "ready": view.ready if view else 0,
                        "waiting": view.waiting if view else 0,
                        "running": view.running if view else 0,
                        "consumers": view.consumers if view else 0,
                        "free_slots": view.free_slots if view else 0,
                        **{
                            s: stored.get(s, 0)
                            for s in ("succeeded", "failed", "dead", "cancelled")
                        },
                        "queued": (view.ready + view.waiting) if view else 0,
                        "transitions": moves.get(name, {}),
                    }
                )
            return {"queues": out}

        @app.post("/api/v1/queues/{name}/purge", dependencies=[TokenRequired], tags=["queues"])
        async def purge(name: str) -> dict[str, Any]:
            """Cancel every queued job of a queue (running jobs finish)."""
            count = await self.call(lambda core, now, wall: core.purge_queue(name, now, wall=wall))
            return {"queue": name, "cancelled": count}

        @app.get("/api/v1/workers", tags=["workers"])
        async def workers() -> dict[str, Any]:
            """Workers with their queues, free slots, last heartbeat and running jobs."""
            views = await self.call(lambda core, now, wall: core.worker_views())
            return {
                "workers": [
                    {
                        **asdict(v),
                        "identity": v.identity.hex(),
                        "identity_text": _printable(v.identity),
                        "queues": list(v.queues),
                        "jobs_running": list(v.jobs_running),
                    }
                    for v in views
                ]
            }

        @app.get("/api/v1/jobs", tags=["jobs"])
        async def jobs(
            queue: str | None = None,
            state: JobState | None = None,
            limit: int = Query(100, ge=1, le=1000),
            before: str | None = None,
        ) -> dict[str, Any]:
            """Stored jobs, newest first; page with `before` = the last id of a page."""
            try:
                found = await self.read(lambda r: r.list(queue, state, limit, before))
            except ValueError as exc:
                raise HTTPException(422, str(exc)) from None
            return {
                "jobs": [job_json(j) for j in found],
                "next": found[-1].id if len(found) == limit else None,
            }

        @app.get("/api/v1/jobs/{job_id}", tags=["jobs"])
        async def job(job_id: str) -> dict[str, Any]:
            return job_json(await self.find(job_id))

        @app.get("/api/v1/jobs/{job_id}/result", tags=["jobs"])
        async def result(job_id: str) -> dict[str, Any]:
            """The job's result once it finished (409 while it has none)."""
            found = await self.find(job_id)
            if not found.state.terminal:
                raise HTTPException(409, f"job {job_id} is {found.state.value}")
            return {
                "id": job_id,
                "state": found.state.value,
                "result": _body_json(found.result),
                "error": found.error,
            }

        @app.post("/api/v1/jobs", dependencies=[TokenRequired], tags=["jobs"], status_code=201)
        async def submit(request: SubmitRequest) -> dict[str, Any]:
            """Submit a job; answers once it is stored."""
            headers: list[tuple[str, str]] = [("reply-requested", "")]
            if request.retries is not None:
                headers.append(("retry-count", str(request.retries)))
            if request.timeout is not None:
                headers.append(("timeout", f"{request.timeout:g}"))
            if request.delay is not None:
                headers.append(("delay", f"{request.delay:g}"))
            body = emqp.build_call_body(
                emqp.EventmqCall(
                    callable=request.callable,
                    path=request.path or "zbus",
                    args=tuple(request.args),
                    kwargs=request.kwargs,
                )
            )
            job_id = request.id or str(uuidlib.uuid4())
            try:
                created = await self.call(
                    lambda core, now, wall: core.submit(
                        job_id, request.queue, tuple(headers), body, now, wall=wall
                    )
                )
            except ValueError as exc:  # RangeError: a number or size outside its range
                reason = "out_of_range" if isinstance(exc, RangeError) else "refused"
                self.metrics.rejected.labels("admin", reason).inc()
                raise HTTPException(422, str(exc)) from None
            return job_json(created)

        @app.post("/api/v1/jobs/{job_id}/retry", dependencies=[TokenRequired], tags=["jobs"])
        async def retry(job_id: str) -> dict[str, Any]:
            """Run a dead or failed job again, with its full retry count."""
            found = await self.find(job_id)
            try:
                again = await self.call(lambda core, now, wall: core.retry(found, now, wall=wall))
            except ValueError as exc:
                raise HTTPException(409, str(exc)) from None
            return job_json(again)

        @app.post("/api/v1/jobs/{job_id}/cancel", dependencies=[TokenRequired], tags=["jobs"])
        async def cancel(job_id: str) -> dict[str, Any]:
            """Cancel a queued job (409 when it is running or finished)."""
            found = await self.find(job_id)
            if not await self.call(lambda core, now, wall: core.cancel(job_id, now, wall=wall)):
                raise HTTPException(409, f"job {job_id} is {found.state.value}: not cancelled")
            return job_json(await self.find(job_id))
