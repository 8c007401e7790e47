"""eMQP/1.0 as eventmq writes it: header text, the JSON call body, the worker's result.

Part of the eMQP codec (:mod:`zbus.common.protocols.emqp` is the facade). The spec
leaves the headers' encoding and the job body open; eventmq 0.3.13 fills them with

- headers as comma-separated text (``reply-requested,retry-count:1``), the only encoding
  any peer uses for the spec's "dictionary of headers";
- the REQUEST, SCHEDULE and UNSCHEDULE body ``["run", {"callable": ..., "path": ...}]``
  (:class:`EventmqCall`);
- the worker REPLY body ``{"value": ...}``.

The decoder and encoder use the private helpers here for the header frames and for the
dialect's ``json_bodies`` check.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from zbus.common.protocols.emqp_commands import PROTOCOL, Headers, JsonValue
from zbus.common.protocols.errors import FrameValueError, text

__all__ = [
    "EventmqCall",
    "build_call_body",
    "build_reply_value",
    "format_headers",
    "has_header",
    "header",
    "parse_call_body",
    "parse_headers",
    "parse_reply_value",
]

_CACHE_LIMIT: Final = 512
# Only short header texts are cached: they are the ones that repeat, and a peer sending
# many distinct large header frames must not make the cache hold megabytes.
_CACHE_FRAME_MAX: Final = 256


# --------------------------------------------------------------------------- headers


_HEADERS_EXPECTED: Final = (
    "headers as comma-separated 'name' or 'name:value' items"
    " (no empty name, no empty value after ':')"
)
HEADERS_BY_FRAME: dict[bytes, Headers] = {}
_FRAME_BY_HEADERS: dict[Headers, bytes] = {}


def _split_headers(raw: str) -> Headers | None:
    """Headers of ``raw``, or ``None`` when it is not canonical header text."""
    if not raw:
        return ()
    out: list[tuple[str, str]] = []
    for item in raw.split(","):
        name, colon, value = item.partition(":")
        # "name:" would decode to the same pair as a bare "name" and break the byte-exact
        # round trip of eventmq's text, so it is refused rather than normalised.
        if not name or (colon and not value):
            return None
        out.append((name, value))
    return tuple(out)


def parse_headers(raw: str) -> Headers:
    """Parse eventmq's header text, e.g. ``"reply-requested,retry-count:1,timeout:10"``.

    Raises:
        FrameValueError: on an empty item, an empty name or an empty value after ``:``.
    """
    headers = _split_headers(raw)
    if headers is None:
        raise FrameValueError(PROTOCOL, _HEADERS_EXPECTED, got=raw)
    return headers


def format_headers(headers: Headers) -> str:
    """The header text of ``headers``: the exact inverse of :func:`parse_headers`.

    Raises:
        FrameValueError: when a name is empty or holds ``,`` or ``:``, or a value holds ``,``.
    """
    parts: list[str] = []
    for name, value in headers:
        if not name or "," in name or ":" in name or "," in value:
            raise FrameValueError(
                PROTOCOL,
                "header names without ',' or ':' and values without ','",
                got=(name, value),
            )
        parts.append(f"{name}:{value}" if value else name)
    return ",".join(parts)


def header(headers: Headers, name: str) -> str | None:
    """The value of the first header called ``name`` (``""`` for a flag), or ``None``."""
    for key, value in headers:
        if key == name:
            return value
    return None


def has_header(headers: Headers, name: str) -> bool:
    """Whether a header (flag or valued) called ``name`` is present."""
    return any(key == name for key, _ in headers)


def decode_headers(frames: Sequence[bytes], command: str, index: int) -> Headers:
    raw = frames[index]
    # Header texts repeat from message to message ("reply-requested,timeout:10"), so the
    # parsed tuples (immutable, safe to share) are cached by their frame.
    cached = HEADERS_BY_FRAME.get(raw)
    if cached is not None:
        return cached
    headers = _split_headers(text(PROTOCOL, command, frames, index, "headers"))
    if headers is None:
        raise FrameValueError(PROTOCOL, _HEADERS_EXPECTED, command=command, frame=index, got=raw)
    if len(raw) <= _CACHE_FRAME_MAX:
        if len(HEADERS_BY_FRAME) >= _CACHE_LIMIT:
            HEADERS_BY_FRAME.clear()
        HEADERS_BY_FRAME[raw] = headers
    return headers


def encode_headers(headers: Headers, command: str) -> bytes:
    cached = _FRAME_BY_HEADERS.get(headers)
    if cached is not None:
        return cached
    try:
        raw = format_headers(headers).encode()
    except FrameValueError as exc:
        raise FrameValueError(PROTOCOL, exc.expected, command=command, got=headers) from None
    if len(raw) <= _CACHE_FRAME_MAX:
        if len(_FRAME_BY_HEADERS) >= _CACHE_LIMIT:
            _FRAME_BY_HEADERS.clear()
        _FRAME_BY_HEADERS[headers] = raw
    return raw


# --------------------------------------------------------------------------- eventmq bodies


@dataclass(frozen=True, slots=True, kw_only=True)
class EventmqCall:
    """eventmq's job: ``path.callable(*args, **kwargs)``, run by its jobmanager.

    ``path`` may name a class as ``"package.module:Class"``; the class is then built with
    ``class_args`` and ``class_kwargs`` and ``callable`` is a method of it. The keyword
    arguments are dicts, as JSON gives them, so a call compares by value but is not
    hashable.
    """

    callable: str
    path: str
    args: tuple[JsonValue, ...] = ()
    kwargs: dict[str, JsonValue] = field(default_factory=dict)
    class_args: tuple[JsonValue, ...] = ()
    class_kwargs: dict[str, JsonValue] = field(default_factory=dict)


_CALL_EXPECTED: Final = 'eventmq call body ["run", {"callable": ..., "path": ..., ...}]'
_BODY_FRAME: Final = {"REQUEST": 6, "SCHEDULE": 7, "UNSCHEDULE": 7}


# The keys eventmq's worker reads besides "callable" and "path"; it defaults missing ones.
_CALL_OPTIONAL: Final = (
    ("args", list, "a JSON list"),
    ("kwargs", dict, "a JSON object"),
    ("class_args", list, "a JSON list"),
    ("class_kwargs", dict, "a JSON object"),
)


def _bad_call(body: bytes, command: str, frame: int, problem: str) -> FrameValueError:
    return FrameValueError(
        PROTOCOL, f"{_CALL_EXPECTED} {problem}", command=command, frame=frame, got=body
    )


def check_call(body: bytes, command: str, frame: int) -> dict[str, Any]:
    """The call parameters of an eventmq JSON body, or FrameValueError naming the problem."""
    try:
        data = json.loads(body.decode())
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise _bad_call(body, command, frame, "as UTF-8 JSON") from None
    if type(data) is not list or len(data) != 2:
        raise _bad_call(body, command, frame, "as a JSON list of 2 items")
    if data[0] != "run":
        # "run" is the only subcommand eventmq's jobmanager executes.
        raise _bad_call(body, command, frame, 'with the subcommand "run"')
    params = data[1]
    if type(params) is not dict:
        raise _bad_call(body, command, frame, "with a JSON object of call parameters")
    for key in ("callable", "path"):
        value = params.get(key)
        if type(value) is not str or not value:
            raise _bad_call(body, command, frame, f"with {key!r} as non-empty text")
    for key, kind, what in _CALL_OPTIONAL:
        # A JSON null is refused too: eventmq's worker would call f(*None) and fail the job.
        if key in params and type(params[key]) is not kind:
            raise _bad_call(body, command, frame, f"with {key!r} as {what}")
    return params


def parse_call_body(body: bytes, command: str = "REQUEST") -> EventmqCall:
    """Parse eventmq's JSON call body of a REQUEST, SCHEDULE or UNSCHEDULE.

    Missing optional keys take eventmq's defaults; keys other than the six of
    :class:`EventmqCall` are ignored, as eventmq's worker does.

    Raises:
        FrameValueError: naming ``command``, its body frame and the problem.
    """
    params = check_call(body, command, _BODY_FRAME.get(command, 6))
    return EventmqCall(
        callable=params["callable"],
        path=params["path"],
        args=tuple(params.get("args", ())),
        kwargs=params.get("kwargs", {}),
        class_args=tuple(params.get("class_args", ())),
        class_kwargs=params.get("class_kwargs", {}),
    )


def build_call_body(call: EventmqCall) -> bytes:
    """The body eventmq's client would send for ``call``, byte for byte.

    Raises:
        FrameValueError: when ``callable`` or ``path`` is empty, or an argument is not
            something JSON can encode.
    """
    if not call.callable or not call.path:
        raise FrameValueError(PROTOCOL, f"{_CALL_EXPECTED} with non-empty 'callable' and 'path'")
    try:
        # json.dumps with its default separators and key order is what eventmq sends.
        text_ = json.dumps(
            [
                "run",
                {
                    "callable": call.callable,
                    "path": call.path,
                    "args": list(call.args),
                    "kwargs": call.kwargs,
                    "class_args": list(call.class_args),
                    "class_kwargs": call.class_kwargs,
                },
            ]
        )
    except (TypeError, ValueError) as exc:
        raise FrameValueError(
            PROTOCOL, "call arguments that JSON can encode", got=str(exc)
        ) from None
    return text_.encode()


_VALUE_EXPECTED: Final = 'worker result {"value": ...} as UTF-8 JSON'


def build_reply_value(value: JsonValue) -> bytes:
    """The body of a worker REPLY carrying ``value``, as eventmq's jobmanager writes it.

    Raises:
        FrameValueError: when JSON cannot encode ``value``.
    """
    try:
        return json.dumps({"value": value}).encode()
    except (TypeError, ValueError) as exc:
        raise FrameValueError(PROTOCOL, _VALUE_EXPECTED, command="REPLY", got=str(exc)) from None


def parse_reply_value(body: bytes) -> JsonValue:
    """The ``value`` of a worker REPLY body ``{"value": ...}``.

    Raises:
        FrameValueError: when ``body`` is not a JSON object with a ``value`` key.
    """
    try:
        data = json.loads(body.decode())
    except (ValueError, RecursionError):
        raise FrameValueError(
            PROTOCOL, _VALUE_EXPECTED, command="REPLY", frame=4, got=body
        ) from None
    if not isinstance(data, dict) or "value" not in data:
        raise FrameValueError(PROTOCOL, _VALUE_EXPECTED, command="REPLY", frame=4, got=body)
    value: JsonValue = data["value"]
    return value
