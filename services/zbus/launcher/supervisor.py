"""The launcher's supervisor: starts the services, restarts those that die, stops them all.

The decisions (when to restart, when to give up) are :mod:`zbus.launcher.policy`'s; this
module runs the processes, polls their readiness, and handles the signals. It runs one
thread: a loop that looks at every service ten times a second, so that a stop request
(Ctrl-C, SIGTERM, ``zbus down``) is seen within a tenth of a second, back-off waits
included. A signal handler only records the request; nothing is raised through the loop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from types import FrameType
from typing import IO, Any

from zbus.launcher.config import ServiceSpec
from zbus.launcher.policy import GiveUp, Phase, RestartPolicy, Supervision
from zbus.launcher.procs import (
    answers_ok,
    describe_exit,
    get_json,
    held,
    listening_pids,
    parent_death_signal,
    pid_alive,
    pid_of,
    tail,
    terminal_foreground,
    who,
)
from zbus.launcher.state import read_pidfile, write_state

__all__ = ["Cluster"]

TICK = 0.1  # seconds between two looks at the services
LOG_LINES = 5  # lines of a service's log printed when it exits
_SETTLED = (Phase.READY, Phase.GIVEN_UP)


class _Slot:
    """One service of the cluster: its spec, its supervision and its current process."""

    def __init__(self, spec: ServiceSpec, policy: RestartPolicy) -> None:
        self.spec = spec
        self.sup = Supervision(policy)
        self.proc: subprocess.Popen[bytes] | None = None
        self.lifeline: int | None = None  # the write end; the kernel closes it if we die
        self.started_at = 0.0
        self.last_exit: str | None = None
        self.since = time.time()

    def state(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "admin": self.spec.admin_url,
            "state": str(self.sup.phase),
            "pid": self.proc.pid if self.proc is not None else None,
            "restarts": self.sup.restarts,
            "failed_starts": self.sup.failed_starts,
            "last_exit": self.last_exit,
            "since": self.since,
        }


class Cluster:
    """Starts, supervises and stops the service processes of one local cluster.

    Args:
        specs: the services, in start order.
        state_dir: where the data, logs and state file go (``.zbus``).
        out: where the launcher reports.
        restart: the restart policy.
    """

    def __init__(
        self,
        specs: list[ServiceSpec],
        state_dir: Path,
        out: IO[str],
        restart: RestartPolicy | None = None,
    ) -> None:
        self.specs = specs
        self.state_dir = state_dir
        self.out = out
        self.policy = restart or RestartPolicy()
        self.slots = [_Slot(spec, self.policy) for spec in specs]
        self.pidfile = state_dir / "run" / "cluster.json"
        self._preexec = parent_death_signal()
        self._stop_request: str | None = None
        self._summarised = False

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    # ------------------------------------------------------------------ the run
    def run(self) -> int:
        """Start everything, supervise it until a stop request, stop everything.

        Returns:
            0 once stopped as asked; 1 when the cluster could not be started at all
            (another launcher runs on this state dir, a program is not installed, or
            the admin ports are held).
        """
        running = read_pidfile(self.pidfile)
        if running is not None and pid_alive(running["launcher"]):
            self.say(
                f"a zbus cluster is already running (pid {running['launcher']}); "
                "stop it with `make down`"
            )
            return 1
        missing = [line for s in self.specs if (line := s.missing_program()) is not None]
        if missing:
            for line in missing:
                self.say(line)
            self.say("refusing to start: install what is missing first")
            return 1
        taken = [line for s in self.specs if (line := held(s.name, s.admin_port)) is not None]
        if taken:
            for line in taken:
                self.say(line)
            self.say(
                "refusing to start: these ports are held (another zbus cluster, from another "
                "checkout or left by a launcher that died?); stop what holds them first "
                "(`make down` where it was started), or give this cluster other ports"
            )
            return 1
        old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            with terminal_foreground():
                try:
                    self._supervise()
                finally:
                    self._stop_all()
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only recorded: the loop sees it within a tick. A second one while stopping is
        # the same request.
        if self._stop_request is None:
            self._stop_request = signal.Signals(signum).name

    def _stopping(self) -> bool:
        return self._stop_request is not None

    def _supervise(self) -> None:
        self._write_state()
        while not self._stopping():
            now = time.monotonic()
            for slot in self.slots:
                self._look(slot, now)
                if self._stopping():
                    break
            else:
                self._launch_due(now)
                if not self._summarised and all(s.sup.phase in _SETTLED for s in self.slots):
                    self._summarised = True
                    self._summary()
                time.sleep(TICK)
        why = {"SIGINT": "Ctrl-C"}.get(self._stop_request or "", self._stop_request)
        self.say(f"stopping the cluster ({why})")

    def _launch_due(self, now: float) -> None:
        for slot in self.slots:
            if slot.sup.is_due(now):
                self._launch(slot, now)
        # The first start goes in file order: each service once the ones before it are
        # ready (or given up).
        for i, slot in enumerate(self.slots):
            if slot.sup.phase is Phase.PENDING:
                if all(s.sup.phase in _SETTLED for s in self.slots[:i]):
                    self._launch(slot, now)
                return

    # ------------------------------------------------------------------ one service
    def _launch(self, slot: _Slot, now: float) -> None:
        spec = slot.spec
        data = self.state_dir / "data" / spec.name
        logs = self.state_dir / "logs"
        data.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "ZBUS_HOST": "127.0.0.1",
            "ZBUS_ADMIN_PORT": str(spec.admin_port),
            "ZBUS_DATA_DIR": str(data),
        }
        if spec.module == "zbus.catalog":  # it shows restarts and given-up services
            env["ZBUS_LAUNCHER_STATE"] = str(self.pidfile.resolve())
        env.update(spec.env)
        read, write = os.pipe()  # the lifeline: the service stops at its end of file
        env["ZBUS_LIFELINE_FD"] = str(read)
        slot.sup.started(now)
        slot.started_at = now
        slot.since = time.time()
        try:
            with (logs / f"{spec.name}.log").open("ab") as logfile:
                slot.proc = subprocess.Popen(
                    spec.argv(data.resolve()),
                    env=env,
                    stdout=logfile,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # Ctrl-C reaches the launcher only
                    pass_fds=(read,),
                    # The launcher runs no other thread, so a fork's child cannot inherit
                    # a lock held elsewhere: the one case that makes preexec_fn unsafe.
                    preexec_fn=self._preexec,  # noqa: PLW1509
                )
        except OSError as exc:
            os.close(write)
            self._ended(slot, f"could not be started: {exc}", now)
            return
        finally:
            os.close(read)
        slot.lifeline = write
        self._write_state()

    def _look(self, slot: _Slot, now: float) -> None:
        proc = slot.proc
        if proc is None:
            return
        code = proc.poll()
        if code is not None:
            starting = slot.sup.phase is Phase.STARTING
            what = f"exited ({describe_exit(code)})" + (" during start-up" if starting else "")
            self._ended(slot, what, now, code)
        elif slot.sup.phase is Phase.STARTING:
            self._check_ready(slot, proc, now)

    def _check_ready(self, slot: _Slot, proc: subprocess.Popen[bytes], now: float) -> None:
        spec = slot.spec
        if spec.is_program:
            self._check_program_ready(slot, proc, now)
            return
        info = get_json(f"{spec.admin_url}/api/v1/info")
        if info is not None and pid_of(info) != proc.pid:
            self._end_start(
                slot,
                f"not started: port {spec.admin_port} ({spec.name}'s admin port) answers "
                f"for {who(info, spec.admin_port)}, not for the {spec.name} this launcher "
                f"started (pid {proc.pid})",
            )
        elif info is not None and get_json(spec.ready_url) is not None:
            self._ready(slot, now)
        elif now - slot.started_at > spec.ready_timeout:
            self._end_start(slot, f"not ready within {spec.ready_timeout:g} s")

    def _check_program_ready(self, slot: _Slot, proc: subprocess.Popen[bytes], now: float) -> None:
        """A program (not a zbus service) is ready when its ``ready_path`` answers 200 and
        the process listening on its admin port is the one started (as /proc tells it:
        it has no ``/api/v1/info`` to say its pid)."""
        spec = slot.spec
        if answers_ok(spec.ready_url):
            pids = listening_pids(spec.admin_port)
            if pids and proc.pid not in pids:
                self._end_start(
                    slot,
                    f"not started: port {spec.admin_port} ({spec.name}'s admin port) is held "
                    f"by {who(None, spec.admin_port)}, not by the {spec.name} this launcher "
                    f"started (pid {proc.pid})",
                )
            else:
                self._ready(slot, now)
        elif now - slot.started_at > spec.ready_timeout:
            self._end_start(slot, f"not ready within {spec.ready_timeout:g} s")

    def _ready(self, slot: _Slot, now: float) -> None:
        slot.sup.became_ready(now)
        slot.since = time.time()
        again = f" again (restart {slot.sup.restarts})" if slot.sup.restarts else ""
        self.say(f"  {slot.spec.name:<12} ready{again}  {slot.spec.admin_url}")
        self._write_state()

    def _end_start(self, slot: _Slot, what: str) -> None:
        """A start that cannot succeed: its process is stopped, and it counts as failed."""
        code = self._terminate(slot)
        self._ended(slot, what, time.monotonic(), code)

    def _ended(self, slot: _Slot, what: str, now: float, code: int | None = None) -> None:
        """The service's process is gone without being asked to: restart it, or give up."""
        name = slot.spec.name
        self._release(slot)
        slot.last_exit = describe_exit(code) if code is not None else what
        slot.since = time.time()
        decision = slot.sup.exited(now)
        if isinstance(decision, GiveUp):
            starts = "start" if decision.failed_starts == 1 else "starts in a row"
            self.say(
                f"  {name:<12} {what}; given up after {decision.failed_starts} failed {starts}: "
                "it stays down, the rest of the cluster goes on"
            )
        elif decision.failed_start:
            self.say(
                f"  {name:<12} {what}; starting it again in {decision.delay:g} s "
                f"(failed start {decision.failed_starts} of {self.policy.start_attempts})"
            )
        else:
            self.say(f"  {name:<12} {what}; restarting it in {decision.delay:g} s")
        for line in tail(self.state_dir / "logs" / f"{name}.log", LOG_LINES):
            self.say(f"      | {line}")
        self._write_state()

    def _terminate(self, slot: _Slot) -> int:
        """Stop the service's process: SIGTERM, then SIGKILL past its ``stop_grace``."""
        proc = slot.proc
        assert proc is not None
        grace = slot.spec.stop_grace
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.say(f"  {slot.spec.name:<12} did not stop within {grace:g} s; killing it")
                proc.kill()
                proc.wait()
        return proc.returncode

    def _release(self, slot: _Slot) -> None:
        slot.proc = None
        if slot.lifeline is not None:
            os.close(slot.lifeline)
            slot.lifeline = None

    # ------------------------------------------------------------------ the whole cluster
    def _summary(self) -> None:
        if not self.slots:
            self.say("no services are defined in the cluster file")
            return
        self.say("")
        for slot in self.slots:
            if slot.sup.phase is not Phase.READY:
                continue
            if slot.spec.is_program:
                self.say(f"  {slot.spec.name:<12} {'url':<12} {slot.spec.admin_url}")
                continue
            info = get_json(f"{slot.spec.admin_url}/api/v1/info") or {}
            for name, endpoint in sorted(info.get("endpoints", {}).items()):
                self.say(f"  {slot.spec.name:<12} {name:<12} {endpoint}")
        down = [s.spec.name for s in self.slots if s.sup.phase is Phase.GIVEN_UP]
        if down:
            self.say(f"\ngiven up (not running): {', '.join(down)}")
        catalog = next((s for s in self.slots if s.spec.module == "zbus.catalog"), None)
        if catalog is not None:
            self.say(f"\ndashboard: {catalog.spec.admin_url}/dashboard")
        self.say(
            f"\nlogs in {self.state_dir / 'logs'}; a service that exits is restarted; "
            "Ctrl-C or `make down` stops the cluster"
        )

    def _stop_all(self) -> None:
        for slot in reversed(self.slots):
            name = slot.spec.name
            if slot.proc is None:
                if slot.sup.phase is Phase.GIVEN_UP:
                    self.say(f"  {name:<12} not running (given up)")
                elif slot.sup.phase is Phase.RESTARTING:
                    self.say(f"  {name:<12} not running (its restart is called off)")
                slot.sup.stopped()
                continue
            code = self._terminate(slot)
            self._release(slot)
            slot.sup.stopped()
            slot.last_exit = describe_exit(code)
            # A program may end by the very SIGTERM it was sent (etcd does): a stop too.
            how = f"exit {code}" if code >= 0 else slot.last_exit
            if code == -signal.SIGTERM:
                how = "by SIGTERM"
            self.say(f"  {name:<12} stopped ({how})")
        with contextlib.suppress(FileNotFoundError):
            self.pidfile.unlink()

    def _write_state(self) -> None:
        write_state(
            self.pidfile,
            {
                "launcher": os.getpid(),
                "services": {s.spec.name: s.proc.pid for s in self.slots if s.proc is not None},
                "supervised": [s.state() for s in self.slots],
                "updated": time.time(),
            },
        )
