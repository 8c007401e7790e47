"""The errors the event bus clients raise (re-exported by :mod:`zbus.eventbus.client`)."""

from __future__ import annotations

from zbus.errors import ZbusError

__all__ = ["DialectError", "PPPPError", "PublishError", "ReplicaUnavailable"]


class PublishError(ZbusError):
    """The bus refused a confirmed publish (``ZB-ERROR``): the reason is its text."""


class ReplicaUnavailable(PublishError):
    """The bus is a replica that cannot take the events now (not the leader, or its
    in-sync replicas did not confirm them): a confirmed publish sends them again, with
    the same uuids, to the next endpoint until its failover time is up."""


class DialectError(ZbusError, ValueError):
    """What was asked needs zbus's extensions, which the client's ``compat`` dialect
    (the plain Event BUS protocol) does not have: a confirmed publish, say."""


class PPPPError(ZbusError):
    """The subscription cannot go on (a SYNC larger than its bound, say)."""
