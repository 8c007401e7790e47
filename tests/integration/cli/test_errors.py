"""The ``zbus`` command's failures: one line ``zbus: <reason>``, exit 1 or 2, no traceback;
and its shell completion scripts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import zbus
from tests.support.local_cluster import ROOT
from tests.support.ports import HeldPorts

COMMANDS = [
    ("status",),
    ("services", "ls"),
    ("bus", "pub", "/t", "1"),
    ("bus", "sub", "/t"),
    ("bus", "tail"),
    ("bus", "tail", "-f"),
    ("bus", "topics"),
    ("jobs", "submit", "default", "noop"),
    ("jobs", "ls"),
    ("jobs", "show", "x"),
    ("jobs", "cancel", "x"),
    ("jobs", "retry", "x"),
    ("jobs", "watch", "x"),
    ("queues", "ls"),
    ("queues", "purge", "q"),
    ("workers", "ls"),
    ("logs",),
    ("logs", "-f"),
]


@pytest.fixture(scope="module")
def dead_catalog() -> Iterator[str]:
    with HeldPorts() as held:  # nothing listens there
        yield f"http://127.0.0.1:{held.port}"


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    err = done.stderr
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("zbus: "), err
    return err.strip()


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_dead_catalog_is_one_line_and_exit_1(command: tuple[str, ...], dead_catalog: str) -> None:
    done = zbus(*command, env={"ZBUS_CATALOG_URL": dead_catalog, "ZBUS_ADMIN_TOKEN": ""})
    expected = 2 if command[:2] == ("jobs", "submit") else 1  # submit keeps its old code
    assert done.returncode == expected, done
    assert one_line(done).startswith(f"zbus: cannot reach the catalog at {dead_catalog}/api/v1/")
    assert done.stdout == ""


def test_one_catalog_flag_before_the_command_is_enough(dead_catalog: str) -> None:
    # The variable names a catalog that answers nothing either: the flag must win.
    env = {"ZBUS_CATALOG_URL": "http://127.0.0.1:1", "ZBUS_ADMIN_TOKEN": ""}
    done = zbus("--catalog", dead_catalog, "workers", "ls", env=env)
    assert done.returncode == 1, done
    assert one_line(done).startswith(f"zbus: cannot reach the catalog at {dead_catalog}/api/v1/")


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("nonsense",), "invalid choice: 'nonsense'"),
        (("status", "--bogus"), "unrecognized arguments: --bogus"),
        (("bus",), "the following arguments are required: ACTION"),
        (("bus", "tail", "-n", "many"), "invalid int value: 'many'"),
        (("bus", "tail", "-n", "0"), "-n must be between 1 and 1000"),
        (("bus", "topics", "--limit", "0"), "--limit must be between 1 and 100000"),
        (("bus", "sub", "-n", "0"), "-n must be at least 1"),
        (("jobs", "ls", "--limit", "5000"), "--limit must be between 1 and 1000"),
        (("jobs", "ls", "--state", "lost"), "invalid choice: 'lost'"),
        (("jobs", "submit", "q", "x", "-p", "novalue"), "expected KEY=VALUE"),
        (("jobs", "watch", "x", "--wait", "-1"), "--wait must be between"),
        (("logs", "--level", "loud"), "unknown level 'loud'"),
        (("logs", "-n", "-1"), "-n must be between 0 and 10000"),
        (("status", "--timeout", "0"), "--timeout must be between"),
        (("status", "--catalog", "nonsense"), "bad URL for the catalog"),
        (("completion", "fish"), "invalid choice: 'fish'"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(
    args: tuple[str, ...], reason: str, dead_catalog: str
) -> None:
    done = zbus(*args, env={"ZBUS_CATALOG_URL": dead_catalog})
    assert done.returncode == 2, done
    assert reason in one_line(done)


def test_pub_refuses_data_on_stdin_that_is_not_utf8(tmp_path: Path, refused_port: int) -> None:
    dead = f"tcp://127.0.0.1:{refused_port}"
    data = tmp_path / "data"
    data.write_bytes(b"\xff\xfe")  # not UTF-8
    with data.open() as stdin:
        done = subprocess.run(
            [sys.executable, "-m", "zbus", "bus", "pub", "/t", "--bus", dead],
            stdin=stdin,
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
    assert done.returncode == 2 and "not UTF-8" in one_line(done)


@pytest.mark.parametrize("shell", ["bash", "zsh", "tcsh"])
def test_completion_scripts_name_every_command(shell: str) -> None:
    done = zbus("completion", shell)
    assert done.returncode == 0, done.stderr
    script = done.stdout
    for word in ("status", "services", "bus", "jobs", "queues", "workers", "logs", "keys"):
        assert word in script, word
    for word in ("pub", "sub", "tail", "topics", "watch", "cancel", "retry", "purge"):
        assert word in script, word
    checker = {"bash": "bash", "zsh": "zsh", "tcsh": "tcsh"}[shell]
    if shutil.which(checker) is not None:
        checked = subprocess.run(
            [checker, "-n"], input=script, capture_output=True, text=True, check=False
        )
        assert checked.returncode == 0, checked.stderr
    else:
        assert shell != "bash", "bash must be here to check the bash script"


def test_bash_completion_completes_commands(tmp_path: Path) -> None:
    script = tmp_path / "zbus.bash"
    script.write_text(zbus("completion", "bash").stdout)
    probe = (
        f"source {script}\n"
        "COMP_WORDS=(zbus jobs w); COMP_CWORD=2; COMP_LINE='zbus jobs w'; COMP_POINT=11\n"
        "_shtab_zbus zbus w jobs\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["watch"]
