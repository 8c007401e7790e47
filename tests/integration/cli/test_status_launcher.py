"""``zbus status`` when the catalog cannot be reached: the local cluster's launcher, whose
state file still says what it restarts and what it gave up (the catalog included)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.cli import zbus


def write_state(state_dir: Path, launcher: int, catalog_state: str) -> None:
    supervised = [
        {"name": "catalog", "admin": "http://127.0.0.1:1", "state": catalog_state, "pid": None,
         "restarts": 4, "failed_starts": 5, "last_exit": "exit status 1", "since": 0.0},
        {"name": "eventbus", "admin": "http://127.0.0.1:2", "state": "ready", "pid": 4243,
         "restarts": 0, "failed_starts": 0, "last_exit": None, "since": 0.0},
    ]  # fmt: skip
    run = state_dir / "run"
    run.mkdir(parents=True)
    content = {"launcher": launcher, "services": {}, "supervised": supervised, "updated": 0.0}
    (run / "cluster.json").write_text(json.dumps(content), encoding="utf-8")


def test_a_given_up_catalog_is_named_from_the_launchers_state(
    tmp_path: Path, refused_port: int
) -> None:
    # A live launcher: this test's own process stands for it (its pid is alive).
    write_state(tmp_path, os.getpid(), "given up")
    catalog = f"http://127.0.0.1:{refused_port}"
    done = zbus("status", "--catalog", catalog, "--state-dir", str(tmp_path))
    assert done.returncode == 1, done
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[2:] if line.strip()}
    assert "given up" in rows["catalog"] and "exit status 1" in rows["catalog"], done.stdout
    assert done.stdout.splitlines()[-1].endswith("given up: catalog"), done.stdout
    assert "cannot reach the catalog" in done.stdout.splitlines()[0], done.stdout

    view = json.loads(
        zbus("status", "--json", "--catalog", catalog, "--state-dir", str(tmp_path)).stdout
    )
    assert view["ready"] is False
    assert [s["state"] for s in view["launcher"]] == ["given up", "ready"]


def test_without_a_running_launcher_it_is_the_catalogs_error(
    tmp_path: Path, refused_port: int
) -> None:
    # A state file left by a launcher that is gone is not read: pid 2**22 + 1 is above
    # Linux's pid_max, so no process has it.
    write_state(tmp_path, 2**22 + 1, "given up")
    done = zbus(
        "status", "--catalog", f"http://127.0.0.1:{refused_port}", "--state-dir", str(tmp_path)
    )
    assert done.returncode == 1, done
    err = done.stderr.strip()
    assert err.startswith("zbus: ") and "\n" not in err and "cannot reach the catalog" in err, err
    assert done.stdout == ""
