"""The service base: one asyncio loop running the ZeroMQ tasks and the admin API.

A service subclasses :class:`Service` and fills in the hooks:

- :meth:`Service.start` binds its sockets (through :meth:`Service.bind`) and opens storage;
- :meth:`Service.background` returns the long-running coroutines (socket readers, timers);
- :meth:`Service.drain` flushes what is pending once the service stops accepting work;
- :meth:`Service.close` releases storage;
- :meth:`Service.add_routes` adds its admin routes.

:meth:`Service.drain` and :meth:`Service.close` run after a failed start too, so they
release only what :meth:`Service.start` got before it failed (a thread that never started
is not joined, a store that never opened is not closed).

Shutdown (SIGTERM, SIGINT, :meth:`Service.request_stop`, or the lifeline pipe from the
process that started the service closing, see :mod:`zbus.runtime.lifeline`): readiness
goes false, the background tasks are cancelled (no new work is taken), :meth:`drain`
runs, then sockets close with linger 0, the context terminates and the admin server
stops; all of it inside ``shutdown_timeout`` seconds, after which whatever is left is
cancelled.

A part the service cannot serve without that fails while it runs (a thread marked with
:meth:`Service.essential`, a background task) is logged with its cause and stops the
service the same way (:meth:`Service.fail`); ``/healthz`` then answers 503, and the
process exits with status 1, so that a supervisor restarts it. Exit statuses: 0 stopped
when asked, 1 stopped by such a failure, 2 could not start (configuration).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import uvicorn
import zmq
import zmq.asyncio
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Gauge, Info, ProcessCollector

from zbus.catalog.client.node import RegistrationDenied
from zbus.common.clock import Clock, SystemClock
from zbus.common.logs import configure_logging
from zbus.common.security import (
    OPEN_DOMAIN,
    KeyPair,
    ZapAllowList,
    client_keys,
    load_keys,
    make_server,
)
from zbus.common.settings import ConfigError, ServiceSettings
from zbus.common.threads import EssentialThread
from zbus.common.version import __version__
from zbus.runtime.admin import create_admin_app
from zbus.runtime.lifeline import watch_lifeline
from zbus.runtime.logship import install_log_shipping
from zbus.runtime.registration import CatalogRegistration, name_taken
from zbus.runtime.signals import defer_stop_signals, deferred_stop_signal

log = logging.getLogger(__name__)

#: Seconds before registering again when the catalog says the name is taken: the first
#: wait, doubling up to the longest.
NAME_TAKEN_RETRY = (0.5, 5.0)
_WATCH_EVERY = 1.0  # seconds between looks at the essential threads that have no hook


class _AdminServer(uvicorn.Server):
    """uvicorn without its own signal handling: the service owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class Service:
    """Base of every zbus service process."""

    name: ClassVar[str] = "service"

    def __init__(self, settings: ServiceSettings, *, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.registry = CollectorRegistry()
        self.ctx: zmq.asyncio.Context = zmq.asyncio.Context()
        self.endpoints: dict[str, str] = {}
        self.admin_url: str | None = None
        self.started_at = self.clock.time()
        self._started_mono = self.clock.monotonic()
        self._sockets: list[zmq.Socket[Any]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()
        self._ready = False
        self._keys: KeyPair | None = None
        self._zap: ZapAllowList | None = None
        self._admin: _AdminServer | None = None
        self._admin_task: asyncio.Task[None] | None = None
        self._registration: CatalogRegistration | None = None
        self._registration_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._essential: list[threading.Thread] = []
        #: Why the service stopped by itself (:meth:`fail`); None while it has not.
        self.failure: str | None = None
        self.admin_app: FastAPI = create_admin_app(self)
        ProcessCollector(registry=self.registry)
        Info("zbus_service", "The service and its version", registry=self.registry).info(
            {"service": self.name, "version": __version__}
        )
        Gauge(
            "zbus_service_uptime_seconds",
            "Seconds since the service started",
            registry=self.registry,
        ).set_function(self.uptime)

    # ----------------------------------------------------------------- hooks
    async def start(self) -> None:
        """Bind sockets and open storage."""

    def background(self) -> Sequence[Coroutine[Any, Any, None]]:
        """The long-running coroutines of the service (readers, timers)."""
        return ()

    async def drain(self) -> None:
        """Flush what is pending; runs after the background tasks were stopped."""

    async def close(self) -> None:
        """Release storage; runs after :meth:`drain`, before the sockets close."""

    def add_routes(self, app: FastAPI) -> None:
        """Add the service's own admin routes."""

    def checks(self) -> dict[str, bool]:
        """Extra readiness checks of the service (name -> passing)."""
        return {}

    # --------------------------------------------------------------- helpers
    def uptime(self) -> float:
        return self.clock.monotonic() - self._started_mono

    def readiness(self) -> dict[str, bool]:
        checks = {"started": self._ready, **self.checks()}
        if self._registration is not None:
            checks["catalog"] = self._registration.registered
        return checks

    def _register(self) -> None:
        """Register with the catalog when one is configured (the catalog itself does not)."""
        endpoint = self.settings.catalog_endpoint
        if not endpoint or self.name == "catalog":
            return
        self._registration = CatalogRegistration(self, endpoint)
        self._registration_task = asyncio.create_task(self._keep_registered(endpoint))

    async def _keep_registered(self, endpoint: str) -> None:
        delay = NAME_TAKEN_RETRY[0]
        while True:
            assert self._registration is not None
            try:
                await self._registration.run()
                return
            except asyncio.CancelledError:
                raise
            except RegistrationDenied as exc:
                if not name_taken(exc):  # denied by policy: stay up, unready, and say why
                    log.error("catalog registration failed", extra={"error": str(exc)})
                    return
                # The name's last holder, most often this very service before a restart
                # (kill -9, a container restarted), stays live in the catalog until its
                # heartbeats are missed; then the name is free again.
                log.warning(
                    "catalog registration denied: the name is taken; trying again",
                    extra={"error": str(exc), "retry_seconds": delay},
                )
            except Exception as exc:
                log.error("catalog registration failed", extra={"error": str(exc)})
                return
            # Backoff between attempts (a retry policy, not a synchronisation point).
            await asyncio.sleep(delay)
            delay = min(delay * 2, NAME_TAKEN_RETRY[1])
            self._registration = CatalogRegistration(self, endpoint)

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": __version__,
            "uptime_seconds": round(self.uptime(), 3),
            "started_at": self.started_at,
            "pid": os.getpid(),
            "endpoints": {**self.endpoints, "admin": self.admin_url},
        }

    def bind(
        self,
        kind: int,
        name: str,
        port: int,
        *,
        open_zap: bool = False,
        options: Mapping[int, int] | None = None,
    ) -> zmq.asyncio.Socket:
        """A new asyncio socket bound to ``tcp://host:port`` (CURVE when configured).

        ``port=0`` binds any free port; the endpoint really bound is recorded in
        :attr:`endpoints` under ``name``. With ``open_zap`` the ZAP handler admits any
        CURVE key on this socket, and the service checks the peer's key itself.
        ``options`` (``zmq.MAXMSGSIZE``, ``zmq.RCVHWM``, ...) are set before the bind:
        ZeroMQ gives each connection the options its socket had when it was bound.

        Raises:
            ConfigError: the port cannot be bound (in use, or not an address of this host).
        """
        sock = self.ctx.socket(kind)
        self.secure(sock)
        if open_zap:
            sock.zap_domain = OPEN_DOMAIN.encode()
        for option, value in (options or {}).items():
            sock.setsockopt(option, value)
        self._sockets.append(sock)
        try:
            sock.bind(f"tcp://{self.settings.host}:{port}")
        except zmq.ZMQError as exc:
            raise ConfigError(
                f"cannot bind the {name} port {self.settings.host}:{port}: {exc.strerror}"
            ) from None
        self.endpoints[name] = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        return sock

    def own(self, sock: zmq.Socket[Any]) -> None:
        """Close ``sock`` with the service's own sockets at shutdown."""
        self._sockets.append(sock)

    @property
    def curve_keys(self) -> KeyPair | None:
        """This service's CURVE key pair (``curve_secret_key``), once started."""
        return self._keys

    def curve_client(self, server_key: Path | None) -> tuple[KeyPair, bytes] | None:
        """``(this service's key pair, the server's public key)`` for a client socket of
        this service to a CURVE server whose public key file is ``server_key``; None when
        either is not configured."""
        if server_key is None or self._keys is None:
            return None
        return self._keys, load_keys(server_key).public

    def admit_only(self, domain: str, keys: frozenset[bytes]) -> None:
        """Sockets whose ``zap_domain`` is ``domain`` admit only ``keys`` (CURVE on):
        a ZAP handler is started for it when the service has no allow-list."""
        if self._keys is None:
            return
        if self._zap is None:
            self._zap = ZapAllowList(zmq.Context.shadow(self.ctx), None)
            self._zap.start()
            self.essential(self._zap.thread)
        self._zap.admit(domain, keys)

    @property
    def allowed_client_keys(self) -> frozenset[bytes] | None:
        """The CURVE client keys of the ZAP allow-list, or None when there is none."""
        return None if self._zap is None else self._zap.keys

    def secure(self, sock: zmq.Socket[Any]) -> None:
        """Make ``sock`` a CURVE server when the service has a key configured."""
        if self._keys is not None:
            make_server(sock, self._keys)

    def request_stop(self) -> None:
        """Begin a graceful shutdown (safe to call more than once, from the loop)."""
        self._stop.set()

    def fail(self, reason: str) -> None:
        """Stop because a part the service cannot serve without failed (from the loop).

        The first reason is kept in :attr:`failure` and logged; ``/healthz`` answers 503
        from now on, and :func:`run` exits with status 1 once the service has stopped.
        """
        if self.failure is None:
            self.failure = reason
            log.error("the service cannot serve any more; stopping", extra={"error": reason})
        self.request_stop()

    def essential(self, thread: threading.Thread) -> None:
        """Mark ``thread`` as one the service cannot serve without.

        When it ends while it was not asked to stop, the service :meth:`fail`s: at once
        for an :class:`~zbus.common.threads.EssentialThread` (through its death hook,
        with the cause), within a second for any other thread once it has started.
        """
        self._essential.append(thread)
        if isinstance(thread, EssentialThread):
            thread.on_death(self._thread_died)

    def _thread_died(self, thread: EssentialThread, cause: BaseException | None) -> None:
        # In the dying thread: hand over to the loop, which owns the shutdown.
        reason = f"thread {thread.name} " + (
            f"died: {cause!r}" if cause is not None else "ended without being asked to"
        )
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
                loop.call_soon_threadsafe(self.fail, reason)
                return
        if self.failure is None:  # after the loop: run() still exits with status 1
            self.failure = reason

    async def _watch_essentials(self) -> None:
        """Fail when a started essential thread is gone (those without a death hook)."""
        while True:
            for thread in self._essential:
                if thread.ident is not None and not thread.is_alive():
                    halted = isinstance(thread, EssentialThread) and thread.halted
                    if not halted:
                        self.fail(f"thread {thread.name} is gone")
            await asyncio.sleep(_WATCH_EVERY)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # --------------------------------------------------------------- running
    async def run(self) -> None:
        """Run until stopped (a signal, :meth:`request_stop`, or the lifeline closing);
        returns once everything is closed."""
        loop = self._loop = asyncio.get_running_loop()
        handled: list[signal.Signals] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._on_signal, sig)
                handled.append(sig)
        unwatch: Callable[[], None] | None = None
        if (early := deferred_stop_signal()) is not None and early in handled:
            self._on_signal(early)  # asked to stop while it was still loading: start, stop
        try:
            if self.settings.lifeline_fd is not None:
                unwatch = watch_lifeline(loop, self.settings.lifeline_fd, self.request_stop)
            await self._start_all()
            settle_garbage_collector()
            log.info("service ready", extra={"endpoints": self.info()["endpoints"]})
            self._register()
            await self._stop.wait()
        finally:
            await self._shutdown()
            if unwatch is not None:
                unwatch()
            for sig in handled:
                loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("signal received, shutting down", extra={"signal": sig.name})
        self.request_stop()

    async def _start_all(self) -> None:
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        if self.settings.curve_secret_key is not None:
            self._keys = load_keys(self.settings.curve_secret_key)
            if self.settings.curve_allowed_clients is not None:
                self._zap = ZapAllowList(
                    zmq.Context.shadow(self.ctx), self.settings.curve_allowed_clients
                )
                self._zap.start()
                self.essential(self._zap.thread)  # no ZAP handler: no CURVE client gets in
        elif self.settings.curve_allowed_clients is not None:
            raise ConfigError("curve_allowed_clients needs curve_secret_key as well")
        for name in ("catalog_public_key", "eventbus_public_key", "broker_public_key"):
            if getattr(self.settings, name) is not None and self._keys is None:
                raise ConfigError(f"{name} needs curve_secret_key as well")
        await self.start()
        await self._start_admin()
        background = (*self.background(), self._watch_essentials())
        self._tasks = [asyncio.create_task(self._guard(c)) for c in background]
        self._ready = True

    async def _guard(self, coro: Coroutine[Any, Any, None]) -> None:
        """A background task that fails stops the service instead of dying unseen."""
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("background task failed; stopping the service")
            name = getattr(coro, "__qualname__", "of the service")
            self.fail(f"background task {name} failed: {exc!r}")

    async def _start_admin(self) -> None:
        sock = _admin_listener(self.settings.host)
        try:
            sock.bind((self.settings.host, self.settings.admin_port))
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"cannot bind admin port {self.settings.host}:{self.settings.admin_port}: {exc}"
            ) from None
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        self.admin_url = f"http://{shown}:{port}"
        config = uvicorn.Config(
            self.admin_app,
            log_config=None,
            lifespan="off",
            timeout_graceful_shutdown=1,
            access_log=False,
        )
        self._admin = _AdminServer(config)
        self._admin_task = asyncio.create_task(self._admin.serve(sockets=[sock]))
        while not self._admin.started:
            if self._admin_task.done():
                await self._admin_task
                raise ConfigError("admin server stopped during start-up")
            await asyncio.sleep(0.005)

    async def _shutdown(self) -> None:
        self._ready = False
        self._stop.set()
        if self._registration is not None and self._registration_task is not None:
            await self._registration.stop()  # DISCONNECT: the catalog forgets us now
            self._registration_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._registration_task
        try:
            async with asyncio.timeout(self.settings.shutdown_timeout):
                await self._stop_tasks()
                await self.drain()
                await self.close()
        except TimeoutError:
            log.error(
                "graceful shutdown exceeded its deadline; forcing",
                extra={"deadline_seconds": self.settings.shutdown_timeout},
            )
        except Exception:
            log.exception("error during shutdown; forcing")
        await self._stop_tasks()
        for sock in self._sockets:
            sock.close(linger=0)
        self._sockets.clear()
        if self._zap is not None:
            self._zap.stop()
        self.ctx.term()
        await self._stop_admin()
        log.info("service stopped")

    async def _stop_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _stop_admin(self) -> None:
        if self._admin is None or self._admin_task is None:
            return
        self._admin.should_exit = True
        try:
            async with asyncio.timeout(2):
                await self._admin_task
        except TimeoutError:
            self._admin.force_exit = True
            self._admin_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._admin_task


def _admin_listener(host: str) -> socket.socket:
    """The admin API's listening socket, not yet bound.

    A response goes out in two writes (headers, then body). Under Nagle's algorithm the
    second waits for the ACK of the first, which a client on a kept-alive connection
    delays by 40 ms: a request on a kept-alive connection took 44 ms instead of 1.
    asyncio sets TCP_NODELAY on every connection it accepts, but only when the listening
    socket's protocol is IPPROTO_TCP, and a socket made with protocol 0 is not; so the
    protocol is given. TCP_NODELAY on the listener as well: Linux copies it to every
    accepted socket.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def main(service_class: type[Service], settings_class: type[ServiceSettings]) -> None:
    """Entry point of ``python -m zbus.<name>``: settings, logging, run."""
    run(service_class, settings_class, sys.argv[1:])


# The collector's generation-0 threshold: a collection every this many allocations
# (CPython's default is 700). A service's hot paths allocate a short-lived object per
# event or job (a snapshot of 1,000,000 topics: as many events), and at 700 the
# collections cost the event bus a quarter of its CPU there; cycles are still collected,
# a few thousand times less often.
GC_GENERATION0 = 50_000


def settle_garbage_collector() -> None:
    """Once the service has started: collect, then freeze what start-up made (modules,
    the admin API, settings), so that no later full collection walks it again, and
    collect less often."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GENERATION0, gen1, gen2)


def run(
    service_class: type[Service], settings_class: type[ServiceSettings], argv: Sequence[str]
) -> None:
    """Run one service as the process's program, until it stops; exit status 2 when it
    could not start, 1 after a failure. A stop signal before the service runs, or after,
    while the process ends, is a graceful stop, never a death by signal."""
    defer_stop_signals()
    try:
        settings = settings_class.load(argv)
    except ConfigError as exc:
        print(f"zbus {service_class.name}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    configure_logging(service_class.name, settings.log_level)
    shipper = None
    service: Service | None = None
    try:
        if settings.eventbus_endpoint:
            shipper = install_log_shipping(
                service_class.name, settings.eventbus_endpoint, curve=_log_shipping_curve(settings)
            )
        service = service_class(settings)
        asyncio.run(service.run())
        defer_stop_signals()  # its handlers are gone; the process is still ending
    except ConfigError as exc:
        log.error("cannot start", extra={"error": str(exc)})
        raise SystemExit(2) from None
    finally:
        if shipper is not None:
            shipper.close()
    if service.failure is not None:
        # A supervisor (the launcher, compose, Kubernetes) restarts a service that exits
        # non-zero; one that stopped serving must not look like a clean stop.
        log.error("exiting after a failure", extra={"error": service.failure, "status": 1})
        raise SystemExit(1)


def _log_shipping_curve(settings: ServiceSettings) -> tuple[KeyPair, bytes] | None:
    """What :meth:`Service.curve_client` gives for the bus, read before the service runs:
    log shipping starts first, so that the service's own start is shipped too."""
    if settings.eventbus_public_key is None or settings.curve_secret_key is None:
        return None  # a public key alone: the service refuses to start and says why
    return client_keys(settings.curve_secret_key, settings.eventbus_public_key, "curve_secret_key")
