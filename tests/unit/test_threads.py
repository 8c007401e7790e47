"""EssentialThread and SocketThread: a death (an exception, or an end nobody asked for)
is reported with its cause to the hooks; a requested stop is not; close always runs."""

from __future__ import annotations

import zmq

from zbus.common.clock import SYSTEM_CLOCK
from zbus.common.threads import EssentialThread, SocketThread


class _Probe(SocketThread):
    def __init__(self, fail_open: bool = False, fail_loop: bool = False) -> None:
        super().__init__("probe", zmq.Context.instance(), SYSTEM_CLOCK)
        self.fail_open, self.fail_loop = fail_open, fail_loop
        self.closed = 0
        self.looped = False

    def open(self) -> None:
        if self.fail_open:
            raise OSError("address in use")

    def loop(self) -> None:
        self.looped = True
        if self.fail_loop:
            raise RuntimeError("boom")
        while not self.halted:
            self._halt.wait(1)

    def close(self) -> None:
        self.closed += 1


def test_a_failed_open_is_reported_and_closed() -> None:
    probe = _Probe(fail_open=True)
    probe.start()
    assert probe.ready.wait(10)
    probe.join(10)
    assert isinstance(probe.failed, OSError) and probe.closed == 1 and not probe.looped


def test_a_failed_loop_is_reported_and_closed() -> None:
    probe = _Probe(fail_loop=True)
    probe.start()
    probe.join(10)
    assert isinstance(probe.failed, RuntimeError) and "probe" in str(probe.failed)
    assert probe.closed == 1


def test_stop_ends_the_loop_and_closes() -> None:
    probe = _Probe()
    probe.start()
    assert probe.ready.wait(10)
    probe.stop()
    probe.join(10)
    assert not probe.is_alive() and probe.failed is None and probe.closed == 1


def _watched(thread: EssentialThread) -> list[tuple[str, BaseException | None]]:
    deaths: list[tuple[str, BaseException | None]] = []
    thread.on_death(lambda t, cause: deaths.append((t.name, cause)))
    return deaths


def test_an_essential_thread_that_raises_reports_its_death_and_cause() -> None:
    def work() -> None:
        raise ValueError("bad row")

    thread = EssentialThread("worker-x", work)
    deaths = _watched(thread)
    thread.start()
    thread.join(10)
    assert len(deaths) == 1 and deaths[0][0] == "worker-x"
    assert isinstance(deaths[0][1], ValueError) and thread.cause is deaths[0][1]


def test_an_essential_thread_that_returns_unasked_is_a_death_too() -> None:
    thread = EssentialThread("quitter", lambda: None)
    deaths = _watched(thread)
    thread.start()
    thread.join(10)
    assert deaths == [("quitter", None)]


def test_a_stopped_essential_thread_is_not_a_death() -> None:
    thread = EssentialThread("polite")
    thread.work = lambda: thread._halt.wait(10)  # type: ignore[method-assign]
    deaths = _watched(thread)
    thread.start()
    thread.stop()
    thread.join(10)
    assert deaths == [] and not thread.is_alive()


def test_a_socket_thread_whose_loop_fails_reports_its_death_after_closing() -> None:
    probe = _Probe(fail_loop=True)
    closed_at_death: list[int] = []
    probe.on_death(lambda t, cause: closed_at_death.append(probe.closed))
    probe.start()
    probe.join(10)
    assert closed_at_death == [1] and isinstance(probe.cause, RuntimeError)


def test_a_socket_thread_that_fails_to_open_is_not_a_death() -> None:
    probe = _Probe(fail_open=True)
    deaths = _watched(probe)
    probe.start()
    probe.join(10)
    assert deaths == [] and isinstance(probe.failed, OSError)
