"""The installed package: one top-level `zbus`, a public API, and no import cycles."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import grimp

import zbus

ROOT = Path(__file__).resolve().parents[2]


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_module_graph_has_no_cycles() -> None:
    graph = grimp.build_graph("zbus")
    assert len(graph.modules) > 100
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    graph = grimp.build_graph("zbus")
    graph.add_import(
        importer="zbus.common.protocols.errors", imported="zbus.eventbus.client.blocking"
    )
    cycles = _cycles(graph)
    assert cycles and "zbus.common.protocols.errors" in cycles[0]


def test_every_public_name_resolves() -> None:
    assert len(zbus.__all__) == len(set(zbus.__all__))
    for name in zbus.__all__:
        assert getattr(zbus, name) is not None, name
    errors = [getattr(zbus, n) for n in zbus.__all__ if n.endswith(("Error", "Failed"))]
    errors += [zbus.BrokerUnavailable, zbus.CatalogNotFound, zbus.CatalogUnavailable]
    for error in errors:
        assert issubclass(error, zbus.ZbusError), error


def test_the_pppp_client_is_public() -> None:
    for name in (
        "PPPPSubscriber",
        "AsyncPPPPSubscriber",
        "PPPPMessage",
        "PPPPError",
        "PositionStore",
        "SQLitePositionStore",
        "PositionStoreError",
    ):
        assert name in zbus.__all__, name
    assert issubclass(zbus.PositionStoreError, OSError)


def test_import_zbus_loads_no_server_framework() -> None:
    code = (
        "import sys, zbus\n"
        "heavy = ('fastapi', 'uvicorn', 'pyspark', 'sqlite3', 'pyarrow',\n"
        "         'rich', 'shtab', 'httpx')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_wheel_installs_only_the_zbus_package(tmp_path: Path) -> None:
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--wheel-dir", str(tmp_path), str(ROOT)),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("zbus-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"zbus"}
    assert "zbus/py.typed" in names and "zbus/dashboard/static/index.html" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(wheel) as archive:
        assert "zbus = zbus.cli:main" in archive.read(entry_points).decode()
