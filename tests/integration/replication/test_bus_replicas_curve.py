"""Three replicas under CURVE: the group shares one key pair, its replication port
admits only that key, and clients with an allowed key publish and are confirmed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import zmq

import zbus
from tests.support.replicas import replica_group
from tests.support.waiting import UNIT
from zbus.common.protocols import replication as rp
from zbus.common.security import generate_keys, load_keys, make_client

pytestmark = pytest.mark.timeout(300)


def test_the_replication_port_admits_only_the_groups_key(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    group_public, group_secret = generate_keys(keys, "eventbus")
    client_public, client_secret = generate_keys(keys, "client")
    for public in (group_public, client_public):  # both may use the bus's ports
        shutil.copy(public, allowed / public.name)
    settings = {
        "ZBUS_CURVE_SECRET_KEY": str(group_secret),
        "ZBUS_CURVE_ALLOWED_CLIENTS": str(allowed),
    }
    with replica_group(tmp_path / "group", **settings) as group:
        leader = group.leader(60, in_sync=3)
        server = load_keys(group_public).public
        curve = (load_keys(client_secret), server)
        with zbus.EventBusClient(group.endpoints(), producer="c", curve=curve) as client:
            seqs = client.publish_many([(f"/k/{i}", b"x") for i in range(50)], confirm=True)
            assert seqs is not None and len(seqs) == 50
        group.caught_up(60)
        # An allowed client's key still does not open the replication port.
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        make_client(sock, load_keys(client_secret), server)
        sock.connect(f"tcp://127.0.0.1:{leader.replication_port}")
        epoch = leader.state()["epoch"]  # type: ignore[index]
        other = next(n for n in group.NAMES if n != leader.name)
        sock.send_multipart(rp.encode(rp.Fetch("eventbus", other, epoch, 1, 0, 4096)))
        try:
            assert sock.poll(int(3000 * UNIT)) == 0, "the replication port answered a client key"
        finally:
            sock.close()
            ctx.term()
        states = [r.state() for r in group.replicas.values()]
        assert all(s is not None and s["log_end"] >= 50 for s in states)
