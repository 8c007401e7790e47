"""``zbus``: a Spark data source that reads the event bus's live log, in batch or streaming.

::

    from zbus.sparkworker.datasource import register

    register(spark)
    df = spark.read.format("zbus").option("endpoint", "tcp://127.0.0.1:5556").load()
    stream = spark.readStream.format("zbus").option("subtrees", "/sensors/").load()

Rows have the schema of the bus's Parquet archive. Every read pages the log through the
SNAPSHOT socket (``ZB-SNAPSHOT`` in mode "log", ADR 0002); the log holds what the bus's
retention keeps, the archive holds the rest. Sequence ranges are split into input
partitions of ``partitionSize`` sequences, each read by one task over its own socket.
Options and offsets: docs/datasource.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from zbus.common.archive_schema import EVENT_ROWS_SCHEMA
from zbus.common.protocols.eventbus_ext import MAX_LIMIT
from zbus.eventbus.client import Event, LogReader
from zbus.sparkworker.archive import EVENT_SCHEMA

__all__ = ["SCHEMA", "SequenceRange", "ZbusDataSource", "ZbusOptions", "register"]

SCHEMA = EVENT_SCHEMA
# What Spark expects of a RecordBatch for SCHEMA (it converts timestamps in UTC).
ARROW_SCHEMA = EVENT_ROWS_SCHEMA

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5556"
DEFAULT_PARTITION_SIZE = 100_000  # sequences per input partition (one task each)
DEFAULT_PAGE_SIZE = 5000  # events per ZB-SNAPSHOT request
DEFAULT_TIMEOUT = 30.0  # seconds the bus may take to answer one request
_BATCH_ONLY = ("startingSequence", "endingSequence")
_STREAM_ONLY = ("startingOffsets", "maxEventsPerTrigger")
_OPTIONS = ("endpoint", "subtrees", "partitionSize", "pageSize", "timeout")
KNOWN_OPTIONS = _OPTIONS + _BATCH_ONLY + _STREAM_ONLY
_MAX_SEQUENCE = (1 << 63) - 1  # the largest sequence the bus stores (SQLite INTEGER)


@dataclass(frozen=True, slots=True)
class ZbusOptions:
    """The source's options, checked (names are case-insensitive, as Spark's are)."""

    endpoint: str = DEFAULT_ENDPOINT
    subtrees: tuple[str, ...] = ()
    partition_size: int = DEFAULT_PARTITION_SIZE
    page_size: int = DEFAULT_PAGE_SIZE
    timeout: float = DEFAULT_TIMEOUT
    starting_sequence: int = 1
    ending_sequence: int | None = None
    starting_offsets: str = "latest"
    max_events_per_trigger: int | None = None

    @classmethod
    def parse(
        cls, options: Mapping[str, str], mode: Literal["batch", "stream"] | None = None
    ) -> ZbusOptions:
        """Check ``options``; ``mode`` refuses the other mode's options.

        Raises:
            ValueError: an unknown option, one of the other mode, or a bad value.
        """
        given = {str(k).lower(): str(v) for k, v in options.items()}
        names = {n.lower(): n for n in KNOWN_OPTIONS}
        unknown = sorted(k for k in given if k not in names)
        if unknown:
            raise ValueError(
                f"zbus data source: unknown option(s) {', '.join(unknown)}; "
                f"the options are {', '.join(KNOWN_OPTIONS)}"
            )
        if mode is not None:
            other, where = (
                (_STREAM_ONLY, "readStream") if mode == "batch" else (_BATCH_ONLY, "read")
            )
            for name in other:
                if name.lower() in given:
                    raise ValueError(
                        f"zbus data source: option {name} applies to spark.{where} only"
                    )

        def integer(name: str, default: int, low: int, high: int = _MAX_SEQUENCE) -> int:
            text = given.get(name.lower())
            if text is None:
                return default
            try:
                value = int(text.strip())
            except ValueError:
                value = low - 1
            if not low <= value <= high:
                raise ValueError(
                    f"zbus data source: option {name} must be an integer in {low}..{high}, "
                    f"got {text!r}"
                )
            return value

        endpoint = given.get("endpoint", DEFAULT_ENDPOINT).strip()
        if "://" not in endpoint:
            raise ValueError(
                "zbus data source: option endpoint is the bus's base (SNAPSHOT) endpoint, "
                f"like {DEFAULT_ENDPOINT}; got {endpoint!r}"
            )
        subtrees = tuple(
            s.strip() for s in given.get("subtrees", "").replace(",", ";").split(";") if s.strip()
        )
        timeout_text = given.get("timeout", str(DEFAULT_TIMEOUT))
        try:
            timeout = float(timeout_text)
        except ValueError:
            timeout = 0.0
        if not 0 < timeout < 1e6:
            raise ValueError(
                f"zbus data source: option timeout is seconds, above 0; got {timeout_text!r}"
            )
        starting = given.get("startingoffsets", "latest").strip().lower()
        if starting not in ("latest", "earliest"):
            starting = str(integer("startingOffsets", 1, 1))
        ending = integer("endingSequence", -1, 0) if "endingsequence" in given else None
        first = integer("startingSequence", 1, 1)
        if ending is not None and ending < first - 1:
            raise ValueError(
                f"zbus data source: endingSequence {ending} is below startingSequence {first}"
            )
        max_events = (
            integer("maxEventsPerTrigger", 0, 1) if "maxeventspertrigger" in given else None
        )
        return cls(
            endpoint=endpoint,
            subtrees=subtrees,
            partition_size=integer("partitionSize", DEFAULT_PARTITION_SIZE, 1),
            page_size=integer("pageSize", DEFAULT_PAGE_SIZE, 1, MAX_LIMIT),
            timeout=timeout,
            starting_sequence=first,
            ending_sequence=ending,
            starting_offsets=starting,
            max_events_per_trigger=max_events,
        )

    def last_sequence(self) -> int:
        """The bus's last sequence, asked now."""
        with LogReader(self.endpoint, timeout=self.timeout) as reader:
            return reader.last_sequence()


@dataclass(frozen=True)
class SequenceRange(InputPartition):
    """One task's share of the log: sequences ``after`` < seq <= ``last``."""

    after: int
    last: int


def split(after: int, last: int, size: int) -> list[SequenceRange]:
    """(after, last] in ranges of ``size`` sequences (none when the range is empty)."""
    return [SequenceRange(a, min(a + size, last)) for a in range(after, last, size)]


def _timestamps(texts: Sequence[str]) -> Any:
    """Producer timestamps (ISO-8601) as UTC; no zone means UTC; unreadable ones null."""
    column = pa.array(texts, pa.string())
    try:
        return column.cast(ARROW_SCHEMA.field("ts").type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass  # Arrow reads the common forms; Python every form the bus accepts

    def parse(text: str) -> datetime | None:
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            return None
        return when.replace(tzinfo=UTC) if when.tzinfo is None else when

    return pa.array([parse(t) for t in texts], ARROW_SCHEMA.field("ts").type)


def _record_batch(events: list[Event]) -> Any:
    seqs, topics, producers, stamps, uuids, data = zip(*events, strict=True)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(list(seqs), pa.int64()),  # from a tuple Arrow takes 100x longer
            pa.array(topics, pa.string()),
            pa.array(producers, pa.string()),
            _timestamps(stamps),
            pa.array(uuids, pa.string()),
            pa.array(data, pa.binary()),
        ],
        schema=ARROW_SCHEMA,
    )


def read_range(options: ZbusOptions, part: InputPartition) -> Iterator[Any]:
    """The events of ``part`` under the subtrees, one Arrow RecordBatch per page."""
    if not isinstance(part, SequenceRange):
        raise TypeError(f"zbus data source: not a partition it planned: {part!r}")
    cursor, last = part.after, part.last
    with LogReader(options.endpoint, timeout=options.timeout) as reader:
        while cursor < last:
            # Without subtrees no page reaches past ``last``; with them it may.
            limit = min(options.page_size, last - cursor)
            page = reader.page(options.subtrees, cursor, limit)
            events = page.events
            if events and events[-1].seq > last:
                events = [e for e in events if e.seq <= last]
            if events:
                yield _record_batch(events)
            if page.next_after is None:
                return
            cursor = page.next_after


def _check_schema(schema: StructType) -> None:
    if schema != SCHEMA:
        raise ValueError(
            f"zbus data source: the schema is fixed ({SCHEMA.simpleString()}); "
            f"got {schema.simpleString()}"
        )


class ZbusBatchReader(DataSourceReader):
    """``spark.read``: sequences startingSequence..endingSequence (inclusive)."""

    def __init__(self, options: ZbusOptions) -> None:
        self.options = options
        # Fixed when the query is planned, so every task reads the same snapshot of the log.
        end = options.ending_sequence
        self.last = options.last_sequence() if end is None else end

    def partitions(self) -> list[SequenceRange]:
        after = self.options.starting_sequence - 1
        # An empty range rather than none: Spark would plan InputPartition(None) instead.
        return split(after, self.last, self.options.partition_size) or [SequenceRange(after, after)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_range(self.options, partition)


def _seq(offset: Mapping[str, Any]) -> int:
    value = offset.get("seq")
    if type(value) is not int or value < 0:
        raise ValueError(f"zbus data source: an offset is {{'seq': N}}, got {offset!r}")
    return value


class ZbusStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: offsets ``{"seq": N}``, N the last sequence a batch includes."""

    def __init__(self, options: ZbusOptions) -> None:
        self.options = options
        self.target: int | None = None  # Trigger.AvailableNow: read up to here, then stop

    def initialOffset(self) -> dict[str, int]:
        starting = self.options.starting_offsets
        if starting == "earliest":
            return {"seq": 0}
        last = self.options.last_sequence()
        if starting == "latest":
            return {"seq": last}
        if int(starting) > last + 1:
            raise ValueError(
                f"zbus data source: startingOffsets {starting} is past the next sequence of "
                f"the bus at {self.options.endpoint}, {last + 1}"
            )
        return {"seq": int(starting) - 1}

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_events_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        begin = _seq(start)
        last = self.options.last_sequence()
        if last < begin:
            raise RuntimeError(
                f"zbus data source: the bus at {self.options.endpoint} is at sequence {last}, "
                f"behind this query's offset {begin}: it has another history (a new data "
                "directory?); start the query afresh with a new checkpoint location"
            )
        if self.target is not None:
            last = min(last, max(self.target, begin))
        if isinstance(limit, ReadMaxRows):
            # A cap on sequences: a bound on rows too, tighter when subtrees filter.
            last = min(last, begin + limit.max_rows)
        elif isinstance(limit, ReadMinRows) and last - begin < limit.min_rows:
            last = begin
        return {"seq": last}

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self.options.last_sequence()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[SequenceRange]:
        return split(_seq(start), _seq(end), self.options.partition_size)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_range(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the bus keeps its log by its own retention policy."""


class ZbusDataSource(DataSource):
    """The ``zbus`` format: the bus's log as rows of :data:`SCHEMA`."""

    @classmethod
    def name(cls) -> str:
        return "zbus"

    def schema(self) -> StructType:
        ZbusOptions.parse(self.options)  # typos fail at load(), before any query runs
        return SCHEMA

    def reader(self, schema: StructType) -> ZbusBatchReader:
        _check_schema(schema)
        return ZbusBatchReader(ZbusOptions.parse(self.options, "batch"))

    def streamReader(self, schema: StructType) -> ZbusStreamReader:
        _check_schema(schema)
        return ZbusStreamReader(ZbusOptions.parse(self.options, "stream"))


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("zbus")`` and ``spark.readStream.format("zbus")`` work."""
    spark.dataSource.register(ZbusDataSource)
