"""The event bus as a process of its own on free ports, for the benchmarks that measure it
(``eventbus``, ``mc0``, ``pppp_client``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.support.ports import released_port

ROOT = Path(__file__).resolve().parents[2]


class Bus:
    """``python -m zbus.eventbus`` on a free run of four ports and a free admin port."""

    def __init__(self, data_dir: Path, **env: str) -> None:
        self.data_dir = data_dir
        self.admin = released_port()
        self.port = released_port(4)
        base = {"ZBUS_DATA_DIR": str(data_dir), "ZBUS_LOG_LEVEL": "WARNING"}
        self.env = {**os.environ, **base, **env}

    def start(self) -> float:
        ports = [self.port + i for i in range(4)]
        for p in ports:  # the bus needs P..P+3; find a free run
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    self.port = released_port(4)
                    return self.start()
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "zbus.eventbus",
                "--port",
                str(self.port),
                "--admin-port",
                str(self.admin),
            ],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/readyz", timeout=1):
                    return time.perf_counter() - t0
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("the event bus exited during start-up") from None
                time.sleep(0.01)

    def ep(self, offset: int) -> str:
        return f"tcp://127.0.0.1:{self.port + offset}"

    def archived_through(self) -> int:
        """The archive's mark as the bus reports it (what its timer flushed so far)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/api/v1/bus", timeout=10) as r:
            return int((json.loads(r.read()).get("archive") or {}).get("archived_through") or 0)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
