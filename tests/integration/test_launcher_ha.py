"""`zbus up --ha`: the local cluster with the event bus as three replicas led through etcd,
and what the launcher needs for it, a program (etcd) run by its command beside the zbus
services. Real processes on free ports (the shipped HA file with its ports moved)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

import zbus
from tests.support.browser import ARGS, VIEWPORT, chromium
from tests.support.cli import zbus as run_zbus
from tests.support.local_cluster import LocalCluster, local_cluster
from tests.support.ports import HeldPorts
from tests.support.waiting import UNIT, wait_until
from zbus.launcher import Cluster, RestartPolicy, ServiceSpec, pid_alive
from zbus.launcher.policy import Phase

ROOT = Path(__file__).resolve().parents[2]
REPLICAS = ("eventbus-1", "eventbus-2", "eventbus-3")
# Heartbeats every half second: a killed replica's name is free in the catalog after
# 1.5 s, so its new process registers, and is ready, sooner.
QUICK_CATALOG = {"catalog": {"ZBUS_HEARTBEAT_INTERVAL": "0.5"}}
# The killed leader comes back only well after its 2 s lease in etcd has run out, so that
# one of the two others is elected (the shipped file restarts it after 1 s, when it may
# well win the election itself).
BACKOFF = 5.0 * UNIT


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def _up(config: Path, state: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "zbus", "up", "--config", str(config), "--state-dir", str(state)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _read_until(proc: subprocess.Popen[str], text: str, seen: list[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            return
    pytest.fail(f"the launcher ended before {text!r}:\n" + "".join(seen))


def _stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM to the launcher; the rest of its output, once it exited 0."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    status = proc.wait(timeout=90 * UNIT)
    assert proc.stdout is not None
    text = proc.stdout.read()
    proc.stdout.close()
    assert status == 0, text
    return text


def test_a_program_is_started_restarted_and_stopped_by_its_command(tmp_path: Path) -> None:
    with HeldPorts() as held:  # the launcher is given the port; the program binds it
        port = held.port
    command = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)]
    config = tmp_path / "cluster.toml"
    config.write_text(
        "[restart]\nbackoff = 0.1\nbackoff_max = 0.2\n\n"
        '[[service]]\nname = "web"\n'
        f"command = [{', '.join(_toml(w) for w in [*command, '--directory', '{data_dir}'])}]\n"
        f'admin_port = {port}\nready_path = "/"\n'
    )
    (tmp_path / "s" / "data" / "web").mkdir(parents=True)
    (tmp_path / "s" / "data" / "web" / "here.txt").write_text("served from its data dir")
    up = _up(config, tmp_path / "s")
    seen: list[str] = []
    try:
        _read_until(up, "stops the cluster", seen)
        text = "".join(seen)
        assert f"web          ready  http://127.0.0.1:{port}" in text, text
        assert f"web          url          http://127.0.0.1:{port}" in text, text
        # `{data_dir}` in its command is its data directory.
        answer = httpx.get(f"http://127.0.0.1:{port}/here.txt", timeout=5)
        assert answer.text == "served from its data dir"
        state = json.loads((tmp_path / "s" / "run" / "cluster.json").read_text())
        pid = state["services"]["web"]
        os.kill(pid, signal.SIGKILL)
        _read_until(up, "ready again (restart 1)", seen)
        assert "web          exited (killed by SIGKILL); restarting it in 0.1 s" in "".join(seen)
        rest = _stop(up)
        assert "web          stopped (by SIGTERM)" in rest, rest  # its way to end on SIGTERM
        assert not pid_alive(pid)
    finally:
        if up.poll() is None:
            _stop(up)


def test_a_program_whose_port_another_process_answers_on_is_not_ready(tmp_path: Path) -> None:
    # The program is started, but what answers at its admin port is another process: it
    # is not the program's readiness, and the start fails (given up at once here).
    with HeldPorts() as held:
        port = held.port
    impostor = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out = io.StringIO()
    spec = ServiceSpec(
        "prog",
        "",
        port,
        command=(sys.executable, "-m", "tests.support.stuck_service"),
        ready_path="/",
    )
    cluster = Cluster([spec], tmp_path / "state", out, RestartPolicy(start_attempts=1))
    (slot,) = cluster.slots
    try:
        wait_until(lambda: _answers(port), timeout=30, what="the impostor to answer")
        cluster._launch(slot, time.monotonic())  # past the check of the ports at start

        def looked() -> bool:
            cluster._look(slot, time.monotonic())
            return slot.sup.phase is Phase.GIVEN_UP

        wait_until(looked, timeout=30, what="the start to fail")
        assert f"port {port} (prog's admin port) is held by pid {impostor.pid}" in out.getvalue()
        assert "given up after 1 failed start" in out.getvalue()
        assert " ready " not in out.getvalue()
        assert pid_alive(impostor.pid)
    finally:
        cluster._stop_all()
        impostor.terminate()
        impostor.wait(timeout=30 * UNIT)


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_up_ha_without_etcd_says_how_to_install_it(tmp_path: Path) -> None:
    bare = tmp_path / "bin"  # a PATH without etcd
    bare.mkdir()
    done = run_zbus("up", "--ha", "--state-dir", str(tmp_path / "s"), env={"PATH": str(bare)})
    assert done.returncode == 1, done
    assert (
        "etcd: the program `etcd` is not installed; install it with "
        "`apt-get install etcd-server`" in done.stdout
    ), done.stdout
    assert "refusing to start" in done.stdout
    assert not (tmp_path / "s" / "logs").exists()  # nothing was started


# ------------------------------------------------------------------ the replicated bus


def _replication(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    try:
        answer = httpx.get(f"{cluster.url(name)}/api/v1/replication", timeout=2)
    except httpx.HTTPError:
        return None
    return answer.json() if answer.status_code == 200 else None


def _state(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    data = json.loads((cluster.state_dir / "run" / "cluster.json").read_text())
    return {entry["name"]: entry for entry in data["supervised"]}


def _one_leader(cluster: LocalCluster, found: list[str], not_: str | None = None) -> bool:
    """Whether one replica leads and the others follow it (``not_``: one that may be
    down, and may not lead)."""
    states = {n: _replication(cluster, n) for n in REPLICAS if n != not_}
    leaders = [n for n, s in states.items() if s is not None and s["role"] == "leader"]
    if len(leaders) != 1:
        return False
    following = all(
        s is not None and s["role"] == "follower" and s["leader"] == leaders[0]
        for n, s in states.items()
        if n != leaders[0]
    )
    found[:] = leaders
    return following


def _bus_logs(cluster: LocalCluster) -> list[dict[str, Any]]:
    """The event buses' log records the catalog gathered (newest first): they went over
    the bus, whose endpoint (every service's ``ZBUS_EVENTBUS_ENDPOINT``) lists the three
    replicas."""
    try:
        answer = httpx.get(
            f"{cluster.url('catalog')}/api/v1/logs",
            params={"service": "eventbus", "limit": 1000},
            timeout=2,
        )
    except httpx.HTTPError:
        return []
    return list(answer.json()["logs"]) if answer.status_code == 200 else []


def _dashboard_shows_roles(catalog: str, roles: dict[str, str]) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=list(ARGS))
        try:
            page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
            page.set_default_timeout(30_000 * UNIT)
            page.goto(f"{catalog}/dashboard#bus")
            expect(page.locator("#bus-replicas")).to_be_visible()
            expect(page.locator("#replicas-body tr")).to_have_count(len(roles))
            for name, role in roles.items():
                row = page.locator(f'#replicas-body tr[data-replica="{name}"]')
                expect(row.locator('[data-field="role"]')).to_have_text(role)
        finally:
            browser.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_up_ha_elects_a_leader_and_another_leads_when_it_is_killed(tmp_path: Path) -> None:
    with local_cluster(
        tmp_path,
        ha=True,
        services=("etcd", "catalog", *REPLICAS),
        env=QUICK_CATALOG,
        restart={"backoff": BACKOFF},
    ) as cluster:
        leader: list[str] = []
        wait_until(lambda: _one_leader(cluster, leader), 60, what="one leader, two followers")
        first = leader[0]
        assert (cluster.state_dir / "data" / "etcd" / "member").is_dir()  # etcd's data
        epoch = _replication(cluster, first)["epoch"]  # type: ignore[index]
        # The replicas' logs reach the catalog (the last one's start, once two are in
        # sync: writes before are refused), shipped to the list of the three.
        wait_until(lambda: bool(_bus_logs(cluster)), 30, what="the replicas' logs gathered")

        # `zbus status`: every service ready, each replica's role, the leader named.
        status = run_zbus("status", "--catalog", cluster.url("catalog"), env={"COLUMNS": "200"})
        assert status.returncode == 0, status.stdout + status.stderr
        lines = status.stdout.splitlines()
        assert "ROLE" in lines[0].split(), status.stdout
        rows = {line.split()[0]: line.split() for line in lines[2:-1]}
        for name in REPLICAS:
            assert ("leader" if name == first else "follower") in rows[name], status.stdout
        assert rows["catalog"][4] == "-", status.stdout  # the ROLE column: not a replica
        assert f"bus leader {first}" in lines[-1], status.stdout
        view = json.loads(run_zbus("status", "--json", "--catalog", cluster.url("catalog")).stdout)
        replication = {e["name"]: e.get("replication") for e in view["services"]}
        assert replication["catalog"] is None and replication[first]["role"] == "leader"

        roles = {n: "leader" if n == first else "follower" for n in REPLICAS}
        _dashboard_shows_roles(cluster.url("catalog"), roles)

        # A confirmed event: stored by the leader and one follower at least.
        endpoints = [cluster.endpoint(p) for p in (5556, 5566, 5576)]
        with zbus.EventBusClient(endpoints, producer="ha-test") as client:
            seq = client.publish("/ha/before", {"n": 1}, confirm=True, timeout=10 * UNIT)

        pid = _state(cluster)[first]["pid"]
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        wait_until(
            lambda: _one_leader(cluster, leader, not_=first),
            30,
            what=f"another replica than {first} to lead",
        )
        elected = time.monotonic() - killed
        second = leader[0]
        assert _state(cluster)[first]["pid"] in (None, pid)  # not back yet: it cannot race
        after = _replication(cluster, second)
        assert after is not None and after["log_end"] >= seq, after
        assert after["epoch"] > epoch

        def back() -> bool:
            entry = _state(cluster)[first]
            again = _replication(cluster, first)
            return (
                entry["state"] == "ready"
                and entry["pid"] not in (None, pid)
                and again is not None
                and again["role"] == "follower"
                and again["leader"] == second
            )

        wait_until(back, 60, what=f"{first} restarted, following {second}")
        assert _state(cluster)[first]["restarts"] == 1
        print(f"\nkill -9 of the leader to another one leading: {elected:.1f} s")
        pids = {n: e["pid"] for n, e in _state(cluster).items() if e["pid"]}
        assert cluster.launcher is not None
        rest = _stop(cluster.launcher)
        assert f"{first:<12} exited (killed by SIGKILL); restarting it in {BACKOFF:g} s" in rest
        assert f"{first:<12} ready again (restart 1)" in rest, rest
        for name in REPLICAS:
            assert f"{name:<12} stopped (exit 0)" in rest, rest
        assert "etcd         stopped (by SIGTERM)" in rest, rest
        assert not any(pid_alive(p) for p in pids.values())
