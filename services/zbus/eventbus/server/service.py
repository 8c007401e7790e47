"""The event bus service: pipeline, snapshot and archive threads, admin API, metrics."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import functools
import json
import logging
import secrets
import sys
import threading
import uuid as uuidlib
from collections.abc import Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any

import msgpack
import zmq
import zmq.asyncio
from fastapi import FastAPI, HTTPException, Query
from pydantic import BaseModel, Field
from zmq.utils import z85

from zbus.common.clock import Clock
from zbus.common.metrics import family_totals
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.sqlite import checkpoint
from zbus.eventbus.core.pppp import STATE_TOPIC
from zbus.eventbus.doors import DOORS, Door, DoorSpec, DoorWiring
from zbus.eventbus.doors.mc0 import Mc0Door
from zbus.eventbus.doors.pppp import PpppDoor, read_status, read_summary
from zbus.eventbus.server.archive import ArchiveError, Archiver
from zbus.eventbus.server.archive_process import ArchiveProcess
from zbus.eventbus.server.config import EventBusSettings
from zbus.eventbus.server.metrics import BusMetrics, RateMeter
from zbus.eventbus.server.pipeline import Pipeline
from zbus.eventbus.server.replica_wiring import ReplicaParts, add_route
from zbus.eventbus.server.replication import REPLICATION_DOMAIN
from zbus.eventbus.server.snapshots import SnapshotServer
from zbus.eventbus.server.store import (
    Event,
    SqliteEventLog,
    SqliteEventLogReader,
    StoreError,
)
from zbus.runtime.admin import TokenRequired
from zbus.runtime.service import Service

log = logging.getLogger(__name__)

TRANSFER_CACHE_KIB = 2048  # SQLite page cache of each spec snapshot's read connection


class PublishRequest(BaseModel):
    topic: str = Field(min_length=1, description="event topic, e.g. /sensors/t1")
    data: Any = Field(None, description="any JSON value; stored as msgpack")
    data_base64: str | None = Field(None, description="raw event data instead of `data`")
    producer: str = "admin-api"
    uuid: str | None = Field(None, description="event UUID (idempotency key); new if absent")


def event_json(e: Event) -> dict[str, Any]:
    """An event for the admin API: data decoded from msgpack when it is msgpack."""
    try:
        data: Any = msgpack.unpackb(e.data, raw=False)
        json.dumps(data)
        encoding = "msgpack"
    except (ValueError, TypeError, msgpack.UnpackException):
        data, encoding = base64.b64encode(e.data).decode(), "base64"
    return {
        "seq": e.seq,
        "topic": e.topic,
        "producer": e.producer,
        "ts": e.ts,
        "uuid": e.uuid,
        "data": data,
        "data_encoding": encoding,
    }


class EventBusService(Service):
    name = "eventbus"

    def __init__(self, settings: EventBusSettings, *, clock: Clock | None = None) -> None:
        super().__init__(settings, clock=clock)
        self.settings: EventBusSettings = settings
        self.metrics = BusMetrics(self.registry)
        self.inproc = f"inproc://zbus-collector-{id(self):x}"
        self.rate = RateMeter()
        self.log_path = settings.data_dir / "events.db"
        self.archiver: Archiver | None = None
        self.doors_on = [spec for spec in DOORS if spec.enabled(settings)]
        self.running: dict[str, Door] = {}  # the doors started, by name
        self.replica: ReplicaParts | None = None  # one replica of a group (ADR 0009)
        #: The doors' identity on the collector, which no client can guess.
        self.door_token = secrets.token_bytes(16)

    async def start(self) -> None:
        # The pipeline thread shares the GIL with this loop: a shorter switch interval
        # keeps its wait for the GIL (and so the bus's tail latency) in the 1 ms range.
        sys.setswitchinterval(0.0005)
        try:
            self.store = await asyncio.to_thread(
                SqliteEventLog, self.log_path, fsync=self.settings.fsync, checkpoint_pages=0
            )
        except StoreError as exc:
            from zbus.common.settings import ConfigError

            raise ConfigError(str(exc)) from None
        archive_uri = self.settings.archive_uri()
        if archive_uri is not None:
            # Until the archive has read its mark, retention deletes nothing.
            self.store.hold_retention(0)
        for spec in self.doors_on:
            if spec.holds_retention:
                # Until the door has said what it holds, retention deletes nothing.
                self.store.hold_retention(0, holder=spec.name)
        sync_ctx: zmq.Context[Any] = zmq.Context.shadow(self.ctx)
        self.pipeline = Pipeline(
            sync_ctx, self.settings, self.store, self.metrics, self.clock, self.inproc
        )
        self.pipeline.secure_hook = self.secure
        if self.settings.replicated:
            self.replica = ReplicaParts.build(
                self.settings, self.store, sync_ctx, self.registry, self.clock
            )
            self.pipeline.replication = self.replica.link
            self.store.visible = self.replica.link.visible
            # The PPPP door's state events: only the door may write them (ADR 0010).
            self.pipeline.collecting.reserve(STATE_TOPIC, self.door_token)
            keys = self.curve_keys
            if keys is not None:
                self.replica.link.curve = keys
                # The allow-list holds raw keys; a KeyPair's are Z85 text.
                self.admit_only(REPLICATION_DOMAIN, frozenset({z85.decode(keys.public)}))
        self.snapshots = SnapshotServer(
            sync_ctx,
            self.settings,
            self.store.reader,
            self.metrics,
            self.secure,
            clock=self.clock,
            # A spec snapshot reads on a connection of its own: a small cache each.
            open_transfer_reader=functools.partial(
                SqliteEventLogReader,
                self.log_path,
                cache_kib=TRANSFER_CACHE_KIB,
                visible=self.store.visible,
            ),
        )
        for thread in (self.pipeline, self.snapshots):
            self.essential(thread)  # the bus cannot serve without either: fail, exit 1
            thread.start()
            await asyncio.to_thread(thread.ready.wait)
            if thread.failed is not None:
                from zbus.common.settings import ConfigError

                raise ConfigError(f"event bus cannot start: {thread.failed}")
        if archive_uri is not None:
            self.archiver = Archiver(
                ArchiveProcess(
                    archive_uri,
                    self.log_path,
                    batch=self.settings.archive_batch,
                    log_level=self.settings.log_level,
                ),
                interval=self.settings.archive_interval,
                batch=self.settings.archive_batch,
                metrics=self.metrics,
                clock=self.clock,
                last_sequence=self.store.last_sequence,
                on_mark=self.store.hold_retention,
            )
            self.essential(self.archiver)  # without it the log is never rolled or trimmed
            self.archiver.start()
        self.endpoints["snapshot"] = self.snapshots.endpoint
        self.endpoints.update(self.pipeline.endpoints)
        if self.replica is not None:
            coordination = self.replica.coordination(
                self.settings, dict(self.endpoints), self.clock
            )
            self.essential(coordination)  # a replica that cannot campaign or renew: exit
            coordination.start()
        for spec in self.doors_on:
            await self._start_door(spec, sync_ctx)
        self.publisher = self.ctx.socket(zmq.DEALER)
        self.own(self.publisher)
        self.publisher.connect(self.inproc)
        self._publish_lock = asyncio.Lock()
        log.info(
            "event log open",
            extra={"path": str(self.log_path), "sequence": self.store.last_sequence()},
        )

    async def _start_door(self, spec: DoorSpec[Any], ctx: zmq.Context[Any]) -> None:
        """Build and start one door of the table; the bus fails its start without it."""
        door: Door = spec.build(
            DoorWiring(
                ctx=ctx,
                settings=self.settings,
                clock=self.clock,
                collector=self.inproc,
                stream=self.pipeline.stream_inproc,
                secure=self.secure,
                log_path=self.log_path,
                hold=functools.partial(self.store.hold_retention, holder=spec.name),
                open_reader=functools.partial(
                    SqliteEventLogReader, self.log_path, visible=self.store.visible
                ),
                leading=self.replica.link.leading if self.replica is not None else None,
                token=self.door_token,
            )
        )
        thread = door
        assert isinstance(thread, threading.Thread)  # every door is a thread
        self.essential(thread)  # its clients depend on it: fail, exit 1
        door.start()
        await asyncio.to_thread(door.ready.wait)
        if door.failed is not None:
            from zbus.common.settings import ConfigError

            raise ConfigError(f"the {spec.title} door cannot start: {door.failed}")
        spec.metrics(door, self.registry)
        self.running[spec.name] = door
        self.endpoints[spec.name] = door.endpoint

    @property
    def mc0(self) -> Mc0Door | None:
        """The mc0 door, once started."""
        door = self.running.get("mc0")
        return door if isinstance(door, Mc0Door) else None

    @property
    def pppp(self) -> PpppDoor | None:
        """The PPPP door, once started."""
        door = self.running.get("pppp")
        return door if isinstance(door, PpppDoor) else None

    def background(self) -> Sequence[Coroutine[Any, Any, None]]:
        return [self._watch()]

    async def _watch(self) -> None:
        """Every second: sample the publish rate, refresh the log size. (The threads
        are the runtime's to watch: :meth:`Service.essential`.)"""
        # One thread owns the reader connection: a cancelled await does not stop the call
        # it waits for, so closing from another thread could race a running query.
        executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="eventbus-watch")
        loop = asyncio.get_running_loop()
        reader = await loop.run_in_executor(executor, SqliteEventLogReader, self.log_path)
        try:
            while True:
                total = self.registry.get_sample_value("zbus_eventbus_events_stored_total") or 0
                self.rate.sample(self.clock.monotonic(), total)
                # Checkpoints run here, off the pipeline thread, so a commit never waits
                # for the checkpoint's fsync (that wait was the bus's p99 latency).
                await loop.run_in_executor(executor, checkpoint, self.log_path)
                stats = await loop.run_in_executor(executor, reader.stats)
                self.metrics.log_bytes.set(stats.size_bytes)
                self.metrics.log_events.set(stats.events)
                await asyncio.sleep(1.0)
        finally:
            executor.submit(reader.close)
            executor.shutdown(wait=False)  # runs after any query still in that thread

    def checks(self) -> dict[str, bool]:
        threads: list[Door | threading.Thread | None] = [
            getattr(self, "pipeline", None),
            getattr(self, "snapshots", None),
        ]
        threads += [self.running.get(spec.name) for spec in self.doors_on]
        return {
            "log_open": hasattr(self, "store"),
            "threads_alive": all(t is not None and t.is_alive() for t in threads),
        }

    async def drain(self) -> None:
        # The doors stop first and hand the collector what their clients sent; the
        # pipeline commits what is queued on the collector before it stops. After a
        # failed start, either thread may not exist, or exist and never have started.
        for door in self.running.values():
            door.stop()
            await asyncio.to_thread(door.join)
        if self.replica is not None:  # gives up the leadership at once, if held
            await asyncio.to_thread(self.replica.stop)
        threads = [getattr(self, name, None) for name in ("snapshots", "pipeline")]
        for thread in threads:
            if thread is not None:
                thread.stop()
        for thread in threads:
            if thread is not None:
                await asyncio.to_thread(thread.join)
        # After the pipeline's last commit, before the log closes: a final flush.
        if self.archiver is not None:
            self.archiver.stop()
            await asyncio.to_thread(self.archiver.join)

    async def close(self) -> None:
        if not hasattr(self, "store"):  # the log never opened
            return
        await asyncio.to_thread(self.store.close)
        log.info("event log closed", extra={"sequence": self.store.last_sequence()})

    # ------------------------------------------------------------------ admin
    async def publish(self, request: PublishRequest) -> dict[str, Any]:
        if request.data_base64 is not None:
            try:
                data = base64.b64decode(request.data_base64, validate=True)
            except ValueError:
                raise HTTPException(422, "data_base64 is not valid base64") from None
        else:
            data = msgpack.packb(request.data, use_bin_type=True)
        event_id = request.uuid or str(uuidlib.uuid4())
        stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        batch = ext.PubBatch(
            (ext.EventData(request.topic, request.producer, stamp, event_id, data),), confirm=True
        )
        async with self._publish_lock:
            await self.publisher.send_multipart(ext.encode(batch))
            try:
                frames = await asyncio.wait_for(self.publisher.recv_multipart(), 10)
            except TimeoutError:
                raise HTTPException(503, "the event bus did not confirm in time") from None
        reply = ext.decode_collector_reply(frames)
        if isinstance(reply, ext.Error):
            # A replica that is not the leader, or whose in-sync replicas lag (ADR 0009).
            unavailable = reply.reason.startswith(ext.UNAVAILABLE + ":")
            raise HTTPException(503 if unavailable else 422, reply.reason)
        if not reply.sequences:
            raise HTTPException(500, "no confirmation for the event")
        return {"seq": reply.sequences[0][1], "uuid": event_id, "topic": request.topic}

    async def _read(self, fn_name: str, *args: Any) -> Any:
        def call() -> Any:
            reader = SqliteEventLogReader(self.log_path)
            try:
                return getattr(reader, fn_name)(*args)
            finally:
                reader.close()

        return await asyncio.to_thread(call)

    def counters(self) -> dict[str, Any]:
        """Running totals since the start: events in, stored, duplicates, sent, and what
        was refused (``rejected``) or dropped for a slow peer (``dropped``), by door."""
        families = list(self.registry.collect())
        rejected = family_totals(families, "zbus_eventbus_rejected", "socket")
        dropped = family_totals(families, "zbus_eventbus_overflows", "socket")
        if self.mc0 is not None:
            rejected["mc0"] = sum(family_totals(families, "zbus_eventbus_mc0_errors").values())
            dropped["mc0"] = sum(family_totals(families, "zbus_eventbus_mc0_dropped").values())
        total = family_totals(families, "zbus_eventbus_events_stored").get("", 0.0)
        return {
            "received": int(family_totals(families, "zbus_eventbus_events_received").get("", 0)),
            "stored": int(total),
            "duplicates": int(family_totals(families, "zbus_eventbus_events_duplicate").get("", 0)),
            "broadcast": {
                k: int(v)
                for k, v in sorted(
                    family_totals(families, "zbus_eventbus_events_broadcast", "socket").items()
                )
            },
            "rejected": {k: int(v) for k, v in sorted(rejected.items())},
            "dropped": {k: int(v) for k, v in sorted(dropped.items())},
        }

    async def doors(self, peers: dict[str, int]) -> dict[str, Any]:
        """Each front door's endpoint, connected peers and subscriptions."""
        out: dict[str, Any] = {
            "spec": {
                "endpoint": self.endpoints.get("snapshot"),
                "peers": peers,
                "subscribers": peers.get("publisher", 0),
                "subscriptions": len(self.pipeline.subscriptions.prefixes),
            }
        }
        if self.mc0 is not None:
            core = self.mc0.core
            out["mc0"] = {
                "endpoint": self.endpoints.get("mc0"),
                "peers": {"connections": len(core.sessions)},
                "subscribers": len(core.sessions),
                "subscriptions": core.topics.count,
            }
        if self.pppp is not None:
            out["pppp"] = await read_summary(self.pppp)  # computed on the door's thread
        return out

    def add_routes(self, app: FastAPI) -> None:
        add_route(app, lambda: self.replica)

        @app.post("/api/v1/events", dependencies=[TokenRequired], tags=["events"])
        async def post_event(request: PublishRequest) -> dict[str, Any]:
            """Publish one event; answers once it is in the log, with its sequence."""
            return await self.publish(request)

        @app.get("/api/v1/events", tags=["events"])
        async def recent_events(
            prefix: str = "",
            limit: int = Query(100, ge=1, le=1000),
            after: int = Query(0, ge=0, le=2**64 - 1),
        ) -> dict[str, Any]:
            """The newest events under a topic prefix, newest first; with ``after``, only
            those above that sequence (a live tail asks with the last one it has)."""
            events = await self._read("recent", prefix, limit, after)
            return {"events": [event_json(e) for e in events]}

        @app.get("/api/v1/snapshot", tags=["events"])
        async def snapshot(
            prefix: str = "",
            after: str | None = None,
            limit: int = Query(1000, ge=1, le=ext.MAX_LIMIT),
        ) -> dict[str, Any]:
            """The latest event of every topic under a prefix, by topic, one page at a time."""
            page = await self._read("snapshot_page", (prefix,), 0, after, limit)
            return {
                "sequence": page.sequence,
                "next": page.next,
                "events": [event_json(e) for e in page.events],
            }

        @app.get("/api/v1/topics", tags=["events"])
        async def topics(
            prefix: str = "", after: str | None = None, limit: int = Query(100, ge=1, le=10_000)
        ) -> dict[str, Any]:
            """Topics with their event counts, bytes, last sequence and its time; paged
            with ``next`` (the last topic of a full page)."""
            stats = await self._read("topics", prefix, limit, after)
            return {
                "topics": [
                    {
                        "topic": t.topic,
                        "count": t.count,
                        "bytes": t.bytes,
                        "last_seq": t.last_seq,
                        "last_ts": t.last_ts,
                    }
                    for t in stats
                ],
                "next": stats[-1].topic if len(stats) == limit else None,
            }

        @app.get("/api/v1/bus", tags=["events"])
        async def bus() -> dict[str, Any]:
            """Sequence, log size, publish rate, connected peers and subscriptions."""
            stats = await self._read("stats")
            peers = dict(self.pipeline.peer_counts)
            peers["snapshot"] = self.snapshots.peers
            return {
                "sequence": self.store.last_sequence(),
                "log": {
                    "first_seq": stats.first_seq,
                    "events": stats.events,
                    "topics": stats.topics,
                    "size_bytes": stats.size_bytes,
                },
                "publish_rate": round(self.rate.rate(), 1),
                "peers": peers,
                "subscriptions": sorted(
                    p.decode("utf-8", "replace") for p in self.pipeline.subscriptions.prefixes
                ),
                "compat": self.settings.compat,
                "peer_bounds": self.settings.bounds().table(),
                "archive": {"enabled": False} if self.archiver is None else self.archiver.status(),
                "counters": self.counters(),
                "doors": await self.doors(peers),
            }

        @app.get("/api/v1/pppp", tags=["pppp"])
        async def pppp(
            after: str | None = Query(None, description="subscriber identity (hex) to page after"),
            limit: int = Query(100, ge=1, le=1000),
        ) -> dict[str, Any]:
            """The PPPP door: channels (sequence, subscribers, backlog) and subscribers."""
            if self.pppp is None:
                raise HTTPException(409, "the PPPP door is off (ZBUS_PPPP_PORT unset)")
            try:
                return await read_status(self.pppp, after, limit)
            except ValueError as exc:
                raise HTTPException(422, str(exc)) from None

        @app.post("/api/v1/archive/flush", dependencies=[TokenRequired], tags=["archive"])
        async def archive_flush() -> dict[str, Any]:
            """Archive every event logged so far, now; answers the new archived mark."""
            if self.archiver is None:
                raise HTTPException(409, "the archive is off (ZBUS_ARCHIVE=false)")
            try:
                mark = await asyncio.wrap_future(self.archiver.request_flush())
            except ArchiveError as exc:
                raise HTTPException(503, f"archive flush failed: {exc}") from None
            return {"archived_through": mark, "lag": self.archiver.lag()}
