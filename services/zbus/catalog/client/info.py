"""Info requests: ask the catalog about one service, or for the list of active ones.

Seed 004, "DBP/Info Request": the client sends REQUEST (``u_U``) with "either a
specified services name or a list of currently active services available" and the
broker answers REPLY (``o_O``) with a JSON object. The spec gives the object no shape,
so the shape goes with the dialect, and the zbus catalog answers in the shape of the
request's dialect:

========  ==============================================  =============================
dialect   one service                                     the list
========  ==============================================  =============================
SPEC      ``{"service", "state", "info", ...}``; an       ``{"services": {name: {...}}}``
          inactive name: ``{"service", "state",
          "warning"}``
HERMES    ``{name: info less the name}``; an unknown      ``{name: info, ...}``
          name: ``{"Error": text}``
========  ==============================================  =============================

Either way the caller gets :class:`ServiceInfo` (None for a name that is not an active
service). A reply in neither shape raises :class:`CatalogReplyError`.

Each request goes on a DEALER of its own, like a Hermes client's REQ, so it neither
waits behind nor mixes with the node's session, and works before registration too.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import zmq
import zmq.asyncio

from zbus.catalog.client.base import CatalogReplyError, CatalogUnavailable, is_hermes
from zbus.common.clock import SYSTEM_CLOCK, Clock
from zbus.common.protocols.dbp import (
    Dialect,
    InfoReply,
    InfoRequest,
    JSONObject,
    decode,
    encode,
)
from zbus.common.protocols.errors import ProtocolError
from zbus.common.security import KeyPair, make_client

__all__ = ["InfoRequests", "ServiceInfo", "read_list", "read_one", "request_info"]

_LIVE = ("active", "late")


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    """One active service as the catalog describes it.

    Attributes:
        name: the name it registered with.
        info: what it registered (its REGISTRATION body with every UPDATE merged in,
            ``name`` included), as the catalog stores it.
        state: ``"active"`` or ``"late"`` from a zbus catalog; None from a catalog
            that does not say (Hermes).
    """

    name: str
    info: JSONObject
    state: str | None = None


def _bad(what: str, body: Any) -> CatalogReplyError:
    text = repr(body)
    return CatalogReplyError(f"info REPLY: expected {what}, got {text[:200]}")


def _spec_entry(name: str, view: Any) -> ServiceInfo:
    if not isinstance(view, dict) or not isinstance(view.get("info"), dict):
        raise _bad(f"an object with an 'info' object for {name!r}", view)
    state = view.get("state")
    if state not in _LIVE:
        raise _bad(f"state 'active' or 'late' for {name!r}", view)
    return ServiceInfo(name, view["info"], state)


def _hermes_entry(name: str, entry: Any) -> ServiceInfo:
    if not isinstance(entry, dict):
        raise _bad(f"an object for {name!r}", entry)
    return ServiceInfo(name, {"name": name, **entry})


def read_one(query: str, body: JSONObject, dialect: Dialect) -> ServiceInfo | None:
    """The reply to a request for ``query``, read in ``dialect``'s shape.

    Raises:
        CatalogReplyError: ``body`` is not in that shape.
    """
    if is_hermes(dialect):
        if "Error" in body:
            return None
        if query not in body:
            raise _bad(f"{{{query!r}: ...}} or {{'Error': ...}}", body)
        return _hermes_entry(query, body[query])
    if body.get("service") != query:
        raise _bad(f"the answer about {query!r}", body)
    if "warning" in body:
        return None
    return _spec_entry(query, body)


def read_list(body: JSONObject, dialect: Dialect) -> dict[str, ServiceInfo]:
    """The reply to a request for the list, read in ``dialect``'s shape.

    Raises:
        CatalogReplyError: ``body`` is not in that shape.
    """
    if is_hermes(dialect):
        return {name: _hermes_entry(name, entry) for name, entry in body.items()}
    services = body.get("services")
    if not isinstance(services, dict):
        raise _bad("{'services': {...}}", body)
    return {name: _spec_entry(name, view) for name, view in services.items()}


async def request_info(
    endpoint: str,
    query: str,
    *,
    dialect: Dialect,
    timeout: float,  # noqa: ASYNC109
    context: zmq.asyncio.Context | None = None,
    curve: tuple[KeyPair, bytes] | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> JSONObject:
    """Send one info REQUEST for ``query`` (``""``: the list) and return the REPLY's body
    (the REQUEST's time frame is ``clock``'s wall time).

    Raises:
        CatalogUnavailable: no REPLY within ``timeout`` seconds.
        CatalogReplyError: the catalog answered something that is not a REPLY.
    """
    ctx = context or zmq.asyncio.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    try:
        if curve is not None:
            make_client(sock, *curve)
        sock.connect(endpoint)
        async with asyncio.timeout(timeout):
            await sock.send_multipart(encode(InfoRequest(query, clock.time()), dialect))
            frames = await sock.recv_multipart()
    except TimeoutError:
        raise CatalogUnavailable(
            f"no answer to the info request within {timeout:g} s from {endpoint}"
        ) from None
    finally:
        sock.close(linger=0)
    try:
        reply = decode(frames, dialect)
    except ProtocolError as exc:
        # Hermes answers a command it does not know with an error text as the command.
        raise CatalogReplyError(f"info REPLY: {exc}") from None
    if not isinstance(reply, InfoReply):
        raise CatalogReplyError(f"info REPLY: expected o_O, got {type(reply).__name__}")
    return reply.info


class InfoRequests:
    """:meth:`service` and :meth:`services` for :class:`~zbus.catalog.client.node.CatalogNode`,
    which sets the attributes below."""

    endpoint: str
    dialect: Dialect
    reply_timeout: float
    curve: tuple[KeyPair, bytes] | None
    counters: dict[str, int]
    clock: Clock
    _ctx: zmq.asyncio.Context

    async def service(
        self,
        name: str,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> ServiceInfo | None:
        """Ask the catalog about the service ``name`` (an info REQUEST).

        Returns:
            What it registered, or None when it is not an active service.

        Raises:
            ValueError: ``name`` is empty, ``*`` or not printable (use :meth:`services`).
            CatalogUnavailable: no answer within ``timeout`` (default ``reply_timeout``).
            CatalogReplyError: an answer that is not a REPLY in the dialect's shape.
        """
        if name in ("", "*") or not name.isprintable():
            raise ValueError(f"a service name must be printable and not '' or '*': {name!r}")
        body = await self._ask(name, timeout)
        try:
            return read_one(name, body, self.dialect)
        except CatalogReplyError:
            self.counters["malformed"] += 1
            raise

    async def services(
        self,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, ServiceInfo]:
        """The catalog's list of active services, by name (an info REQUEST for all).

        Raises:
            CatalogUnavailable: no answer within ``timeout`` (default ``reply_timeout``).
            CatalogReplyError: an answer that is not a REPLY in the dialect's shape.
        """
        body = await self._ask("", timeout)
        try:
            return read_list(body, self.dialect)
        except CatalogReplyError:
            self.counters["malformed"] += 1
            raise

    async def _ask(self, query: str, timeout: float | None) -> JSONObject:  # noqa: ASYNC109
        self.counters["info_requests"] += 1
        try:
            return await request_info(
                self.endpoint,
                query,
                dialect=self.dialect,
                timeout=self.reply_timeout if timeout is None else timeout,
                context=self._ctx,
                curve=self.curve,
                clock=self.clock,
            )
        except CatalogReplyError:
            self.counters["malformed"] += 1
            raise
