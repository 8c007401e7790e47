"""Every ``zbus`` command against one real local cluster (the shipped one, Spark included).

The cluster is deploy/local-cluster.toml on free ports, started once for the module,
with an admin token; the commands run as users run them, ``python -m zbus ...``, told
only where the catalog is (``ZBUS_CATALOG_URL``): every other endpoint they ask it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cli import Streaming, zbus, zbus_json
from tests.support.local_cluster import LocalCluster, local_cluster
from zbus.catalog.client.node import CatalogNode

pytestmark = pytest.mark.timeout(300)

TOKEN = "cli-test-token"
SERVICES = {"catalog", "eventbus", "broker", "worker", "sparkworker"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(
        tmp_path_factory.mktemp("cli"), launcher_env={"ZBUS_ADMIN_TOKEN": TOKEN}
    ) as running:
        yield running


@pytest.fixture(scope="module")
def env(cluster: LocalCluster) -> dict[str, str]:
    """What the commands are told: the catalog, and no token unless a test gives one."""
    return {"ZBUS_CATALOG_URL": cluster.url("catalog"), "ZBUS_ADMIN_TOKEN": ""}


def one_line_error(done: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    """The command failed with ``code`` and one line ``zbus: ...`` naming ``needles``."""
    assert done.returncode == code, done
    err = done.stderr.strip()
    assert err.startswith("zbus: ") and "\n" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


# --------------------------------------------------------------------------- cluster


def test_status_is_one_table_of_the_cluster(env: dict[str, str], cluster: LocalCluster) -> None:
    done = zbus("status", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # RESTARTS: the cluster runs under `zbus up`, which has restarted nothing.
    assert lines[0].split()[:4] == ["SERVICE", "STATE", "READY", "RESTARTS"]
    rows = {line.split()[0]: line.split() for line in lines[2:] if line.strip()}
    assert set(rows) >= SERVICES
    for name in SERVICES:
        assert rows[name][1:4] == ["active", "yes", "0"], rows[name]
    assert lines[-1].startswith("5 services, all ready")

    view = zbus_json("status", "--catalog", cluster.url("catalog"))  # the flag, not the env
    assert view["ready"] is True
    assert {s["name"] for s in view["services"]} == SERVICES
    assert all(s["ready"] is True for s in view["services"])
    assert all(s["restarts"] == 0 for s in view["services"])


async def test_status_exits_1_when_a_service_is_not_ready(
    env: dict[str, str], cluster: LocalCluster, refused_port: int
) -> None:
    dead = f"http://127.0.0.1:{refused_port}"  # nothing listens there
    info = {"name": "ghost", "ip": "127.0.0.1", "port": 1, "function": "test", "admin": dead}
    async with CatalogNode(cluster.endpoint(5246), info, heartbeat_interval=0.5):
        done = await asyncio.to_thread(zbus, "status", env=env)
        assert done.returncode == 1, done.stdout + done.stderr
        ghost = next(line for line in done.stdout.splitlines() if line.startswith("ghost"))
        assert "NO" in ghost.split() and "cannot connect" in ghost
        assert "1 not ready" in done.stdout.splitlines()[-1]

        done = await asyncio.to_thread(zbus, "status", "--json", env=env)
        assert done.returncode == 1
        view = json.loads(done.stdout)
        assert view["ready"] is False
        assert [s["ready"] for s in view["services"] if s["name"] == "ghost"] == [None]


def test_services_ls(env: dict[str, str], cluster: LocalCluster) -> None:
    listed = zbus_json("services", "ls", env=env)["services"]
    by_name = {s["name"]: s for s in listed}
    assert SERVICES - {"catalog"} <= set(by_name)
    bus = by_name["eventbus"]["info"]["endpoints"]
    assert bus["snapshot"] == cluster.endpoint(5556)

    done = zbus("services", "ls", env=env)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("eventbus"))
    assert f"snapshot tcp:{cluster.ports[5556]}" in row and cluster.url("eventbus") in row


# --------------------------------------------------------------------------- bus


def test_bus_pub_tail_and_topics(env: dict[str, str]) -> None:
    prefix = f"/cli/{uuid.uuid4().hex[:8]}/"
    first = zbus_json("bus", "pub", prefix + "t1", '{"celsius": 21.5}', env=env)
    assert first["topic"] == prefix + "t1" and first["seq"] > 0
    done = zbus("bus", "pub", prefix + "t2", "-", env=env, stdin="plain words\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"published {prefix}t2 as event ")
    raw = zbus_json("bus", "pub", "--raw", prefix + "t1", "raw bytes", env=env)
    assert raw["seq"] > first["seq"]

    events = zbus_json("bus", "tail", "-n", "3", prefix, env=env)["events"]
    assert [(e["topic"], e["data"]) for e in events] == [
        (prefix + "t1", {"celsius": 21.5}),
        (prefix + "t2", "plain words"),
        (prefix + "t1", "raw bytes"),
    ]
    assert [e["data_encoding"] for e in events] == ["msgpack", "msgpack", "utf-8"]
    assert events[0]["seq"] == first["seq"] and events[0]["producer"] == "zbus-cli"

    done = zbus("bus", "tail", "-n", "1", prefix, env=env)
    assert done.returncode == 0
    assert done.stdout.split() == [str(raw["seq"]), events[2]["ts"], prefix + "t1", "raw", "bytes"]

    topics = zbus_json("bus", "topics", prefix, env=env)["topics"]
    assert [(t["topic"], t["count"]) for t in topics] == [(prefix + "t1", 2), (prefix + "t2", 1)]
    done = zbus("bus", "topics", prefix, env=env)
    assert done.stdout.splitlines()[0].split() == ["TOPIC", "EVENTS", "BYTES", "LAST", "SEQ"]
    assert done.stdout.splitlines()[-1] == "2 topics"


def test_bus_sub_prints_live_events_until_ctrl_c(env: dict[str, str]) -> None:
    prefix = f"/cli/{uuid.uuid4().hex[:8]}/"
    zbus_json("bus", "pub", prefix + "old", "1", env=env)  # before: not live, not shown
    sub = Streaming("bus", "sub", prefix, "--json", env=env)
    try:
        assert sub.line("err").startswith(f"subscribed to {prefix}")
        zbus_json("bus", "pub", prefix + "a", '{"n": 1}', env=env)
        zbus_json("bus", "pub", "/cli/elsewhere", "2", env=env)
        zbus_json("bus", "pub", prefix + "b", '"two"', env=env)
        got = [json.loads(sub.line()), json.loads(sub.line())]
        assert [(e["topic"], e["data"]) for e in got] == [
            (prefix + "a", {"n": 1}),
            (prefix + "b", "two"),
        ]
        assert sub.interrupt() == 0
        assert sub.rest() == []
        assert all("Traceback" not in line for line in sub.rest("err"))
    finally:
        sub.close()

    # --snapshot: the latest event of each topic first; -n: stop after that many.
    done = zbus("bus", "sub", prefix, "--snapshot", "-n", "3", "--json", env=env)
    assert done.returncode == 0, done.stderr
    topics = sorted(json.loads(line)["topic"] for line in done.stdout.splitlines())
    assert topics == [prefix + "a", prefix + "b", prefix + "old"]


def test_bus_tail_follow(env: dict[str, str]) -> None:
    prefix = f"/cli/{uuid.uuid4().hex[:8]}/"
    zbus_json("bus", "pub", prefix + "x", "1", env=env)
    tail = Streaming("bus", "tail", "-f", "-n", "5", prefix, env=env)
    try:
        assert tail.line().split()[2:] == [prefix + "x", "1"]
        assert tail.line("err").startswith(f"following {prefix} at ")
        for n in (2, 3):
            zbus_json("bus", "pub", prefix + "x", str(n), env=env)
            assert tail.line().split()[2:] == [prefix + "x", str(n)]
        assert tail.interrupt() == 0
        assert tail.rest() == []
    finally:
        tail.close()


# --------------------------------------------------------------------------- logs


def test_logs_filters_and_follows(env: dict[str, str], cluster: LocalCluster) -> None:
    records = zbus_json("logs", "--service", "broker", "-n", "20", env=env)["logs"]
    assert records and {r["service"] for r in records} == {"broker"}
    assert any(r["msg"] == "service ready" for r in records)
    stamps = [r["ts"] for r in records]
    assert stamps == sorted(stamps)  # oldest first

    done = zbus("logs", "--service", "broker", "--grep", "SERVICE READY", "-n", "1", env=env)
    assert done.returncode == 0
    assert done.stdout.split()[1:5] == ["INFO", "broker", "zbus.runtime.service:", "service"]

    follow = Streaming(
        "logs", "-f", "-n", "0", "--service", "broker", "--level", "warning", "--json", env=env
    )
    try:
        assert follow.line("err").startswith("following the logs at ")
        # A refused admin request is logged as a warning by the broker.
        url = f"{cluster.url('broker')}/api/v1/queues/nothing/purge"
        assert httpx.post(url).status_code == 401
        record = json.loads(follow.line())
        assert record["service"] == "broker" and record["level"] == "warning"
        assert record["msg"] == "admin request unauthorised"
        assert follow.interrupt() == 0
    finally:
        follow.close()

    done = zbus("logs", "--level", "loud", env=env)
    assert done.returncode == 2 and "unknown level 'loud'" in done.stderr


# --------------------------------------------------------------------------- jobs


def test_jobs_ls_show_retry_cancel(env: dict[str, str]) -> None:
    token = {**env, "ZBUS_ADMIN_TOKEN": TOKEN}
    submit = ("jobs", "submit", "default", "fail", "-p", "message=on purpose", "--retries", "0")
    done = zbus(*submit, env=env)
    assert done.returncode == 1 and "on purpose" in done.stderr
    failed = done.stderr.split("as job ")[1].split()[0]

    state = zbus_json("jobs", "show", failed, env=env)["state"]
    assert state in ("failed", "dead")
    listed = zbus_json("jobs", "ls", "--queue", "default", "--state", state, env=env)["jobs"]
    assert failed in [j["id"] for j in listed]
    assert {j["state"] for j in listed} == {state}
    done = zbus("jobs", "ls", "--queue", "default", env=env)
    row = next(line for line in done.stdout.splitlines() if line.startswith(failed))
    assert row.split()[1:3] == ["default", "fail"] and "on purpose" in row

    job = zbus_json("jobs", "show", failed, env=env)
    assert job["id"] == failed and "on purpose" in job["error"]
    shown = zbus("jobs", "show", failed, env=env).stdout
    assert "on purpose" in shown and '{"message": "on purpose"}' in shown

    one_line_error(zbus("jobs", "retry", failed, env=env), 1, "admin token", "--token")
    again = zbus_json("jobs", "retry", failed, "--token", TOKEN, env=env)
    assert again["id"] == failed and again["state"] in ("queued", "running", "dead", "failed")

    # A queue no worker serves keeps its jobs queued: cancel one, purge the others.
    parked = f"parked-{uuid.uuid4().hex[:6]}"
    ids = []
    for _ in range(3):
        done = zbus("jobs", "submit", parked, "noop", "--wait", "0", env=env)
        assert done.returncode == 0, done.stderr
        ids.append(json.loads(done.stdout)["job_id"])
    done = zbus("jobs", "cancel", ids[0], env=token)
    assert done.returncode == 0 and done.stdout.strip().endswith("cancelled (state cancelled)")
    one_line_error(zbus("jobs", "cancel", ids[0], env=token), 1, "409", "not cancelled")
    one_line_error(zbus("jobs", "show", "no-such-job", env=env), 1, "404", "no-such-job")

    queues = {q["name"]: q for q in zbus_json("queues", "ls", env=env)["queues"]}
    assert queues[parked]["ready"] + queues[parked]["waiting"] == 2
    assert queues[parked]["cancelled"] == 1
    one_line_error(zbus("queues", "purge", parked, env=env), 1, "admin token")
    assert zbus_json("queues", "purge", parked, env=token) == {"queue": parked, "cancelled": 2}
    done = zbus("queues", "ls", env=env)
    row = next(line for line in done.stdout.splitlines() if line.startswith(parked))
    assert row.split() == [parked, "0", "0", "0", "0", "0", "0", "0", "0", "3"]


def test_workers_ls(env: dict[str, str]) -> None:
    workers = zbus_json("workers", "ls", env=env)["workers"]
    assert sorted(q for w in workers for q in w["queues"]) == ["default", "spark"]
    # Each worker by the name it registered with, with what its own admin API says.
    by_name = {w["name"]: w for w in workers}
    assert sorted(by_name) == ["sparkworker", "worker"]
    assert by_name["worker"]["concurrency"] == 4 and by_name["sparkworker"]["concurrency"] == 2
    assert all(isinstance(w["jobs_done"], int) for w in workers)
    done = zbus("workers", "ls", env=env)
    assert done.stdout.splitlines()[0].split()[:3] == ["WORKER", "QUEUES", "CONCURRENCY"]
    rows = {tuple(line.split()[:3]) for line in done.stdout.splitlines()[2:]}
    assert rows == {("sparkworker", "spark", "2"), ("worker", "default", "4")}


def test_jobs_watch_a_spark_job_with_a_progress_bar(env: dict[str, str]) -> None:
    done = zbus("jobs", "submit", "spark", "topic-stats", "--wait", "0", env=env)
    assert done.returncode == 0, done.stderr
    job_id = json.loads(done.stdout)["job_id"]
    done = zbus("jobs", "watch", job_id, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    bar, final = done.stdout.strip().splitlines()[-2:]
    assert "topic-stats on spark: succeeded" in bar
    assert "━" in bar and "100%" in bar and "tasks" in bar  # a progress bar, full
    assert final.startswith(f"job {job_id} succeeded after ")

    done = zbus("jobs", "submit", "spark", "topic-stats", "--wait", "0", env=env)
    job_id = json.loads(done.stdout)["job_id"]
    done = zbus("jobs", "watch", job_id, "--json", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert all("spark" in line for line in lines[:-1])
    assert lines[-1]["final"] is True and lines[-1]["state"] == "succeeded"
    assert lines[-1]["result"]["value"]["job"] == "topic-stats"


def test_jobs_watch_other_jobs_with_a_spinner(env: dict[str, str]) -> None:
    done = zbus("jobs", "submit", "default", "sleep", "-p", "seconds=0.5", "--wait", "0", env=env)
    job_id = json.loads(done.stdout)["job_id"]
    done = zbus("jobs", "watch", job_id, env=env)
    assert done.returncode == 0, done.stderr
    spinner, final = done.stdout.strip().splitlines()[-2:]
    assert "sleep on default: succeeded" in spinner and "━" not in spinner
    assert "tasks" not in spinner
    assert final.startswith(f"job {job_id} succeeded")

    done = zbus("jobs", "submit", "default", "fail", "--retries", "0", "--wait", "0", env=env)
    job_id = json.loads(done.stdout)["job_id"]
    done = zbus("jobs", "watch", job_id, env=env)
    assert done.returncode == 1
    assert done.stdout.strip().splitlines()[-1].startswith(f"job {job_id} ")

    parked = f"parked-{uuid.uuid4().hex[:6]}"
    done = zbus("jobs", "submit", parked, "noop", "--wait", "0", env=env)
    job_id = json.loads(done.stdout)["job_id"]
    one_line_error(zbus("jobs", "watch", job_id, "--wait", "0.5", env=env), 3, "still queued")


# --------------------------------------------------------------------------- endpoints


def test_flags_and_variables_come_before_the_catalog(
    env: dict[str, str], cluster: LocalCluster, refused_port: int
) -> None:
    dead = f"http://127.0.0.1:{refused_port}"
    one_line_error(
        zbus("queues", "ls", env={**env, "ZBUS_BROKER_ADMIN_URL": dead}),
        1,
        f"cannot reach the broker at {dead}/api/v1/queues",
    )
    flagged = zbus(
        "queues",
        "ls",
        "--broker-admin",
        cluster.url("broker"),
        "--json",
        env={**env, "ZBUS_BROKER_ADMIN_URL": dead, "ZBUS_CATALOG_URL": dead},
    )
    assert flagged.returncode == 0, flagged.stderr
    assert "queues" in json.loads(flagged.stdout)

    # Only the bus endpoint given: pub needs nothing of the (dead) catalog.
    done = zbus(
        "bus",
        "pub",
        "/cli/direct",
        "1",
        "--bus",
        cluster.endpoint(5556),
        env={**env, "ZBUS_CATALOG_URL": dead},
    )
    assert done.returncode == 0, done.stderr


def test_keys_generate(tmp_path: Path, env: dict[str, str]) -> None:
    done = zbus("keys", "generate", "client", "--dir", str(tmp_path), env=env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "client.key").exists() and (tmp_path / "client.key_secret").exists()
    assert done.stdout.startswith("public key: ")
