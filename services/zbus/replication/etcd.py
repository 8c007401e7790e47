"""A replica group's coordination in etcd: the leader's lease, its epoch, the in-sync set.

zbus runs no consensus of its own. etcd holds two keys per group:

- ``{prefix}/{group}/leader``: ``{"name": ..., "address": ...}``, bound to the leader's
  lease, so that it goes when the leader stops renewing. Its create revision is the
  leader's *epoch*, the fencing token: a key made again (by an election) always has a
  larger one, and a transaction that names the epoch cannot succeed for a deposed leader.
- ``{prefix}/{group}/isr``: ``{"members": [...], "epoch": n}``, the in-sync replicas
  (ISR), written only by the leader of ``epoch`` (0: the group's bootstrap). Only a
  member may be elected, and only if the set has not changed since it read it: a replica
  that fell behind cannot lead with a log that misses confirmed writes (Kafka's rule,
  "Replication" in its design notes).

Every change is one etcd transaction whose comparisons carry these rules, so that two
replicas racing cannot both win; the client checks nothing that etcd could contradict
between a read and a write.

The client speaks etcd's JSON gateway (``/v3/...``, etcd 3.4 and later) through
:mod:`zbus.replication.etcd_gateway`, rather than the ``etcd3gw`` package. That package
works against etcd 3.4 (with ``api_path="/v3/"``), but it brings nine more packages
into a server's install (requests and its four, futurist, debtcollector, wrapt, pbr:
about 7 MB) and about 100 ms of import, talks to one host and raises exceptions of its
own, while the transactions, the values' checks and the list of endpoints are ours to
write in any case. What is left is seven POSTs of small JSON documents, and the runtime
loads :mod:`http.client` already.

Values read from etcd are not trusted: a stored value that does not parse raises
:class:`CoordinationError`, as does a call that fails (no endpoint answered, etcd
refused the request, an answer that does not parse).

A transaction whose answer is lost may have been applied; retrying any call here is
safe. A campaign that finds the leader key bound to this replica's own lease knows that
an earlier try of its own made it, and returns that leadership rather than None.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Self

from zbus.errors import ConfigError
from zbus.replication.etcd_gateway import DEFAULT_PORT as DEFAULT_PORT  # re-exported
from zbus.replication.etcd_gateway import (
    NOT_FOUND,
    Answer,
    CoordinationError,
    Gateway,
    b64,
    compare,
    dumps,
    loads,
)

__all__ = ["CoordinationError", "Coordinator", "InSync", "LeaderInfo"]


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """Who leads a group, as its leader key says.

    Attributes:
        name: the replica's name, e.g. ``"eventbus-1"``.
        address: where its endpoints are: free text (JSON, say) chosen by the replica.
        epoch: the leader key's create revision: the fencing token of this leadership.
    """

    name: str
    address: str
    epoch: int


@dataclass(frozen=True, slots=True)
class InSync:
    """A group's in-sync replica set, as its ISR key says.

    Attributes:
        members: the replicas' names, sorted.
        epoch: the epoch of the leader that wrote it (0: written by the bootstrap).
        revision: the key's mod revision; 0 when there is no key (a new group).
    """

    members: tuple[str, ...]
    epoch: int
    revision: int


class Coordinator:
    """One replica's view of its group in etcd: its lease, elections, the in-sync set.

    Safe to use from two threads (say, a thread that renews the lease and the
    replica's loop): each call has a connection of its own.

    Args:
        endpoints: etcd's client URLs, ``http://host:port`` (or ``host:port``), tried
            in turn.
        group: the replica group, e.g. ``"eventbus"``: one key prefix in etcd.
        name: this replica's name in the group, unique in it.
        lease_ttl: seconds the lease lives unrenewed (etcd may round a small one up: 3.4
            grants at least 2 s). Renew it every third of that with :meth:`keepalive`.
        timeout: seconds each endpoint gets to answer one call.
        prefix: where zbus's keys are in etcd.

    Raises:
        ConfigError: an endpoint that is not ``http://host:port``, no endpoint, an empty
            group or name, a group with ``/`` in it, or a TTL or timeout that is not
            positive.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        group: str,
        name: str,
        *,
        lease_ttl: int = 4,
        timeout: float = 1.0,
        prefix: str = "/zbus",
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        if not endpoints:
            raise ConfigError("no etcd endpoint")
        if not group or "/" in group:
            raise ConfigError(f"a replica group's name must be a non-empty word, got {group!r}")
        if not name:
            raise ConfigError("a replica's name must not be empty")
        if lease_ttl < 1 or not timeout > 0:
            raise ConfigError(f"need lease_ttl >= 1 and timeout > 0, got {lease_ttl}, {timeout}")
        self._gateway = Gateway(endpoints, timeout, f"the coordinator of {group}/{name}")
        self.group = group
        self.name = name
        self.lease_ttl = lease_ttl
        self.timeout = timeout
        base = f"{prefix.rstrip('/')}/{group}"
        self._leader_key = b64(f"{base}/leader".encode())
        self._isr_key = b64(f"{base}/isr".encode())
        self._lock = threading.Lock()
        self._lease: int | None = None

    @property
    def lease(self) -> int | None:
        """This replica's lease, or None: never granted, expired, revoked or closed."""
        return self._lease

    def grant(self) -> int:
        """Take a new lease of ``lease_ttl`` seconds for this replica; its id.

        A lease held before is left to expire.

        Raises:
            CoordinationError: etcd could not grant it.
        """
        answer = self._gateway.call("/v3/lease/grant", {"TTL": self.lease_ttl, "ID": 0})
        lease = answer.number(answer.body.get("ID"), "a lease id")
        ttl = answer.number(answer.body.get("TTL"), "a lease TTL")
        if lease <= 0 or ttl <= 0:
            raise answer.error(f"lease {lease} of TTL {ttl}")
        with self._lock:
            self._lease = lease
        return lease

    def keepalive(self) -> bool:
        """Renew this replica's lease for ``lease_ttl`` seconds.

        Returns:
            True when renewed; False when there is no lease to renew: it has expired or
            was revoked (a leader has then lost its key and must stop leading), or none
            was granted. After False, :meth:`campaign` takes a new lease.

        Raises:
            CoordinationError: etcd could not be asked (the lease may still run: a leader
                must count its time from its last renewal).
        """
        lease = self._lease
        if lease is None:
            return False
        try:
            answer = self._gateway.call("/v3/lease/keepalive", {"ID": str(lease)})
        except CoordinationError as exc:
            if exc.code != NOT_FOUND:
                raise
            self._forget(lease)
            return False
        result = answer.body.get("result")
        if not isinstance(result, dict):
            raise answer.error("no result")
        # etcd leaves the TTL out (0) for a lease it no longer has.
        if answer.number(result.get("TTL", 0), "a lease TTL") <= 0:
            self._forget(lease)
            return False
        return True

    def campaign(self, address: str, insync: InSync) -> LeaderInfo | None:
        """Become the group's leader, if no replica leads and the ISR allows it.

        One transaction puts the leader key, bound to this replica's lease (granted now
        if it has none), on three conditions: no leader key exists; the ISR key is
        unchanged since ``insync`` was read (same mod revision; 0: still absent); and
        this replica is in ``insync`` -- or the ISR is absent, and then the same
        transaction creates it with this replica alone, epoch 0: a new group's
        bootstrap.

        Args:
            address: where this replica's endpoints are, for the followers and clients.
            insync: the ISR as :meth:`in_sync` read it.

        Returns:
            This leadership, its epoch the leader key's create revision; None when
            another replica leads, the ISR changed, or this replica is not in it.

        Raises:
            CoordinationError: etcd could not be asked, or the lease had expired (it is
                then forgotten, and the next campaign takes a new one).
        """
        bootstrap = insync.revision == 0
        if not bootstrap and self.name not in insync.members:
            return None
        lease = self._lease
        if lease is None:
            lease = self.grant()
        leader_value = dumps({"name": self.name, "address": address})
        success: list[dict[str, Any]] = [
            {"request_put": {"key": self._leader_key, "value": leader_value, "lease": str(lease)}}
        ]
        if bootstrap:
            isr_value = dumps({"members": [self.name], "epoch": 0})
            success.append({"request_put": {"key": self._isr_key, "value": isr_value}})
        try:
            answer = self._gateway.txn(
                [
                    compare(self._leader_key, "CREATE", 0),
                    compare(self._isr_key, "MOD", insync.revision),
                ],
                success,
                [{"request_range": {"key": self._leader_key}}],
            )
        except CoordinationError as exc:
            if exc.code == NOT_FOUND:  # the lease expired: the next campaign takes another
                self._forget(lease)
            raise
        if answer.succeeded():
            # The transaction's revision is the one at which it made the key.
            return LeaderInfo(self.name, address, answer.revision())
        held = answer.range_in_txn()
        if held is None or held.lease != lease:
            return None
        # The key is bound to this replica's lease, which no other replica holds: an
        # earlier try of this campaign made it, though its answer was lost.
        name, held_address = _leader_value(answer, held.value)
        return LeaderInfo(name, held_address, held.create_revision) if name == self.name else None

    def leader(self) -> LeaderInfo | None:
        """The group's leader, or None when no replica leads.

        Raises:
            CoordinationError: etcd could not be asked, or the key's value is malformed.
        """
        answer = self._gateway.call("/v3/kv/range", {"key": self._leader_key})
        kv = answer.only_kv(answer.body)
        if kv is None:
            return None
        name, address = _leader_value(answer, kv.value)
        return LeaderInfo(name, address, kv.create_revision)

    def in_sync(self) -> InSync:
        """The group's ISR; no members, epoch and revision 0 when the group is new.

        Raises:
            CoordinationError: etcd could not be asked, or the key's value is malformed.
        """
        answer = self._gateway.call("/v3/kv/range", {"key": self._isr_key})
        kv = answer.only_kv(answer.body)
        if kv is None:
            return InSync((), 0, 0)
        members, epoch = _isr_value(answer, kv.value)
        return InSync(members, epoch, kv.mod_revision)

    def set_in_sync(self, members: Iterable[str], epoch: int) -> InSync | None:
        """Store a new ISR, as the leader of ``epoch``.

        One transaction writes it only if the leader key is still the one made at
        ``epoch`` and bound to this replica's lease (which only this replica holds, so
        the key holds its name).

        Args:
            members: the in-sync replicas' names; this replica, the leader, among them.
            epoch: this replica's epoch, as :meth:`campaign` returned it.

        Returns:
            The stored ISR; None when this replica no longer leads at ``epoch``.

        Raises:
            ValueError: an empty name in ``members``, or this replica not among them.
            CoordinationError: etcd could not be asked.
        """
        names = tuple(sorted(set(members)))
        if not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"an ISR member's name must be a non-empty string: {names!r}")
        if self.name not in names:
            raise ValueError(f"the leader {self.name!r} must be in its ISR {names!r}")
        lease = self._lease
        if lease is None or epoch <= 0:
            return None
        value = dumps({"members": list(names), "epoch": epoch})
        answer = self._gateway.txn(
            [
                compare(self._leader_key, "CREATE", epoch),
                compare(self._leader_key, "LEASE", lease),
            ],
            [{"request_put": {"key": self._isr_key, "value": value}}],
            [],
        )
        return InSync(names, epoch, answer.revision()) if answer.succeeded() else None

    def resign(self, epoch: int) -> None:
        """Stop leading: delete the leader key if it is still this replica's key of
        ``epoch``, then revoke the lease (a follower's too: it has no key to delete).

        Raises:
            CoordinationError: etcd could not be asked; the lease is then kept, to retry.
        """
        lease = self._lease
        if lease is None:
            return
        if epoch > 0:
            self._gateway.txn(
                [
                    compare(self._leader_key, "CREATE", epoch),
                    compare(self._leader_key, "LEASE", lease),
                ],
                [{"request_delete_range": {"key": self._leader_key}}],
                [],
            )
        try:
            self._gateway.call("/v3/lease/revoke", {"ID": str(lease)})
        except CoordinationError as exc:
            if exc.code != NOT_FOUND:  # already gone: expired, or a lost answer's retry
                raise
        self._forget(lease)

    def close(self) -> None:
        """Forget the lease (no call to etcd: a leader resigns first; a lease left behind
        expires within ``lease_ttl``); any later call that needs etcd raises
        :class:`CoordinationError`."""
        with self._lock:
            self._gateway.close()
            self._lease = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _forget(self, lease: int) -> None:
        with self._lock:
            if self._lease == lease:  # not one granted meanwhile by another thread
                self._lease = None


# -- the values ---------------------------------------------------------------------------


def _stored(answer: Answer, raw: bytes, key: str) -> dict[str, Any]:
    document = loads(raw)
    if not isinstance(document, dict):
        raise answer.error(f"a {key} key whose value is not a JSON object: {raw[:80]!r}")
    return document


def _leader_value(answer: Answer, raw: bytes) -> tuple[str, str]:
    """The name and address of a leader key's value."""
    document = _stored(answer, raw, "leader")
    name, address = document.get("name"), document.get("address")
    if not isinstance(name, str) or not name or not isinstance(address, str):
        raise answer.error(f"a leader key without a name and an address: {raw[:80]!r}")
    return name, address


def _isr_value(answer: Answer, raw: bytes) -> tuple[tuple[str, ...], int]:
    """The members (sorted) and epoch of an ISR key's value."""
    document = _stored(answer, raw, "ISR")
    members, epoch = document.get("members"), document.get("epoch")
    if (
        not isinstance(members, list)
        or not all(isinstance(m, str) and m for m in members)
        or not isinstance(epoch, int)
        or isinstance(epoch, bool)
        or epoch < 0
    ):
        raise answer.error(f"an ISR key without members and an epoch: {raw[:80]!r}")
    return tuple(sorted(set(members))), epoch
