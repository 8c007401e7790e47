"""The registry store on real SQLite files: round trip, upsert, reopen, rebuild input,
readers, and refusal of files that are not a catalog registry."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from zbus.catalog.core.model import NodeRecord
from zbus.catalog.server.store import RegistryStore, StoreError
from zbus.common.protocols.dbp import TimeEncoding

T0 = 1_763_800_000.125


def record(name: str = "resizer", **kw: object) -> NodeRecord:
    fields: dict[str, object] = {
        "name": name,
        "identity": b"\x00\x80\x00\x41\xa7",
        "info": {"name": name, "ip": "10.0.0.7", "port": 5555, "tags": ["a", "é"]},
        "state": "active",
        "registered_at": T0,
        "last_heartbeat": T0 + 1.5,
        "heartbeat_interval": 3.0,
        "address": "10.0.0.7:40000",
        "time_encoding": TimeEncoding.FLOAT32,
    }
    fields.update(kw)
    return NodeRecord(**fields)  # type: ignore[arg-type]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "catalog.db"


@pytest.fixture
def store(path: Path) -> Iterator[RegistryStore]:
    store = RegistryStore(path)
    yield store
    store.close()


def test_round_trip_and_reader(store: RegistryStore) -> None:
    a, b = record("a"), record("b", address=None, time_encoding=TimeEncoding.ASCII, info={})
    store.write([b, a])
    assert store.load() == [a, b]
    reader = store.reader()
    try:
        assert reader.get("a") == a and reader.get("zzz") is None
        assert reader.list() == [a, b]
    finally:
        reader.close()


def test_upsert_by_name_and_gone_rows(store: RegistryStore) -> None:
    store.write([record(), record(state="late"), record("x")])
    assert [r.state for r in store.load()] == ["late", "active"]
    store.write([record(state="gone")])
    assert [r.name for r in store.load()] == ["x"]  # gone nodes are not rebuilt
    reader = store.reader()
    try:
        got = reader.get("resizer")
        assert got is not None and got.state == "gone"  # but still shown
        assert len(reader.list()) == 2
    finally:
        reader.close()


def test_empty_write_is_a_no_op(store: RegistryStore) -> None:
    store.write([])
    assert store.load() == []


def test_reopen_keeps_records(path: Path) -> None:
    first = RegistryStore(path, fsync=True)
    first.write([record()])
    first.close()
    again = RegistryStore(path)
    try:
        assert again.load() == [record()]
    finally:
        again.close()


def test_not_a_database_is_refused(path: Path) -> None:
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="catalog registry"):
        RegistryStore(path)


def test_another_applications_database_is_refused(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE other(x)")
    conn.close()
    with pytest.raises(StoreError, match="another application"):
        RegistryStore(path)


def test_bad_row_is_a_store_error(store: RegistryStore, path: Path) -> None:
    store.write([record()])
    conn = sqlite3.connect(path)
    conn.execute("UPDATE nodes SET state = 'zombie'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="zombie"):
        store.load()


def test_records_are_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        record().state = "gone"  # type: ignore[misc]
