"""The cluster file's services: a zbus service by its module, another program (etcd) by
its command; what each is started with; clear errors for what is wrong; and the shipped
HA cluster file (`zbus up --ha`) as the issue fixes it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from zbus.common.settings import ConfigError
from zbus.launcher import ServiceSpec, load_cluster, load_cluster_file

ROOT = Path(__file__).resolve().parents[3]
HA = ROOT / "deploy" / "local-cluster-ha.toml"
REPLICAS = ("eventbus-1", "eventbus-2", "eventbus-3")
BUS_LIST = "tcp://127.0.0.1:5556,tcp://127.0.0.1:5566,tcp://127.0.0.1:5576"

PROGRAM = """
[[service]]
name = "etcd"
command = ["etcd", "--data-dir={data_dir}", "--name=x"]
admin_port = 2379
ready_path = "/health"
install_hint = "apt-get install etcd-server"
"""


def _load(tmp_path: Path, text: str) -> list[ServiceSpec]:
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return load_cluster(path)


def test_a_program_is_read_with_its_command_readiness_and_hint(tmp_path: Path) -> None:
    (spec,) = _load(tmp_path, PROGRAM)
    assert spec.is_program and spec.module == ""
    assert spec.command == ("etcd", "--data-dir={data_dir}", "--name=x")
    assert spec.ready_url == "http://127.0.0.1:2379/health"
    assert spec.install_hint == "apt-get install etcd-server"
    data = tmp_path / "data" / "etcd"
    assert spec.argv(data) == ["etcd", f"--data-dir={data}", "--name=x"]


def test_a_zbus_service_runs_as_python_m_and_is_ready_at_readyz(tmp_path: Path) -> None:
    (spec,) = _load(tmp_path, "[[service]]\nname='bus'\nmodule='zbus.eventbus'\nadmin_port=1\n")
    assert not spec.is_program and spec.command == ()
    assert spec.argv(tmp_path) == [sys.executable, "-m", "zbus.eventbus"]
    assert spec.ready_url == "http://127.0.0.1:1/readyz"
    assert spec.missing_program() is None


def test_a_missing_program_is_named_with_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (spec,) = _load(tmp_path, PROGRAM)
    monkeypatch.setenv("PATH", str(tmp_path))  # a folder without etcd
    assert spec.missing_program() == (
        "etcd: the program `etcd` is not installed; install it with `apt-get install etcd-server`"
    )
    found = ServiceSpec("py", "", 1, command=(sys.executable, "-c", "pass"))
    assert found.missing_program() is None  # a path, found as it is
    bare = ServiceSpec("x", "", 1, command=("no-such-program-here",))
    assert bare.missing_program() == "x: the program `no-such-program-here` is not installed"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("name='x'\nadmin_port=1\n", r"missing key 'module' \(a zbus service\) or 'command'"),
        (
            "name='x'\nmodule='m'\ncommand=['etcd']\nadmin_port=1\n",
            "'module'.*or 'command', not both",
        ),
        ("name='x'\ncommand='etcd --name=x'\nadmin_port=1\n", "command must be a list of strings"),
        ("name='x'\ncommand=['etcd', 2]\nadmin_port=1\n", "command must be a list of strings"),
        ("name='x'\ncommand=[]\nadmin_port=1\n", "command must start with the program"),
        ("name='x'\ncommand=['']\nadmin_port=1\n", "command must start with the program"),
        ("name='x'\nmodule=''\nadmin_port=1\n", "module must name a module"),
        ("name='x'\nmodule='m'\nadmin_port=1\nready_timeout=nan\n", r"in \(0, 3600\]"),
        ("name='x'\nmodule='m'\nadmin_port=1\nready_timeout=inf\n", r"in \(0, 3600\]"),
        ("name='x'\nmodule='m'\nadmin_port=1\nready_timeout=0\n", r"in \(0, 3600\]"),
        ("name='x'\ncommand=['etcd']\n", "missing key 'admin_port'"),
        ("name='x'\ncommand=['etcd']\nadmin_port=1\nready_path='health'\n", "ready_path must be"),
        ("name='x'\ncommand=['etcd']\nadmin_port=1\nready_path=3\n", "ready_path must be"),
        ("name='x'\ncommand=['etcd']\nadmin_port=1\ninstall_hint=1\n", "install_hint must be"),
        ("name='x'\ncommand=['etcd']\nadmin_port=1\ncomand=['etcd']\n", "has no key 'comand'"),
    ],
)
def test_a_bad_service_entry_says_what_is_wrong(tmp_path: Path, entry: str, message: str) -> None:
    with pytest.raises(ConfigError, match=rf"service #1: .*{message}"):
        _load(tmp_path, "[[service]]\n" + entry)


def test_the_ha_file_runs_etcd_first_then_the_catalog_and_three_replicas() -> None:
    loaded = load_cluster_file(HA)
    names = [s.name for s in loaded.services]
    assert names[:5] == ["etcd", "catalog", *REPLICAS]
    assert set(names[5:]) == {"broker", "worker", "sparkworker"}
    assert loaded.restart.backoff == 1.0  # a replica that dies is back after a second
    etcd = loaded.services[0]
    assert etcd.is_program and etcd.command[0] == "etcd" and etcd.admin_port == 2379
    assert etcd.ready_path == "/health" and etcd.install_hint == "apt-get install etcd-server"
    argv = etcd.argv(Path(".zbus/data/etcd"))
    assert "--data-dir=.zbus/data/etcd" in argv
    assert "--listen-client-urls=http://127.0.0.1:2379" in argv
    assert "--listen-peer-urls=http://127.0.0.1:2380" in argv


def test_the_ha_file_has_the_issues_ports_and_one_group() -> None:
    specs = {s.name: s for s in load_cluster(HA)}
    fixed = {  # admin, ZBUS_PORT, PPPP, mc0, replication
        "eventbus-1": (8702, 5556, 5560, 61616, 5561),
        "eventbus-2": (8712, 5566, 5570, 61626, 5571),
        "eventbus-3": (8722, 5576, 5580, 61636, 5581),
    }
    group = ",".join(f"{n}=127.0.0.1:{ports[4]}" for n, ports in fixed.items())
    for name, (admin, port, pppp, mc0, _) in fixed.items():
        spec = specs[name]
        assert spec.module == "zbus.eventbus" and spec.admin_port == admin
        env = spec.env
        assert (env["ZBUS_PORT"], env["ZBUS_PPPP_PORT"], env["ZBUS_MC0_PORT"]) == (
            str(port),
            str(pppp),
            str(mc0),
        )
        assert env["ZBUS_REPLICA_NAME"] == env["ZBUS_NODE_NAME"] == name
        assert env["ZBUS_REPLICAS"] == group
        assert env["ZBUS_ETCD_ENDPOINTS"] == "http://127.0.0.1:2379"
    for spec in specs.values():
        if not spec.is_program:
            assert spec.env["ZBUS_EVENTBUS_ENDPOINT"] == BUS_LIST, spec.name


def test_the_ha_file_is_the_plain_one_with_the_bus_replicated() -> None:
    plain = {s.name: s for s in load_cluster(ROOT / "deploy" / "local-cluster.toml")}
    ha = {s.name: s for s in load_cluster(HA)}
    for name, spec in plain.items():
        if name == "eventbus":
            continue
        same = ha[name]
        assert (same.module, same.admin_port) == (spec.module, spec.admin_port)
        assert {**spec.env, "ZBUS_EVENTBUS_ENDPOINT": BUS_LIST} == same.env, name
