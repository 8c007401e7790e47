"""The PPPP door's positions: ``pppp.sqlite`` beside the event log (ADR 0006).

Two tables, written in small group commits by the door's thread:

- ``channels``: channel -> checkpoint ``(cseq, seq)``: every logged event of the channel
  above global ``seq`` has channel sequence ``cseq + 1``, ``cseq + 2``, ... in log order;
- ``positions``: (subscriber identity, channel) -> the highest sequence it ACKed with
  everything below.

Nothing per event is written: channel sequences are a function of the log. A position
written late after a ``kill -9`` only means some messages are sent again.
"""

from __future__ import annotations

import sqlite3

from zbus.common.sqlite import Store, StoreError, StoreFormat

__all__ = ["APPLICATION_ID", "PpppPositions", "StoreError"]

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
            gone = [(c,) for c, v in checkpoints.items() if v is None]
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
