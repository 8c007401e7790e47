"""What every zbus SQLite store shares: opening, the versioned schema, checkpoints.

Each store is one SQLite file in WAL mode, marked with its own ``application_id`` and a
``user_version`` schema number, written by one thread and read by others through their
own connections. ``synchronous=NORMAL`` keeps every committed transaction across a
``kill -9`` of the process; FULL (``fsync=True``) also across a power cut.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar
from urllib.parse import quote


class StoreError(Exception):
    """A file that is not a usable store, or a store operation that failed."""


def connect(path: Path, cache_kib: int, *, create: bool, what: str) -> sqlite3.Connection:
    """A connection in autocommit mode, usable from any thread (one at a time).

    Raises:
        StoreError: the file cannot be opened (``what`` names the kind of store).
    """
    uri = f"file:{quote(str(path.absolute()))}?mode={'rwc' if create else 'rw'}"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.execute(f"PRAGMA cache_size = -{cache_kib}")
        conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: cannot open as a zbus {what}: {exc}") from exc
    return conn


def open_schema(
    conn: sqlite3.Connection, path: Path, *, app_id: int, version: int, schema: str, what: str
) -> None:
    """Create the schema in an empty file, or check that the file is this store's.

    Raises:
        StoreError: another application's file, or a schema version this build cannot read.
    """
    try:
        found_id = conn.execute("PRAGMA application_id").fetchone()[0]
        found_version = conn.execute("PRAGMA user_version").fetchone()[0]
        objects = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
        if found_id == 0 and found_version == 0 and objects == 0:
            if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] != "wal":
                raise StoreError(f"{path}: cannot switch the database to WAL mode")
            conn.executescript(
                f"BEGIN IMMEDIATE; {schema}"
                f" PRAGMA application_id = {app_id};"
                f" PRAGMA user_version = {version}; COMMIT;"
            )
            return
        if found_id != app_id:
            raise StoreError(f"{path}: not a zbus {what} (another application's file)")
        if found_version != version:
            raise StoreError(
                f"{path}: {what} schema version {found_version} is not supported "
                f"(this build reads version {version})"
            )
        conn.execute("PRAGMA journal_mode = WAL")
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: not a usable zbus {what}: {exc}") from exc


def configure_writer(conn: sqlite3.Connection, *, fsync: bool, checkpoint_pages: int) -> None:
    """Durability and checkpoint settings of a store's writer connection.

    ``checkpoint_pages=0`` turns SQLite's automatic checkpoints off: the writer then never
    waits for a checkpoint's fsync, and the owner runs :func:`checkpoint` from another
    thread instead.
    """
    conn.execute(f"PRAGMA synchronous = {'FULL' if fsync else 'NORMAL'}")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute(f"PRAGMA wal_autocheckpoint = {int(checkpoint_pages)}")


def checkpoint(path: Path) -> tuple[int, int]:
    """Copy the WAL into the database without blocking the writer (PASSIVE checkpoint).

    Returns (WAL pages, pages checkpointed). Runs on a connection of its own.
    """
    conn = connect(path, 1024, create=False, what="store")
    try:
        _, pages, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(pages), int(done)
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: checkpoint failed: {exc}") from exc
    finally:
        conn.close()


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection, path: Path, what: str) -> Iterator[sqlite3.Connection]:
    """One write transaction: committed on exit, rolled back on any error.

    Raises:
        StoreError: an SQLite error, naming the store file and the operation.
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise StoreError(f"{path}: {what} failed: {exc}") from exc
        raise


@dataclass(frozen=True, slots=True)
class StoreFormat:
    """One kind of store file: how it is marked, its schema, its connections' page caches.

    Attributes:
        what: the kind of store in error messages (``"job store"``).
        app_id: the file's ``PRAGMA application_id``.
        version: the schema version (``PRAGMA user_version``) this build reads and writes.
        schema: the SQL that creates the schema in an empty file.
        writer_cache_kib: the writer connection's page cache.
        reader_cache_kib: each read-only connection's page cache.
    """

    what: str
    app_id: int
    version: int
    schema: str
    writer_cache_kib: int
    reader_cache_kib: int = 1024

    def open_writer(self, path: Path, *, fsync: bool, checkpoint_pages: int) -> sqlite3.Connection:
        """The writer connection of the store at ``path``: the file created or checked
        (:func:`open_schema`) and configured (:func:`configure_writer`); closed again when
        either fails.

        Raises:
            StoreError: the file cannot be opened, or it is not a store of this format.
        """
        what = self.what
        conn = connect(path, self.writer_cache_kib, create=True, what=what)
        try:
            open_schema(
                conn, path, app_id=self.app_id, version=self.version, schema=self.schema, what=what
            )
            configure_writer(conn, fsync=fsync, checkpoint_pages=checkpoint_pages)
        except BaseException:
            conn.close()
            raise
        return conn

    def open_reader(self, path: Path) -> sqlite3.Connection:
        """A read-only connection of its own to the store at ``path``.

        Raises:
            StoreError: the file cannot be opened.
        """
        conn = connect(path, self.reader_cache_kib, create=False, what=self.what)
        conn.execute("PRAGMA query_only = ON")
        return conn


class Store:
    """A store's writer: the file, created or checked, and its one writer connection.

    Subclasses name their :class:`StoreFormat` in ``FORMAT`` and add their operations,
    writing through :meth:`transaction`. For one thread at a time.
    """

    FORMAT: ClassVar[StoreFormat]

    def __init__(self, path: Path, *, fsync: bool = False, checkpoint_pages: int = 1000) -> None:
        """Open (or create) the store file at ``path``.

        Raises:
            StoreError: the file cannot be opened, or it is not this kind of store.
        """
        self.path = Path(path)
        self._conn = self.FORMAT.open_writer(
            self.path, fsync=fsync, checkpoint_pages=checkpoint_pages
        )

    def transaction(self, what: str) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One write transaction on the writer connection (see :func:`transaction`)."""
        return transaction(self._conn, self.path, what)

    def close(self) -> None:
        self._conn.close()


class StoreReader:
    """A read-only connection of its own to a store file, for one thread at a time.

    WAL readers never block each other or the writer.
    """

    FORMAT: ClassVar[StoreFormat]

    def __init__(self, path: Path) -> None:
        """Open the existing store file at ``path`` for reading.

        Raises:
            StoreError: the file cannot be opened.
        """
        self.path = Path(path)
        self._conn = self.FORMAT.open_reader(self.path)

    def close(self) -> None:
        self._conn.close()
