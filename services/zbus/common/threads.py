"""The base of the threads that own a service's hot-path sockets (blocking pollers)."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)


class SocketThread(threading.Thread):
    """A daemon thread that opens its sockets, runs its loop until stopped, and closes.

    Subclasses implement :meth:`open` (create and bind; a failure is reported through
    :attr:`failed` once :attr:`ready` is set, and the service fails its start),
    :meth:`loop` (run until :attr:`halted`), and :meth:`close` (release whatever
    :meth:`open` got, even when it failed half-way).
    """

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.ready = threading.Event()
        self.failed: BaseException | None = None
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    @property
    def halted(self) -> bool:
        return self._halt.is_set()

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
            return
        self.ready.set()
        try:
            self.loop()
        except Exception:
            log.exception("%s failed", self.name)
            self.failed = RuntimeError(f"{self.name} thread died")
        finally:
            self.close()
