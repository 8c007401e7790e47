"""`zbus up` / `zbus down`: the local cluster launcher with real service processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.bus import free_port
from tests.support.waiting import UNIT, wait_for
from zbus.common.settings import ConfigError
from zbus.launcher import _alive, load_cluster

ROOT = Path(__file__).resolve().parents[2]


def _cluster_file(tmp_path: Path, *names: str) -> tuple[Path, dict[str, int]]:
    ports = {name: free_port() for name in names}
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
            wait_for(lambda pid=pid: not _alive(pid), what=f"service pid {pid} to exit")
        assert not (state / "run" / "cluster.json").exists()
        assert (state / "logs" / "first.log").read_text().count('"service stopped"') == 1
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGTERM)
            launcher.wait(timeout=30)


def test_a_service_that_fails_to_start_stops_the_rest(tmp_path: Path) -> None:
    config, _ = _cluster_file(tmp_path, "good")
    with config.open("a") as fh:
        fh.write('[[service]]\nname = "bad"\nmodule = "tests.support.echo_service"\n')
        fh.write(f'admin_port = {free_port()}\nenv = {{ ZBUS_LOG_LEVEL = "LOUD" }}\n')
    result = subprocess.run(
        _zbus("up", "--config", str(config), "--state-dir", str(tmp_path / "s")),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "bad exited with code 2 during start-up" in result.stdout
    assert "log_level" in result.stdout
    assert "good         stopped" in result.stdout


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
            "unique",
        ),
    ],
)
def test_bad_cluster_files_are_clear_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_cluster(path)


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
