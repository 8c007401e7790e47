"""What a replica's log needs beyond appends: its epoch history, and truncation.

A follower truncates the tail a deposed leader wrote and the current leader never had
(:func:`zbus.replication.core.follower_truncation`). Replicas copy whole stored batches,
so the logs of a group part only at a batch boundary; a cut inside a batch is refused.
The truncated events leave the topic index (a topic whose latest event went gets its
previous one, found by reading back through the batches) and the uuid dict; the uuid
runs need nothing, since their lookups check the uuid stored at the sequence they name.

The epoch history is a table of the same file, so that it changes in the same
transaction as the log it describes.
"""

from __future__ import annotations

import sqlite3

from zbus.common.sqlite import StoreError
from zbus.eventbus.core.batchlog import BatchError
from zbus.eventbus.server.reader import batches_from

EPOCHS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS epochs(epoch INTEGER PRIMARY KEY, first_seq INTEGER NOT NULL)"
)


def read_epochs(conn: sqlite3.Connection) -> tuple[tuple[int, int], ...]:
    return tuple(conn.execute("SELECT epoch, first_seq FROM epochs ORDER BY epoch").fetchall())


def write_epochs(conn: sqlite3.Connection, entries: tuple[tuple[int, int], ...]) -> None:
    """Replace the history (in the caller's transaction)."""
    conn.execute("DELETE FROM epochs")
    conn.executemany("INSERT INTO epochs VALUES (?, ?)", entries)


def truncate_after(conn: sqlite3.Connection, seq: int, last: int) -> tuple[int, list[bytes]]:
    """Delete every event after ``seq`` (in the caller's transaction).

    Returns:
        The number of events deleted and their uuids (16 bytes each).

    Raises:
        StoreError: ``seq`` falls inside a stored batch, or a batch is damaged.
    """
    if seq >= last:
        return 0, []
    straddling = conn.execute(
        "SELECT first_seq, last_seq FROM batches WHERE first_seq <= ? AND last_seq > ?",
        (seq, seq),
    ).fetchone()
    if straddling is not None:
        raise StoreError(
            f"cannot truncate after sequence {seq}: it is inside the batch "
            f"{straddling[0]}..{straddling[1]}"
        )
    gone: dict[str, list[int]] = {}  # topic -> [events, bytes]
    uuids: list[bytes] = []
    count = 0
    try:
        for batch in batches_from(conn, seq):
            topics, _, _, data = batch.columns()
            for topic, d in zip(topics, data, strict=True):
                agg = gone.setdefault(topic, [0, 0])
                agg[0] += 1
                agg[1] += len(d)
            uuids.extend(batch.uuids[i : i + 16] for i in range(0, len(batch.uuids), 16))
            count += batch.count
        conn.execute("DELETE FROM batches WHERE first_seq > ?", (seq,))
        latest = _latest_before(conn, seq, set(gone))
    except BatchError as exc:
        raise StoreError(f"cannot truncate: {exc}") from exc
    for topic, (n, b) in gone.items():
        if topic in latest:
            conn.execute(
                "UPDATE topics SET last_seq = ?, count = count - ?, bytes = bytes - ?"
                " WHERE topic = ?",
                (latest[topic], n, b, topic),
            )
        else:
            conn.execute("DELETE FROM topics WHERE topic = ?", (topic,))
    conn.execute("UPDATE meta SET value = value - ? WHERE key = 'events'", (count,))
    conn.execute("DELETE FROM epochs WHERE first_seq > ?", (seq,))
    return count, uuids


def _latest_before(conn: sqlite3.Connection, seq: int, topics: set[str]) -> dict[str, int]:
    """topic -> its latest sequence at or below ``seq``, reading back batch by batch
    until every topic is found or the log's start is reached."""
    found: dict[str, int] = {}
    wanted = set(topics)
    for batch in batches_from(conn, 0, before=seq + 1, newest_first=True):
        if not wanted:
            break
        names, _, _, _ = batch.columns()
        for s, topic in zip(reversed(batch.sequences()), reversed(names), strict=True):
            if topic in wanted and s <= seq:
                found[topic] = s
                wanted.discard(topic)
    return found
