"""etcd's v3 JSON gateway: the transport of :mod:`zbus.replication.etcd`.

The gateway (``/v3/...``, etcd 3.4 and later) takes a JSON document by POST and answers
one; keys and values are in base64, and 64-bit numbers are strings. :class:`Gateway`
makes those calls over :mod:`http.client`.

Each call opens a connection of its own and closes it: a few calls a second at most,
and no kept-alive connection can turn stale when etcd restarts. Every call is bounded
by ``timeout`` on each endpoint (connecting, then the answer), and tries the endpoints
in turn, starting with the last that answered. Whatever goes wrong (no endpoint
answered, etcd refused the request, an answer that does not parse) raises
:class:`CoordinationError`.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from zbus.errors import ConfigError, ZbusError

__all__ = [
    "DEFAULT_PORT",
    "NOT_FOUND",
    "Answer",
    "CoordinationError",
    "Gateway",
    "KeyValue",
    "b64",
    "compare",
    "dumps",
    "loads",
]

#: etcd's client port, when an endpoint names none.
DEFAULT_PORT = 2379

#: gRPC's NOT_FOUND, which etcd answers for a lease that has expired or was revoked.
NOT_FOUND = 5

# The largest answer read: a range of one key, or a transaction over two (etcd's own
# request limit is 1.5 MiB).
_MAX_ANSWER = 4 << 20


class CoordinationError(ZbusError):
    """etcd could not be asked, refused the request, or answered what cannot be used.

    Attributes:
        endpoint: the endpoint that answered so; None when none answered (the message
            then says what failed at each).
        code: etcd's (gRPC) status code when it refused the request, else None.
    """

    def __init__(self, message: str, endpoint: str | None = None, code: int | None = None) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.code = code


@dataclass(frozen=True, slots=True)
class _Endpoint:
    url: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class KeyValue:
    """A key etcd answered: its value (decoded from base64) and its revisions."""

    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True, slots=True)
class Answer:
    """A JSON object etcd answered, with where it came from for error messages."""

    endpoint: str
    path: str
    body: dict[str, Any]

    def error(self, what: str) -> CoordinationError:
        return CoordinationError(
            f"etcd at {self.endpoint} answered {self.path} with {what}", self.endpoint
        )

    def number(self, value: object, what: str) -> int:
        """An etcd number: the gateway writes 64-bit ones as strings, others as numbers."""
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.isascii() and value.lstrip("-").isdigit():
            return int(value)
        raise self.error(f"{value!r} for {what}")

    def succeeded(self) -> bool:
        """Whether a transaction's comparisons held."""
        outcome = self.body.get("succeeded", False)  # false is left out
        if not isinstance(outcome, bool):
            raise self.error(f"{outcome!r} for a transaction's outcome")
        return outcome

    def revision(self) -> int:
        """The store's revision in the answer's header."""
        header = self.body.get("header")
        if not isinstance(header, dict):
            raise self.error("no header")
        number = self.number(header.get("revision"), "a revision")
        if number <= 0:
            raise self.error(f"revision {number}")
        return number

    def only_kv(self, result: object) -> KeyValue | None:
        """The key a range of one key found, or None."""
        if not isinstance(result, dict):
            raise self.error("a range result that is not an object")
        kvs = result.get("kvs", [])
        if not isinstance(kvs, list) or len(kvs) > 1:
            raise self.error("a range of one key that is not a list of at most one")
        if not kvs:
            return None
        kv = kvs[0]
        if not isinstance(kv, dict):
            raise self.error("a key-value that is not an object")
        value = kv.get("value", "")  # an empty value is left out
        if not isinstance(value, str):
            raise self.error("a value that is not base64 text")
        try:
            data = base64.b64decode(value, validate=True)
        except binascii.Error:
            raise self.error("a value that is not base64") from None
        return KeyValue(
            data,
            self.number(kv.get("create_revision"), "a create revision"),
            self.number(kv.get("mod_revision"), "a mod revision"),
            self.number(kv.get("lease", 0), "a lease"),
        )

    def range_in_txn(self) -> KeyValue | None:
        """The key read by a failed transaction's one range."""
        responses = self.body.get("responses")
        if not isinstance(responses, list) or len(responses) != 1:
            raise self.error("not the one range asked for")
        response = responses[0]
        if not isinstance(response, dict):
            raise self.error("a transaction's response that is not an object")
        return self.only_kv(response.get("response_range"))


class Gateway:
    """etcd's JSON gateway at one or more endpoints, tried in turn.

    Safe to use from two threads: each call has a connection of its own.

    Args:
        endpoints: etcd's client URLs, ``http://host:port`` (or ``host:port``).
        timeout: seconds each endpoint gets to answer one call.
        owner: what holds the gateway, for the error of a call after :meth:`close`.

    Raises:
        ConfigError: no endpoint, or one that is not ``http://host:port``.
    """

    def __init__(
        self, endpoints: Sequence[str], timeout: float, owner: str = "the etcd gateway"
    ) -> None:
        if not endpoints:
            raise ConfigError("no etcd endpoint")
        self._endpoints = [_parse_endpoint(text) for text in endpoints]
        self.timeout = timeout
        self.owner = owner
        self._preferred = 0  # the endpoint that answered last
        self._closed = False

    def close(self) -> None:
        """Make every later call raise :class:`CoordinationError`."""
        self._closed = True

    def txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]],
    ) -> Answer:
        """One transaction: ``success``'s requests if every comparison holds, else
        ``failure``'s."""
        return self.call("/v3/kv/txn", {"compare": compare, "success": success, "failure": failure})

    def call(self, path: str, request: dict[str, Any]) -> Answer:
        """POST ``request`` to ``path`` at each endpoint in turn until one answers.

        An endpoint that cannot be reached, does not answer in time, answers something
        that is not a JSON object, or says it cannot serve now (HTTP 5xx or 429: no
        leader, too many requests) is skipped; a refusal (etcd's error, such as a lease
        not found) is final.
        """
        if self._closed:
            raise CoordinationError(f"{self.owner} is closed")
        payload = json.dumps(request).encode()
        failures: list[str] = []
        count = len(self._endpoints)
        first = self._preferred
        for step in range(count):
            index = (first + step) % count
            endpoint = self._endpoints[index]
            try:
                status, raw = self._post(endpoint, path, payload)
            except (OSError, http.client.HTTPException) as exc:
                failures.append(f"{endpoint.url}: {self._describe(exc)}")
                continue
            body = loads(raw)
            if not isinstance(body, dict):
                failures.append(f"{endpoint.url}: HTTP {status}, not a JSON object")
                continue
            error = body.get("error")
            if status == 200 and not error:
                self._preferred = index
                return Answer(endpoint.url, path, body)
            code, message = _describe_error(body, error)
            if isinstance(error, dict) and isinstance(error.get("http_code"), int):
                status = error["http_code"]  # an error inside a streamed answer
            if status >= 500 or status == 429:
                failures.append(f"{endpoint.url}: HTTP {status}, {message}")
                continue
            raise CoordinationError(
                f"etcd at {endpoint.url} refused {path}: {message}", endpoint.url, code
            )
        raise CoordinationError(f"no etcd endpoint answered {path}: {'; '.join(failures)}")

    def _post(self, endpoint: _Endpoint, path: str, payload: bytes) -> tuple[int, bytes]:
        deadline = time.monotonic() + self.timeout
        conn = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=self.timeout)
        try:
            conn.request("POST", path, payload, {"Content-Type": "application/json"})
            sock = conn.sock
            if sock is not None:  # the rest of the call gets what the sending left
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
            response = conn.getresponse()
            raw = response.read(_MAX_ANSWER + 1)
        finally:
            conn.close()
        if len(raw) > _MAX_ANSWER:
            raise http.client.HTTPException(f"an answer over {_MAX_ANSWER} bytes")
        return response.status, raw

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, TimeoutError):
            return f"no answer in {self.timeout:g} s"
        if isinstance(exc, ConnectionRefusedError):
            return "connection refused"
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# -- requests -----------------------------------------------------------------------------


def _parse_endpoint(text: str) -> _Endpoint:
    parts = urlsplit(text if "://" in text else f"http://{text}")
    try:
        port = DEFAULT_PORT if parts.port is None else parts.port
    except ValueError:  # not a number, or out of range
        port = 0
    if (
        parts.scheme != "http"
        or not parts.hostname
        or not port
        or parts.path not in ("", "/")
        or parts.query
        or parts.username is not None
    ):
        raise ConfigError(f"an etcd endpoint must be http://host:port, got {text!r}")
    return _Endpoint(text, parts.hostname, port)


def b64(data: bytes) -> str:
    """Bytes as the gateway takes them: base64 text."""
    return base64.b64encode(data).decode("ascii")


def dumps(value: dict[str, Any]) -> str:
    """A stored value: compact JSON, in base64 for the gateway."""
    return b64(json.dumps(value, separators=(",", ":"), sort_keys=True).encode())


def loads(raw: bytes) -> object:
    """JSON, or None for anything that is not (nested too deep, a number too long)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def compare(key: str, target: str, value: int) -> dict[str, Any]:
    """A transaction's comparison: ``key``'s ``target`` (CREATE, MOD or LEASE) equals
    ``value``."""
    field = {"CREATE": "create_revision", "MOD": "mod_revision", "LEASE": "lease"}[target]
    return {"key": key, "target": target, "result": "EQUAL", field: str(value)}


def _describe_error(body: dict[str, Any], error: object) -> tuple[int | None, str]:
    """The gRPC code and message of an error answer: ``{"error": text, "code": n}``, or
    ``{"error": {"grpc_code": n, "message": text}}`` inside a streamed answer."""
    if isinstance(error, dict):
        code, message = error.get("grpc_code"), error.get("message")
    else:
        code, message = body.get("code"), body.get("message") or error
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    return code, str(message)[:200] if message else "no error message"
