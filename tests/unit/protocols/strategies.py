"""Hypothesis strategies shared by the codec tests."""

from __future__ import annotations

from hypothesis import strategies as st

from tests.support.dbp import T_ASCII, T_F32, T_F64

# Random frame lists: random counts, lengths and bytes, with a bias towards the
# short ASCII words that protocols use as command frames so decoders get past the
# first check often enough to exercise their deeper branches.
_words = st.sampled_from(
    [
        b"",
        b"SYNCSTART",
        b"SYNC",
        b"SYNCEND",
        b"HUGZ",
        b"eMQP/1.0",
        b"REQUEST",
        b"INFORM",
        b"READY",
        b"REPLY",
        b"HEARTBEAT",
        b"DISCONNECT",
        b"ACK",
        b"KBYE",
        b"SCHEDULE",
        b"UNSCHEDULE",
        b"CONNECT",
        b"NOOP",
        b"SUB",
        b"UNSUB",
        b"PUT",
        b"MESSAGE",
        b"ERROR",
        b"OK",
        b"ID",
        b"TOPIC",
        b"TTL",
        b"VERSION",
        b"u_U",
        b"o_O",
        b"UwU",
        b"UoU",
        b"OwO",
        b"OmO",
        b"(O_O)",
        b"<3",
        b"</3",
        b"u.u",
        b"\x01",
        b"\x02",
        b"\x03",
        b"\x04",
        b"null",
        b"{}",
        b"[]",
        b"0",
        b"\x00" * 8,
    ]
)
frame = st.one_of(_words, st.binary(max_size=64))
frame_lists = st.lists(frame, max_size=12)

# DBP: random frame lists rarely start with the empty frame, a command and a valid time;
# these always have the first two and often the third, so the fuzzing reaches each
# command's body checks.
dbp_shaped_frames = st.tuples(
    st.sampled_from(
        [b"u_U", b"o_O", b"UwU", b"UoU", b"OwO", b"(O_O)", b"OmO", b"<3", b"</3", b"u.u"]
    ),
    st.sampled_from([T_ASCII, T_F32, T_F64, b"0", b".5", b"1."]) | frame,
    st.lists(
        st.sampled_from([b"", b"{}", b'{"a": [1.5, null]}', b"svc", b"*"]) | frame, max_size=2
    ),
).map(lambda t: [b"", t[0], t[1], *t[2]])
