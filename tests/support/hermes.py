"""The real Hermes, the DBP spec editor's catalog and client, for the integration tests.

Hermes (PyPI ``Hermes-lnestelroad`` 1.0.2) cannot share zbus's environment: its
``Client`` imports ``T`` from ``zmq.sugar.context``, which pyzmq removed in 26, and
zbus runs pyzmq 27. So it gets a virtualenv of its own, made from the suite's Python
(3.11 works) with pyzmq 25.1.2, the last line that has ``T`` and wheels for 3.11;
``netifaces`` builds from source, so a C compiler and the Python headers are needed.

The virtualenv is made once per machine and kept under ``ZBUS_PEERS_DIR`` (default
``~/.cache/zbus/peers``): about 15 s the first time, nothing after. A lock file keeps
two test runs from building it at once. Hermes is driven by ``hermes_peer.py``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.waiting import UNIT

#: What the Hermes virtualenv holds; a change makes a new one.
REQUIREMENTS = (
    "Hermes-lnestelroad==1.0.2",
    "pyzmq==25.1.2",
    "PyYAML==6.0.3",
    "netifaces==0.11.0",
)
DRIVER = Path(__file__).with_name("hermes_peer.py")


def peers_dir() -> Path:
    configured = os.environ.get("ZBUS_PEERS_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "zbus" / "peers"


def hermes_python() -> Path:
    """The Python of a virtualenv with Hermes installed, made on first use.

    Raises:
        RuntimeError: the virtualenv could not be made (with pip's output).
    """
    root = peers_dir()
    root.mkdir(parents=True, exist_ok=True)
    venv = root / "hermes-1.0.2"
    python = venv / "bin" / "python"
    stamp = venv / "zbus-requirements.txt"
    wanted = "\n".join(REQUIREMENTS) + "\n"
    with (root / "hermes.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == wanted and python.exists():
            return python
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(python), "-m", "pip", "install", "--quiet", *REQUIREMENTS],
            [str(python), "-c", "import Hermes.Client, Hermes.Service, Hermes.CoreCatalogService"],
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, timeout=600, check=False)
            if done.returncode != 0:
                raise RuntimeError(
                    f"cannot install Hermes for the tests: {' '.join(step)} exited "
                    f"{done.returncode}\n{done.stdout}\n{done.stderr}"
                )
        stamp.write_text(wanted)
    return python


def run_hermes(python: Path, *args: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Run one Hermes role to its end and return the JSON lines it printed.

    Raises:
        AssertionError: it failed or did not finish in ``timeout`` (its output attached).
    """
    try:
        done = subprocess.run(
            [str(python), str(DRIVER), *args],
            capture_output=True,
            text=True,
            timeout=timeout * UNIT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"Hermes {args[0]} did not finish in {timeout * UNIT:g} s\n"
            f"stdout: {exc.stdout!r}\nstderr: {exc.stderr!r}"
        ) from None
    if done.returncode != 0:
        raise AssertionError(
            f"Hermes {args[0]} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
        )
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@contextlib.contextmanager
def hermes_broker(python: Path, beacon_port: int) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """The real Hermes broker (``CoreCatalogService``) as a process: yields its ROUTER
    port and the process, and kills it at the end.

    Its output (it prints every frame it receives) goes to a file, not a pipe nobody
    reads, which would stop it once full.
    """
    with tempfile.TemporaryDirectory(prefix="hermes-broker-") as tmp:
        log_path = Path(tmp) / "broker.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                [str(python), "-u", str(DRIVER), "broker", str(beacon_port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        try:
            port = None
            deadline = time.monotonic() + 30 * UNIT
            while port is None:
                for line in log_path.read_text().splitlines():
                    if line.startswith('{"port"'):
                        port = int(json.loads(line)["port"])
                if port is None and (proc.poll() is not None or time.monotonic() > deadline):
                    raise AssertionError(
                        f"the Hermes broker did not start:\n{log_path.read_text()}"
                    )
                if port is None:
                    time.sleep(0.02)  # polling its log for the port, with a deadline
            yield port, proc
        finally:
            # Killed: its SIGTERM handler can leave a timer thread that keeps it alive.
            proc.kill()
            proc.wait()
