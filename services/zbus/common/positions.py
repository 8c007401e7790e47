"""Where a subscriber's application is, per channel: the position store hook.

A PPPP subscriber (:class:`zbus.PPPPSubscriber`) loads the positions when it starts, and
drops every message at or below them as a duplicate. The application saves a position
once it has done the work of a message, ideally in the same transaction as that work:
then a crash between the two cannot make it do the work twice or skip it.

:class:`PositionStore` is the hook (any object with ``load`` and ``save``);
:class:`SQLitePositionStore` keeps the positions in a SQLite file, and lets the
application write its own tables in the same transaction.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from zbus.errors import ZbusError

if TYPE_CHECKING:
    import sqlite3

__all__ = ["PositionStore", "PositionStoreError", "SQLitePositionStore"]

_U64 = (1 << 64) - 1
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS zbus_positions ("
    " channel TEXT PRIMARY KEY, position INTEGER NOT NULL) WITHOUT ROWID"
)


class PositionStoreError(ZbusError, OSError):
    """The store's file cannot be used (not SQLite, not a position store, unreadable)."""


@runtime_checkable
class PositionStore(Protocol):
    """Where the application is, per channel (a channel sequence; 0: nowhere yet)."""

    def load(self) -> Mapping[str, int]:
        """The saved positions, by channel."""
        ...

    def save(self, channel: str, position: int) -> None:
        """Remember that the application is done with ``channel`` up to ``position``."""
        ...


class SQLitePositionStore:
    """Positions in a SQLite file (WAL; a committed save survives ``kill -9``).

    ``save`` outside :meth:`transaction` commits at once. Inside it, the save commits
    with whatever else the application wrote through the connection it yields, so that
    the work of a message and its position are kept together or not at all::

        with store.transaction() as db:
            db.execute("INSERT INTO totals VALUES (?, ?)", (msg.topic, len(msg.data)))
            store.save(msg.channel, msg.position)

    A position never moves back: saving one below the saved one keeps the saved one.
    One store belongs to one thread at a time.

    Raises:
        PositionStoreError: the file is not SQLite, or not usable as a position store.
    """

    def __init__(self, path: str | Path) -> None:
        import sqlite3  # here, so that `import zbus` loads no SQLite

        self.path = Path(path)
        self._errors: tuple[type[Exception], ...] = (sqlite3.Error,)
        self._lock = threading.Lock()
        self._depth = 0
        try:
            self._conn: sqlite3.Connection = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False
            )
            self._conn.execute("PRAGMA busy_timeout = 10000")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute(_SCHEMA)
        except sqlite3.Error as exc:
            raise PositionStoreError(f"{self.path}: not usable as a position store: {exc}") from exc

    @property
    def connection(self) -> sqlite3.Connection:
        """The store's connection (autocommit outside :meth:`transaction`)."""
        return self._conn

    def load(self) -> dict[str, int]:
        try:
            rows = self._conn.execute("SELECT channel, position FROM zbus_positions").fetchall()
        except self._errors as exc:
            raise PositionStoreError(f"{self.path}: cannot read positions: {exc}") from exc
        out: dict[str, int] = {}
        for channel, position in rows:
            if type(channel) is str and type(position) is int and 0 <= position <= _U64:
                out[channel] = position
        return out

    def save(self, channel: str, position: int) -> None:
        if type(position) is not int or not 0 <= position <= _U64:
            raise ValueError(f"a position is 0..2**64-1, got {position!r}")
        if position == 0:
            return  # inside a SYNC: nothing to save yet
        try:
            self._conn.execute(
                "INSERT INTO zbus_positions (channel, position) VALUES (?, ?)"
                " ON CONFLICT (channel) DO UPDATE SET position = max(position, excluded.position)",
                (channel, position),
            )
        except self._errors as exc:
            raise PositionStoreError(f"{self.path}: cannot save a position: {exc}") from exc

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction for the application's writes and its saves: committed when
        the block ends, rolled back if it raises."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> SQLitePositionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
