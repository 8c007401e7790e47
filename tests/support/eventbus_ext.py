"""What the tests of zbus's Event BUS extensions (ADR 0002) share: sample values, the
decoders by socket, msgpack packing, and a strategy for each command.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC
from typing import Any

import msgpack
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from zbus.common.protocols.eventbus_ext import (
    CONFIRM,
    ERROR,
    MAX_LIMIT,
    PAGE,
    PUB_BATCH,
    SNAPSHOT,
    STREAM_BATCH,
    STREAM_HEARTBEAT,
    Confirm,
    Error,
    EventData,
    ExtCommand,
    PubBatch,
    SequencedEvent,
    SnapshotPage,
    SnapshotQuery,
    StreamBatch,
    StreamHeartbeat,
    decode_collector,
    decode_collector_reply,
    decode_snapshot_reply,
    decode_snapshot_request,
    decode_stream,
)

U64_MAX = 2**64 - 1
UUID = "5f0c3b1e-9a7d-4c2e-8b61-0d4e2f9a7c13"
UUID2 = "0d4e2f9a-7c13-4c2e-8b61-5f0c3b1e9a7d"
TS = "2026-11-22T08:35:32.862Z"
ROW: list[Any] = ["/t", "p", TS, UUID, b"\x01"]
COMMAND_FRAMES = [PUB_BATCH, CONFIRM, ERROR, SNAPSHOT, PAGE, STREAM_BATCH, STREAM_HEARTBEAT]

Decoder = Callable[[Sequence[bytes]], ExtCommand]
DECODERS: list[Decoder] = [
    decode_collector,
    decode_collector_reply,
    decode_snapshot_request,
    decode_snapshot_reply,
    decode_stream,
]
# Each command with the decoder of the socket it arrives on (ZB-ERROR on both).
DECODER_OF: list[tuple[type, Decoder]] = [
    (PubBatch, decode_collector),
    (Confirm, decode_collector_reply),
    (Error, decode_collector_reply),
    (SnapshotQuery, decode_snapshot_request),
    (SnapshotPage, decode_snapshot_reply),
    (Error, decode_snapshot_reply),
    (StreamBatch, decode_stream),
    (StreamHeartbeat, decode_stream),
]


def packb(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


# --------------------------------------------------------------------------- strategies

sequences = st.integers(0, U64_MAX)
texts = st.text(max_size=30)
topics = st.text(min_size=1, max_size=30).filter(lambda t: not t.startswith("\0"))
timestamps = st.one_of(
    st.datetimes().map(lambda d: d.isoformat()),
    st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat()),
    st.datetimes().map(lambda d: d.isoformat(timespec="milliseconds") + "Z"),
)
uuids = st.uuids(version=None).map(str) | st.uuids().map(lambda u: str(u).upper())
payloads = st.binary(max_size=64)
events = st.builds(EventData, topics, texts, timestamps, uuids, payloads)
event_lists = st.lists(events, max_size=5).map(tuple)
sequenced_events = st.builds(SequencedEvent, sequences, topics, texts, timestamps, uuids, payloads)


def commands(kind: type) -> SearchStrategy[ExtCommand]:
    if kind is PubBatch:
        return st.builds(PubBatch, event_lists, st.booleans())
    if kind is Confirm:
        pairs = st.tuples(uuids, sequences)
        return st.builds(Confirm, st.lists(pairs, max_size=5).map(tuple))
    if kind is Error:
        return st.builds(Error, texts)
    if kind is SnapshotQuery:
        subtrees = st.lists(texts, max_size=4).map(tuple)
        limits = st.integers(1, MAX_LIMIT)
        # The cursor of mode "latest" is a topic, that of mode "log" a sequence.
        latest = st.builds(
            SnapshotQuery, subtrees, sequences, st.none() | texts, st.just("latest"), limits
        )
        log = st.builds(
            SnapshotQuery,
            subtrees,
            sequences,
            st.none() | sequences.map(str),
            st.just("log"),
            limits,
        )
        return latest | log
    if kind is SnapshotPage:
        return st.builds(
            SnapshotPage,
            st.lists(sequenced_events, max_size=5).map(tuple),
            st.none() | texts,
            sequences,
        )
    if kind is StreamBatch:
        return st.builds(StreamBatch, sequences, event_lists)
    assert kind is StreamHeartbeat
    return st.builds(StreamHeartbeat, sequences)
