"""What every ``zbus`` command shares: its errors, its options, and where the cluster is.

Endpoints come, in this order, from a flag, a ``ZBUS_*`` variable, or the catalog: the
command asks the catalog's ``/api/v1/services`` where every service is, so ``--catalog``
(or ``ZBUS_CATALOG_URL``) is the only address a user needs. A service is found by the
``function`` it registered with (``eventbus``, ``broker``, ``sparkworker``); among
several, an active one first, then by name.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from zbus.common.urls import UNSPECIFIED_HOSTS, host_of, split_url, with_host

__all__ = [
    "DEFAULT_CATALOG",
    "CliError",
    "Cluster",
    "add_broker_options",
    "add_bus_options",
    "add_catalog_option",
    "add_json_option",
    "add_token_option",
]

DEFAULT_CATALOG = "http://127.0.0.1:8701"
DEFAULT_TIMEOUT = 5.0  # seconds an admin API has to answer
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # an admin API's answer the command reads, at most


class CliError(Exception):
    """A command failed: ``zbus: <message>`` on stderr and exit status ``code``.

    Codes: 1 a failure (a service refused, could not be reached, or answered an error),
    2 bad usage, 3 no result in time (``jobs submit``, ``jobs watch``).
    """

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- options


def _env_help(text: str, env: str, default: str | None = None) -> str:
    tail = f"; default {default}" if default else "; default: ask the catalog"
    return f"{text} (env {env}{tail})"


def add_catalog_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--catalog",
        metavar="URL",
        default=None,
        help=_env_help("the catalog's admin URL", "ZBUS_CATALOG_URL", DEFAULT_CATALOG),
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"seconds each request may take (default {DEFAULT_TIMEOUT:g})",
    )


def add_json_option(parser: argparse.ArgumentParser, streaming: bool = False) -> None:
    what = "one JSON object per line" if streaming else "one JSON document"
    parser.add_argument("--json", action="store_true", help=f"machine output: {what}")


def add_token_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token",
        default=None,
        help="the admin bearer token for actions (env ZBUS_ADMIN_TOKEN)",
    )


# The options that say where a service is, by flag: metavar, what it names, its variable.
_LOCATED_OPTIONS = {
    "--bus": ("ENDPOINT", "the event bus's base endpoint", "ZBUS_EVENTBUS_ENDPOINT"),
    "--bus-admin": ("URL", "the event bus's admin URL", "ZBUS_EVENTBUS_ADMIN_URL"),
    "--broker": ("ENDPOINT", "the broker's client port", "ZBUS_BROKER_CLIENT_ENDPOINT"),
    "--broker-admin": ("URL", "the broker's admin URL", "ZBUS_BROKER_ADMIN_URL"),
}


def _add_located_options(parser: argparse.ArgumentParser, *flags: str | None) -> None:
    """The ``flags`` (None: left out), then the catalog options that find the service when
    neither a flag nor its variable is given."""
    for flag in flags:
        if flag is not None:
            metavar, what, env = _LOCATED_OPTIONS[flag]
            parser.add_argument(flag, metavar=metavar, default=None, help=_env_help(what, env))
    add_catalog_option(parser)


def add_bus_options(parser: argparse.ArgumentParser, zmq: bool = True, admin: bool = True) -> None:
    """Where the event bus is: ``--bus`` (``zmq``), ``--bus-admin`` (``admin``), and the
    catalog options (:func:`add_catalog_option`)."""
    _add_located_options(parser, "--bus" if zmq else None, "--bus-admin" if admin else None)


def add_broker_options(
    parser: argparse.ArgumentParser, zmq: bool = False, admin: bool = True
) -> None:
    """Where the broker is: ``--broker`` (``zmq``), ``--broker-admin`` (``admin``), and the
    catalog options (:func:`add_catalog_option`)."""
    _add_located_options(parser, "--broker" if zmq else None, "--broker-admin" if admin else None)


# --------------------------------------------------------------------------- the cluster


@dataclass(frozen=True, slots=True)
class Located:
    """A registered service as the catalog lists it."""

    name: str
    function: str
    state: str
    admin: str | None
    endpoints: Mapping[str, str]


def reachable(url: str, host: str | None) -> str:
    """``url`` with an unspecified host (``0.0.0.0`` in containers) replaced by ``host``."""
    parts = split_url(url)
    if parts is None:
        return url
    if parts.hostname not in UNSPECIFIED_HOSTS or not host:
        return url.rstrip("/")
    return with_host(parts, host)


def located(record: Mapping[str, Any]) -> Located:
    """A ``/api/v1/services`` entry, its URLs made reachable from here."""
    info = record.get("info")
    info = info if isinstance(info, dict) else {}
    heard = record.get("udp_address")
    host = host_of(heard) if isinstance(heard, str) else None
    ip = info.get("ip")
    host = host or (ip if isinstance(ip, str) else None)
    if host in UNSPECIFIED_HOSTS:
        host = None
    raw = info.get("endpoints")
    endpoints = {
        str(k): reachable(v, host)
        for k, v in (raw if isinstance(raw, dict) else {}).items()
        if isinstance(v, str)
    }
    admin = info.get("admin")
    name = str(record.get("name", "?"))
    return Located(
        name=name,
        function=str(info.get("function") or name),
        state=str(record.get("state", "?")),
        admin=reachable(admin, host) if isinstance(admin, str) else None,
        endpoints=endpoints,
    )


class Cluster:
    """Where the services are and an HTTP client for their admin APIs; one per command.

    Args:
        args: the command's parsed options (``catalog``, ``timeout``, ``token``, ``bus``,
            ``bus_admin``, ``broker``, ``broker_admin``; those a command lacks are None).
        env: the environment (``os.environ`` by default).
    """

    def __init__(self, args: argparse.Namespace, env: Mapping[str, str] | None = None) -> None:
        self.args = args
        self.env = os.environ if env is None else env
        self.catalog = (
            getattr(args, "catalog", None)
            or getattr(args, "top_catalog", None)
            or self.env.get("ZBUS_CATALOG_URL")
            or DEFAULT_CATALOG
        ).rstrip("/")
        timeout = getattr(args, "timeout", None)
        self.timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        if not 0 < self.timeout <= 3600:
            raise CliError("--timeout must be between 0 and 3600 seconds", 2)
        self.token = getattr(args, "token", None) or self.env.get("ZBUS_ADMIN_TOKEN") or None
        self._services: list[Located] | None = None
        self._http: httpx.Client | None = None

    def close(self) -> None:
        if self._http is not None:
            self._http.close()

    # ----------------------------------------------------------------- discovery

    def services(self) -> list[Located]:
        """Every service the catalog lists (asked once per command)."""
        if self._services is None:
            _, entries = self.get_list(
                f"{self.catalog}/api/v1/services",
                "the catalog",
                "services",
                f"the catalog at {self.catalog} answered no service list",
            )
            self._services = [located(e) for e in entries if isinstance(e, dict)]
        return self._services

    def _pick(self, function: str) -> Iterator[Located]:
        found = [s for s in self.services() if s.function == function]
        found.sort(key=lambda s: (s.state != "active", s.name))
        return iter(found)

    def _resolve(self, flag: str, env: str, function: str, key: str, what: str) -> str:
        given = getattr(self.args, flag, None) or self.env.get(env)
        if given:
            return str(given).rstrip("/")
        for service in self._pick(function):
            value = service.admin if key == "admin" else service.endpoints.get(key)
            if value:
                return value
        raise CliError(
            f"the catalog at {self.catalog} lists no {what}; "
            f"give --{flag.replace('_', '-')} or {env}"
        )

    def bus_endpoint(self) -> str:
        return self._resolve(
            "bus", "ZBUS_EVENTBUS_ENDPOINT", "eventbus", "snapshot", "event bus endpoint"
        )

    def bus_admin(self) -> str:
        return self._resolve(
            "bus_admin", "ZBUS_EVENTBUS_ADMIN_URL", "eventbus", "admin", "event bus admin URL"
        )

    def broker_endpoint(self) -> str:
        return self._resolve(
            "broker", "ZBUS_BROKER_CLIENT_ENDPOINT", "broker", "clients", "broker endpoint"
        )

    def broker_admin(self) -> str:
        return self._resolve(
            "broker_admin", "ZBUS_BROKER_ADMIN_URL", "broker", "admin", "broker admin URL"
        )

    def sparkworkers(self) -> list[str]:
        """The admin URLs of the sparkworkers the catalog lists (``ZBUS_SPARKWORKER_ADMIN_URL``:
        comma-separated, instead)."""
        given = self.env.get("ZBUS_SPARKWORKER_ADMIN_URL")
        if given:
            return [u.strip().rstrip("/") for u in given.split(",") if u.strip()]
        return [s.admin for s in self._pick("sparkworker") if s.admin]

    # ----------------------------------------------------------------- HTTP

    def _client(self) -> httpx.Client:
        if self._http is None:
            # No proxies from the environment: admin APIs are cluster-internal.
            self._http = httpx.Client(
                timeout=httpx.Timeout(self.timeout),
                trust_env=False,
                follow_redirects=False,
                headers={"Accept": "application/json", "User-Agent": "zbus-cli"},
            )
        return self._http

    def get(
        self,
        url: str,
        what: str,
        params: Mapping[str, Any] | None = None,
        ok: tuple[int, ...] = (200,),
    ) -> Any:
        """GET ``url`` and its JSON body; ``ok`` lists the statuses that are not errors."""
        return self.request("GET", url, what, params=params, ok=ok)[1]

    def get_list(
        self, url: str, what: str, key: str, missing: str, params: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], list[Any]]:
        """GET ``url``: its JSON object and the list that object holds under ``key``.

        Raises:
            CliError: as :meth:`get`; ``missing`` when the answer holds no such list.
        """
        body = self.get(url, what, params)
        items = body.get(key) if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise CliError(missing)
        return body, items

    def post(self, url: str, what: str, body: Any = None) -> Any:
        """POST ``url`` (with the admin token when there is one) and its JSON body."""
        return self.request("POST", url, what, body=body, ok=(200, 201))[1]

    def request(
        self,
        method: str,
        url: str,
        what: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        ok: tuple[int, ...] = (200,),
    ) -> tuple[int, Any]:
        """One request to an admin API: its status and JSON body.

        Raises:
            CliError: it could not be reached, took too long, or answered an error
                status (with the API's ``detail``) or something that is not JSON.
        """
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            with self._client().stream(
                method, url, params=query, json=body, headers=headers
            ) as response:
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > MAX_ANSWER_BYTES:
                        raise CliError(f"{what} at {url} answered more than 64 MiB")
                status = response.status_code
        except httpx.TimeoutException:
            raise CliError(f"{what} at {url} did not answer within {self.timeout:g} s") from None
        except httpx.ConnectError as exc:
            raise CliError(f"cannot reach {what} at {url}: {_reason(exc)}") from None
        except httpx.InvalidURL as exc:
            raise CliError(f"bad URL for {what}: {url!r} ({exc})", 2) from None
        except httpx.UnsupportedProtocol:
            raise CliError(
                f"bad URL for {what}: {url!r} (http:// or https:// expected)", 2
            ) from None
        except httpx.HTTPError as exc:
            raise CliError(f"{what} at {url}: {_reason(exc)}") from None
        try:
            parsed = _json(bytes(data))
        except ValueError:
            raise CliError(f"{what} at {url} answered HTTP {status}, not JSON") from None
        if status not in ok:
            raise CliError(status_error(what, status, parsed))
        return status, parsed


def _json(data: bytes) -> Any:
    import json

    return json.loads(data) if data else None


def _reason(exc: BaseException) -> str:
    text = str(exc)
    if "Connection refused" in text or "Errno 111" in text:
        return "connection refused"
    return text or type(exc).__name__


def status_error(what: str, status: int, body: Any) -> str:
    detail: Any = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):  # a validation error: where and why
        parts = []
        for item in detail:
            if isinstance(item, dict):
                where = ".".join(str(p) for p in item.get("loc", ()) if p not in ("query", "body"))
                parts.append(f"{where}: {item.get('msg', '')}" if where else str(item.get("msg")))
        detail = "; ".join(parts)
    if status == 401:
        return f"{what} refused: a valid admin token is required (give --token or ZBUS_ADMIN_TOKEN)"
    reason = f": {detail}" if detail else ""
    return f"{what} answered HTTP {status}{reason}"
