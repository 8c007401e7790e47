"""``zbus bus``: publish, subscribe, tail and list the topics of the event bus.

zbus bus pub TOPIC [DATA]          publish one event, confirmed; DATA read as JSON when it
                                   parses, else as text (msgpack-packed); stdin when absent
zbus bus sub [PREFIX]              live events under PREFIX until Ctrl-C (or -n N events)
zbus bus tail [-n N] [-f] [PREFIX] the last N events of the log; -f: then every new one
zbus bus topics [PREFIX]           topics with their event counts, bytes, last sequence

``pub`` and ``sub`` speak ZeroMQ to the bus (the event bus client); ``tail`` reads the
newest events from the bus's admin API and follows its log over ZeroMQ (the log reader:
every event, in sequence order); ``topics`` asks the admin API.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from zbus.cli.common import CliError, Cluster, add_bus_options, add_json_option
from zbus.cli.output import data_view, print_json, print_line, size, table

__all__ = [
    "add_parser",
    "event_json",
    "follow_log",
    "log_position",
    "print_event",
    "print_recent",
    "run",
    "zmq_call",
]

PRODUCER = "zbus-cli"
MAX_STDIN = 64 * 1024 * 1024  # bytes of DATA read from stdin, at most
MAX_TAIL = 1000  # the admin API's page
FOLLOW_POLL = 0.2  # seconds between reads of the log when nothing new came


def add_parser(sub: Any) -> None:
    """Add ``bus`` to the ``zbus`` command's subparsers."""
    bus = sub.add_parser("bus", help="publish, subscribe, tail and list topics of the event bus")
    actions = bus.add_subparsers(dest="bus_command", metavar="ACTION", required=True)

    pub = actions.add_parser("pub", help="publish one event and print its sequence")
    pub.add_argument("topic", help="the event's topic, e.g. /sensors/t1")
    pub.add_argument(
        "data",
        nargs="?",
        default=None,
        help="the data: JSON when it parses, else text (packed with msgpack); "
        "'-' or absent: read stdin",
    )
    pub.add_argument("--raw", action="store_true", help="send DATA as its bytes, not packed")
    pub.add_argument("--uuid", default=None, help="the event's UUID (publishing is idempotent)")
    add_bus_options(pub, admin=False)
    add_json_option(pub)

    sub_ = actions.add_parser("sub", help="print live events under a prefix until Ctrl-C")
    sub_.add_argument("prefix", nargs="?", default="", help="topic prefix (default: every topic)")
    sub_.add_argument(
        "--snapshot",
        action="store_true",
        help="first the latest event of every matching topic, then live ones",
    )
    sub_.add_argument(
        "-n", "--count", type=int, default=None, metavar="N", help="stop after N events"
    )
    add_bus_options(sub_, admin=False)
    add_json_option(sub_, streaming=True)

    tail = actions.add_parser("tail", help="the last events of the log (-f: and follow it)")
    tail.add_argument("prefix", nargs="?", default="", help="topic prefix (default: every topic)")
    tail.add_argument(
        "-n", "--lines", type=int, default=10, metavar="N", help="events to show (1-1000; 10)"
    )
    tail.add_argument("-f", "--follow", action="store_true", help="then print every new event")
    add_bus_options(tail)
    add_json_option(tail, streaming=True)

    topics = actions.add_parser("topics", help="topics with event counts, bytes, last sequence")
    topics.add_argument("prefix", nargs="?", default="", help="topic prefix (default: all)")
    topics.add_argument(
        "--limit", type=int, default=1000, help="topics to list, at most (1-100000; 1000)"
    )
    add_bus_options(topics, zmq=False)
    add_json_option(topics)


def run(args: argparse.Namespace, cluster: Cluster) -> int:
    command: Callable[[argparse.Namespace, Cluster], int] = {
        "pub": _pub,
        "sub": _sub,
        "tail": _tail,
        "topics": _topics,
    }[args.bus_command]
    return command(args, cluster)


# --------------------------------------------------------------------------- events


def event_json(
    seq: int, topic: str, producer: str, ts: str, uuid: str, data: bytes
) -> dict[str, Any]:
    """An event as the command prints it: the admin API's shape, data decoded."""
    value, encoding = data_view(data)
    return {
        "seq": seq,
        "topic": topic,
        "producer": producer,
        "ts": ts,
        "uuid": uuid,
        "data": value,
        "data_encoding": encoding,
    }


def _from_api(entry: dict[str, Any]) -> dict[str, Any]:
    # The admin API gives bytes that are not msgpack as base64: show text as text.
    if entry.get("data_encoding") == "base64" and isinstance(entry.get("data"), str):
        try:
            raw = base64.b64decode(entry["data"], validate=True)
        except ValueError:
            return entry
        entry = {**entry}
        entry["data"], entry["data_encoding"] = data_view(raw)
    return entry


def print_event(event: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_line(event)
        return
    data = event.get("data")
    shown = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    if event.get("data_encoding") == "base64":
        shown = f"base64:{shown}"
    print(f"{event.get('seq'):>8}  {event.get('ts')}  {event.get('topic')}  {shown}", flush=True)


# --------------------------------------------------------------------------- commands


def _data(args: argparse.Namespace) -> bytes | Any:
    text = args.data
    if text is None or text == "-":
        if text is None and sys.stdin.isatty():
            raise CliError("give DATA, or '-' and the data on stdin", 2)
        raw = sys.stdin.buffer.read(MAX_STDIN + 1)
        if len(raw) > MAX_STDIN:
            raise CliError(f"the data on stdin is larger than {MAX_STDIN // 2**20} MiB", 2)
        if args.raw:
            return raw
        try:
            text = raw.decode("utf-8").rstrip("\n")
        except UnicodeDecodeError:
            raise CliError("the data on stdin is not UTF-8 (send bytes with --raw)", 2) from None
    if args.raw:
        return str(text).encode("utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _pub(args: argparse.Namespace, cluster: Cluster) -> int:
    from zbus.eventbus.client import EventBusClient, PublishError

    data = _data(args)
    endpoint = cluster.bus_endpoint()
    try:
        client = EventBusClient(endpoint, producer=PRODUCER)
    except ValueError as exc:
        raise CliError(f"bad event bus endpoint {endpoint!r}: {exc}", 2) from None
    try:
        seq = client.publish(
            args.topic, data, confirm=True, timeout=cluster.timeout, uuid=args.uuid
        )
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    except TimeoutError:
        raise CliError(
            f"the event bus at {endpoint} did not confirm within {cluster.timeout:g} s"
        ) from None
    except PublishError as exc:
        raise CliError(f"the event bus at {endpoint} refused the event: {exc}") from None
    finally:
        client.close(linger=0)  # the confirmed event is in the log: nothing to wait for
    if args.json:
        print_json({"topic": args.topic, "seq": seq})
    else:
        print(f"published {args.topic} as event {seq}")
    return 0


def _sub(args: argparse.Namespace, cluster: Cluster) -> int:
    from zbus.eventbus.client import EventBusClient, LogReader

    if args.count is not None and args.count < 1:
        raise CliError("-n must be at least 1", 2)
    endpoint = cluster.bus_endpoint()
    since = 0
    if not args.snapshot:
        # Live only: everything after the bus's current sequence.
        with LogReader(endpoint, timeout=cluster.timeout) as reader:
            since = zmq_call(reader.last_sequence, endpoint)
    try:
        client = EventBusClient(endpoint, producer=PRODUCER)
        subscription = client.subscribe(args.prefix or (), since=since)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    shown = 0
    print(
        f"subscribed to {args.prefix or 'every topic'} at {endpoint} (Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    try:
        while args.count is None or shown < args.count:
            event = subscription.next(timeout=1.0)
            if event is None:
                continue
            print_event(event_json(*event), args.json)
            shown += 1
    except KeyboardInterrupt:
        pass
    finally:
        subscription.close()
        client.close(linger=0)
    return 0


def zmq_call(fn: Callable[[], Any], endpoint: str) -> Any:
    from zbus.eventbus.client import LogQueryError

    try:
        return fn()
    except TimeoutError:
        raise CliError(f"no answer from the event bus at {endpoint}") from None
    except LogQueryError as exc:
        raise CliError(str(exc)) from None
    except ValueError as exc:
        raise CliError(str(exc), 2) from None


def _tail(args: argparse.Namespace, cluster: Cluster) -> int:
    if not 1 <= args.lines <= MAX_TAIL:
        raise CliError(f"-n must be between 1 and {MAX_TAIL}", 2)
    endpoint, start = log_position(cluster) if args.follow else ("", 0)
    _, events = cluster.get_list(
        f"{cluster.bus_admin()}/api/v1/events",
        "the event bus",
        "events",
        "the event bus answered no event list",
        {"prefix": args.prefix, "limit": args.lines},
    )
    newest = [_from_api(e) for e in reversed(events) if isinstance(e, dict)]
    print_recent(newest, "events", print_event, follow=args.follow, as_json=args.json)
    if not args.follow:
        return 0
    after = max([start, *(int(e.get("seq", 0)) for e in newest)])
    where = args.prefix or "every topic"
    print(f"following {where} at {endpoint} (Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        for event in follow_log(endpoint, args.prefix, after, cluster.timeout):
            print_event(event, args.json)
    except KeyboardInterrupt:
        pass
    return 0


def log_position(cluster: Cluster) -> tuple[str, int]:
    """The bus's endpoint and its log's last sequence: read before the recent records are,
    so that following the log from there misses none of what comes after them."""
    from zbus.eventbus.client import LogReader

    endpoint = cluster.bus_endpoint()
    with LogReader(endpoint, timeout=cluster.timeout) as reader:
        return endpoint, zmq_call(reader.last_sequence, endpoint)


def print_recent(
    items: list[dict[str, Any]],
    key: str,
    show: Callable[[dict[str, Any], bool], None],
    *,
    follow: bool,
    as_json: bool,
) -> None:
    """The recent records a command starts with: with ``--json`` and no ``--follow`` one
    JSON document ``{key: items}``, else one line each (JSON lines with ``--json``)."""
    if as_json and not follow:
        print_json({key: items})
        return
    for item in items:
        show(item, as_json)


def follow_log(endpoint: str, prefix: str, after: int, timeout: float) -> Iterator[dict[str, Any]]:
    """Every event under ``prefix`` logged after sequence ``after``, as it comes (forever)."""
    from zbus.eventbus.client import LogReader

    with LogReader(endpoint, timeout=timeout) as reader:
        while True:
            page = zmq_call(functools.partial(reader.page, prefix or (), after, 1000), endpoint)
            for event in page.events:
                yield event_json(*event)
            if page.events:
                after = max(after, page.events[-1].seq)
            if page.next_after is not None:
                after = max(after, page.next_after)
                continue
            after = max(after, page.last_sequence)
            if not page.events:
                time.sleep(FOLLOW_POLL)


def _topics(args: argparse.Namespace, cluster: Cluster) -> int:
    if not 1 <= args.limit <= 100_000:
        raise CliError("--limit must be between 1 and 100000", 2)
    url = f"{cluster.bus_admin()}/api/v1/topics"
    found: list[dict[str, Any]] = []
    after: str | None = None
    while len(found) < args.limit:
        page = min(10_000, args.limit - len(found))
        _, topics = cluster.get_list(
            url,
            "the event bus",
            "topics",
            "the event bus answered no topic list",
            {"prefix": args.prefix, "limit": page, "after": after},
        )
        found += [t for t in topics if isinstance(t, dict)]
        if len(topics) < page or not topics:
            break
        after = str(topics[-1].get("topic"))
    if args.json:
        print_json({"topics": found})
        return 0
    rows = [
        [t.get("topic"), t.get("count"), size(t.get("bytes")), t.get("last_seq")] for t in found
    ]
    table(["TOPIC", "EVENTS", "BYTES", "LAST SEQ"], rows, right=("EVENTS", "BYTES", "LAST SEQ"))
    print(f"{len(found)} topics")
    return 0
