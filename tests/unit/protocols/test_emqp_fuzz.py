"""eMQP/1.0 garbage in: random and near-miss frame lists decode to a command that
survives encode -> decode, or raise ProtocolError, never anything else.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_EXAMPLES
from tests.support.emqp import CALL_BODY, DIALECTS, EVENTMQ_HEADERS, IDB, V
from tests.unit.protocols.strategies import frame_lists
from zbus.common.protocols.emqp import Inform, decode, encode
from zbus.common.protocols.errors import ProtocolError

# --------------------------------------------------------------------------- garbage in

PLAUSIBLE = st.one_of(
    st.sampled_from(
        [
            b"",
            IDB,
            b"default",
            b"default,other",
            b"a,,b",
            b"[",
            b'[[10, "default"]]',
            b'[[10, ""]]',
            b'[["10", "default"]]',
            b'[[true, "x"]]',
            b"worker",
            b"-1",
            b"60",
            b"-5",
            b"1e3",
            b"* * * * *",
            b'{"value": 1}',
            CALL_BODY,
            b'["run", {}]',
            b'["run", {"callable": "f", "path": "m", "args": null}]',
            b'["go", {"callable": "f", "path": "m"}]',
            EVENTMQ_HEADERS,
            b"x:",
            b"\xff\xfe",
            b"[" * 200,
            b"[[10, ",
            b'[[10, "a"]',
            b'[["a", 10]]',
            b"[1]",
            b'[[10, "a,b"]]',
            b'[[10, "\\ud800"]]',
        ]
    ),
    st.binary(max_size=24),
)
# Frame counts each command accepts (the decoder's own table is private on purpose).
FRAME_COUNTS = {
    b"REQUEST": (7, 7),
    b"INFORM": (5, 6),
    b"READY": (4, 4),
    b"REPLY": (5, 6),
    b"HEARTBEAT": (4, 5),
    b"DISCONNECT": (4, 4),
    b"ACK": (5, 5),
    b"KBYE": (4, 4),
    b"SCHEDULE": (9, 9),
    b"UNSCHEDULE": (9, 9),
    b"PUBLISH": (6, 6),
    b"request": (7, 7),
}


@st.composite
def near_misses(draw: st.DrawFn) -> list[bytes]:
    """Mostly well-framed messages (right envelope, about the right frame count) whose
    content frames are drawn from values that are almost valid, so every decoder
    branch is reached often, not only the first checks."""
    command = draw(st.sampled_from(sorted(FRAME_COUNTS)))
    low, high = FRAME_COUNTS[command]
    count = draw(st.integers(low - 1, high + 1))
    empty = draw(st.sampled_from([b"", b"", b"", b"", b"x"]))
    version = draw(st.sampled_from([V, V, V, V, b"eMQP/1.1", b"eMQP/", b"MDPC01"]))
    rest = draw(st.lists(PLAUSIBLE, min_size=count - 3, max_size=count - 3))
    return [empty, version, command, *rest]


def _decode_or_protocol_error(frames: Sequence[bytes]) -> None:
    """Decode in every dialect: a command or ProtocolError, never anything else.

    A command that decodes must also survive encode -> decode unchanged; the one
    allowed refusal is an INFORM whose JSON queues the spec's CSV form cannot carry.
    """
    for dialect in DIALECTS.values():
        try:
            cmd = decode(frames, dialect)
        except ProtocolError:
            continue
        try:
            again = encode(cmd, dialect)
        except ProtocolError:
            assert isinstance(cmd, Inform)
            assert not dialect.json_queues
            continue
        assert decode(again, dialect) == cmd


@settings(max_examples=FUZZ_EXAMPLES)
@given(frame_lists)
def test_garbage_in_raises_only_protocol_error(frames: list[bytes]) -> None:
    _decode_or_protocol_error(frames)


@settings(max_examples=FUZZ_EXAMPLES)
@given(near_misses())
def test_near_miss_messages_raise_only_protocol_error(frames: list[bytes]) -> None:
    _decode_or_protocol_error(frames)
