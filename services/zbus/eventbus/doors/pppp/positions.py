"""The PPPP door's positions: ``pppp.sqlite`` beside the event log (ADR 0006).

Two tables, written in small group commits by the door's thread:

- ``channels``: channel -> checkpoint ``(cseq, seq)``: every logged event of the channel
  above global ``seq`` has channel sequence ``cseq + 1``, ``cseq + 2``, ... in log order;
- ``positions``: (subscriber identity, channel) -> the highest sequence it ACKed with
  everything below.

Nothing per event is written: channel sequences are a function of the log. A position
written late after a ``kill -9`` only means some messages are sent again.

A replica of a replicated bus keeps the same tables in ``pppp-group.sqlite``
(:class:`PpppGroupPositions`), written only from the door's state events as the log
holds them (ADR 0010), with the sequence up to which the log was folded in.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from zbus.common.sqlite import Store, StoreError, StoreFormat
from zbus.eventbus.core.pppp import StateDelta

__all__ = [
    "APPLICATION_ID",
    "GROUP_APPLICATION_ID",
    "PpppGroupPositions",
    "PpppPositions",
    "StoreError",
]

APPLICATION_ID = 0x7A707070  # "zppp"
SCHEMA_VERSION = 1
_WHAT = "PPPP position store"
_SCHEMA = """
CREATE TABLE channels(
    channel TEXT PRIMARY KEY, cseq INTEGER NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE positions(
    identity BLOB NOT NULL, channel TEXT NOT NULL, acked INTEGER NOT NULL,
    PRIMARY KEY(identity, channel)) WITHOUT ROWID;
"""
GROUP_APPLICATION_ID = 0x7A707067  # "zppg"
_GROUP_SCHEMA = (
    _SCHEMA + "CREATE TABLE applied(one INTEGER PRIMARY KEY CHECK (one = 1), seq INTEGER NOT NULL);"
)


class PpppPositions(Store):
    """Checkpoints and ACK positions in one SQLite file, for one thread at a time.

    Opened with ``PpppPositions(path, fsync=...)`` (:class:`~zbus.common.sqlite.Store`).
    """

    FORMAT = StoreFormat(_WHAT, APPLICATION_ID, SCHEMA_VERSION, _SCHEMA, 2048)

    def channels(self) -> list[tuple[str, int, int]]:
        """Every channel with its checkpoint ``(name, cseq, seq)``."""
        try:
            return list(self._conn.execute("SELECT channel, cseq, seq FROM channels"))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read the channels: {exc}") from exc

    def positions(self) -> list[tuple[bytes, str, int]]:
        """Every subscriber position ``(identity, channel, acked)``."""
        try:
            return [
                (bytes(i), c, a)
                for i, c, a in self._conn.execute("SELECT identity, channel, acked FROM positions")
            ]
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read the positions: {exc}") from exc

    def write(
        self,
        positions: dict[tuple[bytes, str], int | None],
        checkpoints: dict[str, tuple[int, int] | None],
    ) -> None:
        """Store changed positions and checkpoints (None: delete) in one transaction."""
        with self.transaction("write") as conn:
            _write(conn, positions, checkpoints)


def _write(
    conn: sqlite3.Connection,
    positions: dict[tuple[bytes, str], int | None],
    checkpoints: dict[str, tuple[int, int] | None],
    dropped: Iterable[str] = (),
) -> None:
    """``dropped``: channels that went (and may be back in ``checkpoints``): their
    positions go before the new ones are written."""
    gone = [(c,) for c, v in checkpoints.items() if v is None]
    gone += [(c,) for c in dropped if checkpoints.get(c) is not None]
    if gone:
        conn.executemany("DELETE FROM channels WHERE channel = ?", gone)
        conn.executemany("DELETE FROM positions WHERE channel = ?", gone)
    conn.executemany(
        "INSERT INTO channels VALUES (?, ?, ?) ON CONFLICT(channel) DO UPDATE SET"
        " cseq = excluded.cseq, seq = excluded.seq",
        [(c, v[0], v[1]) for c, v in checkpoints.items() if v is not None],
    )
    conn.executemany(
        "DELETE FROM positions WHERE identity = ? AND channel = ?",
        [k for k, v in positions.items() if v is None],
    )
    conn.executemany(
        "INSERT INTO positions VALUES (?, ?, ?) ON CONFLICT(identity, channel)"
        " DO UPDATE SET acked = excluded.acked",
        [(k[0], k[1], v) for k, v in positions.items() if v is not None],
    )


class PpppGroupPositions(PpppPositions):
    """A replica's copy of its group's PPPP state: the fold of the state events of the
    log up to :meth:`applied` (``PpppGroupPositions(path, fsync=...)``)."""

    FORMAT = StoreFormat(
        "replicated PPPP state", GROUP_APPLICATION_ID, SCHEMA_VERSION, _GROUP_SCHEMA, 2048
    )

    def applied(self) -> int:
        """The log's sequence up to which its state events are folded in."""
        try:
            row = self._conn.execute("SELECT seq FROM applied").fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read the applied sequence: {exc}") from exc
        return int(row[0]) if row else 0

    def apply(
        self,
        delta: StateDelta,
        applied: int,
    ) -> None:
        """Fold changes in, up to the log's sequence ``applied``, in one transaction."""
        with self.transaction("apply") as conn:
            _write(conn, delta.positions, delta.checkpoints, delta.dropped)
            conn.execute(
                "INSERT INTO applied VALUES (1, ?)"
                " ON CONFLICT(one) DO UPDATE SET seq = excluded.seq",
                (applied,),
            )
