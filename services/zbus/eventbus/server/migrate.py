"""Opening a log of the version-1 schema: migrated in place to version 2 on open.

Version 1 stored one row per event (``events``) with a uuid B-tree (``uuids``); version 2
stores one row per batch (see :mod:`zbus.eventbus.server.store`). The migration reads the
events in sequence order, groups them by the batches they were received in (the old
``batches`` table kept each batch's first sequence and receive time), writes them as
stored batches, indexes every uuid at once, and drops the old tables, all in one
transaction: a crash during it leaves the version-1 log as it was, and the next open
starts again. It costs a pass over the log, read and written once (not measured at
scale), and the file keeps the old tables' pages as free pages.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

from zbus.common.sqlite import StoreError
from zbus.eventbus.core import batchlog
from zbus.eventbus.server.uuid_index import SCHEMA as UUID_SCHEMA
from zbus.eventbus.server.uuid_index import bulk_index

log = logging.getLogger(__name__)

BATCHES = """
CREATE TABLE batches(
    first_seq INTEGER PRIMARY KEY, last_seq INTEGER NOT NULL, count INTEGER NOT NULL,
    received REAL NOT NULL, crc INTEGER NOT NULL, seqs BLOB, uuids BLOB NOT NULL,
    rows BLOB NOT NULL);
"""
_MAX_BATCH = 1_000


def migrate_v1(conn: sqlite3.Connection, path: Path, app_id: int, version: int) -> bool:
    """Migrate a version-1 event log to ``version`` in place; False if it is not one.

    Raises:
        StoreError: the migration failed (the log is left at version 1).
    """
    try:
        if conn.execute("PRAGMA application_id").fetchone()[0] != app_id:
            return False
        if conn.execute("PRAGMA user_version").fetchone()[0] != 1:
            return False
    except sqlite3.Error:
        return False  # open_schema reports what is wrong with the file
    started = time.monotonic()
    log.warning("event log %s: migrating schema version 1 to %d", path, version)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ALTER TABLE batches RENAME TO batches_v1")
        for statement in (BATCHES + UUID_SCHEMA).split(";"):
            if statement.strip():
                conn.execute(statement)
        received = conn.execute("SELECT first_seq, received FROM batches_v1 ORDER BY first_seq")
        bounds = received.fetchall()
        raws: list[bytes] = []
        seqs: list[int] = []
        group: list[tuple[int, str, str, str, bytes, bytes]] = []
        at = -1  # index in bounds of the received batch holding the event (-1: none)
        group_at = -1
        cur = conn.execute("SELECT seq, topic, producer, ts, uuid, data FROM events ORDER BY seq")

        def flush() -> None:
            if not group:
                return
            when = bounds[group_at][1] if group_at >= 0 else 0.0
            batch = batchlog.encode(
                [r[0] for r in group],
                when,
                b"".join(r[4] for r in group),
                ([r[1] for r in group], [r[2] for r in group], [r[3] for r in group],
                 [r[5] for r in group]),
            )  # fmt: skip
            conn.execute(
                "INSERT INTO batches VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (batch.first_seq, batch.last_seq, batch.count, batch.received, batch.crc,
                 batch.seqs, batch.uuids, batch.rows),
            )  # fmt: skip
            raws.append(batch.uuids)
            seqs.extend(r[0] for r in group)
            group.clear()

        for row in cur:
            while at + 1 < len(bounds) and bounds[at + 1][0] <= row[0]:
                at += 1
            if group and (len(group) >= _MAX_BATCH or at != group_at):
                flush()
            group_at = at
            group.append(row)
        flush()
        last = seqs[-1] if seqs else 0
        bulk_index(conn, b"".join(raws), seqs, last)
        for table in ("events", "batches_v1", "uuids"):
            conn.execute(f"DROP TABLE {table}")
        conn.execute(f"PRAGMA user_version = {int(version)}")
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise StoreError(
                f"{path}: migrating the event log from version 1 failed: {exc}"
            ) from exc
        raise
    log.warning(
        "event log %s: migrated %d events to version %d in %.1f s",
        path, len(seqs), version, time.monotonic() - started,
    )  # fmt: skip
    return True
