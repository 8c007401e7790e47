"""The replica groups' coordination (``zbus.replication.etcd``) against a real etcd:
elections, fencing epochs, the in-sync set, leases that end, etcd down, and values in
its keys that are not what zbus writes.

Needs the Debian package ``etcd-server``; `.ci/run` installs it.
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.etcd import EtcdServer, etcd_server
from tests.support.ports import HeldPorts
from tests.support.waiting import UNIT, wait_until
from zbus.errors import ConfigError
from zbus.replication.etcd import CoordinationError, Coordinator, InSync, LeaderInfo

GROUP = "eventbus"
LEADER_KEY = f"/zbus/{GROUP}/leader"

Replica = Callable[..., Coordinator]


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    with etcd_server(tmp_path / "etcd") as server:
        yield server


@pytest.fixture
def replica(etcd: EtcdServer) -> Iterator[Replica]:
    """Makes ``eventbus-N`` replicas of one group on ``etcd``; closes them at the end."""
    made: list[Coordinator] = []

    def make(name: str, **options: Any) -> Coordinator:
        options.setdefault("timeout", 2 * UNIT)
        coordinator = Coordinator([etcd.endpoint], GROUP, name, **options)
        made.append(coordinator)
        return coordinator

    yield make
    for coordinator in made:
        coordinator.close()


def _gateway(endpoint: str, path: str, request: dict[str, Any]) -> dict[str, Any]:
    """A call to etcd's JSON gateway made by the test itself, as another client would."""
    with urllib.request.urlopen(
        f"{endpoint}{path}", json.dumps(request).encode(), timeout=5 * UNIT
    ) as answer:
        body: dict[str, Any] = json.load(answer)
    return body


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _put(endpoint: str, key: str, value: bytes) -> None:
    _gateway(endpoint, "/v3/kv/put", {"key": _b64(key.encode()), "value": _b64(value)})


def _create_revision(endpoint: str, key: str) -> int:
    kvs = _gateway(endpoint, "/v3/kv/range", {"key": _b64(key.encode())})["kvs"]
    return int(kvs[0]["create_revision"])


def _revoke(endpoint: str, lease: int) -> None:
    _gateway(endpoint, "/v3/lease/revoke", {"ID": str(lease)})


def _lease(replica: Coordinator) -> int:
    lease = replica.lease
    assert lease is not None, f"{replica.name} holds no lease"
    return lease


def _elect(replica: Coordinator, address: str = "") -> LeaderInfo:
    leadership = replica.campaign(address or f'{{"host": "{replica.name}"}}', replica.in_sync())
    assert leadership is not None, f"{replica.name} was not elected"
    return leadership


def test_the_bootstrap_campaign_creates_the_isr(replica: Replica) -> None:
    first = replica("eventbus-1")
    assert first.in_sync() == InSync((), 0, 0)
    assert first.leader() is None

    leadership = first.campaign('{"replication": "tcp://10.0.0.1:5560"}', first.in_sync())

    assert leadership is not None
    assert leadership == LeaderInfo(
        "eventbus-1", '{"replication": "tcp://10.0.0.1:5560"}', leadership.epoch
    )
    assert first.leader() == leadership
    # One transaction made both keys: the ISR's revision is the epoch.
    assert first.in_sync() == InSync(("eventbus-1",), 0, leadership.epoch)
    assert first.keepalive()


def test_a_second_replica_cannot_campaign_while_the_first_leads(replica: Replica) -> None:
    first, second = replica("eventbus-1"), replica("eventbus-2")
    empty = second.in_sync()  # both race to bootstrap the group; the first wins
    leadership = _elect(first)
    assert second.campaign("b", empty) is None
    # In the ISR now, and having read it afresh: the leader key still stops it.
    isr = first.set_in_sync(["eventbus-2", "eventbus-1"], leadership.epoch)
    assert isr is not None
    assert isr == InSync(("eventbus-1", "eventbus-2"), leadership.epoch, isr.revision)
    assert second.campaign("b", second.in_sync()) is None
    assert second.leader() == leadership


def test_the_epoch_is_the_create_revision_and_grows_across_elections(
    etcd: EtcdServer, replica: Replica
) -> None:
    first, second = replica("eventbus-1"), replica("eventbus-2")
    one = _elect(first)
    assert one.epoch == _create_revision(etcd.endpoint, LEADER_KEY)
    assert first.set_in_sync(["eventbus-1", "eventbus-2"], one.epoch) is not None
    first.resign(one.epoch)
    assert first.leader() is None
    assert first.lease is None

    two = _elect(second)
    assert two.epoch == _create_revision(etcd.endpoint, LEADER_KEY) > one.epoch
    assert second.leader() == two
    assert second.set_in_sync(["eventbus-2", "eventbus-1"], two.epoch) is not None
    second.resign(two.epoch)

    three = _elect(first)  # a new lease for it: resigning revoked the old one
    assert three.epoch > two.epoch
    assert second.in_sync().epoch == two.epoch  # written by the leader of that epoch


def test_a_leader_whose_lease_is_revoked_loses_its_key(etcd: EtcdServer, replica: Replica) -> None:
    first, second = replica("eventbus-1"), replica("eventbus-2")
    leadership = _elect(first)
    assert first.set_in_sync(["eventbus-1", "eventbus-2"], leadership.epoch) is not None
    _revoke(etcd.endpoint, _lease(first))  # what etcd does when the lease runs out

    assert not first.keepalive()
    assert first.lease is None
    assert second.leader() is None
    assert first.set_in_sync(["eventbus-1"], leadership.epoch) is None
    assert _elect(second).epoch > leadership.epoch


def test_a_lease_left_unrenewed_expires(replica: Replica) -> None:
    first = replica("eventbus-1", lease_ttl=1)  # etcd 3.4 makes it 2 s
    second = replica("eventbus-2")
    _elect(first)
    wait_until(lambda: second.leader() is None, 10, what="the leader key to expire")
    assert not first.keepalive()


def test_keepalive_renews_the_lease(etcd: EtcdServer, replica: Replica) -> None:
    first = replica("eventbus-1", lease_ttl=4)
    leadership = _elect(first)

    def ttl_left() -> int:
        answer = _gateway(etcd.endpoint, "/v3/kv/lease/timetolive", {"ID": str(first.lease)})
        return int(answer["TTL"])  # whole seconds left

    wait_until(lambda: ttl_left() <= 2, 10, what="the lease to run 1 s down")
    assert first.keepalive()
    assert ttl_left() >= 3
    assert first.leader() == leadership


def test_set_in_sync_with_a_stale_epoch_returns_none(etcd: EtcdServer, replica: Replica) -> None:
    first, second = replica("eventbus-1"), replica("eventbus-2")
    old = _elect(first)
    assert first.set_in_sync(["eventbus-1", "eventbus-2"], old.epoch) is not None
    _revoke(etcd.endpoint, _lease(first))
    assert not first.keepalive()
    new = _elect(first)  # elected again, on a new lease: a new epoch
    assert new.epoch > old.epoch

    assert first.set_in_sync(["eventbus-1"], old.epoch) is None
    assert first.set_in_sync(["eventbus-1"], 0) is None
    # Another replica cannot write it on the leader's epoch: the key is not its own.
    second.grant()
    assert second.set_in_sync(["eventbus-2"], new.epoch) is None
    assert first.in_sync().members == ("eventbus-1", "eventbus-2")
    assert first.in_sync().epoch == old.epoch

    isr = first.set_in_sync(["eventbus-1"], new.epoch)
    assert isr is not None
    assert first.in_sync() == isr == InSync(("eventbus-1",), new.epoch, isr.revision)
    with pytest.raises(ValueError, match="must be in its ISR"):
        first.set_in_sync(["eventbus-2"], new.epoch)


def test_a_replica_not_in_the_isr_cannot_campaign(replica: Replica) -> None:
    first, second = replica("eventbus-1"), replica("eventbus-2")
    one = _elect(first)  # the bootstrap: the ISR is eventbus-1 alone
    first.resign(one.epoch)
    assert second.campaign("b", second.in_sync()) is None
    assert second.leader() is None

    two = _elect(first)
    assert first.set_in_sync(["eventbus-1", "eventbus-2"], two.epoch) is not None
    stale = second.in_sync()  # names eventbus-2 ...
    assert first.set_in_sync(["eventbus-1"], two.epoch) is not None  # ... which fell behind
    first.resign(two.epoch)
    assert second.campaign("b", stale) is None
    assert second.campaign("b", second.in_sync()) is None
    assert second.leader() is None
    assert _elect(first).epoch > two.epoch


def test_a_campaign_retried_after_a_lost_answer_returns_its_leadership(
    replica: Replica,
) -> None:
    first = replica("eventbus-1")
    isr = first.in_sync()
    leadership = first.campaign("a", isr)
    assert leadership is not None
    # The same request again, as after a timeout that hid the answer.
    assert first.campaign("a", isr) == leadership


def test_etcd_down_every_call_raises_within_the_timeout(etcd: EtcdServer, replica: Replica) -> None:
    first = replica("eventbus-1", timeout=0.5 * UNIT)
    leadership = _elect(first)
    calls: dict[str, Callable[[], object]] = {
        "grant": first.grant,
        "keepalive": first.keepalive,
        "campaign": lambda: first.campaign("a", InSync(("eventbus-1",), 0, 1)),
        "leader": first.leader,
        "in_sync": first.in_sync,
        "set_in_sync": lambda: first.set_in_sync(["eventbus-1"], leadership.epoch),
        "resign": lambda: first.resign(leadership.epoch),
    }

    def all_fail(how: str) -> None:
        for name, call in calls.items():
            started = time.monotonic()
            with pytest.raises(CoordinationError, match=etcd.endpoint) as raised:
                call()
            took = time.monotonic() - started
            assert took < first.timeout + 0.5 * UNIT, f"{how}: {name} took {took:.2f} s"
            assert raised.value.endpoint is None, f"{how}: {name}: {raised.value}"

    etcd.kill()  # connections refused
    all_fail("killed")
    etcd.start()  # on the same data: the key and its lease are still there
    assert first.leader() == leadership
    assert first.keepalive()

    etcd.pause()  # connections accepted, nothing answered: each call times out
    try:
        all_fail("paused")
    finally:
        etcd.resume()
    # A call that timed out may still be applied once etcd reads it: the resignation too.
    assert first.leader() in (leadership, None)
    first.resign(leadership.epoch)
    assert first.leader() is None
    assert first.lease is None


# Values zbus never writes, by the key they are found in; each case has a group of its own
# on one etcd for them all.
MALFORMED = {
    "leader": [
        b"not json",
        b"",
        b"\xff\xfe",
        b"[1, 2]",
        b"[" * 100_000,  # nested too deep for the parser
        b'{"name": 5, "address": "a"}',
        b'{"name": "eventbus-1"}',
        b'{"name": "", "address": "a"}',
    ],
    "isr": [
        b"null",
        b'{"members": "eventbus-1", "epoch": 0}',
        b'{"members": [1], "epoch": 0}',
        b'{"members": [""], "epoch": 0}',
        b'{"members": ["eventbus-1"]}',
        b'{"members": ["eventbus-1"], "epoch": "3"}',
        b'{"members": ["eventbus-1"], "epoch": true}',
        b'{"members": ["eventbus-1"], "epoch": -1}',
        b'{"members": ["eventbus-1"], "epoch": 1e400}',
        b'{"members": ["eventbus-1"], "epoch": 1' + b"0" * 5000 + b"}",  # too many digits
    ],
}


@pytest.fixture(scope="module")
def shared_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    with etcd_server(tmp_path_factory.mktemp("etcd")) as server:
        yield server


@pytest.mark.parametrize(
    ("key", "index"),
    [(key, index) for key, values in MALFORMED.items() for index in range(len(values))],
)
def test_malformed_values_raise_coordination_error(
    shared_etcd: EtcdServer, key: str, index: int
) -> None:
    group = f"malformed-{key}-{index}"
    _put(shared_etcd.endpoint, f"/zbus/{group}/{key}", MALFORMED[key][index])
    with Coordinator([shared_etcd.endpoint], group, "eventbus-1") as coordinator:
        read = coordinator.leader if key == "leader" else coordinator.in_sync
        with pytest.raises(CoordinationError, match=f"{key.replace('isr', 'ISR')} key"):
            read()


def test_endpoints_are_tried_in_turn(etcd: EtcdServer, refused_ports: HeldPorts) -> None:
    dead = [f"http://127.0.0.1:{port}" for port in refused_ports.ports[:2]]
    with _not_etcd() as other:
        replica = Coordinator([dead[0], other, etcd.endpoint], GROUP, "eventbus-1")
        assert replica.in_sync() == InSync((), 0, 0)
        assert _elect(replica).name == "eventbus-1"
        with pytest.raises(CoordinationError, match="not a JSON object"):
            Coordinator([other], GROUP, "eventbus-1").leader()
    with pytest.raises(CoordinationError) as raised:
        Coordinator(dead, GROUP, "eventbus-1").leader()
    assert all(f"{endpoint}: connection refused" in str(raised.value) for endpoint in dead)
    replica.close()
    with pytest.raises(CoordinationError, match="closed"):
        replica.leader()


def test_a_refusal_by_etcd_is_final(etcd: EtcdServer, replica: Replica) -> None:
    first = replica("eventbus-1")
    _revoke(etcd.endpoint, first.grant())
    # The put of a campaign names a lease etcd no longer has: etcd refuses it.
    with pytest.raises(CoordinationError, match="lease not found") as raised:
        first.campaign("a", first.in_sync())
    assert raised.value.endpoint == etcd.endpoint
    assert raised.value.code == 5
    assert first.lease is None  # forgotten: the next campaign takes a new one
    assert _elect(first).name == "eventbus-1"


@pytest.mark.parametrize(
    "endpoint", ["", "https://127.0.0.1:2379", "http://127.0.0.1:99999", "http://h:1/v3"]
)
def test_endpoints_must_be_http_host_port(endpoint: str) -> None:
    with pytest.raises(ConfigError):
        Coordinator([endpoint], GROUP, "eventbus-1")


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError):
        Coordinator([], GROUP, "eventbus-1")
    with pytest.raises(ConfigError):
        Coordinator(["127.0.0.1:2379"], "event/bus", "eventbus-1")
    with pytest.raises(ConfigError):
        Coordinator(["127.0.0.1:2379"], GROUP, "")
    with pytest.raises(ConfigError):
        Coordinator(["127.0.0.1:2379"], GROUP, "eventbus-1", timeout=0)


class _NotEtcd(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, format: str, *args: Any) -> None:  # quiet: no line per request
        pass


@contextmanager
def _not_etcd() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that answers every POST with text, not JSON; its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotEtcd)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
