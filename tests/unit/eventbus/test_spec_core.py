"""The Event BUS door's core alone, its SNAPSHOT half: requests in, actions out, the
time passed in; every (state, input) pair of a spec transfer; malformed requests refused
and counted. No sockets, no log, no sleeping (the PUBLISHER and COLLECTOR halves are in
test_spec_pipeline.py)."""

from __future__ import annotations

import pytest

from tests.support.logged import logged
from zbus.common.protocols import eventbus as eb
from zbus.common.protocols import eventbus_ext as ext
from zbus.common.protocols.eventbus_limits import MAX_SUBTREES
from zbus.eventbus.core.log import Event
from zbus.eventbus.core.spec import (
    MAX_ACTIVE,
    MAX_WAITING,
    PAGE_HEADROOM,
    RETRY,
    STALL_SECONDS,
    TURN,
    CloseTransfer,
    OpenTransfer,
    ReadLatest,
    ReadLog,
    ReadTransfer,
    Reply,
    SendTransfer,
    Sent,
    SnapshotCore,
    SnapshotLimits,
    SnapshotOutput,
    State,
)

A, B = b"\x00client-a", b"\x00client-b"
MESSAGE_BYTES = 256 * 1024


def new_core(dialect: eb.Dialect = eb.SPEC, read_bytes: int = MESSAGE_BYTES) -> SnapshotCore:
    return SnapshotCore(dialect, SnapshotLimits(MESSAGE_BYTES, read_bytes))


def syncstart(subtrees: tuple[str, ...] = (), seq: int = 0) -> list[bytes]:
    return eb.encode(eb.SyncStart(subtrees, seq))


def sync(e: Event, dialect: eb.Dialect = eb.SPEC) -> list[bytes]:
    return eb.encode(eb.Sync(e.topic, e.seq, e.producer, e.ts, e.uuid, e.data), dialect)


def only(out: SnapshotOutput) -> object:
    assert len(out.actions) == 1, out.actions
    return out.actions[0]


def start(core: SnapshotCore, who: bytes = A, frames: list[bytes] | None = None) -> int:
    """A SYNCSTART from ``who`` that is admitted: the id of its transfer."""
    core.receive(who, syncstart() if frames is None else frames, 0.0)
    t = core.transfers.of(who)
    assert t is not None
    return t.id


def opened(core: SnapshotCore, now: float = 0.0, sequence: int = 7) -> int:
    """One transfer for A, opened and asked for its first read."""
    tid = start(core)
    core.take()
    core.tick(now)
    assert only(core.take()) == OpenTransfer(tid, (), 0, False)
    core.transfer_opened(tid, sequence, now)
    assert only(core.take()) == ReadTransfer(tid, TURN, MESSAGE_BYTES)
    return tid


# ------------------------------------------------------------------------ pages
def test_a_latest_page_is_read_then_sent_and_counted() -> None:
    core = new_core()
    query = ext.SnapshotQuery(("/a/",), 3, "/a/x", "latest", 50)
    core.receive(A, ext.encode(query), 0.0)
    out = core.take()
    assert out.actions == [ReadLatest(A, ("/a/",), 3, "/a/x", 50, MESSAGE_BYTES - PAGE_HEADROOM)]
    assert out.counts == {("snapshots", "page-latest"): 1}
    events = [logged(4, "/a/y"), logged(9, "/a/z")]
    core.page_read(A, events, "/a/z", 12, 0.0)
    reply = only(core.take())
    rows = [[e.seq, e.topic, e.producer, e.ts, e.uuid, e.data] for e in events]
    assert reply == Reply(A, ext.encode_page(rows, "/a/z", 12), page=True)


def test_a_log_page_reads_from_its_cursor() -> None:
    core = new_core()
    core.receive(A, ext.encode(ext.SnapshotQuery((), 0, "41", "log", 10)), 0.0)
    assert only(core.take()) == ReadLog(A, (), 41, 10, MESSAGE_BYTES - PAGE_HEADROOM)
    assert core.totals == {("snapshots", "page-log"): 1}


def test_a_page_that_finds_the_queue_full_is_dropped_and_counted() -> None:
    core = new_core()
    page = Reply(A, [b"x"], page=True)
    core.replied(page, Sent.FULL)
    core.replied(page, Sent.GONE)  # gone: nobody to count for
    core.replied(Reply(A, [b"x"]), Sent.FULL)  # an error reply: not a page
    assert core.take().counts == {("overflows", ""): 1}


@pytest.mark.parametrize("reason", ["storage", "internal"])
def test_a_page_read_that_fails_is_answered_and_counted(reason: str) -> None:
    core = new_core()
    action = ReadLatest(A, (), 0, None, 10, 100)
    core.failed(action, reason, "disk I/O error", 0.0)
    out = core.take()
    prefix = "storage failed" if reason == "storage" else "internal error"
    assert out.actions == [Reply(A, ext.encode(ext.Error(f"{prefix}: disk I/O error")))]
    assert out.counts == {("rejected", reason): 1}


# -------------------------------------------------------------- bad requests
@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        ([], "frame_count"),
        ([b"SYNCSTART"], "frame_count"),
        ([b"SYNCSTART", b"/a;;/b", bytes(8)], "bad_value"),
        ([b"SYNCSTART", b"/a", b"\x01\x02"], "bad_value"),
        ([b"SYNCSTART", b"\xff", bytes(8)], "bad_value"),
        ([b"HELLO", b"", bytes(8)], "unknown_command"),
        ([b"SYNCSTART", ";".join(["/a"] * (MAX_SUBTREES + 1)).encode(), bytes(8)], None),
    ],
)
def test_a_malformed_spec_request_is_refused_counted_and_not_answered(
    frames: list[bytes], reason: str | None
) -> None:
    core = new_core()
    core.receive(A, frames, 0.0)
    out = core.take()
    assert out.actions == []
    assert len(out.refusals) == 1 and out.refusals[0].identity == A
    got = out.refusals[0].reason
    assert got == reason if reason is not None else got in ("out_of_range", "bad_value")
    assert out.counts == {("rejected", got): 1}
    assert core.transfers.of(A) is None


@pytest.mark.parametrize(
    "query",
    [
        {"limit": 0},
        {"mode": "all"},
        {"subtrees": "/a"},
        {"subtrees": ["/a"] * (MAX_SUBTREES + 1)},
        {"color": "blue"},
    ],
)
def test_a_malformed_page_request_gets_an_error_and_is_counted(query: dict[str, object]) -> None:
    import msgpack

    core = new_core()
    core.receive(A, [ext.SNAPSHOT, msgpack.packb(query)], 0.0)
    out = core.take()
    (reply,) = out.actions
    assert isinstance(reply, Reply) and reply.identity == A and not reply.page
    assert isinstance(ext.decode_snapshot_reply(reply.frames), ext.Error)
    assert sum(n for (metric, _), n in out.counts.items() if metric == "rejected") == 1


def test_a_bug_costs_one_request(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(ext, "decode_snapshot_request", broken)
    core = new_core()
    core.receive(A, ext.encode(ext.SnapshotQuery()), 0.0)
    out = core.take()
    assert out.actions == [Reply(A, ext.encode(ext.Error("internal error: bug")))]
    assert out.refusals[0].reason == "internal"
    assert isinstance(out.refusals[0].error, RuntimeError)


# ---------------------------------------------------------- spec requests
@pytest.mark.parametrize(
    ("dialect", "spec", "subtrees"),
    [
        (eb.SPEC, b"/a;/b", ("/a", "/b")),
        (eb.SPEC, b"/a,/b", ("/a", "/b")),
        (eb.NODE_REFERENCE, b"/a,/b;/c", ("/a", "/b", "/c")),
        (eb.SPEC, b"", ()),
    ],
)
def test_subtrees_split_on_either_separator(
    dialect: eb.Dialect, spec: bytes, subtrees: tuple[str, ...]
) -> None:
    core = new_core(dialect)
    seq = b"0" if dialect.ascii_sequences else bytes(8)
    tid = start(core, frames=[b"SYNCSTART", spec, seq])
    core.take()
    core.tick(0.0)
    assert only(core.take()) == OpenTransfer(tid, subtrees, 0, False)


def test_syncstart_0_asks_for_the_state_and_n_for_every_event_above_n() -> None:
    core = new_core()
    a = start(core, A, syncstart(("/x",), 0))
    b = start(core, B, syncstart(("/x",), 42))
    assert core.take().counts == {("snapshots", "spec"): 1, ("snapshots", "spec-resume"): 1}
    core.tick(0.0)
    assert core.take().actions == [
        OpenTransfer(a, ("/x",), 0, False),
        OpenTransfer(b, ("/x",), 42, True),
    ]


def test_a_whole_transfer_from_syncstart_to_syncend() -> None:
    core = new_core()
    tid = opened(core, sequence=9)
    events = [logged(3, "/a"), logged(9, "/b")]
    core.transfer_read(tid, events, True, 0.0)
    messages = [sync(e) for e in events] + [eb.encode(eb.SyncEnd((), 9))]
    assert only(core.take()) == SendTransfer(tid, A, messages)
    core.transfer_sent(tid, 3, Sent.OK, 0.0)
    assert only(core.take()) == CloseTransfer(tid)
    assert core.transfers.get(tid) is None and core.transfers.of(A) is None
    assert core.next_deadline() is None


def test_the_node_dialect_gets_ascii_sequences() -> None:
    core = new_core(eb.NODE_REFERENCE)
    tid = start(core, frames=[b"SYNCSTART", b"/a", b"0"])
    core.tick(0.0)
    core.transfer_opened(tid, 5, 0.0)
    core.take()
    core.transfer_read(tid, [logged(5, "/a")], True, 0.0)
    send = only(core.take())
    assert isinstance(send, SendTransfer)
    assert send.messages == [sync(logged(5, "/a"), eb.NODE_REFERENCE), [b"SYNCEND", b"/a", b"5"]]


def test_a_turn_sends_at_most_turn_messages() -> None:
    core = new_core()
    tid = opened(core)
    half = [logged(i, "/a") for i in range(1, TURN // 2 + 1)]
    core.transfer_read(tid, half, False, 0.0)
    core.take()
    core.transfer_sent(tid, len(half), Sent.OK, 0.0)
    assert only(core.take()) == ReadTransfer(tid, TURN - len(half), MESSAGE_BYTES)
    core.transfer_read(tid, half, False, 0.0)
    core.take()
    core.transfer_sent(tid, len(half), Sent.OK, 1.0)
    assert core.take().actions == []  # its turn is used up
    t = core.transfers.get(tid)
    assert t is not None and t.state is State.IDLE and t.sent == TURN
    assert core.next_deadline() == 1.0  # it sent: the next turn at once
    core.tick(1.0)
    assert only(core.take()) == ReadTransfer(tid, TURN, MESSAGE_BYTES)


def test_a_full_queue_keeps_the_rest_for_the_next_turn() -> None:
    core = new_core()
    tid = opened(core)
    events = [logged(i, "/a") for i in range(1, 5)]
    core.transfer_read(tid, events, False, 0.0)
    core.take()
    core.transfer_sent(tid, 1, Sent.FULL, 0.0)
    assert core.take().actions == []
    assert core.next_deadline() == 0.0  # it sent one
    core.tick(0.0)
    assert only(core.take()) == SendTransfer(tid, A, [sync(e) for e in events[1:]])
    core.transfer_sent(tid, 0, Sent.FULL, 0.0)
    assert core.next_deadline() == pytest.approx(RETRY[0])  # nothing went: wait


def test_turns_that_send_nothing_wait_longer_each_time_up_to_the_last_retry() -> None:
    core = new_core()
    tid = opened(core)
    core.transfer_read(tid, [logged(1, "/a")], False, 0.0)
    core.take()
    now = 0.0
    waits = []
    for _ in range(len(RETRY) + 2):
        core.transfer_sent(tid, 0, Sent.FULL, now)
        deadline = core.next_deadline()
        assert deadline is not None
        waits.append(round(deadline - now, 6))
        now = deadline
        core.tick(now)
        core.take()
    assert waits == [*RETRY, RETRY[-1], RETRY[-1]]


def test_a_client_that_reads_nothing_loses_its_transfer() -> None:
    core = new_core()
    tid = opened(core)
    core.transfer_read(tid, [logged(1, "/a"), logged(2, "/a")], False, 0.0)
    core.take()
    core.transfer_sent(tid, 1, Sent.FULL, 0.0)  # progress at 0
    core.tick(STALL_SECONDS)
    core.take()
    core.transfer_sent(tid, 0, Sent.FULL, STALL_SECONDS)  # not past the limit yet
    assert core.transfers.get(tid) is not None
    late = STALL_SECONDS + 0.5
    core.tick(late)
    core.take()
    core.transfer_sent(tid, 0, Sent.FULL, late)
    out = core.take()
    assert out.actions == [CloseTransfer(tid)]
    assert out.counts == {("aborted", ""): 1}
    assert out.stalled == [(A, 1)]
    assert core.transfers.get(tid) is None and core.next_deadline() is None


def test_a_client_gone_aborts_its_transfer() -> None:
    core = new_core()
    tid = opened(core)
    core.transfer_read(tid, [logged(1, "/a")], False, 0.0)
    core.take()
    core.transfer_sent(tid, 0, Sent.GONE, 0.0)
    out = core.take()
    assert out.actions == [CloseTransfer(tid)] and out.counts == {("aborted", ""): 1}


def test_a_read_of_nothing_ends_the_turn_without_progress() -> None:
    core = new_core()
    tid = opened(core)
    core.transfer_read(tid, [], False, 2.0)
    assert core.take().actions == []
    t = core.transfers.get(tid)
    assert t is not None and t.state is State.IDLE
    assert core.next_deadline() == pytest.approx(2.0 + RETRY[0])


def test_at_most_max_active_read_at_once_and_the_others_wait_their_turn() -> None:
    core = new_core()
    ids = [start(core, bytes([i])) for i in range(MAX_ACTIVE)]
    late = start(core, b"late")
    t = core.transfers.get(late)
    assert t is not None and t.state is State.WAITING
    core.take()
    core.tick(0.0)
    opens = core.take().actions
    assert [a.transfer for a in opens if isinstance(a, OpenTransfer)] == ids
    # The first one finishes; the turn ends when every other is back to IDLE.
    core.transfer_opened(ids[0], 1, 0.0)
    core.transfer_read(ids[0], [], True, 0.0)
    core.transfer_sent(ids[0], 1, Sent.OK, 0.0)
    for tid in ids[1:]:
        core.transfer_opened(tid, 1, 0.0)
        core.transfer_read(tid, [], False, 0.0)
    assert t.state is State.IDLE  # admitted at the end of the turn
    core.take()
    core.tick(0.0)
    assert OpenTransfer(late, (), 0, False) in core.take().actions


def test_past_max_waiting_a_syncstart_is_refused_as_busy() -> None:
    core = new_core()
    for i in range(MAX_ACTIVE + MAX_WAITING):
        start(core, i.to_bytes(4, "big"))
    core.take()
    core.receive(b"one too many", syncstart(), 0.0)
    out = core.take()
    assert out.actions == [] and out.counts == {("rejected", "busy"): 1}
    assert out.refusals[0].reason == "busy"


def test_close_closes_every_open_reader() -> None:
    core = new_core()
    tid = opened(core)
    start(core, B)  # admitted, not opened yet: nothing to close
    core.take()
    core.close(0.0)
    assert core.take().actions == [CloseTransfer(tid)]
    assert not core.transfers.busy


# ------------------------------------------- every (state, input) of a transfer
def in_state(state: State) -> tuple[SnapshotCore, int]:
    """A core whose transfer for A is in ``state`` (others fill the places first when
    it must wait)."""
    core = new_core()
    if state is State.WAITING:
        for i in range(MAX_ACTIVE):
            start(core, bytes([i]))
    tid = start(core)
    if state in (State.OPENING, State.READING, State.SENDING):
        core.tick(0.0)
    if state in (State.READING, State.SENDING):
        core.transfer_opened(tid, 7, 0.0)
    if state is State.SENDING:
        core.transfer_read(tid, [logged(1, "/a"), logged(2, "/a")], False, 0.0)
    t = core.transfers.get(tid)
    assert t is not None and t.state is state
    core.take()
    return core, tid


INPUTS = ("opened", "read", "read_nothing", "sent", "full", "gone", "failed", "replaced", "close")
# (state, input) -> the state after it (None: gone) and the actions it asks for, by kind.
TABLE: dict[tuple[State, str], tuple[State | None, list[type]]] = {
    (State.OPENING, "opened"): (State.READING, [ReadTransfer]),
    (State.READING, "read"): (State.SENDING, [SendTransfer]),
    (State.READING, "read_nothing"): (State.IDLE, []),
    (State.SENDING, "sent"): (State.READING, [ReadTransfer]),
    (State.SENDING, "full"): (State.IDLE, []),
    (State.SENDING, "gone"): (None, [CloseTransfer]),
    (State.OPENING, "failed"): (None, [CloseTransfer]),
    (State.READING, "failed"): (None, [CloseTransfer]),
    (State.SENDING, "failed"): (None, [CloseTransfer]),
    (State.WAITING, "replaced"): (None, []),
    (State.WAITING, "close"): (None, []),
    (State.IDLE, "replaced"): (None, []),  # never opened: nothing to close
    (State.IDLE, "close"): (None, []),
}
for _state in (State.OPENING, State.READING, State.SENDING):
    TABLE[_state, "replaced"] = (None, [CloseTransfer])
    TABLE[_state, "close"] = (None, [CloseTransfer])


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("what", INPUTS)
def test_every_state_and_input(state: State, what: str) -> None:
    core, tid = in_state(state)
    t = core.transfers.get(tid)
    assert t is not None
    if what == "opened":
        core.transfer_opened(tid, 9, 0.0)
    elif what == "read":
        core.transfer_read(tid, [logged(3, "/a")], False, 0.0)
    elif what == "read_nothing":
        core.transfer_read(tid, [], False, 0.0)
    elif what in ("sent", "full", "gone"):
        count, outcome = {"sent": (2, Sent.OK), "full": (1, Sent.FULL), "gone": (0, Sent.GONE)}[
            what
        ]
        core.transfer_sent(tid, count, outcome, 0.0)
    elif what == "failed":
        core.failed(ReadTransfer(tid, 1, 1), "storage", "disk I/O error", 0.0)
    elif what == "replaced":
        core.receive(A, syncstart(("/new",)), 0.0)
        core.tick(0.0)
    else:
        core.close(0.0)
    out = core.take()
    expected = TABLE.get((state, what))
    if expected is None:  # not defined there: ignored
        assert out.actions == [] and out.counts == {}
        assert core.transfers.get(tid) is t and t.state is state
        return
    after, kinds = expected
    mine = [a for a in out.actions if getattr(a, "transfer", None) == tid]
    if what == "replaced":  # the new transfer's actions are its own
        new = core.transfers.of(A)
        assert new is not None and new.id != tid and new.request.subtrees == ("/new",)
        assert out.counts.get(("aborted", "")) == 1
    assert [type(a) for a in mine] == kinds
    if after is None:
        assert core.transfers.get(tid) is None
    else:
        assert core.transfers.get(tid) is t and t.state is after
    if what == "failed" and after is None:
        assert out.counts == {("rejected", "storage"): 1}
    if what == "gone":
        assert out.counts == {("aborted", ""): 1}


def test_results_for_a_transfer_that_is_gone_are_ignored() -> None:
    core = new_core()
    tid = opened(core)
    core.receive(A, syncstart(), 0.0)  # replaced while its read is under way
    core.take()
    core.transfer_read(tid, [logged(1, "/a")], True, 0.0)
    core.transfer_sent(tid, 1, Sent.OK, 0.0)
    core.transfer_opened(tid, 1, 0.0)
    core.failed(OpenTransfer(tid, (), 0, False), "internal", "x", 0.0)
    assert core.take() == SnapshotOutput()
