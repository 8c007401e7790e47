"""The catalog core driven by DBP commands and time values: no sockets, no sleeping.

Each test plays a dialog between nodes and ``CatalogCore`` and checks what it sends
(encoded with ``dbp.encode`` where the bytes matter), the records it asks the store to
write, and its counters.
"""

from __future__ import annotations

from typing import Any

import pytest

from zbus.catalog.core import liveness
from zbus.catalog.core.catalog import CatalogConfig, CatalogCore, NodeRecord, Outgoing, malformed
from zbus.common.protocols.dbp import (
    HERMES,
    SPEC,
    Approved,
    Awk,
    Denied,
    Disconnect,
    Heartbeat,
    InfoReply,
    InfoRequest,
    Registration,
    TimeEncoding,
    Update,
    decode,
    encode,
)

T0 = 1_763_800_000.0
I = 3.0  # heartbeat interval  # noqa: E741
F32 = TimeEncoding.FLOAT32
A = b"\x00node-a"
B = b"\x00node-b"
C = b"\x00client"


def info(name: str = "resizer", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "ip": "10.0.0.7",
        "port": 5555,
        "function": "resize images",
        "heartbeat_interval": I,
    }
    body.update(extra)
    return body


HERMES_INFO = {
    "name": "Rohan",
    "interfaces": {"router": {"ip": "10.0.0.7", "port": 5247}},
    "reg_time": "Sat Nov 22 08:35:32 2025",
    "topics": None,
}


def core(nodes: tuple[NodeRecord, ...] = (), now: float = T0, **config: Any) -> CatalogCore:
    config.setdefault("heartbeat_interval", I)
    config.setdefault("grace", 10.0)
    return CatalogCore(CatalogConfig(**config), nodes, now=now, wall=now)


def register(c: CatalogCore, identity: bytes = A, body: dict[str, Any] | None = None,
             now: float = T0, **kw: Any) -> Outgoing:  # fmt: skip
    body = info() if body is None else body
    c.tcp_message(identity, Registration(body, now), now, wall=now, **kw)
    [out] = c.take_outbox()
    return out


def state(c: CatalogCore, name: str = "resizer") -> str | None:
    return next((r.state for r in c.nodes() if r.name == name), None)


def ask(c: CatalogCore, query: str, now: float = T0) -> dict[str, Any]:
    c.tcp_message(C, InfoRequest(query, now), now, wall=now)
    [out] = c.take_outbox()
    assert isinstance(out.command, InfoReply)
    return out.command.info


# ---------------------------------------------------------------- registration


def test_registration_is_approved_with_instructions_and_stored() -> None:
    c = core(udp_port=6000)
    out = register(c)
    assert out == Outgoing(A, Approved(
        {"heartbeat_interval": I, "heartbeat_misses": 3, "udp_heartbeat": 6000},
        T0, TimeEncoding.ASCII), SPEC)  # fmt: skip
    [rec] = c.take_changes()
    assert (rec.name, rec.identity, rec.state, rec.registered_at) == ("resizer", A, "active", T0)
    assert rec.info == info() and rec.heartbeat_interval == I
    assert c.counters["registrations_approved"] == 1


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"ip": "1.2.3.4"}, "malformed: name"),
        (info(name=""), "malformed: name"),
        ({**info(), "name": 7}, "malformed: name"),
        ({"name": "x", "ip": "1.2.3.4"}, "malformed: missing port, function, heartbeat_interval"),
        (info(port="80 "), "malformed: port"),  # "80" is accepted: a port in decimal text
        (info(port=70000), "malformed: port"),
        (info(heartbeat_interval=0), "malformed: heartbeat_interval"),
        ({"name": "x", "interfaces": []}, "malformed: interfaces"),
    ],
)
def test_malformed_registration_is_denied(body: dict[str, Any], reason: str) -> None:
    c = core()
    out = register(c, body=body)
    assert isinstance(out.command, Denied)
    assert out.command.reasons[0].startswith(reason)
    assert encode(out.command, out.dialect)[1] == b"(O_O)"
    assert c.take_changes() == [] and c.nodes() == []
    assert c.counters["registrations_denied_malformed"] == 1


def test_hermes_shaped_body_is_accepted() -> None:
    assert malformed(HERMES_INFO) == []
    assert isinstance(register(core(), body=HERMES_INFO).command, Approved)


def test_name_taken_by_live_node_is_denied_until_it_is_inactive() -> None:
    c = core()
    register(c, A)
    out = register(c, B, now=T0 + 1)
    assert isinstance(out.command, Denied) and out.command.reasons[0].startswith("name taken")
    assert c.counters["registrations_denied_name_taken"] == 1
    c.tick(T0 + 2 * I, wall=T0 + 2 * I)  # late: still live
    assert state(c) == "late"
    c.take_outbox()
    assert isinstance(register(c, B, now=T0 + 2 * I).command, Denied)
    c.tick(T0 + 3 * I, wall=T0 + 3 * I)  # inactive: the name may be taken over
    c.take_outbox()
    assert isinstance(register(c, B, now=T0 + 3 * I).command, Approved)
    assert [r.identity for r in c.nodes()] == [B]
    # The old connection is forgotten: its heartbeat now gets DISCONNECT.
    c.tcp_message(A, Heartbeat("resizer", T0), T0 + 3 * I, wall=T0 + 3 * I)
    assert isinstance(c.take_outbox()[0].command, Disconnect)


def test_same_identity_registers_again() -> None:
    c = core()
    register(c)
    out = register(c, body=info(port=6666), now=T0 + 1)
    assert isinstance(out.command, Approved)
    assert c.nodes()[0].info["port"] == 6666


def test_policy_names_and_keys() -> None:
    key = bytes(32)
    c = core(allowed_names=frozenset({"resizer"}), allowed_keys=frozenset({key}))
    out = register(c, body=info(name="other"), peer_key=key)
    assert isinstance(out.command, Denied) and "not allowed" in out.command.reasons[0]
    out = register(c, peer_key=b"\x01" * 32)
    assert isinstance(out.command, Denied) and "key" in out.command.reasons[0]
    assert isinstance(register(c, peer_key=None).command, Denied)
    assert c.counters["registrations_denied_policy"] == 3
    assert isinstance(register(c, peer_key=key).command, Approved)


# ---------------------------------------------------------------- update, info


def test_update_is_acknowledged_and_merged() -> None:
    c = core()
    register(c)
    c.take_changes()
    c.tcp_message(A, Update({"name": "resizer", "port": 7000}, T0 + 1), T0 + 1, wall=T0 + 1)
    assert c.take_outbox() == [Outgoing(A, Awk(T0 + 1, TimeEncoding.ASCII), SPEC)]
    [rec] = c.take_changes()
    assert rec.info == info(port=7000) and rec.last_heartbeat == T0 + 1
    c.tcp_message(A, Update({"name": "renamed"}, T0 + 2), T0 + 2, wall=T0 + 2)
    [out] = c.take_outbox()
    assert isinstance(out.command, Denied) and c.counters["updates_denied"] == 1


def test_update_from_unregistered_peer_gets_disconnect() -> None:
    c = core()
    c.tcp_message(B, Update({"port": 1}, T0), T0, wall=T0)
    assert c.take_outbox() == [Outgoing(B, Disconnect(T0, TimeEncoding.ASCII), SPEC)]
    assert c.counters["unexpected_commands"] == 1


def test_info_one_list_and_inactive_warning() -> None:
    c = core()
    register(c, A)
    register(c, B, body=info("thumbs"))
    one = ask(c, "resizer")
    assert one["service"] == "resizer" and one["state"] == "active"
    assert one["info"] == info() and one["confirmed"] is True
    assert sorted(ask(c, "*")["services"]) == ["resizer", "thumbs"]
    assert sorted(ask(c, "")["services"]) == ["resizer", "thumbs"]
    unknown = ask(c, "nobody")
    assert unknown["state"] == "gone" and unknown["warning"].startswith("inactive")
    c.tcp_message(B, Heartbeat("thumbs", T0), T0 + 3 * I - 1, wall=T0 + 3 * I - 1)
    c.tick(T0 + 3 * I, wall=T0 + 3 * I)
    c.take_outbox()
    assert state(c) == "inactive"
    warned = ask(c, "resizer", T0 + 3 * I)
    assert warned["state"] == "inactive" and "warning" in warned and "info" not in warned
    assert list(ask(c, "*", T0 + 3 * I)["services"]) == ["thumbs"]
    assert c.counters["info_requests"] == 6


# ---------------------------------------------------------------- heartbeats, liveness


def test_liveness_boundaries_and_recovery() -> None:
    c = core()
    register(c)
    c.take_changes()
    assert c.next_deadline() == T0 + I  # the catalog's first HEARTBEAT
    c.tick(T0 + I, wall=T0 + I)
    assert state(c) == "active"  # a beat is due, not yet missing
    assert c.next_deadline() == T0 + 1.5 * I  # late: one beat missing
    c.tick(T0 + 1.5 * I - 0.001, wall=T0 + 1.5 * I - 0.001)
    assert state(c) == "active"
    c.tick(T0 + 1.5 * I, wall=T0 + 1.5 * I)
    assert state(c) == "late"
    assert c.take_changes() == []  # late is not written to the registry
    assert c.next_deadline() == T0 + 2 * I  # the catalog's next HEARTBEAT
    c.tick(T0 + 3 * I - 0.001, wall=T0 + 3 * I - 0.001)
    assert state(c) == "late"
    c.tick(T0 + 3 * I, wall=T0 + 3 * I)
    assert state(c) == "inactive" and [r.state for r in c.take_changes()] == ["inactive"]
    assert liveness.next_change("inactive", T0, I, 3, 10) == T0 + 3 * I + 10
    assert [o.command for o in c.take_outbox()] == [
        Heartbeat("catalog", T0 + I, TimeEncoding.ASCII),  # to live nodes only
        Heartbeat("catalog", T0 + 3 * I - 0.001, TimeEncoding.ASCII),
    ]
    c.tcp_message(A, Heartbeat("resizer", T0 + 3 * I + 5), T0 + 3 * I + 5, wall=T0 + 3 * I + 5)
    assert state(c) == "active" and c.take_outbox() == []
    assert [r.state for r in c.take_changes()] == ["active"]
    assert c.counters["heartbeats_tcp"] == 1


def test_a_steady_node_with_jitter_costs_no_store_write() -> None:
    c = core()
    register(c)
    c.take_changes()
    jitter = [0.0, 0.45, 0.1, 0.3, 0.49, 0.0, 0.2]  # fractions of I after each due beat
    for k in range(1, 200):
        now = T0 + k * I + jitter[k % len(jitter)] * I
        c.tick(now, wall=now)
        c.tcp_message(A, Heartbeat("resizer", now), now, wall=now)
        assert state(c) == "active"
    assert c.take_changes() == []


def test_expiry_exactly_after_grace() -> None:
    c = core()
    register(c)
    c.take_changes()
    c.tick(T0 + 3 * I + 10 - 0.001, wall=T0 + 3 * I + 10 - 0.001)
    assert state(c) == "inactive"
    c.tick(T0 + 3 * I + 10, wall=T0 + 3 * I + 10)
    assert state(c) is None and c.counters["expiries"] == 1
    assert [r.state for r in c.take_changes()] == ["inactive", "gone"]
    assert ask(c, "resizer")["state"] == "gone"


def test_skipped_ticks_jump_straight_to_the_due_state() -> None:
    c = core()
    register(c)
    c.tick(T0 + 3 * I, wall=T0 + 3 * I)
    assert state(c) == "inactive"


def test_udp_heartbeat_refreshes_and_records_address() -> None:
    c = core()
    register(c)
    c.take_changes()
    c.udp_heartbeat(("10.0.0.7", 40000), Heartbeat("resizer", T0 + 2), T0 + 2, wall=T0 + 2)
    [rec] = c.take_changes()
    assert rec.address == "10.0.0.7:40000" and rec.last_heartbeat == T0 + 2
    c.udp_heartbeat(("10.0.0.7", 40000), Heartbeat("resizer", T0 + 4), T0 + 4, wall=T0 + 4)
    assert c.take_changes() == []  # a steady heartbeat is not a store write
    c.tick(T0 + 4 + I - 0.001, wall=T0 + 4 + I - 0.001)
    assert state(c) == "active"
    c.take_outbox()
    c.udp_heartbeat(("10.0.0.9", 1), Heartbeat("nobody", T0 + 5), T0 + 5, wall=T0 + 5)
    assert c.counters["heartbeats_udp"] == 2 and c.counters["heartbeats_unknown"] == 1
    assert c.take_outbox() == []  # UDP is never answered


def test_catalog_sends_heartbeats_to_live_nodes_only() -> None:
    c = core()
    register(c, A)
    register(c, B, body=info("thumbs"), now=T0 + 1)
    # Each node's heartbeats keep the phase of its registration (spread, not a burst).
    c.tick(T0 + I, wall=T0 + I)
    assert c.take_outbox() == [
        Outgoing(A, Heartbeat("catalog", T0 + I, TimeEncoding.ASCII), SPEC),
    ]
    assert c.next_deadline() == T0 + 1 + I
    c.tick(T0 + 1 + I, wall=T0 + 1 + I)
    assert c.take_outbox() == [
        Outgoing(B, Heartbeat("catalog", T0 + 1 + I, TimeEncoding.ASCII), SPEC),
    ]
    c.udp_heartbeat(("h", 1), Heartbeat("thumbs", T0 + 3 * I), T0 + 3 * I, wall=T0 + 3 * I)
    c.tick(T0 + 3 * I, wall=T0 + 3 * I)  # resizer is inactive now: the catalog stops sending to it
    assert [o.identity for o in c.take_outbox()] == [B]
    assert c.counters["heartbeats_sent"] == 3


# ---------------------------------------------------------------- disconnect


def test_disconnect_from_node_removes_it() -> None:
    c = core()
    register(c)
    c.take_changes()
    c.tcp_message(A, Disconnect(T0 + 1), T0 + 1, wall=T0 + 1)
    assert [r.state for r in c.take_changes()] == ["gone"]
    c.tick(T0 + 10 * I, wall=T0 + 10 * I)
    assert c.take_outbox() == [] and c.nodes() == []
    assert c.counters["disconnects_received"] == 1


def test_udp_disconnect_by_address() -> None:
    c = core()
    register(c)
    c.udp_heartbeat(("10.0.0.7", 40000), Heartbeat("resizer", T0), T0, wall=T0)
    c.udp_heartbeat(("10.0.0.7", 40001), Disconnect(T0 + 1), T0 + 1, wall=T0 + 1)
    assert c.nodes() != []
    c.udp_heartbeat(("10.0.0.7", 40000), Disconnect(T0 + 1), T0 + 1, wall=T0 + 1)
    assert c.nodes() == []


def test_udp_disconnect_finds_every_node_at_that_address_and_only_there() -> None:
    c = core()
    shared, other = ("10.0.0.9", 5000), ("10.0.0.9", 5001)
    for identity, name in ((A, "a"), (B, "b"), (C, "c")):
        register(c, identity, body=info(name))
    c.udp_heartbeat(shared, Heartbeat("a", T0), T0, wall=T0)
    c.udp_heartbeat(shared, Heartbeat("b", T0), T0, wall=T0)
    c.udp_heartbeat(shared, Heartbeat("c", T0), T0, wall=T0)
    c.udp_heartbeat(other, Heartbeat("c", T0), T0, wall=T0)  # c moved away from the shared address
    c.udp_heartbeat(shared, Disconnect(T0 + 1), T0 + 1, wall=T0 + 1)
    assert [r.name for r in c.nodes()] == ["c"]
    assert c.counters["disconnects_received"] == 2
    c.udp_heartbeat(other, Disconnect(T0 + 1), T0 + 1, wall=T0 + 1)
    assert c.nodes() == [] and c._by_address == {}


@pytest.mark.parametrize(
    "cmd",
    [Approved({}, T0), Denied((), T0), InfoReply({}, T0), Awk(T0)],
    ids=["approved", "denied", "reply", "awk"],
)
def test_valid_but_unexpected_command_gets_disconnect(cmd: Any) -> None:
    c = core()
    register(c)
    c.take_changes()
    c.tcp_message(A, cmd, T0 + 1, wall=T0 + 1)
    assert c.take_outbox() == [Outgoing(A, Disconnect(T0 + 1, TimeEncoding.ASCII), SPEC)]
    assert [r.state for r in c.take_changes()] == ["gone"]  # "then no further commands"
    c.tick(T0 + I, wall=T0 + I)
    assert c.take_outbox() == []
    assert c.counters["unexpected_commands"] == 1 and c.counters["disconnects_sent"] == 1


def test_invalid_message_is_counted_and_dropped() -> None:
    c = core()
    c.invalid_message()
    assert c.counters["invalid_messages"] == 1 and c.take_outbox() == []


# ---------------------------------------------------------------- Hermes


def test_hermes_frames_answered_in_kind() -> None:
    c = core()
    frames = encode(Registration(HERMES_INFO, T0, F32), HERMES)
    out = register(c, body=HERMES_INFO)  # ASCII first: gets SPEC
    assert out.dialect == SPEC
    c = core()
    c.tcp_message(A, decode(frames), T0, wall=T0)
    [out] = c.take_outbox()
    assert out.dialect == HERMES and isinstance(out.command, Approved)
    wire = encode(out.command, out.dialect)
    assert len(wire[2]) == 4 and decode(wire).time_encoding is F32
    assert c.nodes()[0].time_encoding is F32
    c.tcp_message(B, decode(encode(Registration(HERMES_INFO, T0, F32), HERMES)), T0, wall=T0)
    [denied] = c.take_outbox()
    assert encode(denied.command, denied.dialect)[1] == b"OmO"
    update = decode(encode(Update({"name": "Rohan", "topics": ["t"]}, T0, F32)))
    c.tcp_message(A, update, T0, wall=T0)
    [ack] = c.take_outbox()
    assert ack.dialect == HERMES and encode(ack.command, ack.dialect)[1:2] == [b"u.u"]
    # No HEARTBEATs to Hermes (it has no <3) and no expiry by silence.
    c.tick(T0 + 1000 * I, wall=T0 + 1000 * I)
    assert c.take_outbox() == [] and state(c, "Rohan") == "active"


# ---------------------------------------------------------------- restart


def test_restart_unknown_identity_heartbeat_disconnect_then_register() -> None:
    first = core()
    register(first, A)
    stored = first.take_changes()
    c = core(tuple(stored), now=T0 + 100)
    assert c.confirmed("resizer") is False and ask(c, "resizer", T0 + 100)["confirmed"] is False
    c.tick(T0 + 100 + I, wall=T0 + 100 + I)
    assert c.take_outbox() == []  # no heartbeats to an identity from another run
    c.tcp_message(A, Heartbeat("resizer", T0 + 101), T0 + 101, wall=T0 + 101)
    assert c.take_outbox() == [Outgoing(A, Disconnect(T0 + 101, TimeEncoding.ASCII), SPEC)]
    c.udp_heartbeat(("h", 1), Heartbeat("resizer", T0 + 101), T0 + 101, wall=T0 + 101)
    assert c.counters["heartbeats_unknown"] == 2
    # The node reconnects on a new socket (new identity) and registers: approved even
    # though the unconfirmed record still holds the name.
    assert isinstance(register(c, B, now=T0 + 102).command, Approved)
    assert c.confirmed("resizer") is True and c.nodes()[0].identity == B


def test_restart_unconfirmed_nodes_expire_from_the_restart_time() -> None:
    gone = NodeRecord(name="old", identity=B, info={}, state="gone", registered_at=T0,
                      last_heartbeat=T0, heartbeat_interval=I)  # fmt: skip
    rec = NodeRecord(name="resizer", identity=A, info=info(), state="active",
                     registered_at=T0, last_heartbeat=T0, heartbeat_interval=I,
                     time_encoding=F32)  # fmt: skip
    c = core((rec, gone), now=T0 + 1000)
    assert [r.name for r in c.nodes()] == ["resizer"]
    c.tick(T0 + 1000 + 3 * I + 10 - 0.001, wall=T0 + 1000 + 3 * I + 10 - 0.001)
    assert state(c) == "inactive"
    c.tick(T0 + 1000 + 3 * I + 10, wall=T0 + 1000 + 3 * I + 10)
    assert c.nodes() == [] and c.take_changes()[-1].state == "gone"


# ---------------------------------------------------------------- table, config


def test_transition_table_refuses_unknown_pairs() -> None:
    assert liveness.step("late", "heard") == "active"
    with pytest.raises(ValueError, match="no transition"):
        liveness.step("gone", "heard")
    assert liveness.advance("inactive", T0, I, 3, 10, T0 + I) == "inactive"


@pytest.mark.parametrize(
    "bad", [{"heartbeat_interval": 0}, {"heartbeat_misses": 0}, {"grace": -1}, {"udp_port": 0}]
)
def test_config_rejects_bad_values(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="CatalogConfig"):
        CatalogConfig(**bad)


def test_admin_deregister_disconnects_the_node_and_forgets_it() -> None:
    from zbus.common.protocols import dbp as _dbp

    core = CatalogCore(CatalogConfig(heartbeat_interval=1.0), now=T0, wall=T0)
    core.tcp_message(b"N1", _dbp.Registration(info("svc"), T0), T0, wall=T0)
    core.take_outbox()
    core.take_changes()
    assert core.deregister("svc", wall=T0 + 1) is True
    (out,) = core.take_outbox()
    assert out.identity == b"N1" and isinstance(out.command, _dbp.Disconnect)
    (gone,) = core.take_changes()
    assert (gone.name, gone.state) == ("svc", "gone")
    assert core.nodes() == []
    assert core.deregister("svc", wall=T0 + 2) is False
