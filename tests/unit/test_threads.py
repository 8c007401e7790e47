"""SocketThread: a failed open or loop is reported, and close always runs."""

from __future__ import annotations

from zbus.common.threads import SocketThread


class _Probe(SocketThread):
    def __init__(self, fail_open: bool = False, fail_loop: bool = False) -> None:
        super().__init__("probe")
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
