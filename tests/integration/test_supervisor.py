"""`zbus up` as a supervisor, on the shipped local cluster with real processes: a service
that dies is restarted and the others go on, one that cannot start is given up, and
every way of stopping the cluster ends with status 0 and no process left behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.support.browser import ARGS, VIEWPORT, chromium
from tests.support.local_cluster import LocalCluster, local_cluster
from tests.support.ports import HeldPorts
from tests.support.waiting import UNIT, wait_until
from zbus.launcher import pid_alive

ROOT = Path(__file__).resolve().parents[2]
# Restarts after a tenth of a second: the back-off's length is the policy's (unit tests),
# here only that it happens.
FAST = {"backoff": 0.1, "backoff_max": 0.2}
# Heartbeats every half second: a killed service's name is free in the catalog after
# 1.5 s (three missed heartbeats), so its new process registers, and is ready, sooner.
QUICK_CATALOG = {"catalog": {"ZBUS_HEARTBEAT_INTERVAL": "0.5"}}


def _state(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    data = json.loads((cluster.state_dir / "run" / "cluster.json").read_text())
    return {entry["name"]: entry for entry in data["supervised"]}


def _pids(cluster: LocalCluster) -> dict[str, int]:
    """The pid of each service that runs."""
    return {n: e["pid"] for n, e in _state(cluster).items() if isinstance(e["pid"], int)}


def _back(cluster: LocalCluster, name: str, old: int) -> bool:
    """Whether ``name`` runs as a new process, ready, and its admin API says so."""
    try:
        entry = _state(cluster)[name]
    except (OSError, ValueError, KeyError):
        return False  # the file is replaced atomically; this is a read of nothing yet
    if entry["state"] != "ready" or entry["pid"] in (None, old):
        return False
    url = cluster.url(name)
    try:
        info = httpx.get(f"{url}/api/v1/info", timeout=2).json()
        return info["pid"] == entry["pid"] and httpx.get(f"{url}/readyz").status_code == 200
    except httpx.HTTPError:
        return False


def _session_members(sids: set[int]) -> list[int]:
    """Every process whose session is one of ``sids`` (each service leads one: its
    children, e.g. the sparkworker's JVM, are in it too)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[3]) in sids:
                found.append(int(entry.name))
    return found


def _zbus(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zbus", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120 * UNIT,
        check=False,
        env={**os.environ, "COLUMNS": "200"},  # a table's row on one line
    )


def _rest(cluster: LocalCluster, timeout: float = 90) -> str:
    """The launcher's output to its end, and its exit status checked to be 0."""
    launcher = cluster.launcher
    assert launcher is not None and launcher.stdout is not None
    status = launcher.wait(timeout=timeout * UNIT)
    text = launcher.stdout.read()
    assert status == 0, text
    assert "Traceback" not in text and "zbus:" not in text, text
    return text


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_each_service_killed_comes_back_and_the_others_never_stop(tmp_path: Path) -> None:
    with local_cluster(tmp_path, env=QUICK_CATALOG, restart=FAST) as cluster:
        assert cluster.launcher is not None and cluster.launcher.stdout is not None
        every: set[int] = set()
        took = {}
        for name in ("catalog", "eventbus", "broker", "worker", "sparkworker"):
            before = _pids(cluster)
            every |= set(before.values())
            killed = time.monotonic()
            os.kill(before[name], signal.SIGKILL)
            wait_until(
                lambda name=name, old=before[name]: _back(cluster, name, old),  # type: ignore[misc]
                timeout=120,
                what=f"{name} to be back and ready",
            )
            took[name] = round(time.monotonic() - killed, 1)
            after = _pids(cluster)
            for other, pid in before.items():
                if other != name:
                    assert after[other] == pid and pid_alive(pid), f"{other} stopped"
            assert _state(cluster)[name]["restarts"] == 1
        print(f"\nkill -9 to ready again, seconds: {took}")
        every |= set(_pids(cluster).values())
        down = _zbus("down", "--state-dir", str(cluster.state_dir))
        assert down.returncode == 0, down.stdout + down.stderr
        text = _rest(cluster)
        for name in ("catalog", "eventbus", "broker", "worker", "sparkworker"):
            assert f"{name:<12} exited (killed by SIGKILL); restarting it" in text, text
            assert f"{name:<12} stopped (exit 0)" in text, text
        assert not any(pid_alive(pid) for pid in every)
        wait_until(lambda: not _session_members(every), what="the services' children to exit")


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "down"])
def test_every_way_of_stopping_exits_0_and_leaves_no_process(tmp_path: Path, how: str) -> None:
    services = ("catalog", "eventbus", "broker", "worker")
    with local_cluster(tmp_path, services=services) as cluster:
        assert cluster.launcher is not None
        pids = _pids(cluster)
        if how == "down":
            down = _zbus("down", "--state-dir", str(cluster.state_dir))
            assert down.returncode == 0, down.stdout + down.stderr
        else:
            cluster.launcher.send_signal(getattr(signal, how))
        text = _rest(cluster)
        assert ("stopping the cluster (Ctrl-C)" if how == "SIGINT" else "(SIGTERM)") in text
        for name in services:
            assert f"{name:<12} stopped (exit 0)" in text, text
        assert not any(pid_alive(pid) for pid in pids.values())
        assert not (cluster.state_dir / "run" / "cluster.json").exists()


def test_a_service_that_cannot_start_is_given_up_and_named(tmp_path: Path) -> None:
    with HeldPorts() as free:
        port = free.port
    with socket.socket() as squatter:  # another program holds the broker's client port
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        seen: list[str] = []
        with local_cluster(
            tmp_path,
            services=("catalog", "eventbus", "broker"),
            env={**QUICK_CATALOG, "broker": {"ZBUS_CLIENT_PORT": str(port)}},
            restart=FAST,
            output=seen,
        ) as cluster:
            text = "".join(seen)
            for attempt in range(1, 5):
                assert f"(failed start {attempt} of 5)" in text, text
            assert "broker       exited (exit status 2) during start-up; given up after 5" in text
            assert "given up (not running): broker" in text
            assert "address already in use" in text.lower()  # its log's last lines
            state = _state(cluster)
            assert state["broker"]["state"] == "given up" and state["broker"]["pid"] is None
            assert state["broker"]["restarts"] == 4
            bus = _pids(cluster)["eventbus"]

            status = _zbus("status", "--catalog", cluster.url("catalog"))
            assert status.returncode == 1, status.stdout + status.stderr
            last = status.stdout.strip().splitlines()[-1]
            assert "given up: broker" in last, status.stdout
            row = next(line for line in status.stdout.splitlines() if line.startswith("broker"))
            assert "given up" in row and "NO" in row, status.stdout
            as_json = json.loads(
                _zbus("status", "--json", "--catalog", cluster.url("catalog")).stdout
            )
            broker = next(e for e in as_json["services"] if e["name"] == "broker")
            assert broker["supervised"] == "given up" and broker["ready"] is False
            assert "given up after 5 failed starts" in broker["error"]

            _dashboard_shows_given_up(cluster.url("catalog"), "broker")
            assert _pids(cluster)["eventbus"] == bus and pid_alive(bus)  # the rest goes on
            assert cluster.launcher is not None
            cluster.launcher.send_signal(signal.SIGTERM)
            text = _rest(cluster)
            assert "broker       not running (given up)" in text
            assert "eventbus     stopped (exit 0)" in text


def _dashboard_shows_given_up(catalog: str, name: str) -> None:
    """The dashboard's overview lists ``name`` as given up, though it never registered."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=list(ARGS))
        try:
            page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
            page.set_default_timeout(30_000 * UNIT)
            page.goto(f"{catalog}/dashboard#overview")
            row = page.locator(f'tr[data-service="{name}"]')
            expect(row).to_have_attribute("data-state", "given up")
            expect(row.locator('td[data-field="live"]')).to_contain_text(
                "given up after 5 failed starts"
            )
            expect(row.locator("[data-restarts]")).to_have_text(" · 4 restarts")
            bus = page.locator('tr[data-service="eventbus"] [data-restarts]')
            expect(bus).to_have_text(" · 0 restarts")
        finally:
            browser.close()
