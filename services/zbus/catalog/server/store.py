"""The catalog's registry: one SQLite file (WAL mode) of node records, keyed by name.

Layout (schema version 1; the file is marked with ``PRAGMA application_id``): one table
``nodes`` with every field of :class:`~zbus.catalog.core.model.NodeRecord`; ``info`` is
JSON text and ``time_encoding`` the enum's value. A node that left or expired keeps its
row with state ``gone``, so the admin API can still show it; :meth:`RegistryStore.load`
skips those rows when the catalog rebuilds.

Durability: ``synchronous=NORMAL`` keeps every committed write across a kill of the
process, ``fsync=True`` (FULL) also across a power cut. Plain blocking code for one
writer thread; :meth:`RegistryStore.reader` gives other threads their own connections.
"""

from __future__ import annotations

import builtins
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zbus.catalog.core.model import NODE_STATES, NodeRecord
from zbus.common.protocols.dbp import TimeEncoding
from zbus.common.sqlite import Store, StoreFormat, StoreReader
from zbus.common.sqlite import StoreError as StoreError  # re-exported

SCHEMA_VERSION = 1
APPLICATION_ID = 0x7A626367  # "zbcg"
_WHAT = "catalog registry"

_SCHEMA = """
CREATE TABLE nodes(
    name TEXT PRIMARY KEY, identity BLOB NOT NULL, info TEXT NOT NULL, state TEXT NOT NULL,
    registered_at REAL NOT NULL, last_heartbeat REAL NOT NULL,
    heartbeat_interval REAL NOT NULL, address TEXT, time_encoding TEXT NOT NULL
) WITHOUT ROWID;
"""
_FORMAT = StoreFormat(_WHAT, APPLICATION_ID, SCHEMA_VERSION, _SCHEMA, 4096)
_FIELDS = (
    "name, identity, info, state, registered_at, last_heartbeat, heartbeat_interval,"
    " address, time_encoding"
)
_SELECT = f"SELECT {_FIELDS} FROM nodes"
_UPSERT = f"INSERT OR REPLACE INTO nodes({_FIELDS}) VALUES ({', '.join('?' * 9)})"


def _row(r: NodeRecord) -> tuple[Any, ...]:
    return (
        r.name, r.identity, json.dumps(r.info, separators=(",", ":")), r.state,
        r.registered_at, r.last_heartbeat, r.heartbeat_interval, r.address,
        r.time_encoding.value,
    )  # fmt: skip


def _record(row: tuple[Any, ...], path: Path) -> NodeRecord:
    try:
        state = row[3]
        if state not in NODE_STATES:
            raise ValueError(f"unknown state {state!r}")
        return NodeRecord(
            name=row[0], identity=bytes(row[1]), info=json.loads(row[2]), state=state,
            registered_at=row[4], last_heartbeat=row[5], heartbeat_interval=row[6],
            address=row[7], time_encoding=TimeEncoding(row[8]),
        )  # fmt: skip
    except (ValueError, TypeError) as exc:
        raise StoreError(f"{path}: bad row for node {row[0]!r}: {exc}") from exc


class RegistryStore(Store):
    """Node records in one SQLite file, written by one thread at a time."""

    FORMAT = _FORMAT

    def write(self, records: Sequence[NodeRecord]) -> None:
        """Upsert the records by name (a later one for the same name wins) in one
        transaction: durable once this returns."""
        if not records:
            return
        rows = [_row(r) for r in records]
        with self.transaction("write") as conn:
            conn.executemany(_UPSERT, rows)

    def load(self) -> list[NodeRecord]:
        """Every node that is not gone, by name: what the catalog rebuilds from."""
        try:
            rows = self._conn.execute(f"{_SELECT} WHERE state != 'gone' ORDER BY name").fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: load failed: {exc}") from exc
        return [_record(r, self.path) for r in rows]

    def reader(self) -> RegistryReader:
        return RegistryReader(self.path)


class RegistryReader(StoreReader):
    """A read-only view with its own connection, for one thread at a time."""

    FORMAT = _FORMAT

    def get(self, name: str) -> NodeRecord | None:
        row = self._conn.execute(f"{_SELECT} WHERE name = ?", (name,)).fetchone()
        return None if row is None else _record(row, self.path)

    def list(self) -> builtins.list[NodeRecord]:
        """Every stored node, gone ones included, by name."""
        rows = self._conn.execute(f"{_SELECT} ORDER BY name").fetchall()
        return [_record(r, self.path) for r in rows]
