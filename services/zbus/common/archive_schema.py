"""The event archive's columns: the contract between the event bus, which writes the
archive (``services/zbus/eventbus/server/archive.py``), and what reads it (the sparkworker's jobs,
the ``zbus`` Spark data source, pyarrow). docs/archive.md describes it."""

from __future__ import annotations

from typing import Final

import pyarrow as pa

__all__ = ["ARCHIVE_SCHEMA", "EVENT_ROWS_SCHEMA"]

#: The columns of every file the bus writes, exactly (``date`` is in the directory name).
ARCHIVE_SCHEMA: Final = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("producer", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("uuid", pa.string(), nullable=False),
        pa.field("data", pa.binary(), nullable=False),
    ]
)

#: The same columns as readers produce them: every column nullable, as Spark writes
#: (compacted files) and as the data source hands rows over (a ``ts`` it cannot parse).
EVENT_ROWS_SCHEMA: Final = pa.schema([f.with_nullable(True) for f in ARCHIVE_SCHEMA])
