"""A replicated service's settings (``ZBUS_REPLICA_NAME``, ``ZBUS_REPLICAS``, ...).

Mixed into a service's settings class. Replication is off unless ``replica_name`` is set;
then the group, etcd's endpoints and the replica's own name must agree, or the service
refuses to start with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field, model_validator

MAX_REPLICAS = 9


@dataclass(frozen=True, slots=True)
class Peer:
    """One replica of the group: its name and its replication endpoint."""

    name: str
    endpoint: str  # tcp://host:port


class ReplicationSettings(BaseModel):
    replica_name: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="this replica's name in its group (e.g. eventbus-1); unset: one replica, "
        "no replication",
    )
    replicas: str = Field(
        "",
        max_length=4096,
        description="the group: NAME=HOST:PORT of each replica's replication port, "
        "comma-separated, this replica included",
    )
    etcd_endpoints: str = Field(
        "", max_length=4096, description="etcd's client URLs, comma-separated"
    )
    replication_group: str = Field(
        "eventbus",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="the group's name: its keys in etcd are under /zbus/GROUP/",
    )
    min_insync: int = Field(
        2, ge=1, le=MAX_REPLICAS, description="replicas in sync for a write to be confirmed"
    )
    lease_ttl: int = Field(
        2, ge=2, le=60, description="seconds of the leader's etcd lease (etcd's least is 2)"
    )
    replica_max_lag: float = Field(
        2.0,
        gt=0,
        le=600,
        description="seconds a follower may go without catching up before it leaves the "
        "in-sync set",
    )
    replication_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="this replica's replication port (unset: its entry in ZBUS_REPLICAS)",
    )

    @model_validator(mode="after")
    def _check_group(self) -> ReplicationSettings:
        if self.replica_name is None:
            return self
        peers = self.peers()
        names = [p.name for p in peers]
        if self.replica_name not in names:
            raise ValueError(
                f"replica_name {self.replica_name!r} is not in replicas ({', '.join(names)})"
            )
        if self.min_insync > len(peers):
            raise ValueError(f"min_insync {self.min_insync} is more than the {len(peers)} replicas")
        if not self.etcd():
            raise ValueError("etcd_endpoints must name at least one etcd client URL")
        return self

    @property
    def replicated(self) -> bool:
        return self.replica_name is not None

    def peers(self) -> list[Peer]:
        """The group, parsed from ``replicas``.

        Raises:
            ValueError: an entry that is not NAME=HOST:PORT, a repeated name, or more
                than nine replicas.
        """
        out: list[Peer] = []
        for entry in filter(None, (e.strip() for e in self.replicas.split(","))):
            name, sep, address = entry.partition("=")
            host, colon, port = address.rpartition(":")
            if not (sep and colon and host and name.strip() and port.isdigit()):
                raise ValueError(f"replicas: {entry!r} is not NAME=HOST:PORT")
            if not 0 < int(port) <= 65535:
                raise ValueError(f"replicas: port {port} of {name!r} is not in 1..65535")
            out.append(Peer(name.strip(), f"tcp://{host}:{int(port)}"))
        names = [p.name for p in out]
        if len(set(names)) != len(names):
            raise ValueError("replicas: a name is given twice")
        if not 1 <= len(out) <= MAX_REPLICAS:
            raise ValueError(f"replicas: 1 to {MAX_REPLICAS} entries, got {len(out)}")
        return out

    def etcd(self) -> list[str]:
        return [e.strip() for e in self.etcd_endpoints.split(",") if e.strip()]

    def own_replication_port(self) -> int:
        if self.replication_port is not None:
            return self.replication_port
        me = next(p for p in self.peers() if p.name == self.replica_name)
        return int(me.endpoint.rsplit(":", 1)[1])
