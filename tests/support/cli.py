"""Running the ``zbus`` command as users do: ``python -m zbus ...`` in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from queue import Empty, Queue
from typing import IO, Any

from tests.support.waiting import UNIT

ROOT = Path(__file__).resolve().parents[2]


def zbus(
    *args: str,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m zbus ARGS`` to its end; its exit status, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "zbus", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout * UNIT,
        check=False,
    )


def zbus_json(*args: str, env: Mapping[str, str] | None = None) -> Any:
    """Run ``python -m zbus ARGS --json``, which must succeed; its output parsed."""
    done = zbus(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


class Streaming:
    """A streaming ``zbus`` command (``bus sub``, ``logs -f``) read line by line."""

    def __init__(self, *args: str, env: Mapping[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "zbus", *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: Queue[str | None] = Queue()
        self.err: Queue[str | None] = Queue()
        for stream, queue in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=_pump, args=(stream, queue), daemon=True).start()

    def line(self, stream: str = "out", timeout: float = 30.0) -> str:
        """The next line of stdout (or ``"err"``); fails when none comes in time."""
        queue = self.out if stream == "out" else self.err
        try:
            got = queue.get(timeout=timeout * UNIT)
        except Empty:
            raise AssertionError(f"no line on std{stream} within {timeout * UNIT:g} s") from None
        assert got is not None, f"std{stream} closed (exit {self.proc.poll()})"
        return got.rstrip("\n")

    def interrupt(self, timeout: float = 30.0) -> int:
        """Ctrl-C: SIGINT, then its exit status."""
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=timeout * UNIT)

    def rest(self, stream: str = "out") -> list[str]:
        """What is left on stdout (or ``"err"``) once the process ended."""
        queue = self.out if stream == "out" else self.err
        lines = []
        while (got := queue.get(timeout=10 * UNIT)) is not None:
            lines.append(got.rstrip("\n"))
        return lines

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _pump(stream: IO[str] | None, queue: Queue[str | None]) -> None:
    assert stream is not None
    for line in stream:
        queue.put(line)
    queue.put(None)
    stream.close()
