"""The installed package: one top-level `zbus`, a public API, a light import, and no
import cycles."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

import grimp
import pytest

import zbus
import zbus.common.settings
import zbus.errors

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


#: What no client import may load: the services' frameworks, storage and data stacks.
HEAVY = (
    "pydantic",
    "pydantic_settings",
    "fastapi",
    "starlette",
    "uvicorn",
    "prometheus_client",
    "sqlite3",
    "pyarrow",
    "pyspark",
    "httpx",
    "rich",
    "shtab",
)


def _loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``statement``."""
    code = f"import sys\n{statement}\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def _heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


@pytest.mark.parametrize(
    "statement",
    [
        "import zbus",
        "import zbus.eventbus.client",
        "import zbus.broker.client",
        "import zbus.catalog.client",
        "from zbus import *",
    ],
)
def test_a_client_import_loads_no_server_framework(statement: str) -> None:
    assert _heavy_in(_loaded_after(statement)) == []


def test_the_heavy_check_sees_a_heavy_import() -> None:
    heavy = _heavy_in(_loaded_after("import zbus.common.settings"))
    assert {"pydantic", "pydantic_settings"} <= {m.split(".")[0] for m in heavy}


def test_import_zbus_loads_no_client_and_no_asyncio() -> None:
    # `import zbus` must cost at most 2x `import zmq, msgpack` (tests/bench/bench_import.py
    # measures it). asyncio with zmq.asyncio alone costs about that much, and the clients'
    # codecs and cores about 3x, so each client is imported at the first use of its names.
    loaded = _loaded_after("import zbus")
    assert "asyncio" not in loaded
    assert sorted(m for m in loaded if ".client" in m) == []
    assert {"zmq", "zbus.errors", "zbus.common.security"} <= loaded


def _public_api_source() -> tuple[set[str], dict[str, str], dict[str, str]]:
    """From zbus/__init__.py: the names imported at once, those the TYPE_CHECKING block
    imports (name -> module), and the table of names imported at first use."""
    tree = ast.parse(Path(zbus.__file__).read_text())
    eager: set[str] = set()
    typed: dict[str, str] = {}
    table: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("zbus"):
            eager.update(alias.name for alias in node.names)
        elif isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for child in node.body:
                assert isinstance(child, ast.ImportFrom) and child.module
                typed.update((alias.name, child.module) for alias in child.names)
        elif isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "_CLIENTS":
            table = ast.literal_eval(node.value)
    return eager, typed, table


def test_the_lazy_names_are_the_typed_names() -> None:
    eager, typed, table = _public_api_source()
    assert table and typed == table
    assert eager.isdisjoint(table)
    assert eager | set(table) == set(zbus.__all__)
    for name, module in table.items():
        assert getattr(zbus, name) is getattr(importlib.import_module(module), name), name


def test_every_public_name_imports_in_a_fresh_interpreter() -> None:
    code = (
        "import zbus\n"
        "from zbus import *\n"
        "missing = [n for n in zbus.__all__ if n not in globals()]\n"
        "missing += [n for n in zbus.__all__ if n not in dir(zbus)]\n"
        "print(' '.join(missing) or 'ok')\n"
        "try:\n"
        "    zbus.NoSuchName\n"
        "except AttributeError:\n"
        "    print('AttributeError')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["ok", "AttributeError"]


def test_config_error_is_one_class_wherever_it_is_imported_from() -> None:
    assert zbus.ConfigError is zbus.errors.ConfigError is zbus.common.settings.ConfigError
    assert issubclass(zbus.ConfigError, zbus.ZbusError)
    assert issubclass(zbus.ConfigError, ValueError)


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
