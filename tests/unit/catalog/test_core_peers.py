"""The catalog core with the peers it serves: Hermes (UPDATE on a new socket, its info
replies) and a node written from the DBP spec text (its field names, the ranges of its
numbers). No sockets, no sleeping: commands and time values in, what it sends out."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from tests.unit.catalog.test_core import HERMES_INFO, T0, A, B, C, core, info, register
from zbus.catalog.core.catalog import CatalogConfig, CatalogCore, Outgoing
from zbus.common.protocols.dbp import (
    HERMES,
    Approved,
    Awk,
    Denied,
    Disconnect,
    InfoReply,
    InfoRequest,
    Registration,
    TimeEncoding,
    Update,
    decode,
    encode,
)

F32 = TimeEncoding.FLOAT32
KEY_A = b"\x0a" * 32
KEY_B = b"\x0b" * 32


def hermes(c: CatalogCore, cmd: Any, identity: bytes, now: float = T0, **kw: Any) -> Outgoing:
    """``cmd`` as Hermes writes it (float32 time, its JSON), decoded as the wiring does."""
    c.tcp_message(identity, decode(encode(cmd, HERMES)), now, wall=now, **kw)
    [out] = c.take_outbox()
    return out


def hermes_register(c: CatalogCore, identity: bytes = A, **kw: Any) -> None:
    out = hermes(c, Registration(HERMES_INFO, T0, F32), identity, **kw)
    assert isinstance(out.command, Approved)
    c.take_changes()


# ---------------------------------------------------------------- Hermes: UPDATE


def test_hermes_update_on_a_new_socket_is_accepted_by_name() -> None:
    c = core()
    hermes_register(c, A)
    # A Hermes service closes its socket after APPROVED and sends UPDATE on a new one.
    out = hermes(c, Update({"name": "Rohan", "topics": ["weather"]}, T0 + 1, F32), B, T0 + 1)
    assert out.identity == B and isinstance(out.command, Awk)
    assert encode(out.command, out.dialect)[1] == b"u.u"
    [rec] = c.take_changes()
    assert rec.info["topics"] == ["weather"] and rec.last_heartbeat == T0 + 1
    assert c.counters["updates"] == 1 and c.counters["unexpected_commands"] == 0


def test_an_update_by_name_is_only_for_nodes_registered_in_hermes_dialect() -> None:
    c = core()
    register(c, A)  # zbus's own dialect: UPDATE belongs on its connection
    c.take_changes()
    c.tcp_message(B, Update({"name": "resizer", "port": 7000}, T0 + 1), T0 + 1, wall=T0 + 1)
    assert c.take_outbox() == [Outgoing(B, Disconnect(T0 + 1, TimeEncoding.ASCII))]
    assert c.take_changes() == [] and c.nodes()[0].info["port"] == 5555
    # A name nobody registered: DISCONNECT, as before.
    out = hermes(c, Update({"name": "Gondor", "topics": []}, T0 + 2, F32), C, T0 + 2)
    assert isinstance(out.command, Disconnect)
    assert c.counters["unexpected_commands"] == 2


def test_under_curve_an_update_by_name_must_come_from_the_nodes_key() -> None:
    c = core(allowed_keys=frozenset({KEY_A, KEY_B}))
    hermes_register(c, A, peer_key=KEY_A)
    out = hermes(c, Update({"name": "Rohan", "topics": ["x"]}, T0, F32), B, peer_key=KEY_B)
    assert isinstance(out.command, Denied) and encode(out.command, out.dialect)[1] == b"OmO"
    assert "key" in out.command.reasons[0] and "Rohan" in out.command.reasons[0]
    assert c.take_changes() == [] and c.counters["updates_denied_policy"] == 1
    out = hermes(c, Update({"name": "Rohan", "topics": ["x"]}, T0, F32), C, peer_key=KEY_A)
    assert isinstance(out.command, Awk)
    assert c.take_changes()[0].info["topics"] == ["x"]


# ---------------------------------------------------------------- Hermes: info replies


def hermes_ask(c: CatalogCore, query: str) -> dict[str, Any]:
    out = hermes(c, InfoRequest(query, T0, F32), C)
    assert isinstance(out.command, InfoReply) and out.dialect == HERMES
    # What a Hermes client reads: json.loads of frame 3, after float32 frame 2.
    wire = encode(out.command, out.dialect)
    assert len(wire[2]) == 4
    body: dict[str, Any] = json.loads(wire[3])
    return body


def test_a_hermes_client_gets_replies_in_its_shape() -> None:
    c = core()
    hermes_register(c, A)
    register(c, B, body=info("thumbs"))
    expected = {k: v for k, v in HERMES_INFO.items() if k != "name"}
    assert hermes_ask(c, "Rohan") == {"Rohan": expected}
    listed = hermes_ask(c, "")
    assert sorted(listed) == ["Rohan", "thumbs"] and listed["Rohan"] == expected
    # A node of zbus's dialect, as a Hermes client reads a service: its router address.
    thumbs = hermes_ask(c, "thumbs")["thumbs"]
    assert thumbs["interfaces"] == {"router": {"ip": "10.0.0.7", "port": 5555}}
    assert thumbs["function"] == "resize images" and "reg_time" in thumbs
    unknown = hermes_ask(c, "Gondor")
    assert list(unknown) == ["Error"] and "Gondor" in unknown["Error"]
    # Inactive: an error too (the spec's "inactive warning").
    c.tick(T0 + 3 * 3.0, wall=T0 + 3 * 3.0)
    c.take_outbox()
    assert list(hermes_ask(c, "thumbs")) == ["Error"]
    assert "thumbs" not in hermes_ask(c, "*")


def test_a_zbus_client_still_gets_zbus_replies() -> None:
    c = core()
    hermes_register(c, A)
    c.tcp_message(C, InfoRequest("Rohan", T0), T0, wall=T0)
    [out] = c.take_outbox()
    assert isinstance(out.command, InfoReply)
    assert out.command.info["service"] == "Rohan" and out.command.info["state"] == "active"


# ---------------------------------------------------------------- a node from the spec text


SPEC_READER = {
    "name": "ingest",
    "address": "10.0.0.5",
    "port": "7000",
    "function": "ingest",
    "heartbeat": 2,
}


def test_a_body_written_from_the_spec_text_is_approved_and_stored_canonically() -> None:
    c = core()
    out = register(c, body=SPEC_READER)
    assert isinstance(out.command, Approved), out.command
    [rec] = c.take_changes()
    assert rec.info == {
        "name": "ingest",
        "ip": "10.0.0.5",
        "port": 7000,
        "function": "ingest",
        "heartbeat_interval": 2.0,
    }


@pytest.mark.parametrize(
    "body",
    [
        {**info(), "heartbeat_interval": None, "heartbeat": 1.5},
        {**info(), "ip": None, "ip_address": "10.0.0.5"},
        {**info(), "heartbeat_interval": "1.5"},
        {**info(), "heartbeat": 1.5, "heartbeat_interval": 1.5},  # both, agreeing
    ],
)
def test_the_names_a_spec_reader_uses_are_accepted(body: dict[str, Any]) -> None:
    c = core()
    assert isinstance(register(c, body={k: v for k, v in body.items() if v is not None}).command,
                      Approved)  # fmt: skip
    [rec] = c.take_changes()
    assert set(rec.info) == {"name", "ip", "port", "function", "heartbeat_interval"}
    assert type(rec.info["port"]) is int and type(rec.info["heartbeat_interval"]) is float


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"port": 0}, "port"),
        ({"port": 65536}, "port"),
        ({"port": "80a"}, "port"),
        ({"port": 2**63}, "port"),
        ({"port": True}, "port"),
        ({"heartbeat": 0}, "heartbeat_interval"),
        ({"heartbeat_interval": 3601}, "heartbeat_interval"),
        ({"heartbeat_interval": 1e308}, "heartbeat_interval"),
        ({"heartbeat_interval": 0.001}, "heartbeat_interval"),
        ({"heartbeat": 2, "heartbeat_interval": 3}, "heartbeat_interval"),
        ({"ip": ""}, "ip"),
        ({"ip": "10.0.0.5", "address": "10.0.0.6"}, "ip"),
        ({"function": 7}, "function"),
        ({"name": "x" * 256}, "name"),
        ({"blob": "x" * 70_000}, "size"),
    ],
)
def test_numbers_and_fields_out_of_range_are_denied_naming_the_field(
    changes: dict[str, Any], field: str
) -> None:
    c = core()
    out = register(c, body={**info(), **changes})
    assert isinstance(out.command, Denied), out.command
    assert any(field in reason for reason in out.command.reasons), out.command.reasons
    assert c.take_changes() == [] and c.nodes() == []
    assert c.counters["registrations_denied_malformed"] == 1


@pytest.mark.parametrize(
    ("interfaces", "ok"),
    [
        ({"router": {"ip": "10.0.0.7", "port": 5247}}, True),
        ({"router": {"ip": "10.0.0.7", "port": 70000}}, False),
        ({"router": {"ip": "10.0.0.7", "port": -1}}, False),
        ({"router": "tcp://x"}, False),
    ],
)
def test_hermes_interface_ports_have_the_same_range(interfaces: dict[str, Any], ok: bool) -> None:
    c = core()
    out = register(c, body={**HERMES_INFO, "interfaces": interfaces})
    assert isinstance(out.command, Approved if ok else Denied), out.command
    if not ok:
        assert isinstance(out.command, Denied)
        assert "interfaces" in out.command.reasons[0]


@pytest.mark.parametrize(
    "changes",
    [{"port": 70000}, {"heartbeat": -1}, {"port": None}, {"blob": "x" * 70_000}],
)
def test_an_update_out_of_range_is_denied_and_never_stored(changes: dict[str, Any]) -> None:
    c = core()
    register(c, A)
    c.take_changes()
    c.tcp_message(A, Update({"name": "resizer", **changes}, T0 + 1), T0 + 1, wall=T0 + 1)
    [out] = c.take_outbox()
    assert isinstance(out.command, Denied), out.command
    assert c.take_changes() == [] and c.nodes()[0].info == info()
    assert c.counters["updates_denied"] == 1


def test_an_update_in_a_spec_readers_words_is_stored_canonically() -> None:
    c = core()
    register(c, A)
    c.take_changes()
    c.tcp_message(A, Update({"heartbeat": "1.5", "port": "7001"}, T0 + 1), T0 + 1, wall=T0 + 1)
    assert isinstance(c.take_outbox()[0].command, Awk)
    [rec] = c.take_changes()
    assert rec.info == info(port=7001, heartbeat_interval=1.5)


# ---------------------------------------------------------------- configuration ranges


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("heartbeat_interval", "0.001"),
        ("heartbeat_interval", "1e9"),
        ("heartbeat_interval", "nan"),
        ("heartbeat_misses", "0"),
        ("heartbeat_misses", "1000"),
        ("grace", "-1"),
        ("grace", "1e12"),
        ("log_window", "10000000"),
        ("udp_port", "70000"),
    ],
)
def test_catalog_settings_out_of_range_are_refused_naming_the_setting(
    setting: str, value: str, tmp_path: Any
) -> None:
    from zbus.catalog.server.config import CatalogSettings
    from zbus.common.settings import ConfigError

    flag = "--" + setting.replace("_", "-")
    with pytest.raises(ConfigError, match=setting):
        CatalogSettings.load([flag, value, "--data-dir", str(tmp_path)])


@pytest.mark.parametrize(
    "bad",
    [
        {"heartbeat_interval": 1e9},
        {"heartbeat_interval": math.nan},
        {"heartbeat_misses": 10**9},
        {"grace": 1e12},
        {"udp_port": 70000},
    ],
)
def test_catalog_config_out_of_range_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        CatalogConfig(**bad)
