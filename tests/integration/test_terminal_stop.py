"""Ctrl-C on a terminal stops the local cluster and leaves its parent unharmed.

``make up`` runs ``zbus up`` under make, in the terminal's foreground group, so a Ctrl-C
reaches both; make would die of it (status 130) however cleanly the cluster stopped.
Here a real pseudo-terminal runs ``sh -c 'zbus up ...; echo ...'``, the shell standing
for make (a non-interactive shell dies of SIGINT as make does), and the test types
Ctrl-C at it as a user would.
"""

from __future__ import annotations

import os
import pty
import select
import shlex
import sys
from pathlib import Path

import pytest

from tests.support.local_cluster import cluster_file, port_map
from tests.support.waiting import Deadline

ROOT = Path(__file__).resolve().parents[2]
CTRL_C = b"\x03"  # the terminal's interrupt character (stty intr), as a key press


def _read_until(fd: int, needle: bytes, seen: bytearray, deadline: Deadline) -> bool:
    """Read the terminal's output into ``seen`` until ``needle`` is in it (True) or the
    terminal closes (False)."""
    while needle not in seen:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline.left()))
        if not ready:
            raise AssertionError(f"no {needle!r} in time; the terminal showed:\n{seen.decode()}")
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: every process holding the terminal is gone
            return False
        if not chunk:
            return False
        seen += chunk
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux pseudo-terminal")
def test_ctrl_c_on_the_terminal_stops_the_cluster_and_its_parent_exits_0(tmp_path: Path) -> None:
    ports, held = port_map()
    config = cluster_file(tmp_path / "cluster.toml", ports, services=("catalog", "eventbus"))
    state = tmp_path / "state"
    up = [sys.executable, "-m", "zbus", "up", "--config", str(config), "--state-dir", str(state)]
    script = f"{shlex.join(up)}; echo parent saw status $?"
    held.release()
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session of its own on the terminal, as a login shell's job
        os.chdir(ROOT)
        os.execvp("sh", ["sh", "-c", script])
    seen = bytearray()
    try:
        deadline = Deadline(120, "the cluster to start")
        assert _read_until(fd, b"stops the cluster", seen, deadline)
        os.write(fd, CTRL_C)
        _read_until(fd, b"\x00", seen, deadline)  # to the end: the terminal closes
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    text = seen.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "stopping the cluster (Ctrl-C)" in text, text
    assert "catalog      stopped (exit 0)" in text and "eventbus     stopped (exit 0)" in text
    assert "parent saw status 0" in text, text
    assert not (state / "run" / "cluster.json").exists()
