"""The SQLite position store and the PPPP client's checks of its options."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from zbus import PositionStore, PositionStoreError, PPPPSubscriber, SQLitePositionStore
from zbus.eventbus.client._pppp_shell import check_name


def test_positions_survive_reopening_and_never_move_back(tmp_path: Path) -> None:
    path = tmp_path / "pos.sqlite"
    with SQLitePositionStore(path) as store:
        assert isinstance(store, PositionStore)
        assert store.load() == {}
        store.save("/a/", 10)
        store.save("/a/", 7)  # behind: kept at 10
        store.save("/b/", 0)  # inside a SYNC: nothing to save
        store.save("", 3)
    with SQLitePositionStore(path) as store:
        assert store.load() == {"/a/": 10, "": 3}


def test_a_transaction_keeps_the_work_and_the_position_together(tmp_path: Path) -> None:
    with SQLitePositionStore(tmp_path / "pos.sqlite") as store:
        store.connection.execute("CREATE TABLE work (n INTEGER)")
        with store.transaction() as db:
            db.execute("INSERT INTO work VALUES (1)")
            store.save("/a/", 1)
        with pytest.raises(RuntimeError), store.transaction() as db:
            db.execute("INSERT INTO work VALUES (2)")
            store.save("/a/", 2)
            raise RuntimeError("the work failed")
        assert store.load() == {"/a/": 1}
        assert store.connection.execute("SELECT n FROM work").fetchall() == [(1,)]


def test_bad_positions_and_files_are_refused(tmp_path: Path) -> None:
    with SQLitePositionStore(tmp_path / "pos.sqlite") as store:
        for bad in (-1, 1 << 64, 1.5, "3"):
            with pytest.raises(ValueError):
                store.save("/a/", bad)  # type: ignore[arg-type]
    junk = tmp_path / "junk"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(PositionStoreError):
        SQLitePositionStore(junk)
    # A row written by something else with a value out of range is not loaded.
    path = tmp_path / "odd.sqlite"
    SQLitePositionStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO zbus_positions VALUES ('/x/', -5)")
    assert SQLitePositionStore(path).load() == {}


def test_names_channels_and_settings_are_checked() -> None:
    assert check_name("worker-1") == b"worker-1"
    assert check_name(None).startswith(b"zbus-")
    for bad in ("", "x" * 256, "\x00x"):
        with pytest.raises(ValueError):
            check_name(bad)
    with pytest.raises(ValueError, match="channel"):
        PPPPSubscriber("tcp://127.0.0.1:1", [])
    with pytest.raises(ValueError, match="misses"):
        PPPPSubscriber("tcp://127.0.0.1:1", "/a/", misses=1)
    with pytest.raises(ValueError, match="name"):
        PPPPSubscriber("tcp://127.0.0.1:1", "/a/", name="")
