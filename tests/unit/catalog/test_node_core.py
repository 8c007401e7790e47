"""The catalog node's decisions without sockets: time in, commands and deadlines out."""

from __future__ import annotations

from typing import Any

import pytest

from zbus.catalog.client._node_core import Answer, Beat, NodeCore
from zbus.catalog.client.base import CatalogUnavailable, NodeState, RegistrationDenied
from zbus.common.protocols.dbp import (
    HERMES,
    SPEC,
    Approved,
    Awk,
    Denied,
    Disconnect,
    Heartbeat,
    Registration,
    Update,
)

I = 1.0  # heartbeat interval  # noqa: E741
WALL = 1_763_800_000.0
INFO = {"name": "resizer", "ip": "127.0.0.1", "port": 1, "function": "f"}


def core(**kw: Any) -> NodeCore:
    args: dict[str, Any] = {"heartbeat_interval": I, "misses": 3, "udp_address": None,
                            "dialect": SPEC, "backoff": (0.1, 0.5)}  # fmt: skip
    args.update(kw)
    return NodeCore("tcp://10.0.0.1:5246", INFO, **args)


def registered(**kw: Any) -> NodeCore:
    c = core(**kw)
    c.begin_registration(0.0, None)
    c.approved(Approved({}, WALL), 0.0)
    return c


def test_registration_backs_off_exponentially_up_to_the_largest_pause() -> None:
    c = core()
    c.begin_registration(0.0, None)
    assert c.state is NodeState.REGISTERING
    assert c.registration(WALL) == Registration({**INFO, "heartbeat_interval": I}, WALL)
    pauses = [c.attempt_failed(float(n)) for n in range(5)]
    assert pauses == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert c.counters["registration_timeouts"] == 5
    c.begin_registration(10.0, None)  # a new round starts from the first pause
    assert c.attempt_failed(10.0) == 0.1


def test_registration_gives_up_when_the_next_attempt_would_pass_the_deadline() -> None:
    c = core()
    c.begin_registration(100.0, 0.35)
    assert c.attempt_failed(100.0) == 0.1
    assert c.attempt_failed(100.1) == 0.2
    with pytest.raises(CatalogUnavailable):
        c.attempt_failed(100.3)  # 100.3 + 0.4 >= 100.35


def test_denied_ends_the_node_and_closing_keeps_it_denied() -> None:
    c = core()
    c.begin_registration(0.0, None)
    error = c.denied(Denied(("name taken",), WALL))
    assert isinstance(error, RegistrationDenied) and error.reasons == ("name taken",)
    c.closed()
    assert c.state is NodeState.DENIED


def test_registration_reply_waits_past_heartbeats_and_counts_the_unexpected() -> None:
    c = core()
    assert c.registration_reply(Approved({}, WALL))
    assert c.registration_reply(Disconnect(WALL))
    assert not c.registration_reply(Heartbeat("catalog", WALL))
    assert not c.registration_reply(None)
    assert not c.registration_reply(Awk(WALL))
    assert c.counters["unexpected"] == 1


def test_approved_instructions_set_the_agreed_timing_and_udp_target() -> None:
    c = core()
    c.begin_registration(0.0, None)
    config = {"heartbeat_interval": 0.5, "heartbeat_misses": 5, "udp_heartbeat": 6000}
    c.approved(Approved(config, WALL), 7.0)
    assert (c.heartbeat_interval, c.misses) == (0.5, 5)
    assert c.udp_target == ("10.0.0.1", 6000) and c.mode == "udp"
    assert c.state is NodeState.REGISTERED and c.config == config
    c.approved(Approved({"heartbeat_interval": -1, "heartbeat_misses": 0}, WALL), 8.0)
    assert (c.heartbeat_interval, c.misses) == (0.5, 5)  # out of range: kept
    assert c.counters["malformed"] == 2


def test_tcp_beats_are_paced_and_silence_ends_the_session_on_monotonic_time() -> None:
    c = registered()
    first = c.beat(0.0, WALL)
    assert first == Beat(tcp=Heartbeat("resizer", WALL), next_at=I)
    c.sent(0.0, beat=True)
    # Another command went out less than half an interval ago: no HEARTBEAT this round.
    c.sent(0.9)
    assert c.beat(1.0, WALL).tcp is None
    assert c.beat(2.0, WALL - 3600.0).tcp == Heartbeat("resizer", WALL - 3600.0)
    # Close to the end of the silence the next round comes just after it.
    assert c.beat(2.5, WALL).next_at == pytest.approx(3 * I + 0.001)
    assert c.beat(3 * I, WALL + 3600.0) == Beat(end="silence")
    assert c.counters["heartbeats_tcp"] == 1


def test_any_command_is_a_heartbeat_and_keeps_the_session() -> None:
    c = registered()
    assert c.command(Heartbeat("catalog", WALL), 2.9) is None
    assert c.beat(5.0, WALL).end is None  # 2.1 s of silence: below 3 intervals
    assert c.counters["heartbeats_received"] == 1


def test_udp_falls_back_to_tcp_on_a_missed_beat_and_returns() -> None:
    c = registered(udp_address=("10.0.0.1", 6000))
    assert c.mode == "udp"
    beat = c.beat(0.0, WALL)
    assert beat.udp == Heartbeat("resizer", WALL) and beat.tcp is None
    beat = c.beat(1.5 * I, WALL)  # a beat missed: TCP too, UDP still as a probe
    assert c.mode == "tcp" and beat.udp is not None and beat.tcp is not None
    assert c.counters["fallbacks_to_tcp"] == 1
    assert c.datagram(Heartbeat("catalog", WALL), 1.6) is None
    assert c.mode == "udp" and c.counters["returns_to_udp"] == 1
    assert c.counters["heartbeats_udp"] == 2


def test_datagrams_before_registration_are_ignored() -> None:
    c = core(udp_address=("10.0.0.1", 6000))
    assert c.datagram(Disconnect(WALL), 0.0) is None
    assert c.counters["disconnects_received"] == 0


def test_disconnect_and_denied_end_the_session() -> None:
    c = registered()
    assert c.command(Disconnect(WALL), 1.0) == "disconnect"
    assert c.command(Denied(("who?",), WALL), 1.0) == "denied"
    assert c.session_ended("disconnect", WALL) is None
    assert c.session_ended("silence", WALL) == Disconnect(WALL)
    c.registered_again()
    assert c.counters["reregistrations"] == 1


def test_an_update_gets_its_answer_once() -> None:
    c = registered()
    assert c.update({"port": 2}, WALL) == Update({"name": "resizer", "port": 2}, WALL)
    assert c.command(Awk(WALL), 1.0) == Answer({})
    assert c.command(Awk(WALL), 1.0) is None  # no UPDATE waits: unexpected
    assert c.counters["unexpected"] == 1
    c.update({"port": 3}, WALL)
    assert c.command(Approved({"k": 1}, WALL), 1.0) == Answer({"k": 1})
    c.update({"port": 4}, WALL)
    answer = c.command(Denied(("no",), WALL), 1.0)
    assert isinstance(answer, Answer) and isinstance(answer.denied, RegistrationDenied)
    c.update({"port": 5}, WALL)
    c.update_done()  # timed out
    assert c.command(Approved({"pushed": True}, WALL), 1.0) is None
    assert c.config == {"pushed": True}
    assert c.counters["updates"] == 4


def test_hermes_sends_udp_beats_only_and_ignores_silence() -> None:
    c = registered(dialect=HERMES)
    assert c.beat(0.0, WALL) == Beat()  # no UDP port: nothing to send, ever
    c = registered(dialect=HERMES, udp_address=("10.0.0.1", 6000))
    beat = c.beat(1000 * I, WALL)
    assert beat.end is None and beat.tcp is None and beat.udp is not None
    assert beat.next_at == 1000 * I + I


def test_goodbye_only_when_registered() -> None:
    c = core()
    assert c.goodbye(WALL) is None
    c = registered()
    assert c.goodbye(WALL) == Disconnect(WALL)
    c.closed()
    assert c.state is NodeState.CLOSED
