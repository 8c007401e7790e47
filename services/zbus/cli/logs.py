"""``zbus logs``: the cluster's log records, from the catalog and, with ``-f``, live.

Every service ships its records as events on ``/zbus/logs/<service>``; the catalog keeps
the recent ones (``/api/v1/logs``). ``zbus logs`` prints the last ``-n`` records that
match, oldest first; ``-f`` then follows the bus's log under ``/zbus/logs/`` over
ZeroMQ (every record, in order) with the same filters applied here: ``--service`` (the
exact name), ``--level`` (that level or above), ``--grep`` (text in the message, any
case).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from zbus.cli.bus import follow_log, log_position, print_recent
from zbus.cli.common import CliError, Cluster, add_bus_options, add_json_option
from zbus.cli.output import print_line

__all__ = ["LEVELS", "add_parser", "run"]

LOG_TOPIC_PREFIX = "/zbus/logs/"
LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_ALIASES = {"warn": "warning", "fatal": "critical"}
_SHOWN = ("ts", "level", "service", "logger", "msg")


def _level(text: str) -> str:
    name = _ALIASES.get(text.strip().lower(), text.strip().lower())
    if name not in LEVELS:
        raise argparse.ArgumentTypeError(f"unknown level {text!r}: one of {', '.join(LEVELS)}")
    return name


def add_parser(sub: Any) -> None:
    """Add ``logs`` to the ``zbus`` command's subparsers."""
    logs = sub.add_parser("logs", help="the cluster's log records (-f: follow them)")
    logs.add_argument("-f", "--follow", action="store_true", help="then print new records")
    logs.add_argument("--service", default=None, help="only this service's records")
    logs.add_argument(
        "--level", type=_level, default=None, help="this level or above (debug ... critical)"
    )
    logs.add_argument("--grep", default=None, metavar="TEXT", help="text in the message")
    logs.add_argument(
        "-n", "--lines", type=int, default=50, metavar="N", help="records to show (0-10000; 50)"
    )
    add_bus_options(logs, admin=False)
    add_json_option(logs, streaming=True)


def matches(record: dict[str, Any], args: argparse.Namespace) -> bool:
    """The record passes ``--service``, ``--level`` and ``--grep``."""
    if args.service is not None and record.get("service") != args.service:
        return False
    if args.level is not None:
        level = record.get("level")
        name = _ALIASES.get(str(level).lower(), str(level).lower())
        if LEVELS.get(name, 0) < LEVELS[args.level]:
            return False
    return not (args.grep and args.grep.casefold() not in str(record.get("msg", "")).casefold())


def render(record: dict[str, Any]) -> str:
    """``ts LEVEL service logger: msg key=value ...``"""
    extra = " ".join(f"{k}={v}" for k, v in record.items() if k not in _SHOWN)
    head = (
        f"{record.get('ts', '-')} {str(record.get('level', '-')).upper():<8} "
        f"{record.get('service', '-')} {record.get('logger', '-')}: {record.get('msg', '')}"
    )
    return f"{head}  {extra}" if extra else head


def _show(record: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_line(record)
    else:
        print(render(record), flush=True)


def run(args: argparse.Namespace, cluster: Cluster) -> int:
    if not 0 <= args.lines <= 10_000:
        raise CliError("-n must be between 0 and 10000", 2)
    endpoint, start = log_position(cluster) if args.follow else ("", 0)
    records: list[dict[str, Any]] = []
    if args.lines:
        query = {
            "service": args.service,
            "level": args.level,
            "text": args.grep,
            "limit": args.lines,
        }
        _, found = cluster.get_list(
            f"{cluster.catalog}/api/v1/logs",
            "the catalog",
            "logs",
            "the catalog answered no log records",
            query,
        )
        records = [r for r in reversed(found) if isinstance(r, dict)]
    print_recent(records, "logs", _show, follow=args.follow, as_json=args.json)
    if not args.follow:
        return 0
    # The catalog's window and the bus's log overlap: records from before ``start``
    # (the bus's sequence when the command began) were in the window already.
    prefix = LOG_TOPIC_PREFIX + (args.service or "")
    print(f"following the logs at {endpoint} (Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        for event in follow_log(endpoint, prefix, start, cluster.timeout):
            data = event.get("data")
            if isinstance(data, dict) and matches(data, args):
                _show(data, args.json)
    except KeyboardInterrupt:
        pass
    return 0
