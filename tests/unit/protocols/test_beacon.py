"""Catalog beacons: the zbus binary beacon and Hermes's ``SHALOM <port>``."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_EXAMPLES
from zbus.common.protocols.beacon import (
    MAGIC,
    Beacon,
    HermesBeacon,
    decode_beacon,
    encode_beacon,
)
from zbus.common.protocols.dbp import HERMES, SPEC, Dialect
from zbus.common.protocols.errors import FrameValueError, ProtocolError, UnknownCommandError

INSTANCE = bytes(range(16))

hosts = st.text(max_size=80).filter(lambda h: len(h.encode("utf-8")) <= 255)
beacons = st.builds(
    Beacon,
    instance=st.binary(min_size=16, max_size=16),
    port=st.integers(min_value=0, max_value=0xFFFF),
    host=hosts,
    version=st.integers(min_value=1, max_value=0xFF),
)
hermes_beacons = st.builds(HermesBeacon, st.integers(min_value=1, max_value=0xFFFF))


@given(beacons)
def test_zbus_beacon_round_trips(beacon: Beacon) -> None:
    data = encode_beacon(beacon)
    assert data[:5] == MAGIC + bytes([beacon.version])
    assert decode_beacon(data, SPEC) == beacon


@given(hermes_beacons)
def test_hermes_beacon_round_trips(beacon: HermesBeacon) -> None:
    data = encode_beacon(beacon)
    assert decode_beacon(data, HERMES) == beacon


# --------------------------------------------------------------------------- golden bytes


def test_golden_zbus_beacon() -> None:
    beacon = Beacon(INSTANCE, 5246, "catalog.local")
    data = (
        b"ZBUS"
        + b"\x01"
        + INSTANCE
        + b"\x14\x7e"  # 5246
        + b"\x0d"
        + b"catalog.local"
    )
    assert encode_beacon(beacon) == data
    assert decode_beacon(data) == beacon


def test_golden_zbus_beacon_without_host_and_departure() -> None:
    instance = uuid.UUID("6f1c0f4e-8a43-4a57-9a0e-3c2b1d0e5f77").bytes
    data = b"ZBUS\x01" + instance + b"\x00\x00\x00"
    assert encode_beacon(Beacon(instance, 0)) == data
    assert decode_beacon(data) == Beacon(instance, 0, "", 1)


def test_golden_shalom() -> None:
    assert encode_beacon(HermesBeacon(5246)) == b"SHALOM 5246"
    assert decode_beacon(b"SHALOM 5246", HERMES) == HermesBeacon(5246)


def test_later_versions_may_append_fields() -> None:
    data = b"ZBUS\x02" + INSTANCE + b"\x14\x7e\x04host" + b"\x01\x02future"
    assert decode_beacon(data) == Beacon(INSTANCE, 5246, "host", 2)
    assert encode_beacon(Beacon(INSTANCE, 5246, "host", 2)) == data[: -len(b"\x01\x02future")]


def test_the_dialect_picks_the_format() -> None:
    with pytest.raises(UnknownCommandError, match=r"^beacon ZBUS: expected a zbus beacon"):
        decode_beacon(b"SHALOM 5246", SPEC)
    zbus = encode_beacon(Beacon(INSTANCE, 5246))
    with pytest.raises(UnknownCommandError, match=r"^beacon SHALOM: expected a Hermes beacon"):
        decode_beacon(zbus, HERMES)


# --------------------------------------------------------------------------- garbage in


@pytest.mark.parametrize("dialect", [SPEC, HERMES], ids=["zbus", "shalom"])
@settings(max_examples=FUZZ_EXAMPLES // 2)
@given(data=st.binary(max_size=300))
def test_garbage_beacons(dialect: Dialect, data: bytes) -> None:
    try:
        beacon = decode_beacon(data, dialect)
    except ProtocolError:
        return
    assert decode_beacon(encode_beacon(beacon), dialect) == beacon


@settings(max_examples=FUZZ_EXAMPLES // 2)
@given(
    st.sampled_from([b"ZBUS", b"ZBUS\x01", b"ZBUS\x00", b"ZBUS\x02", b"SHALOM ", b"SHALOM 5"]),
    st.binary(max_size=64),
)
def test_garbage_after_a_valid_prefix(prefix: bytes, tail: bytes) -> None:
    for dialect in (SPEC, HERMES):
        try:
            beacon = decode_beacon(prefix + tail, dialect)
        except ProtocolError:
            continue
        assert decode_beacon(encode_beacon(beacon), dialect) == beacon


HEADER = b"ZBUS\x01" + INSTANCE + b"\x14\x7e"


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (HEADER, r"^beacon ZBUS: expected at least 24 bytes"),
        (b"ZBUS\x00" + INSTANCE + b"\x14\x7e\x00", r"^beacon ZBUS: expected a version of 1"),
        (HEADER + b"\x05host", r"^beacon ZBUS: expected 5 bytes of host"),
        (HEADER + b"\x04host!", r"^beacon ZBUS: expected a version 1 beacon to end after"),
        (HEADER + b"\x02\xc3(", r"^beacon ZBUS: expected the host as UTF-8"),
    ],
)
def test_malformed_zbus_beacons(data: bytes, match: str) -> None:
    with pytest.raises(FrameValueError, match=match):
        decode_beacon(data)


@pytest.mark.parametrize(
    "data",
    [
        b"SHALOM ",
        b"SHALOM abc",
        b"SHALOM 70000",
        b"SHALOM 0",
        b"SHALOM 05246",
        b"SHALOM +5246",
        b"SHALOM 5246 ",
        b"SHALOM  5246",
        b"SHALOM 123456",
    ],
)
def test_malformed_shalom(data: bytes) -> None:
    with pytest.raises(FrameValueError, match=r"^beacon SHALOM: expected a port"):
        decode_beacon(data, HERMES)


def test_shalom_needs_its_word() -> None:
    for data in (b"", b"SHALOM", b"shalom 5246", b"GONDOR_CALLS_FOR_AID"):
        with pytest.raises(UnknownCommandError, match=r"^beacon SHALOM: expected a Hermes"):
            decode_beacon(data, HERMES)


@pytest.mark.parametrize(
    ("beacon", "match"),
    [
        (Beacon(b"short", 1), r"^beacon ZBUS: expected a 16-byte instance UUID"),
        (Beacon(INSTANCE, 65536), r"^beacon ZBUS: expected a port in 0\.\.65535"),
        (Beacon(INSTANCE, -1), r"^beacon ZBUS: expected a port in 0\.\.65535"),
        (Beacon(INSTANCE, 1, version=0), r"^beacon ZBUS: expected a version in 1\.\.255"),
        (Beacon(INSTANCE, 1, version=256), r"^beacon ZBUS: expected a version in 1\.\.255"),
        (Beacon(INSTANCE, 1, "h" * 256), r"^beacon ZBUS: expected a host of at most 255"),
        (Beacon(INSTANCE, 1, "\ud800"), r"^beacon ZBUS: expected a host encodable as UTF-8"),
        (HermesBeacon(0), r"^beacon SHALOM: expected a port in 1\.\.65535"),
        (HermesBeacon(65536), r"^beacon SHALOM: expected a port in 1\.\.65535"),
    ],
)
def test_encode_rejects_what_the_format_cannot_carry(
    beacon: Beacon | HermesBeacon, match: str
) -> None:
    with pytest.raises(FrameValueError, match=match):
        encode_beacon(beacon)
