"""How the ``zbus`` command prints: rich tables for people, JSON for programs.

Tables go to stdout through a :class:`rich.console.Console`; when stdout is not a
terminal they carry no colour and are as wide as their content (up to 240 columns, or
``COLUMNS``), so that ``grep`` and ``awk`` see whole lines. ``--json`` prints one JSON
document (listings) or one JSON object per line (streaming commands) instead.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "ago",
    "console",
    "data_view",
    "duration",
    "identity",
    "print_answer",
    "print_json",
    "print_line",
    "size",
    "stamp",
    "table",
]

_consoles: dict[bool, Console] = {}


def console(stderr: bool = False) -> Console:
    """The command's console on stdout (or stderr), made on first use."""
    found = _consoles.get(stderr)
    stream = sys.stderr if stderr else sys.stdout
    if found is None or found.file is not stream:
        from rich.console import Console

        tty = stream.isatty()
        width = None if tty or os.environ.get("COLUMNS") else 240
        found = Console(file=stream, width=width, soft_wrap=not tty, highlight=False)
        _consoles[stderr] = found
    return found


def print_json(data: Any) -> None:
    """One JSON document on stdout."""
    print(json.dumps(data, indent=2, default=str, ensure_ascii=False), flush=True)


def print_answer(answer: Any, as_json: bool, summary: str) -> int:
    """What an action prints once done: the service's answer as one JSON document with
    ``--json``, else the one line ``summary``. Returns the exit status, 0."""
    if as_json:
        print_json(answer)
    else:
        print(summary)
    return 0


def print_line(data: Any) -> None:
    """One JSON object on one line of stdout (streaming output)."""
    print(json.dumps(data, default=str, ensure_ascii=False, separators=(",", ":")), flush=True)


def table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    title: str | None = None,
    right: Iterable[str] = (),
) -> None:
    """A table on stdout: ``columns`` as headers, ``right`` the right-aligned ones."""
    from rich import box
    from rich.table import Table

    aligned = set(right)
    view = Table(
        title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, show_edge=False
    )
    for name in columns:
        view.add_column(name, justify="right" if name in aligned else "left", overflow="fold")
    for row in rows:
        view.add_row(*("" if cell is None else str(cell) for cell in row))
    console().print(view)


def ago(ts: float | None, now: float | None = None) -> str:
    """``12s ago`` for a Unix time, ``-`` for None."""
    if ts is None:
        return "-"
    seconds = (time.time() if now is None else now) - ts
    if seconds < 0:
        return "in " + duration(-seconds)
    return duration(seconds) + " ago"


def duration(seconds: float | None) -> str:
    """``4s``, ``3m 20s``, ``2h 5m``, ``3d 4h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def size(count: float | None) -> str:
    """Bytes in B, kB, MB, GB (powers of 1000)."""
    if count is None:
        return "-"
    value = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError  # pragma: no cover


def stamp(ts: float | None) -> str:
    """A Unix time as ``2026-11-24 08:20:26`` UTC; ``-`` for None."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def data_view(data: bytes) -> tuple[Any, str]:
    """An event's data as JSON can carry it, and how it was read.

    msgpack first (the bus's convention), then UTF-8 text, else base64.
    """
    import msgpack

    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:  # any malformed msgpack: not msgpack, then
        pass
    else:
        return _jsonable(value), "msgpack"
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def identity(hexed: Any) -> str:
    """A worker identity as the broker's API gives it (hex), as text when printable."""
    if not isinstance(hexed, str):
        return "-"
    try:
        text = bytes.fromhex(hexed).decode("ascii")
    except ValueError:
        return hexed
    return text if text.isprintable() else hexed
