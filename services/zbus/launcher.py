"""The local cluster: every zbus service as a plain process on 127.0.0.1, no container engine.

``zbus up`` reads the cluster file (``deploy/local-cluster.toml``), starts each service in
order, waits until its ``/readyz`` answers 200, prints the admin URLs and then stays in
the foreground. Ctrl-C, SIGTERM or ``zbus down`` stops the services in reverse order,
each with SIGTERM and its graceful deadline, SIGKILL only past it.

Before it starts anything, the launcher makes sure every admin port is free, and it
counts a service ready only when the process answering at its admin port is the one it
started (the pid in ``/api/v1/info``): a port held by another cluster, from another
checkout or left by a launcher that died, is refused at once with what holds it.

Services do not outlive their launcher, even one killed with ``kill -9``: each gets the
read end of a pipe whose write end only the launcher holds (``ZBUS_LIFELINE_FD``; at its
end of file the service shuts down gracefully), and on Linux also a parent-death signal
(SIGTERM), which stops a service still starting, before it watches the pipe.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from zbus.common.settings import ConfigError

DEFAULT_CONFIG = Path("deploy/local-cluster.toml")
DEFAULT_STATE = Path(".zbus")
STOP_GRACE = 10.0


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """One service of the local cluster, as the cluster file describes it."""

    name: str
    module: str
    admin_port: int
    env: dict[str, str] = field(default_factory=dict)
    ready_timeout: float = 60.0


def load_cluster(path: Path) -> list[ServiceSpec]:
    """The services of the cluster file, in start order.

    Raises:
        ConfigError: the file is missing, not TOML, or an entry is incomplete.
    """
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"cluster file {path} not found") from None
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cluster file {path}: {exc}") from None
    entries = raw.get("service", [])
    if not isinstance(entries, list):
        raise ConfigError(f"cluster file {path}: [[service]] must be an array of tables")
    specs: list[ServiceSpec] = []
    for i, entry in enumerate(entries):
        where = f"cluster file {path}, service #{i + 1}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: not a table")
        try:
            name, module, port = entry["name"], entry["module"], entry["admin_port"]
        except KeyError as exc:
            raise ConfigError(f"{where}: missing key {exc.args[0]!r}") from None
        env = entry.get("env", {})
        timeout = entry.get("ready_timeout", 60.0)
        if not (isinstance(name, str) and isinstance(module, str)):
            raise ConfigError(f"{where}: name and module must be strings")
        if not isinstance(port, int) or not 0 < port < 65536:
            raise ConfigError(f"{where}: admin_port must be a port number")
        if not isinstance(env, dict) or not all(isinstance(v, str | int) for v in env.values()):
            raise ConfigError(f"{where}: env must map names to strings or numbers")
        if not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigError(f"{where}: ready_timeout must be a positive number")
        specs.append(
            ServiceSpec(name, module, port, {k: str(v) for k, v in env.items()}, float(timeout))
        )
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"cluster file {path}: service names must be unique")
    ports = [s.admin_port for s in specs]
    if len(set(ports)) != len(ports):
        raise ConfigError(f"cluster file {path}: admin ports must be unique")
    return specs


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop


class Cluster:
    """Starts, watches and stops the service processes of one local cluster."""

    def __init__(self, specs: list[ServiceSpec], state_dir: Path, out: IO[str]) -> None:
        self.specs = specs
        self.state_dir = state_dir
        self.out = out
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.pidfile = state_dir / "run" / "cluster.json"
        self._lifelines: list[int] = []  # write ends; the kernel closes them if we die
        self._preexec = _parent_death_signal()

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def run(self) -> int:
        """Start everything, wait for a stop request, stop everything. Returns an exit code."""
        running = read_pidfile(self.pidfile)
        if running is not None and pid_alive(running["launcher"]):
            self.say(
                f"a zbus cluster is already running (pid {running['launcher']}); "
                "stop it with `make down`"
            )
            return 1
        held = [line for spec in self.specs if (line := _held(spec)) is not None]
        if held:
            for line in held:
                self.say(line)
            self.say(
                "refusing to start: these ports are held (another zbus cluster, from another "
                "checkout or left by a launcher that died?); stop what holds them first "
                "(`make down` where it was started), or give this cluster other ports"
            )
            return 1
        old = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            try:
                for spec in self.specs:
                    self._start(spec)
                self._summary()
                self._watch()
            except _Stop:
                self.say("stopping the cluster")
            except ConfigError as exc:
                self.say(f"error: {exc}")
                return 1
            finally:
                # A second Ctrl-C while stopping must not leave orphans behind.
                for sig in old:
                    signal.signal(sig, signal.SIG_IGN)
                self._stop_all()
            return 0
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)

    def _start(self, spec: ServiceSpec) -> None:
        data = self.state_dir / "data" / spec.name
        logs = self.state_dir / "logs"
        data.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "ZBUS_HOST": "127.0.0.1",
            "ZBUS_ADMIN_PORT": str(spec.admin_port),
            "ZBUS_DATA_DIR": str(data),
            **spec.env,
        }
        read, write = os.pipe()  # the lifeline: the service stops at its end of file
        env["ZBUS_LIFELINE_FD"] = str(read)
        logfile = (logs / f"{spec.name}.log").open("ab")
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", spec.module],
                env=env,
                stdout=logfile,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches the launcher only; it stops the rest
                pass_fds=(read,),
                # The launcher runs no other thread, so a fork's child cannot inherit a
                # lock held elsewhere: the one case that makes preexec_fn unsafe.
                preexec_fn=self._preexec,  # noqa: PLW1509
            )
        except BaseException:
            os.close(write)
            raise
        finally:
            os.close(read)
            logfile.close()
        self._lifelines.append(write)
        self.procs[spec.name] = proc
        self._write_pidfile()
        url = f"http://127.0.0.1:{spec.admin_port}"
        deadline = time.monotonic() + spec.ready_timeout
        while True:
            code = proc.poll()
            if code is not None:
                raise ConfigError(
                    f"{spec.name} exited with code {code} during start-up; "
                    f"its log: {logs / f'{spec.name}.log'}\n{_tail(logs / f'{spec.name}.log')}"
                )
            info = _get_json(f"{url}/api/v1/info")
            if info is not None and _pid_of(info) != proc.pid:
                raise ConfigError(
                    f"port {spec.admin_port} ({spec.name}'s admin port) answers for "
                    f"{_who(info, spec.admin_port)}, not for the {spec.name} this launcher "
                    f"started (pid {proc.pid}): another cluster holds the ports"
                )
            if info is not None and _get_json(f"{url}/readyz") is not None:
                break
            if time.monotonic() > deadline:
                raise ConfigError(f"{spec.name} not ready within {spec.ready_timeout:g} s")
            time.sleep(0.1)
        self.say(f"  {spec.name:<12} ready  {url}")

    def _summary(self) -> None:
        if not self.procs:
            self.say("no services are defined in the cluster file")
            return
        self.say("")
        for spec in self.specs:
            info = _get_json(f"http://127.0.0.1:{spec.admin_port}/api/v1/info") or {}
            for name, endpoint in sorted(info.get("endpoints", {}).items()):
                self.say(f"  {spec.name:<12} {name:<12} {endpoint}")
        catalog = next((spec for spec in self.specs if spec.module == "zbus.catalog"), None)
        if catalog is not None:
            self.say(f"\ndashboard: http://127.0.0.1:{catalog.admin_port}/dashboard")
        self.say(f"\nlogs in {self.state_dir / 'logs'}; Ctrl-C or `make down` stops the cluster")

    def _watch(self) -> None:
        reported: set[str] = set()
        while True:
            for name, proc in self.procs.items():
                code = proc.poll()
                if code is not None and name not in reported:
                    reported.add(name)
                    self.say(
                        f"{name} exited with code {code}; see {self.state_dir}/logs/{name}.log"
                    )
            time.sleep(0.5)

    def _stop_all(self) -> None:
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_GRACE)
                except subprocess.TimeoutExpired:
                    self.say(f"{name} did not stop within {STOP_GRACE:g} s; killing it")
                    proc.kill()
                    proc.wait()
            self.say(f"  {name:<12} stopped (exit {proc.returncode})")
        for fd in self._lifelines:
            os.close(fd)
        self._lifelines.clear()
        with contextlib.suppress(FileNotFoundError):
            self.pidfile.unlink()

    def _write_pidfile(self) -> None:
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        content = {"launcher": os.getpid(), "services": {n: p.pid for n, p in self.procs.items()}}
        tmp = self.pidfile.with_suffix(".tmp")
        tmp.write_text(json.dumps(content), encoding="utf-8")
        tmp.replace(self.pidfile)


def read_pidfile(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("launcher"), int):
        return None
    return data


def stop_cluster(state_dir: Path, out: IO[str], timeout: float = 60.0) -> int:
    """``zbus down``: ask the launcher recorded in the state dir to stop, and wait for it."""
    pidfile = state_dir / "run" / "cluster.json"
    running = read_pidfile(pidfile)
    if running is None or not pid_alive(running["launcher"]):
        print("no zbus cluster is running", file=out)
        with contextlib.suppress(FileNotFoundError):
            pidfile.unlink()
        return 0
    pid = running["launcher"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(pid):
        print(f"the launcher (pid {pid}) did not stop within {timeout:g} s", file=out)
        return 1
    print("zbus cluster stopped", file=out)
    return 0


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


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _parent_death_signal() -> Callable[[], None] | None:
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


def _held(spec: ServiceSpec) -> str | None:
    """What holds the admin port of ``spec``, as a line to print; None when it is free."""
    port = spec.admin_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the service binds it: a port left in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            return None
        except OSError:
            pass
    info = _get_json(f"http://127.0.0.1:{port}/api/v1/info")
    return f"port {port} ({spec.name}'s admin port) is held by {_who(info, port)}"


def _who(info: Any, port: int) -> str:
    """The process at ``port``: the zbus service that answers there (``info`` from its
    ``/api/v1/info``) and its pid, else whichever process listens on it, if it is ours
    to see."""
    pid = _pid_of(info)
    if pid is None:
        pids = _listening_pids(port)
        pid = pids[0] if len(pids) == 1 else None
    name = info.get("name") if isinstance(info, dict) else None
    if isinstance(name, str):
        return f"the zbus service {name} (pid {pid})" if pid else f"the zbus service {name}"
    if pid is not None:
        return f"pid {pid} ({_cmdline(pid)})"
    return f"a process this user cannot see (`ss -ltnp 'sport = :{port}'` as root names it)"


def _pid_of(info: Any) -> int | None:
    pid = info.get("pid") if isinstance(info, dict) else None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else None


def _listening_pids(port: int) -> list[int]:
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


def _get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
