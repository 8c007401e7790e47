"""The ranges of what the event bus takes from the wire: event fields, subtrees, numbers.

The Event BUS RFC gives no size to any field. zbus bounds each one, so that what a
producer sends is what every subscriber (spec, Node.js or zbus) can take back and what
the bus can hold per peer can be stated in bytes (docs/eventbus.md, "Ranges"):

- topic: UTF-8 text of 1 to ``MAX_TOPIC_BYTES`` bytes, not starting with NUL (zbus's
  extension commands do);
- producer id: UTF-8 text of at most ``MAX_PRODUCER_BYTES`` bytes (empty allowed);
- timestamp: ISO-8601 as ``datetime.fromisoformat`` reads it, at most
  ``MAX_TIMESTAMP_BYTES`` bytes, its instant within years 1..9999 in UTC (what the
  archive can store);
- uuid: the canonical 36-character 8-4-4-4-12 hex form, any version;
- data: at most the bus's ``ZBUS_MAX_EVENT_BYTES`` (``DEFAULT_MAX_DATA_BYTES``);
- subtree lists: at most ``MAX_SUBTREES`` items of at most ``MAX_TOPIC_BYTES`` bytes
  each (a longer prefix matches no topic);
- sequences: 0..2**64-1 on the wire (a query past the last stored sequence finds nothing).

The collector's decoders enforce the event ranges; the snapshot decoders the subtree
ranges. A field outside its range raises :class:`EventFieldError`, whose ``field`` names
it, so that the bus can count refusals by field.
"""

from __future__ import annotations

from datetime import UTC, datetime

from zbus.common.protocols.errors import FrameValueError

MAX_TOPIC_BYTES = 1024
MAX_PRODUCER_BYTES = 256
MAX_TIMESTAMP_BYTES = 64
UUID_CHARS = 36
MAX_SUBTREES = 256
DEFAULT_MAX_DATA_BYTES = 1024 * 1024
MAX_SEQUENCE = 2**64 - 1

#: What an event costs beyond its data, at most, in any message that carries it: its
#: text fields at their largest, msgpack and frame headers, and ZeroMQ's own bookkeeping
#: of up to seven frames (about 100 bytes each).
RECORD_OVERHEAD = MAX_TOPIC_BYTES + MAX_PRODUCER_BYTES + MAX_TIMESTAMP_BYTES + UUID_CHARS + 1024

FIELDS = ("topic", "producer", "timestamp", "uuid", "data")


class EventFieldError(FrameValueError):
    """An event field that is malformed or outside its range.

    Attributes:
        field: ``"topic"``, ``"producer"``, ``"timestamp"``, ``"uuid"`` or ``"data"``.
    """

    def __init__(
        self,
        protocol: str,
        field: str,
        expected: str,
        *,
        command: str | None = None,
        frame: int | None = None,
        got: object = None,
    ) -> None:
        super().__init__(protocol, expected, command=command, frame=frame, got=got)
        self.field = field


def utf8_len(text: str) -> int:
    """The length of ``text`` in UTF-8 bytes (``isascii`` is a flag check: no copy then)."""
    return len(text) if text.isascii() else len(text.encode())


def timestamp_in_range(text: str) -> bool:
    """True unless ``text`` (an ISO-8601 timestamp that parses) is outside years
    1..9999 once in UTC: only the first and the last year can be, by their offset."""
    if text[:4] not in ("0001", "9999"):
        return True
    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        return True  # taken as UTC
    try:
        when.astimezone(UTC)
    except OverflowError:
        return False
    return True


def out_of_range(
    topic_bytes: int, producer_bytes: int, timestamp: str, data_bytes: int, max_data: int
) -> tuple[str, str] | None:
    """The first event field outside its range and what its range is, or None.

    The topic's content (UTF-8, no leading NUL), the timestamp's syntax and the uuid's
    form are checked where the event is decoded; this adds the sizes and the timestamp's
    instant.
    """
    if not 1 <= topic_bytes <= MAX_TOPIC_BYTES:
        return "topic", f"a topic of 1 to {MAX_TOPIC_BYTES} bytes"
    if producer_bytes > MAX_PRODUCER_BYTES:
        return "producer", f"a producer id of at most {MAX_PRODUCER_BYTES} bytes"
    if utf8_len(timestamp) > MAX_TIMESTAMP_BYTES:
        return "timestamp", f"a timestamp of at most {MAX_TIMESTAMP_BYTES} bytes"
    if not timestamp_in_range(timestamp):
        return "timestamp", "a timestamp within years 1..9999 in UTC"
    if data_bytes > max_data:
        return "data", f"data of at most {max_data} bytes"
    return None


def subtrees_out_of_range(subtrees: tuple[str, ...] | list[str]) -> str | None:
    """What is wrong with a subtree list's size, or None."""
    if len(subtrees) > MAX_SUBTREES:
        return f"at most {MAX_SUBTREES} subtrees (got {len(subtrees)})"
    for subtree in subtrees:
        if utf8_len(subtree) > MAX_TOPIC_BYTES:
            return f"at most {MAX_TOPIC_BYTES} bytes per subtree"
    return None


__all__ = [
    "DEFAULT_MAX_DATA_BYTES",
    "FIELDS",
    "MAX_PRODUCER_BYTES",
    "MAX_SEQUENCE",
    "MAX_SUBTREES",
    "MAX_TIMESTAMP_BYTES",
    "MAX_TOPIC_BYTES",
    "RECORD_OVERHEAD",
    "UUID_CHARS",
    "EventFieldError",
    "out_of_range",
    "subtrees_out_of_range",
    "timestamp_in_range",
    "utf8_len",
]
