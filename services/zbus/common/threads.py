"""Threads a service cannot serve without, and the base of those that own hot-path
sockets (blocking pollers).

A thread that dies must not leave its service looking alive: an :class:`EssentialThread`
logs the cause and calls its death hooks whenever its work ends without a requested
:meth:`~EssentialThread.stop`, by an exception or by returning. The service runtime
(``zbus.runtime.service.Service.essential``) hooks in there and stops the service,
which then exits non-zero so that a supervisor restarts it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import zmq

from zbus.common.clock import Clock

log = logging.getLogger(__name__)

#: ``hook(thread, cause)``, called in the dying thread; ``cause`` is the exception that
#: ended its work, or None when the work returned without being asked to stop.
DeathHook = Callable[["EssentialThread", BaseException | None], None]


class EssentialThread(threading.Thread):
    """A daemon thread whose end, unless asked for with :meth:`stop`, is a failure.

    Give it a ``target`` or override :meth:`work`. Whoever owns the thread adds
    :meth:`on_death` hooks before starting it. A thread that runs its own stop signal
    (a queue sentinel, an event of its own) calls :meth:`stop` too, first, so that its
    end counts as asked for.
    """

    def __init__(self, name: str, target: Callable[[], object] | None = None) -> None:
        super().__init__(name=name, daemon=True)
        self._work_target = target
        self._halt = threading.Event()
        self._death_hooks: list[DeathHook] = []
        #: What ended the work: the exception, or None (still running, stopped, or
        #: returned by itself).
        self.cause: BaseException | None = None

    def stop(self) -> None:
        """Ask the thread to end; its end is then not a failure. Safe on a thread that
        never started."""
        self._halt.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end; at once when it never started (the service's
        start failed before it), where ``threading.Thread.join`` raises."""
        if self.ident is None:
            return
        super().join(timeout)

    @property
    def halted(self) -> bool:
        return self._halt.is_set()

    def on_death(self, hook: DeathHook) -> None:
        """Call ``hook`` when the thread's work ends without :meth:`stop` (any thread)."""
        self._death_hooks.append(hook)

    def work(self) -> None:
        """The thread's work: its ``target`` unless a subclass overrides this."""
        if self._work_target is not None:
            self._work_target()

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:
            self.cause = exc
            log.exception("%s failed", self.name)
        finally:
            self._died()

    def _died(self) -> None:
        if self.halted:
            return
        if self.cause is None:
            log.error("%s ended without being asked to stop", self.name)
        for hook in self._death_hooks:
            try:
                hook(self, self.cause)
            except Exception:  # a hook must not hide the others
                log.exception("death hook of %s failed", self.name)


class SocketThread(EssentialThread):
    """An essential thread that opens its sockets, runs its loop until stopped, and closes.

    Subclasses implement :meth:`open` (create and bind; a failure is reported through
    :attr:`failed` once :attr:`ready` is set, and the service fails its start),
    :meth:`loop` (run until :attr:`halted`), and :meth:`close` (release whatever
    :meth:`open` got, even when it failed half-way). A loop that fails, or that returns
    while not halted, is a death (see :class:`EssentialThread`).

    Its sockets come from ``ctx``, and it reads the time only from ``clock`` (monotonic
    for its deadlines, wall time for what it stamps), so that a test can drive it.
    """

    def __init__(self, name: str, ctx: zmq.Context[Any], clock: Clock) -> None:
        super().__init__(name)
        self.ctx = ctx
        self.clock = clock
        self.ready = threading.Event()
        self.failed: BaseException | None = None

    def open(self) -> None:
        raise NotImplementedError

    def loop(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        try:
            self.open()
        except BaseException as exc:
            self.failed = exc
            self.close()
            self.ready.set()
            return  # not a death: the service sees `failed` and fails its start
        self.ready.set()
        try:
            self.loop()
        except BaseException as exc:
            log.exception("%s failed", self.name)
            self.cause = exc
            self.failed = RuntimeError(f"{self.name} thread died: {exc!r}")
        finally:
            try:
                self.close()
            finally:
                self._died()
