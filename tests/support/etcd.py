"""A real etcd for the integration tests: one member on 127.0.0.1, its data in a folder
of the test's, killed (by its pid) when the ``with`` block ends.

Needs the Debian package ``etcd-server`` (etcd 3.4); `.ci/run` installs it.

Its client and peer ports are chosen before it starts (it is told them on its command
line) and kept for its life, so that :meth:`EtcdServer.kill` (``kill -9``: etcd down,
as a crash leaves it) and :meth:`EtcdServer.start` bring it back where its clients look
for it, with the data it had. While it is down nothing listens there: the ports lie
below the kernel's ephemeral range (see ``tests.support.ports``), where no outgoing
connection lands meanwhile.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.ports import HeldPorts
from tests.support.waiting import wait_until


def etcd_binary() -> str:
    """The path of etcd.

    Raises:
        AssertionError: etcd is not installed.
    """
    path = shutil.which("etcd")
    assert path is not None, "etcd is missing: install the Debian package etcd-server"
    return path


class EtcdServer:
    """One etcd member, its data under ``root``; started by :func:`etcd_server`.

    Attributes:
        endpoint: its client URL, ``http://127.0.0.1:PORT``.
        data_dir: its data, kept across :meth:`kill` and :meth:`start`.
    """

    def __init__(self, root: Path, name: str = "zbus-test") -> None:
        self.name = name
        self.data_dir = root / "data"
        self.log_path = root / "etcd.log"
        # Held (bound, not listening) until etcd is about to bind them.
        self._held: HeldPorts | None = HeldPorts(2)
        self.client_port, self.peer_port = self._held.ports
        self.endpoint = f"http://127.0.0.1:{self.client_port}"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """Its process id while it runs (stopped, too), else None."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def start(self, timeout: float = 30.0) -> None:
        """Start it (again, on the same ports and data) and wait until it is healthy.

        Raises:
            AssertionError: it exited, or was not healthy within ``timeout`` units.
        """
        assert self.pid is None, "etcd runs already"
        self._release()
        peer = f"http://127.0.0.1:{self.peer_port}"
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [
                    etcd_binary(),
                    f"--name={self.name}",
                    f"--data-dir={self.data_dir}",
                    f"--listen-client-urls={self.endpoint}",
                    f"--advertise-client-urls={self.endpoint}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster={self.name}={peer}",
                    "--initial-cluster-state=new",  # ignored once the data dir has a member
                    "--logger=zap",
                    "--log-level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until(self._healthy, timeout, what=f"etcd healthy at {self.endpoint}")

    def _healthy(self) -> bool:
        proc = self._proc
        assert proc is not None
        if proc.poll() is not None:
            raise AssertionError(
                f"etcd exited {proc.returncode}:\n{self.log_path.read_text(errors='replace')}"
            )
        try:
            with urllib.request.urlopen(f"{self.endpoint}/health", timeout=1) as answer:
                return bool(json.load(answer).get("health") == "true")
        except (OSError, ValueError):
            return False

    def kill(self) -> None:
        """``kill -9`` it, as a crash would, and wait for it to go."""
        self._release()
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                proc.kill()  # a paused one too
            proc.wait(30)
        self._proc = None

    def _release(self) -> None:
        if self._held is not None:
            self._held.release()
            self._held = None

    def restart(self) -> None:
        """:meth:`kill` it, then :meth:`start` it again on the same data."""
        self.kill()
        self.start()

    def pause(self) -> None:
        """Stop it (``SIGSTOP``): its ports accept connections, it answers nothing."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let it run again after :meth:`pause`."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGCONT)


@contextmanager
def etcd_server(root: Path) -> Iterator[EtcdServer]:
    """A healthy etcd with its data and log under ``root`` (made if missing), killed at the
    end of the block whatever happens in it."""
    root.mkdir(parents=True, exist_ok=True)
    server = EtcdServer(root)
    try:
        server.start()
        yield server
    finally:
        server.kill()
