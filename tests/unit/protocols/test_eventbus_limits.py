"""The ranges the collector and the snapshot decoders hold the wire to (eventbus_limits)."""

from __future__ import annotations

import msgpack
import pytest

from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.errors import FrameValueError
from zbus.common.protocols.eventbus_limits import (
    MAX_PRODUCER_BYTES,
    MAX_SUBTREES,
    MAX_TOPIC_BYTES,
    EventFieldError,
)

UUID = "5f0c3b1e-9a7d-4c2e-8b61-0d4e2f9a7c13"
TS = "2026-11-22T08:35:32.862Z"
SEQ_0 = bytes(8)
MAX_DATA = 100

# (field, topic, producer, timestamp, uuid, data): one field bad each.
BAD = [
    ("topic", "", "p", TS, UUID, b""),
    ("topic", "\0ZB", "p", TS, UUID, b""),
    ("topic", "/" + "a" * MAX_TOPIC_BYTES, "p", TS, UUID, b""),
    ("topic", "/" + "\u00e9" * (MAX_TOPIC_BYTES // 2), "p", TS, UUID, b""),  # 1025 UTF-8 bytes
    ("producer", "/t", "p" * (MAX_PRODUCER_BYTES + 1), TS, UUID, b""),
    ("timestamp", "/t", "p", "2026-11-22T08:35:32." + "0" * 60 + "Z", UUID, b""),
    ("timestamp", "/t", "p", "0001-01-01T00:00:00+00:01", UUID, b""),
    ("timestamp", "/t", "p", "9999-12-31T23:59:59-00:01", UUID, b""),
    ("timestamp", "/t", "p", "yesterday", UUID, b""),
    ("uuid", "/t", "p", TS, "not-a-uuid", b""),
    ("data", "/t", "p", TS, UUID, bytes(MAX_DATA + 1)),
]
# Each field at the edge of its range.
TOP = [
    ("/" + "a" * (MAX_TOPIC_BYTES - 1), "p" * MAX_PRODUCER_BYTES, TS, UUID, bytes(MAX_DATA)),
    ("/t", "", "0001-01-01T00:00:00+00:00", UUID, b""),
    ("/t", "p", "9999-12-31T23:59:59", UUID.upper(), b""),  # no offset: taken as UTC
    ("/t", "p", "0001-01-01T00:00:00-01:00", UUID, b""),
]


def _spec_pub(topic: str, producer: str, ts: str, uuid: str, data: bytes) -> list[bytes]:
    return [topic.encode(), SEQ_0, producer.encode(), ts.encode(), uuid.encode(), data]


@pytest.mark.parametrize(("field", "topic", "producer", "ts", "uuid", "data"), BAD)
def test_pub_field_out_of_range_names_the_field(
    field: str, topic: str, producer: str, ts: str, uuid: str, data: bytes
) -> None:
    frames = _spec_pub(topic, producer, ts, uuid, data)
    with pytest.raises(EventFieldError) as caught:
        eb.decode_collector(frames, max_data=MAX_DATA)
    assert caught.value.field == field
    assert caught.value.frame == {"topic": 0, "producer": 2, "timestamp": 3, "uuid": 4}.get(
        field, 5
    )
    assert caught.value.command == "PUB" and field in str(caught.value)


@pytest.mark.parametrize(("field", "topic", "producer", "ts", "uuid", "data"), BAD)
def test_zb_pub_field_out_of_range_names_the_field(
    field: str, topic: str, producer: str, ts: str, uuid: str, data: bytes
) -> None:
    good = [["/ok", "p", TS, UUID, b""]]
    frames = [ext.PUB_BATCH, b"\x01", msgpack.packb([*good, [topic, producer, ts, uuid, data]])]
    for decode in (ext.decode_collector_rows, ext.decode_collector):
        with pytest.raises(EventFieldError) as caught:
            decode(frames, max_data=MAX_DATA)
        assert caught.value.field == field
        assert f"event 1 {field}" in str(caught.value)


@pytest.mark.parametrize("row", TOP)
def test_fields_at_the_edge_of_their_range_are_taken(row: tuple[str, str, str, str, bytes]) -> None:
    pub = eb.decode_collector(_spec_pub(*row), max_data=MAX_DATA)
    assert (pub.topic, pub.producer, pub.timestamp, pub.uuid, pub.data) == row
    frames = [ext.PUB_BATCH, b"\x00", msgpack.packb([list(row)])]
    assert ext.decode_collector_rows(frames, max_data=MAX_DATA) == (False, [list(row)])


def test_clients_encoding_agrees_with_the_collector_on_empty_topics() -> None:
    with pytest.raises(EventFieldError):
        eb.encode(eb.Pub("", None, "p", TS, UUID, b""))


@pytest.mark.parametrize(
    "subtrees",
    [[f"/s/{i}/" for i in range(MAX_SUBTREES + 1)], ["/" + "a" * MAX_TOPIC_BYTES]],
    ids=["too many", "too long"],
)
def test_subtree_lists_have_a_size(subtrees: list[str]) -> None:
    for dialect in (eb.SPEC, eb.NODE_REFERENCE):
        frames = [b"SYNCSTART", dialect.subtree_separator.join(subtrees).encode(), b"1"]
        if not dialect.ascii_sequences:
            frames[2] = (1).to_bytes(8, "big")
        with pytest.raises(FrameValueError, match="SYNCSTART frame 1: expected at most"):
            eb.decode_snapshot_request(frames, dialect)
    query = [ext.SNAPSHOT, msgpack.packb({"subtrees": subtrees})]
    with pytest.raises(FrameValueError, match="ZB-SNAPSHOT frame 1: expected subtrees: at most"):
        ext.decode_snapshot_request(query)
    # At the limit: taken.
    top = subtrees[:MAX_SUBTREES] if len(subtrees) > 1 else ["/" + "a" * (MAX_TOPIC_BYTES - 1)]
    assert ext.decode_snapshot_request([ext.SNAPSHOT, msgpack.packb({"subtrees": top})]).subtrees


@pytest.mark.parametrize(
    "after", ["\u00b2", "\u0661", "9" * 5000, "-1", "+1", " 1", "", str(2**64), "1.0"]
)
def test_a_log_cursor_is_a_sequence_in_ascii_digits(after: str) -> None:
    frames = [ext.SNAPSHOT, msgpack.packb({"mode": "log", "after": after})]
    with pytest.raises(FrameValueError, match="after in mode 'log' as a sequence"):
        ext.decode_snapshot_request(frames)
    # In mode "latest" the cursor is a topic: any text.
    latest = ext.decode_snapshot_request([ext.SNAPSHOT, msgpack.packb({"after": after})])
    assert latest.after == after


def test_log_cursor_reads_the_largest_sequence() -> None:
    top = str(2**64 - 1)
    query = ext.decode_snapshot_request(
        [ext.SNAPSHOT, msgpack.packb({"mode": "log", "after": top, "since": 5})]
    )
    assert ext.log_cursor(query) == 2**64 - 1
    assert ext.log_cursor(ext.SnapshotQuery((), 5, None, "log")) == 5
