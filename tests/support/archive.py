"""Event archives for tests, in the bus's layout.

``<root>/date=YYYY-MM-DD/part-<first:020d>-<last:020d>.parquet``: one file per date and
call, named by its seq range, with the archive's schema.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from zbus.common.archive_schema import EVENT_ROWS_SCHEMA

ARROW_SCHEMA = EVENT_ROWS_SCHEMA


@dataclass(frozen=True, slots=True)
class ArchivedEvent:
    seq: int
    topic: str
    producer: str
    ts: datetime  # aware, UTC
    uuid: str
    data: bytes


def make_events(
    count: int,
    topics: Sequence[str],
    start: datetime,
    step: timedelta = timedelta(seconds=1),
    first_seq: int = 1,
) -> list[ArchivedEvent]:
    """``count`` events cycling through ``topics``, ``step`` apart, data of varied size."""
    return [
        ArchivedEvent(
            seq=first_seq + i,
            topic=topics[i % len(topics)],
            producer=f"producer-{i % 3}",
            ts=start + i * step,
            uuid=str(uuidlib.uuid4()),
            data=bytes([i % 256]) * (1 + (i * 7) % 50),
        )
        for i in range(count)
    ]


def archive_mark(archived_through: int) -> str:
    """The text of the archiver's mark, ``_zbus_archive.json`` (docs/archive.md)."""
    return json.dumps(
        {"version": 1, "archived_through": archived_through, "updated": "2024-03-11T00:00:00Z"}
    )


def write_archive(path: Path, events: Iterable[ArchivedEvent]) -> list[Path]:
    """Write ``events`` under ``path``: one file per UTC date, named by its seq range.

    Called again with other events, it adds files beside the ones already there.
    """
    by_date: dict[str, list[ArchivedEvent]] = defaultdict(list)
    for event in events:
        by_date[event.ts.astimezone(UTC).date().isoformat()].append(event)
    written = []
    for day, group in sorted(by_date.items()):
        group.sort(key=lambda e: e.seq)
        table = pa.table(
            {
                "seq": [e.seq for e in group],
                "topic": [e.topic for e in group],
                "producer": [e.producer for e in group],
                "ts": [e.ts for e in group],
                "uuid": [e.uuid for e in group],
                "data": [e.data for e in group],
            },
            schema=ARROW_SCHEMA,
        )
        directory = path / f"date={day}"
        directory.mkdir(parents=True, exist_ok=True)
        file = directory / f"part-{group[0].seq:020d}-{group[-1].seq:020d}.parquet"
        pq.write_table(table, file)
        written.append(file)
    return written


def read_events(path: Path) -> pa.Table:
    """Every event under an archive (or a partition) ``path``, by pyarrow, sorted by seq."""
    files = sorted(
        f
        for f in path.rglob("*.parquet")
        if not any(part.startswith(("_", ".")) for part in f.relative_to(path).parts)
    )
    return pa.concat_tables([pq.read_table(f, schema=ARROW_SCHEMA) for f in files]).sort_by("seq")
