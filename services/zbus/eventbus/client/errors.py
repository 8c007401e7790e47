"""The errors the event bus clients raise (re-exported by :mod:`zbus.eventbus.client`)."""

from __future__ import annotations

from zbus.errors import ZbusError

__all__ = ["DialectError", "PPPPError", "PublishError"]


class PublishError(ZbusError):
    """The bus refused a confirmed publish (``ZB-ERROR``): the reason is its text."""


class DialectError(ZbusError, ValueError):
    """What was asked needs zbus's extensions, which the client's ``compat`` dialect
    (the plain Event BUS protocol) does not have: a confirmed publish, say."""


class PPPPError(ZbusError):
    """The subscription cannot go on (a SYNC larger than its bound, say)."""
