"""Checking a job's parameters: each parser takes the raw JSON value and names the
parameter in the :class:`~zbus.sparkworker.errors.ParamError` it raises."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, date, datetime
from typing import Any, Final, TypeVar

from zbus.sparkworker.errors import ParamError

__all__ = [
    "check_params",
    "optional",
    "parse_choice",
    "parse_date",
    "parse_positive",
    "parse_prefixes",
    "parse_text",
    "parse_time",
    "parse_whole",
    "since_until",
]

T = TypeVar("T")

_EPOCH_LIMIT: Final = 253_402_300_800  # 10000-01-01: past it, datetime cannot follow
_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")
_MAX_NUMBER: Final = 1e15  # any size or span a job takes, with room to spare
_MAX_WHOLE: Final = 2**63 - 1  # what Spark's long holds


def _shown(value: int | float) -> str:
    """``repr(value)``, short: an int of thousands of digits is shown by its size."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    return repr(value)


def optional(params: Mapping[str, Any], name: str, parse: Callable[[str, Any], T]) -> T | None:
    """``parse(name, params[name])``, or ``None`` when the parameter is absent or null."""
    value = params.get(name)
    return None if value is None else parse(name, value)


def check_params(job: str, params: Mapping[str, Any], known: Iterable[str]) -> None:
    """Refuse parameters ``job`` does not take, naming the ones it does.

    Raises:
        ParamError: for the first unknown name (sorted).
    """
    allowed = sorted(known)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) or "no parameters"
        raise ParamError(unknown[0], f"unknown parameter of {job} (it takes: {takes})")


def parse_time(name: str, value: Any) -> datetime:
    """ISO-8601 text (no zone: UTC) or epoch seconds, as an aware UTC datetime."""
    if isinstance(value, bool):
        raise ParamError(name, f"expected ISO-8601 text or epoch seconds, got {value!r}")
    if isinstance(value, int | float):
        # The range first: math.isfinite() of an int beyond any float raises.
        if not (-_EPOCH_LIMIT < value < _EPOCH_LIMIT and math.isfinite(value)):
            raise ParamError(name, f"epoch seconds out of range: {_shown(value)}")
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            pass
        else:
            return parse_time(name, seconds)
        try:
            when = datetime.fromisoformat(text.replace("z", "Z"))
        except ValueError:
            raise ParamError(
                name, f"expected ISO-8601 text or epoch seconds, got {value!r}"
            ) from None
        return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    raise ParamError(
        name, f"expected ISO-8601 text or epoch seconds, got {type(value).__name__} {value!r}"
    )


def since_until(params: Mapping[str, Any]) -> tuple[datetime | None, datetime | None]:
    """The ``since`` and ``until`` parameters of a window ``since <= ts < until`` (either
    may be absent), refusing an empty one."""
    since = optional(params, "since", parse_time)
    until = optional(params, "until", parse_time)
    if since is not None and until is not None and until <= since:
        # As the results write times: ISO-8601 UTC with a "Z".
        shown = since.isoformat().replace("+00:00", "Z")
        raise ParamError("until", f"must be after since ({shown})")
    return since, until


def parse_date(name: str, value: Any) -> date:
    """A day as ``YYYY-MM-DD``."""
    if not isinstance(value, str) or not _DATE.fullmatch(value.strip()):
        raise ParamError(name, f"expected a date YYYY-MM-DD, got {value!r}")
    try:
        return date.fromisoformat(value.strip())
    except ValueError:
        raise ParamError(name, f"not a valid date: {value!r}") from None


def parse_prefixes(name: str, value: Any) -> tuple[str, ...]:
    """Topic prefixes: a list of strings, or one string split on ';' (and ',').

    An empty result (or an empty prefix among them) means every topic: ``()``.
    """
    if isinstance(value, str):
        items: list[Any] = value.replace(",", ";").split(";")
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise ParamError(name, f"expected a string or a list of strings, got {value!r}")
    if not all(isinstance(item, str) for item in items):
        raise ParamError(name, f"expected a string or a list of strings, got {value!r}")
    prefixes = [item.strip() for item in items]
    if isinstance(value, list | tuple) and "" in prefixes:
        return ()  # an empty prefix in a list matches every topic
    return tuple(dict.fromkeys(p for p in prefixes if p))


def parse_text(name: str, value: Any) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise ParamError(name, f"expected a non-empty string, got {value!r}")
    return value.strip()


def parse_positive(name: str, value: Any) -> float:
    """A number > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParamError(name, f"expected a number, got {value!r}")
    if not (0 < value <= _MAX_NUMBER):  # NaN and infinities fail too
        raise ParamError(name, f"expected a number > 0 and <= 1e15, got {_shown(value)}")
    return float(value)


def parse_whole(name: str, value: Any, minimum: int = 1) -> int:
    """A whole number >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamError(name, f"expected a whole number, got {value!r}")
    if not minimum <= value <= _MAX_WHOLE:
        raise ParamError(
            name, f"expected a whole number >= {minimum} and < 2**63, got {_shown(value)}"
        )
    return value


def parse_choice(choices: tuple[str, ...]) -> Callable[[str, Any], str]:
    """A parser accepting one of ``choices`` (case-insensitive)."""

    def parse(name: str, value: Any) -> str:
        if isinstance(value, str) and value.strip().lower() in choices:
            return value.strip().lower()
        raise ParamError(name, f"expected one of {', '.join(choices)}, got {value!r}")

    return parse
