"""1,000 PPPP subscribers on one channel, DEALER sockets in this process: each gets every
message, once and in order."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import zmq

from tests.support.bus import bus_thread
from tests.support.pppp import metrics
from tests.support.waiting import UNIT
from zbus.common.protocols import pppp
from zbus.common.protocols.pppp_event import EventPayload, SyncEnd, decode_payload
from zbus.eventbus.client import BusEndpoints, EventBusClient

SUBSCRIBERS = 1000
MESSAGES = 100
CHANNEL = "/many/"


def test_a_thousand_subscribers_on_one_channel_each_get_every_message(tmp_path: Path) -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    # A long idle time: this one thread answers a thousand subscribers, and must not be
    # taken for dead while it reads the others.
    with bus_thread(tmp_path, pppp_port=0, pppp_idle=10.0) as bus:
        socks = []
        try:
            poller = zmq.Poller()
            for i in range(SUBSCRIBERS):
                sock = ctx.socket(zmq.DEALER)
                sock.linger = 0
                sock.routing_id = f"sub-{i:04}".encode()
                sock.connect(bus.endpoints["pppp"])
                sock.send_multipart(pppp.encode(pppp.Subscribe(CHANNEL)))
                poller.register(sock, zmq.POLLIN)
                socks.append(sock)
            index = {sock: i for i, sock in enumerate(socks)}
            synced = [False] * SUBSCRIBERS
            got: list[list[tuple[int, str]]] = [[] for _ in range(SUBSCRIBERS)]
            published = False
            deadline = time.monotonic() + 120 * UNIT
            while sum(len(g) for g in got) < SUBSCRIBERS * MESSAGES:
                assert time.monotonic() < deadline, sum(len(g) for g in got)
                if all(synced) and not published:
                    with EventBusClient(BusEndpoints.from_info(bus.info()), producer="p") as c:
                        c.publish_many(
                            [(f"{CHANNEL}{n % 10}", n) for n in range(MESSAGES)], confirm=True
                        )
                    published = True
                for sock, _ in poller.poll(1000):
                    i = index[sock]
                    highest = -1
                    while True:
                        try:
                            frames = sock.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        cmd = pppp.decode_from_publisher(frames)
                        if not isinstance(cmd, pppp.Publish):
                            continue
                        payload = decode_payload(cmd)
                        if isinstance(payload, SyncEnd):
                            synced[i] = True
                            highest = max(highest, payload.head)
                        elif cmd.sequence == len(got[i]) + 1:  # a resend of one it has: dropped
                            assert isinstance(payload, EventPayload)
                            got[i].append((cmd.sequence, payload.topic))
                            highest = cmd.sequence
                    if highest >= 0:
                        sock.send_multipart(pppp.encode(pppp.AckNack(CHANNEL, highest)))
            want = [(n + 1, f"{CHANNEL}{n % 10}") for n in range(MESSAGES)]
            assert all(g == want for g in got)
            values = metrics(bus.admin_url or "")
            assert values["zbus_pppp_subscribers{state=live}"] == SUBSCRIBERS
            assert values["zbus_pppp_sent_total{kind=publish}"] == SUBSCRIBERS * MESSAGES
        finally:
            for sock in socks:
                sock.close(linger=0)
    ctx.term()
