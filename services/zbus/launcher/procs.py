"""What the launcher asks the operating system: processes, ports, admin APIs, logs."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "answers_ok",
    "describe_exit",
    "get_json",
    "held",
    "listening_pids",
    "parent_death_signal",
    "pid_alive",
    "pid_of",
    "tail",
    "who",
]


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (signal 0: nothing is sent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); it is not running.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def describe_exit(code: int) -> str:
    """A process's exit as ``Popen.returncode`` tells it: ``exit status 2``, ``killed by
    SIGKILL``."""
    if code >= 0:
        return f"exit status {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def parent_death_signal() -> Callable[[], None] | None:
    """What a started service runs before its program (Linux only): the kernel sends it
    SIGTERM when the launcher dies. None elsewhere; the lifeline pipe still stops it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    launcher = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != launcher:  # the launcher died before the prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def held(name: str, port: int) -> str | None:
    """What holds the admin port ``port`` of service ``name``, as a line to print; None
    when it is free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the service binds it: a port left in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            return None
        except OSError:
            pass
    info = get_json(f"http://127.0.0.1:{port}/api/v1/info")
    return f"port {port} ({name}'s admin port) is held by {who(info, port)}"


def who(info: Any, port: int) -> str:
    """The process at ``port``: the zbus service that answers there (``info`` from its
    ``/api/v1/info``) and its pid, else whichever process listens on it, if it is ours
    to see."""
    pid = pid_of(info)
    if pid is None:
        pids = listening_pids(port)
        pid = pids[0] if len(pids) == 1 else None
    name = info.get("name") if isinstance(info, dict) else None
    if isinstance(name, str):
        return f"the zbus service {name} (pid {pid})" if pid else f"the zbus service {name}"
    if pid is not None:
        return f"pid {pid} ({_cmdline(pid)})"
    return f"a process this user cannot see (`ss -ltnp 'sport = :{port}'` as root names it)"


def pid_of(info: Any) -> int | None:
    """The ``pid`` of an ``/api/v1/info`` answer, if it has one."""
    pid = info.get("pid") if isinstance(info, dict) else None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else None


def listening_pids(port: int) -> list[int]:
    """The pids of the processes with a TCP socket listening on ``port`` (Linux /proc)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local_address is HEXIP:HEXPORT; st 0A is LISTEN; the inode is field 9.
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].split(":")[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    pids: set[int] = set()
    if not inodes:
        return []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        pids.add(int(proc.name))
                        break
    return sorted(pids)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            words = fh.read().rstrip(b"\0").split(b"\0")
    except OSError:
        return "command unknown"
    text = " ".join(w.decode(errors="replace") for w in words)
    return text if len(text) <= 120 else text[:117] + "..."


def answers_ok(url: str, timeout: float = 1.0) -> bool:
    """Whether ``url`` answers 200 (whatever the body)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def get_json(url: str, timeout: float = 1.0) -> Any:
    """The JSON body of a 200 answer at ``url``; None for anything else."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def tail(path: Path, lines: int = 15) -> list[str]:
    """The last ``lines`` lines of a log file (none when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


@contextlib.contextmanager
def terminal_foreground() -> Iterator[None]:
    """Make this process the terminal's foreground group while the cluster runs.

    Ctrl-C sends SIGINT to the terminal's whole foreground group: under ``make up`` that
    is make too, which then dies of it (status 130) however cleanly the launcher stops.
    In a group of its own in the foreground, the launcher alone gets Ctrl-C, stops the
    cluster, and exits 0, and so does make. The group the terminal had is given back on
    the way out. Nothing changes when stdin is not a terminal or the launcher runs in
    the background.
    """
    try:
        fd = sys.stdin.fileno()
        before = os.tcgetpgrp(fd) if os.isatty(fd) else None
    except (OSError, ValueError):  # no stdin, or not a terminal of this session
        before = None
    if before is None or before != os.getpgrp():
        yield
        return
    try:
        os.setpgid(0, 0)
        _set_foreground(fd, os.getpgrp())
    except OSError:  # a session leader cannot move: it is in the foreground already
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            _set_foreground(fd, before)


def _set_foreground(fd: int, group: int) -> None:
    # A process not in the foreground group that changes it gets SIGTTOU, which would
    # stop it: ignored for the call, as shells do.
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(fd, group)
    finally:
        signal.signal(signal.SIGTTOU, old)
