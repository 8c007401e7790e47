"""The local cluster: every zbus service as a plain process on 127.0.0.1, no container engine.

``zbus up`` reads the cluster file (``deploy/local-cluster.toml``), starts each service in
order, waits until its ``/readyz`` answers 200, prints the admin URLs and then stays in
the foreground. Ctrl-C, SIGTERM or ``zbus down`` stops the services in reverse order,
each with SIGTERM and its graceful deadline, SIGKILL only past it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
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

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def run(self) -> int:
        """Start everything, wait for a stop request, stop everything. Returns an exit code."""
        running = read_pidfile(self.pidfile)
        if running is not None and _alive(running["launcher"]):
            self.say(
                f"a zbus cluster is already running (pid {running['launcher']}); "
                "stop it with `make down`"
            )
            return 1
        old = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            try:
                for spec in self.specs:
                    self._start(spec)
                    self._write_pidfile()
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
        logfile = (logs / f"{spec.name}.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", spec.module],
            env=env,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches the launcher only; it stops the rest
        )
        logfile.close()
        self.procs[spec.name] = proc
        url = f"http://127.0.0.1:{spec.admin_port}"
        deadline = time.monotonic() + spec.ready_timeout
        while True:
            code = proc.poll()
            if code is not None:
                raise ConfigError(
                    f"{spec.name} exited with code {code} during start-up; "
                    f"its log: {logs / f'{spec.name}.log'}\n{_tail(logs / f'{spec.name}.log')}"
                )
            if _get_json(f"{url}/readyz") is not None:
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
    if running is None or not _alive(running["launcher"]):
        print("no zbus cluster is running", file=out)
        with contextlib.suppress(FileNotFoundError):
            pidfile.unlink()
        return 0
    pid = running["launcher"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        print(f"the launcher (pid {pid}) did not stop within {timeout:g} s", file=out)
        return 1
    print("zbus cluster stopped", file=out)
    return 0


def _alive(pid: int) -> bool:
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
