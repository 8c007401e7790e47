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
    add_json_option,
    add_token_option,
)
from zbus.cli.output import ago, identity, print_answer, print_json, table

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
        add_json_option(parser)


def run_queues(args: argparse.Namespace, cluster: Cluster) -> int:
    admin = cluster.broker_admin()
    if args.queues_command == "purge":
        body = cluster.post(
            f"{admin}/api/v1/queues/{quote(args.queue, safe='')}/purge", "the broker"
        )
        count = body.get("cancelled") if isinstance(body, dict) else "?"
        return print_answer(body, args.json, f"queue {args.queue}: {count} queued jobs cancelled")
    body, queues = cluster.get_list(
        f"{admin}/api/v1/queues", "the broker", "queues", "the broker answered no queue list"
    )
    if args.json:
        print_json(body)
        return 0
    rows = [[q.get("name"), *(q.get(c, 0) for c in QUEUE_COLUMNS)] for q in queues]
    headers = [c.upper().replace("_", " ") for c in QUEUE_COLUMNS]
    table(["QUEUE", *headers], rows, right=headers)
    return 0


# The worker services asked for their names and figures: at most this many.
MAX_WORKER_SERVICES = 64


def _worker_figures(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """Registered worker services by the identity they connect to the broker with: their
    name, concurrency and jobs done and failed (what the broker cannot tell). A service
    that does not answer is left out: its worker shows with less."""
    figures: dict[str, dict[str, Any]] = {}
    asks = [(s, "api/v1/worker") for s in cluster.services() if s.function == "worker"]
    asks += [(s, "api/v1/spark") for s in cluster.services() if s.function == "sparkworker"]
    for service, path in asks[:MAX_WORKER_SERVICES]:
        if not service.admin:
            continue
        try:
            body = cluster.get(f"{service.admin}/{path}", service.name)
        except CliError:
            continue
        if not isinstance(body, dict):
            continue
        broker = body.get("broker")
        ident = body.get("identity") or (
            broker.get("identity") if isinstance(broker, dict) else None
        )
        if isinstance(ident, str):
            figures[ident] = {
                "name": service.name,
                "concurrency": body.get("concurrency"),
                "jobs_done": body.get("jobs_done"),
                "jobs_failed": body.get("jobs_failed"),
            }
    return figures


def run_workers(args: argparse.Namespace, cluster: Cluster) -> int:
    body, workers = cluster.get_list(
        f"{cluster.broker_admin()}/api/v1/workers",
        "the broker",
        "workers",
        "the broker answered no worker list",
    )
    try:
        figures = _worker_figures(cluster)
    except CliError:  # no catalog to ask (endpoints given by flags): the broker's view only
        figures = {}
    for w in workers:
        if isinstance(w, dict):
            w.update(figures.get(str(w.get("identity_text")), {}))
    if args.json:
        print_json(body)
        return 0
    now = time.time()
    rows = []
    for w in workers:
        if not isinstance(w, dict):
            continue
        running = w.get("jobs_running") or []
        done, failed = w.get("jobs_done"), w.get("jobs_failed")
        rows.append(
            [
                w.get("name") or identity(w.get("identity")),
                ", ".join(str(q) for q in w.get("queues") or []),
                w.get("concurrency", "-"),
                w.get("slots_free"),
                len(running),
                "-" if done is None else f"{done} ({failed or 0} failed)",
                ago(w.get("last_heartbeat"), now),
                ", ".join(str(j) for j in running[:3]) + (" …" if len(running) > 3 else ""),
            ]
        )
    table(
        ["WORKER", "QUEUES", "CONCURRENCY", "FREE SLOTS", "RUNNING", "DONE", "HEARTBEAT", "JOBS"],
        rows,
        right=("CONCURRENCY", "FREE SLOTS", "RUNNING"),
    )
    return 0
