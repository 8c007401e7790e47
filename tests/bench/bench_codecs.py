"""Codec cost: encode + decode of each protocol's hot command vs the same frames inline.

The baseline builds the frame list by hand from the field values and splits it back
into the field values (with the same conversions: 8-byte integers, UTF-8 text, float
time), with no validation and no command object. The codec's extra cost is its checks
and the frozen command object. Target: at most 1.5x the baseline.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tests.bench.harness import Result, interleaved, report
from zbus.common.protocols import dbp, emqp, eventbus

N = 50_000
TARGET = 1.5

TOPIC, PRODUCER = "/demo/sensors/temperature", "producer-1"
TS, UUID = "2026-11-22T08:35:32.862Z", "3f2b6f3e-8a0b-4c8e-9b6e-3c2f1d0a9b8c"
DATA = os.urandom(100)


def _eventbus_broadcast() -> tuple[Callable[[int], None], Callable[[int], None]]:
    cmd = eventbus.Broadcast(TOPIC, 123456789, PRODUCER, TS, UUID, DATA)

    def codec(n: int) -> None:
        enc, dec = eventbus.encode, eventbus.decode_publisher
        for _ in range(n):
            dec(enc(cmd))

    def inline(n: int) -> None:
        for _ in range(n):
            frames = [
                TOPIC.encode(),
                (123456789).to_bytes(8, "big"),
                PRODUCER.encode(),
                TS.encode(),
                UUID.encode(),
                DATA,
            ]
            t, s, p, ts, u, d = frames
            (t.decode(), int.from_bytes(s, "big"), p.decode(), ts.decode(), u.decode(), d)

    return codec, inline


def _eventbus_pub() -> tuple[Callable[[int], None], Callable[[int], None]]:
    cmd = eventbus.Pub(TOPIC, None, PRODUCER, TS, UUID, DATA)

    def codec(n: int) -> None:
        enc, dec = eventbus.encode, eventbus.decode_collector
        for _ in range(n):
            dec(enc(cmd))

    def inline(n: int) -> None:
        for _ in range(n):
            frames = [TOPIC.encode(), bytes(8), PRODUCER.encode(), TS.encode(), UUID.encode(), DATA]
            t, s, p, ts, u, d = frames
            (t.decode(), int.from_bytes(s, "big"), p.decode(), ts.decode(), u.decode(), d)

    return codec, inline


_HEADERS = "reply-requested,retry-count:1,timeout:10"
_BODY = b'["run", {"callable": "noop", "path": "jobs", "args": [], "kwargs": {}}]'


def _emqp_request() -> tuple[Callable[[int], None], Callable[[int], None]]:
    cmd = emqp.Request(UUID, "default", emqp.parse_headers(_HEADERS), _BODY)

    def codec(n: int) -> None:
        enc, dec = emqp.encode, emqp.decode
        for _ in range(n):
            dec(enc(cmd))

    def inline(n: int) -> None:
        for _ in range(n):
            frames = [
                b"",
                b"eMQP/1.0",
                b"REQUEST",
                UUID.encode(),
                b"default",
                _HEADERS.encode(),
                _BODY,
            ]
            _, _, c, m, q, h, b = frames
            (c.decode(), m.decode(), q.decode(), h.decode(), b)

    return codec, inline


def _emqp_reply() -> tuple[Callable[[int], None], Callable[[int], None]]:
    cmd = emqp.Reply(UUID, b'{"value": null}', UUID)

    def codec(n: int) -> None:
        enc, dec = emqp.encode, emqp.decode
        for _ in range(n):
            dec(enc(cmd))

    def inline(n: int) -> None:
        for _ in range(n):
            frames = [b"", b"eMQP/1.0", b"REPLY", UUID.encode(), b'{"value": null}', UUID.encode()]
            _, _, c, m, b, r = frames
            (c.decode(), m.decode(), b, r.decode())

    return codec, inline


def _dbp_heartbeat() -> tuple[Callable[[int], None], Callable[[int], None]]:
    now = 1763800000.25
    cmd = dbp.Heartbeat(service="eventbus", time=now)

    def codec(n: int) -> None:
        enc, dec = dbp.encode, dbp.decode
        for _ in range(n):
            dec(enc(cmd))

    def inline(n: int) -> None:
        for _ in range(n):
            frames = [b"", b"<3", repr(now).encode(), b"eventbus"]
            _, c, t, s = frames
            (c, float(t), s.decode())

    return codec, inline


CASES = {
    "eventbus BROADCAST": _eventbus_broadcast,
    "eventbus PUB": _eventbus_pub,
    "emqp REQUEST": _emqp_request,
    "emqp REPLY": _emqp_reply,
    "dbp HEARTBEAT": _dbp_heartbeat,
}


def main() -> bool:
    results = []
    for name, make in CASES.items():
        codec, inline = make()
        rate, base = interleaved(codec, inline, N)
        results.append(Result(name, rate, base, TARGET))
    return report(results, "codecs: encode+decode vs inline frames (cost x = time / inline time)")


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
