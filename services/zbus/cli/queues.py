"""``zbus queues ls|purge`` and ``zbus workers ls``: the broker's queues and workers.

Both read the broker's admin API; ``purge`` cancels every queued job of a queue (running
jobs finish) and needs the admin token when one is configured.
"""

from __future__ import annotations

import argparse
import time
from typing import Any
from urllib.parse import quote

from zbus.cli.common import (
    CliError,
    Cluster,
    add_broker_options,
    add_catalog_option,
    add_json_option,
    add_token_option,
)
from zbus.cli.output import ago, identity, print_json, table

__all__ = ["add_parsers", "run_queues", "run_workers"]

QUEUE_COLUMNS = (
    "ready",
    "waiting",
    "running",
    "consumers",
    "free_slots",
    "succeeded",
    "failed",
    "dead",
    "cancelled",
)


def add_parsers(sub: Any) -> None:
    """Add ``queues`` and ``workers`` to the ``zbus`` command's subparsers."""
    queues = sub.add_parser("queues", help="the broker's queues: list, purge")
    actions = queues.add_subparsers(dest="queues_command", metavar="ACTION", required=True)
    ls = actions.add_parser("ls", help="every queue with its jobs by state and its consumers")
    purge = actions.add_parser("purge", help="cancel every queued job of a queue")
    purge.add_argument("queue", help="the queue")
    add_token_option(purge)

    workers = sub.add_parser("workers", help="the workers connected to the broker")
    wactions = workers.add_subparsers(dest="workers_command", metavar="ACTION", required=True)
    wls = wactions.add_parser("ls", help="every worker: queues, free slots, running jobs")
    for parser in (ls, purge, wls):
        add_broker_options(parser)
        add_catalog_option(parser)
        add_json_option(parser)


def run_queues(args: argparse.Namespace, cluster: Cluster) -> int:
    admin = cluster.broker_admin()
    if args.queues_command == "purge":
        body = cluster.post(
            f"{admin}/api/v1/queues/{quote(args.queue, safe='')}/purge", "the broker"
        )
        if args.json:
            print_json(body)
        else:
            count = body.get("cancelled") if isinstance(body, dict) else "?"
            print(f"queue {args.queue}: {count} queued jobs cancelled")
        return 0
    body = cluster.get(f"{admin}/api/v1/queues", "the broker")
    queues = body.get("queues") if isinstance(body, dict) else None
    if not isinstance(queues, list):
        raise CliError("the broker answered no queue list")
    if args.json:
        print_json(body)
        return 0
    rows = [[q.get("name"), *(q.get(c, 0) for c in QUEUE_COLUMNS)] for q in queues]
    headers = [c.upper().replace("_", " ") for c in QUEUE_COLUMNS]
    table(["QUEUE", *headers], rows, right=headers)
    return 0


def run_workers(args: argparse.Namespace, cluster: Cluster) -> int:
    body = cluster.get(f"{cluster.broker_admin()}/api/v1/workers", "the broker")
    workers = body.get("workers") if isinstance(body, dict) else None
    if not isinstance(workers, list):
        raise CliError("the broker answered no worker list")
    if args.json:
        print_json(body)
        return 0
    now = time.time()
    rows = []
    for w in workers:
        if not isinstance(w, dict):
            continue
        running = w.get("jobs_running") or []
        rows.append(
            [
                identity(w.get("identity")),
                ", ".join(str(q) for q in w.get("queues") or []),
                w.get("slots_free"),
                len(running),
                ago(w.get("last_heartbeat"), now),
                ", ".join(str(j) for j in running[:3]) + (" …" if len(running) > 3 else ""),
            ]
        )
    table(
        ["WORKER", "QUEUES", "FREE SLOTS", "RUNNING", "HEARTBEAT", "JOBS"],
        rows,
        right=("FREE SLOTS", "RUNNING"),
    )
    return 0
