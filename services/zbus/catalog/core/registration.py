"""What the catalog accepts in a REGISTRATION or UPDATE body, and the one form it stores.

Seed 004 asks for "the services name, ip address, port, function, and heartbeat timing
at a minimum" without naming the keys, so a node written from the spec text alone may
say ``address`` or ``heartbeat`` where zbus says ``ip`` and ``heartbeat_interval``, and
may write the port as text. The catalog accepts every name in
``dbp.REGISTRATION_ALIASES`` and stores one form: the keys of
``dbp.REGISTRATION_FIELDS``, the port an integer and the interval a float in seconds.
Two names of one field must agree.

Every number has a range (``docs/protocols/dbp.md``, "Numbers and their ranges"): a
port 1..65535, a heartbeat interval 0.01..3600 s, a name or address of at most 255
characters, the whole body at most 64 KiB of JSON. A body outside them is refused with
one reason per field, each naming it; nothing of it is stored.

A Hermes-shaped body (``name``, ``interfaces``, ``reg_time``, ``topics``) needs no
address fields; the ports of its interfaces have the same range.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from zbus.common.protocols.dbp import (
    HEARTBEAT_INTERVAL_RANGE,
    MAX_INFO_BYTES,
    MAX_NAME_CHARS,
    PORT_RANGE,
    REGISTRATION_ALIASES,
    REGISTRATION_FIELDS,
    JSONObject,
)

__all__ = ["MAX_INTERFACES", "check", "merge"]

#: Interfaces a Hermes-shaped body may list.
MAX_INTERFACES: Final = 64

_DECIMAL = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)\Z")
_PORT_TEXT = f"an integer {PORT_RANGE[0]}-{PORT_RANGE[1]}"
_INTERVAL_TEXT = (
    f"a number of seconds {HEARTBEAT_INTERVAL_RANGE[0]:g}-{HEARTBEAT_INTERVAL_RANGE[1]:g}"
)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def port(value: Any) -> int | None:
    """``value`` as a port (an integer, or its decimal text), or None when it is not one
    in ``PORT_RANGE``."""
    if type(value) is str and value.isascii() and value.isdigit() and len(value) <= 5:
        value = int(value)
    if type(value) is not int or not PORT_RANGE[0] <= value <= PORT_RANGE[1]:
        return None
    return value


def seconds(value: Any) -> float | None:
    """``value`` as a heartbeat interval in seconds (a number, or its decimal text), or
    None when it is not one in ``HEARTBEAT_INTERVAL_RANGE``."""
    if type(value) is str and len(value) <= 32 and _DECIMAL.match(value):
        value = float(value)
    if type(value) is int:
        # Compared as an integer first: float() of a huge one raises OverflowError.
        if not HEARTBEAT_INTERVAL_RANGE[0] <= value <= HEARTBEAT_INTERVAL_RANGE[1]:
            return None
        value = float(value)
    if type(value) is not float or not math.isfinite(value):
        return None
    lo, hi = HEARTBEAT_INTERVAL_RANGE
    return value if lo <= value <= hi else None


def _text(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS and value.isprintable()


def renamed(body: Mapping[str, Any]) -> tuple[JSONObject, list[str]]:
    """``body`` with each field under its stored name (``REGISTRATION_ALIASES``), and the
    reasons to refuse it when two names of one field disagree."""
    out = dict(body)
    reasons = []
    for field, names in REGISTRATION_ALIASES.items():
        given = [(name, out.pop(name)) for name in names if name in out]
        if not given:
            continue
        values = [v for _, v in given if v is not None]
        if any(v != values[0] for v in values[1:]):
            used = " and ".join(name for name, v in given if v is not None)
            reasons.append(f"malformed: {field} is given twice, as {used}, with different values")
        out[field] = values[0] if values else None
    return out, reasons


def check(body: Mapping[str, Any]) -> tuple[JSONObject, list[str]]:
    """The stored form of a REGISTRATION body, and the reasons to refuse it (none when it
    is usable); each reason starts with ``malformed:`` and names its field."""
    info, reasons = renamed(body)
    if not _text(info.get("name")):
        reasons.append(
            f"malformed: name must be a non-empty printable string of at most "
            f"{MAX_NAME_CHARS} characters"
        )
    hermes = "interfaces" in info
    if hermes:
        reasons += _interfaces(info)
    else:
        missing = [f for f in REGISTRATION_FIELDS[1:] if info.get(f) is None]
        if missing:
            also = [
                f"{' or '.join(REGISTRATION_ALIASES[f][1:])} for {f}"
                for f in missing
                if len(REGISTRATION_ALIASES[f]) > 1
            ]
            note = f" (also accepted: {'; '.join(also)})" if also else ""
            reasons.append(f"malformed: missing {', '.join(missing)}{note}")
    # Each field that is there must be right, in either shape.
    if info.get("ip") is not None and not _text(info["ip"]):
        reasons.append(
            f"malformed: ip must be a non-empty printable string of at most "
            f"{MAX_NAME_CHARS} characters, got {_show(info['ip'])}"
        )
    if info.get("port") is not None:
        number = port(info["port"])
        if number is None:
            reasons.append(f"malformed: port must be {_PORT_TEXT}, got {_show(info['port'])}")
        else:
            info["port"] = number
    if info.get("function") is not None and not (
        isinstance(info["function"], str) and info["function"]
    ):
        reasons.append(
            f"malformed: function must be a non-empty string, got {_show(info['function'])}"
        )
    if info.get("heartbeat_interval") is not None:
        interval = seconds(info["heartbeat_interval"])
        if interval is None:
            reasons.append(
                f"malformed: heartbeat_interval must be {_INTERVAL_TEXT}, "
                f"got {_show(info['heartbeat_interval'])}"
            )
        else:
            info["heartbeat_interval"] = interval
    if not reasons:
        size = len(json.dumps(info, separators=(",", ":"), ensure_ascii=False).encode())
        if size > MAX_INFO_BYTES:
            reasons.append(
                f"malformed: size of the service information is {size} bytes of JSON, "
                f"more than {MAX_INFO_BYTES}"
            )
    return info, reasons


def merge(info: Mapping[str, Any], changes: Mapping[str, Any]) -> tuple[JSONObject, list[str]]:
    """A stored ``info`` with an UPDATE's ``changes`` merged in, in the stored form, and
    the reasons to refuse the UPDATE (the result must be a usable registration)."""
    fields, reasons = renamed(changes)
    merged, more = check({**info, **fields})
    return merged, reasons + more


def _interfaces(info: JSONObject) -> list[str]:
    interfaces = info["interfaces"]
    if not isinstance(interfaces, dict):
        return ["malformed: interfaces must be an object"]
    if len(interfaces) > MAX_INTERFACES:
        return [f"malformed: interfaces must list at most {MAX_INTERFACES}"]
    reasons = []
    info["interfaces"] = interfaces = dict(interfaces)  # a copy: the command's stays as sent
    for key, entry in list(interfaces.items()):
        where = f"interfaces.{key}"
        if not isinstance(entry, dict):
            reasons.append(f"malformed: {where} must be an object with ip and port")
            continue
        if "port" in entry:
            number = port(entry["port"])
            if number is None:
                reasons.append(
                    f"malformed: {where}.port must be {_PORT_TEXT}, got {_show(entry['port'])}"
                )
            elif number != entry["port"]:
                interfaces[key] = {**entry, "port": number}
        if "ip" in entry and not _text(entry["ip"]):
            reasons.append(f"malformed: {where}.ip must be a non-empty printable string")
    return reasons
