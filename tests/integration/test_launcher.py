"""`zbus up` / `zbus down`: the local cluster launcher with real service processes."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.ports import HeldPorts
from tests.support.waiting import UNIT, wait_until
from zbus.common.settings import ConfigError
from zbus.launcher import (
    Cluster,
    RestartPolicy,
    ServiceSpec,
    load_cluster,
    load_cluster_file,
    pid_alive,
)
from zbus.launcher.policy import Phase

ROOT = Path(__file__).resolve().parents[2]


def _cluster_file(tmp_path: Path, *names: str) -> tuple[Path, dict[str, int]]:
    """A cluster file of echo services. The launcher finds its services at the admin ports
    the file gives, so they are chosen here, held until the file is written."""
    with HeldPorts(len(names)) as held:
        ports = dict(zip(names, held.ports, strict=True))
    body = "".join(
        f'[[service]]\nname = "{n}"\nmodule = "tests.support.echo_service"\n'
        f"admin_port = {p}\nenv = {{ ZBUS_SHUTDOWN_TIMEOUT = 2 }}\n\n"
        for n, p in ports.items()
    )
    path = tmp_path / "cluster.toml"
    path.write_text(body)
    return path, ports


def _zbus(*args: str) -> list[str]:
    return [sys.executable, "-m", "zbus", *args]


def test_up_starts_every_service_and_down_stops_them(tmp_path: Path) -> None:
    config, ports = _cluster_file(tmp_path, "first", "second")
    state = tmp_path / "state"
    launcher = subprocess.Popen(
        _zbus("up", "--config", str(config), "--state-dir", str(state)),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert launcher.stdout is not None
        seen = []
        for line in launcher.stdout:
            seen.append(line)
            if "stops the cluster" in line:
                break
        else:
            pytest.fail("launcher ended early:\n" + "".join(seen))
        text = "".join(seen)
        for name, port in ports.items():
            assert f"{name}" in text and f"http://127.0.0.1:{port}" in text
            assert httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200
        pids = json.loads((state / "run" / "cluster.json").read_text())
        assert pids["launcher"] == launcher.pid
        children = list(pids["services"].values())
        assert len(children) == 2

        # A second launcher on the same state dir refuses instead of doubling the cluster.
        again = subprocess.run(
            _zbus("up", "--config", str(config), "--state-dir", str(state)),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert again.returncode == 1
        assert "already running" in again.stdout

        down = subprocess.run(
            _zbus("down", "--state-dir", str(state)),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert down.returncode == 0, down.stdout + down.stderr
        assert "stopped" in down.stdout
        assert launcher.wait(timeout=30 * UNIT) == 0
        for pid in children:
            wait_until(lambda pid=pid: not pid_alive(pid), what=f"service pid {pid} to exit")
        assert not (state / "run" / "cluster.json").exists()
        assert (state / "logs" / "first.log").read_text().count('"service stopped"') == 1
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGTERM)
            launcher.wait(timeout=30)


class _Up:
    """A `zbus up` in the background, its output read line by line."""

    def __init__(self, config: Path, state: Path) -> None:
        self.proc = subprocess.Popen(
            _zbus("up", "--config", str(config), "--state-dir", str(state)),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.state = state
        self.lines: list[str] = []

    def read_until(self, text: str) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if text in line:
                return
        pytest.fail(f"launcher ended before {text!r}:\n" + "".join(self.lines))

    def pids(self) -> dict[str, int]:
        return dict(json.loads((self.state / "run" / "cluster.json").read_text())["services"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60 * UNIT)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def test_a_second_cluster_on_the_same_ports_refuses_at_once(tmp_path: Path) -> None:
    # Another checkout's cluster (another state dir) already holds every port.
    config, ports = _cluster_file(tmp_path, "first", "second")
    first = _Up(config, tmp_path / "a")
    try:
        first.read_until("stops the cluster")
        pids = first.pids()
        again = subprocess.run(
            _zbus("up", "--config", str(config), "--state-dir", str(tmp_path / "b")),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60 * UNIT,
            check=False,
        )
        assert again.returncode == 1, again.stdout + again.stderr
        assert "ready  http" not in again.stdout
        for name, port in ports.items():  # each port, and the service answering there
            assert f"port {port} ({name}'s admin port)" in again.stdout
            assert f"zbus service echo (pid {pids[name]})" in again.stdout
        assert not (tmp_path / "b" / "logs").exists()  # nothing was started
        for port in ports.values():  # and the first cluster is untouched
            assert httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200
    finally:
        first.stop()


def test_a_port_held_by_another_program_is_named(tmp_path: Path) -> None:
    config, ports = _cluster_file(tmp_path, "first")
    with socket.socket() as held:
        held.bind(("127.0.0.1", ports["first"]))
        held.listen()
        result = subprocess.run(
            _zbus("up", "--config", str(config), "--state-dir", str(tmp_path / "s")),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60 * UNIT,
            check=False,
        )
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"port {ports['first']}" in result.stdout
    assert f"pid {os.getpid()}" in result.stdout  # found through /proc: it answers no HTTP


def test_readiness_counts_only_the_launched_process(tmp_path: Path) -> None:
    # The admin port is free when the launcher looks, and taken before the service is
    # ready (here: the launched service serves elsewhere, an impostor at the port). The
    # start fails; with one attempt allowed the service is given up at once.
    with HeldPorts() as held:  # the launcher is given it, the impostor takes it
        port = held.port
    impostor = subprocess.Popen(
        [sys.executable, "-m", "tests.support.echo_service", "--admin-port", str(port)],
        cwd=ROOT,
        env={**os.environ, "ZBUS_DATA_DIR": str(tmp_path / "impostor")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    out = io.StringIO()
    spec = ServiceSpec(
        "first",
        "tests.support.echo_service",
        port,
        {"ZBUS_ADMIN_PORT": "0", "ZBUS_SHUTDOWN_TIMEOUT": "2"},  # any port but ``port``
    )
    cluster = Cluster([spec], tmp_path / "state", out, RestartPolicy(start_attempts=1))
    (slot,) = cluster.slots
    try:
        assert impostor.stdout is not None
        for line in impostor.stdout:
            if b'"service ready"' in line:
                break
        cluster._launch(slot, time.monotonic())  # past the check of the ports at start
        launched = slot.proc
        assert launched is not None

        def looked() -> bool:
            cluster._look(slot, time.monotonic())
            return slot.sup.phase is Phase.GIVEN_UP

        wait_until(looked, timeout=30, what="the start to fail")
        message = out.getvalue()
        assert f"port {port} (first's admin port) answers for" in message
        assert f"zbus service echo (pid {impostor.pid})" in message
        assert "given up after 1 failed start:" in message
        assert "ready  http" not in message
        assert launched.returncode is not None and slot.proc is None  # it was stopped
        assert pid_alive(impostor.pid)
    finally:
        cluster._stop_all()
        impostor.terminate()
        impostor.wait(timeout=30 * UNIT)
        if impostor.stdout is not None:
            impostor.stdout.close()


def test_services_stop_cleanly_when_the_launcher_is_killed(tmp_path: Path) -> None:
    config, _ = _cluster_file(tmp_path, "first", "second")
    up = _Up(config, tmp_path / "s")
    try:
        up.read_until("stops the cluster")
        pids = up.pids()
        up.proc.kill()  # kill -9: the launcher stops nothing itself
        up.proc.wait(timeout=30 * UNIT)
        for name, pid in pids.items():
            wait_until(lambda pid=pid: not pid_alive(pid), timeout=30, what=f"{name} to exit")
            log = (tmp_path / "s" / "logs" / f"{name}.log").read_text()
            assert log.count('"service stopped"') == 1, log
        down = subprocess.run(
            _zbus("down", "--state-dir", str(tmp_path / "s")),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert "no zbus cluster is running" in down.stdout
    finally:
        up.stop()
        for pid in up.pids().values() if (tmp_path / "s" / "run" / "cluster.json").exists() else ():
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_service_still_starting_dies_with_the_launcher(tmp_path: Path) -> None:
    # Before its loop runs, a service watches no pipe: the kernel's parent-death signal
    # is what stops it (here, a process that never gets ready).
    path = tmp_path / "cluster.toml"
    with HeldPorts() as held:  # the launcher is given the admin port
        path.write_text(
            f'[[service]]\nname = "stuck"\nmodule = "tests.support.stuck_service"\n'
            f"admin_port = {held.port}\nready_timeout = 600\n"
        )
    up = _Up(path, tmp_path / "s")
    pid = 0
    try:

        def recorded() -> bool:
            nonlocal pid
            with contextlib.suppress(OSError, ValueError, KeyError):
                pid = up.pids()["stuck"]
            return pid != 0

        wait_until(recorded, timeout=30, what="the launcher to record the service's pid")
        up.proc.kill()
        up.proc.wait(timeout=30 * UNIT)
        wait_until(lambda: not pid_alive(pid), timeout=30, what="the starting service to exit")
    finally:
        up.stop()
        if pid and pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_service_that_fails_to_start_is_given_up_and_the_rest_go_on(tmp_path: Path) -> None:
    config, _ = _cluster_file(tmp_path, "good")
    with config.open("a") as fh, HeldPorts() as held:
        fh.write("[restart]\nbackoff = 0.05\nbackoff_max = 0.1\n\n")
        fh.write('[[service]]\nname = "bad"\nmodule = "tests.support.echo_service"\n')
        fh.write(f'admin_port = {held.port}\nenv = {{ ZBUS_LOG_LEVEL = "LOUD" }}\n')
    up = _Up(config, tmp_path / "s")
    try:
        up.read_until("stops the cluster")
        text = "".join(up.lines)
        assert text.count("bad          exited (exit status 2) during start-up") == 5, text
        assert "(failed start 4 of 5)" in text and "given up after 5 failed starts" in text
        assert "log_level" in text  # the last lines of its log
        good = up.pids()["good"]
        assert list(up.pids()) == ["good"]
        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(timeout=60 * UNIT) == 0
        assert up.proc.stdout is not None
        rest = up.proc.stdout.read()
        assert "bad          not running (given up)" in rest
        assert "good         stopped (exit 0)" in rest
        assert not pid_alive(good)
    finally:
        up.stop()


def test_a_stop_during_a_back_off_wait_is_prompt(tmp_path: Path) -> None:
    config, _ = _cluster_file(tmp_path, "first", "second")
    config.write_text("[restart]\nbackoff = 600\nbackoff_max = 600\n\n" + config.read_text())
    up = _Up(config, tmp_path / "s")
    try:
        up.read_until("stops the cluster")
        pids = up.pids()
        os.kill(pids["first"], signal.SIGTERM)  # it exits 0, not asked to by the launcher
        up.read_until("first        exited (exit status 0); restarting it in 600 s")
        asked = time.monotonic()
        up.proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert up.proc.wait(timeout=30 * UNIT) == 0
        assert time.monotonic() - asked < 15 * UNIT  # not the back-off's 600 s
        assert up.proc.stdout is not None
        rest = up.proc.stdout.read()
        assert "stopping the cluster (Ctrl-C)" in rest
        assert "first        not running (its restart is called off)" in rest
        assert "second       stopped (exit 0)" in rest
        assert not pid_alive(pids["second"])
    finally:
        up.stop()


def test_down_without_a_cluster_says_so(tmp_path: Path) -> None:
    result = subprocess.run(
        _zbus("down", "--state-dir", str(tmp_path)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    assert "no zbus cluster is running" in result.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[[service]]\nname = 'x'\n", "missing key 'module'"),
        ("[[service]]\nname='x'\nmodule='m'\nadmin_port=70000\n", "admin_port"),
        ("service = 3\n", "array of tables"),
        ("[[service\n", "cluster file"),
        (
            "[[service]]\nname='x'\nmodule='m'\nadmin_port=1\n"
            "[[service]]\nname='x'\nmodule='m'\nadmin_port=2\n",
            "service names must be unique",
        ),
        (
            "[[service]]\nname='x'\nmodule='m'\nadmin_port=1\n"
            "[[service]]\nname='y'\nmodule='m'\nadmin_port=1\n",
            "admin ports must be unique",
        ),
        ("restart = 3\n", r"\[restart\] must be a table"),
        ("[restart]\nbackof = 1\n", "has no key 'backof'"),
        ("[restart]\nbackoff = 'soon'\n", "backoff must be a number"),
        ("[restart]\nstart_attempts = 2.5\n", "start_attempts must be a number"),
        ("[restart]\nbackoff = 5\nbackoff_max = 1\n", "backoff_max must be at least"),
    ],
)
def test_bad_cluster_files_are_clear_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_cluster(path)


def test_the_restart_table_sets_the_policy(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[restart]\nbackoff = 0.5\nbackoff_max = 4\nstart_attempts = 2\n")
    policy = load_cluster_file(path).restart
    assert (policy.backoff, policy.backoff_max, policy.start_attempts) == (0.5, 4.0, 2)
    assert policy.healthy_after == 60.0


def test_the_shipped_cluster_file_loads() -> None:
    specs = load_cluster(ROOT / "deploy" / "local-cluster.toml")
    assert [s.name for s in specs] == [s.name for s in specs if s.module.startswith("zbus.")]
    names = [s.name for s in specs]
    assert names[0] == "catalog" and {"eventbus", "broker", "sparkworker"} <= set(names)


def test_keys_generate_writes_a_usable_pair(tmp_path: Path) -> None:
    from zbus.common.security import load_keys

    result = subprocess.run(
        _zbus("keys", "generate", "node1", "--dir", str(tmp_path)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    pair = load_keys(tmp_path / "node1.key_secret")
    assert len(pair.public) == 40 and pair.secret is not None and len(pair.secret) == 40
    assert load_keys(tmp_path / "node1.key").secret is None
    assert os.stat(tmp_path / "node1.key_secret").st_mode & 0o077 == 0
