"""``zbus jobs``: submit, list, show, cancel, retry and watch the broker's jobs.

zbus jobs submit QUEUE NAME [-p KEY=VALUE ...] [--params JSON] [--wait SECONDS]
zbus jobs submit spark topic-stats -p since=2026-11-01 -p prefix=/sensors/
zbus jobs ls [--queue Q] [--state S] [--limit N]
zbus jobs show ID | cancel ID | retry ID | watch ID

``submit`` speaks eMQP to the broker's client port (the broker client); the others use
the broker's admin API (``cancel`` and ``retry`` with the admin token). ``watch`` runs
in :mod:`zbus.cli.watch`.

Each ``-p`` value is read as JSON when it parses (``-p limit=10`` is the number 10,
``-p tags='["a"]'`` a list) and as text otherwise. The parameters travel as the call's
keyword arguments (eMQP REQUEST, eventmq's JSON call body); the result is printed as
JSON on stdout. Against a broker that runs CURVE, ``--curve-secret-key FILE`` (this
client's secret key file) and ``--broker-public-key FILE`` (the broker's public key file)
go together. Exit status of ``submit``: 0 done, 1 the job failed, 2 a usage or connection
error, 3 no result within ``--wait``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zbus.cli.common import (
    CliError,
    Cluster,
    add_broker_options,
    add_json_option,
    add_token_option,
)
from zbus.cli.output import ago, console, identity, print_answer, print_json, stamp, table

if TYPE_CHECKING:
    from zbus.common.security import KeyPair

__all__ = ["JOB_STATES", "add_parser", "curve_keys", "job_name", "parse_params", "run"]

JOB_STATES = ("queued", "running", "succeeded", "failed", "dead", "cancelled")
TERMINAL = frozenset({"succeeded", "failed", "dead", "cancelled"})


def add_parser(sub: Any) -> None:
    """Add ``jobs`` to the ``zbus`` command's subparsers."""
    jobs = sub.add_parser("jobs", help="submit, list, show, cancel, retry and watch jobs")
    actions = jobs.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)
    submit = actions.add_parser("submit", help="submit a job and print its result")
    submit.add_argument("queue", help="the broker queue, e.g. spark")
    submit.add_argument("name", help="the job's registered name, e.g. topic-stats")
    submit.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a parameter (value read as JSON when it parses); repeatable",
    )
    submit.add_argument(
        "--params", default=None, metavar="JSON", help="parameters as a JSON object"
    )
    submit.add_argument(
        "--wait", type=float, default=600.0, help="seconds to wait for the result (0: do not)"
    )
    submit.add_argument("--retries", type=int, default=None, help="runs after a failure")
    submit.add_argument("--job-timeout", type=float, default=None, help="seconds one run may take")
    submit.add_argument(
        "--curve-secret-key",
        type=Path,
        default=None,
        metavar="FILE",
        help="this client's CURVE secret key file (with --broker-public-key)",
    )
    submit.add_argument(
        "--broker-public-key",
        type=Path,
        default=None,
        metavar="FILE",
        help="the broker's CURVE public key file (with --curve-secret-key)",
    )
    add_broker_options(submit, zmq=True, admin=False)

    ls = actions.add_parser("ls", help="list stored jobs, newest first")
    ls.add_argument("--queue", default=None, help="only this queue's jobs")
    ls.add_argument("--state", choices=JOB_STATES, default=None, help="only jobs in this state")
    ls.add_argument("--limit", type=int, default=50, help="jobs to list (1-1000; 50)")
    ls.add_argument("--before", default=None, metavar="ID", help="the page after this job id")

    show = actions.add_parser("show", help="one job: state, attempts, parameters, result")
    show.add_argument("job_id", metavar="ID")
    cancel = actions.add_parser(
        "cancel", help="cancel a queued job (a running Spark job: its Spark work)"
    )
    cancel.add_argument("job_id", metavar="ID")
    retry = actions.add_parser("retry", help="run a failed or dead job again")
    retry.add_argument("job_id", metavar="ID")
    watch = actions.add_parser(
        "watch", help="follow a job until it ends: a progress bar for Spark jobs"
    )
    watch.add_argument("job_id", metavar="ID")
    watch.add_argument(
        "--wait", type=float, default=None, metavar="SECONDS", help="give up after (exit 3)"
    )
    for parser in (ls, show, cancel, retry, watch):
        add_broker_options(parser)
        add_json_option(parser, streaming=parser is watch)
    for parser in (cancel, retry):
        add_token_option(parser)


def parse_params(pairs: list[str], params_json: str | None) -> dict[str, Any]:
    """The job's keyword arguments from ``--params`` and the ``-p`` pairs (which win).

    Raises:
        ValueError: a pair without ``=``, or ``--params`` that is not a JSON object.
    """
    params: dict[str, Any] = {}
    if params_json is not None:
        try:
            loaded = json.loads(params_json)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--params is not JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise ValueError("--params must be a JSON object")
        params.update(loaded)
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"-p {pair!r}: expected KEY=VALUE")
        try:
            params[key] = json.loads(text)
        except json.JSONDecodeError:
            params[key] = text
    return params


def curve_keys(
    secret_key: Path | None, broker_public_key: Path | None
) -> tuple[KeyPair, bytes] | None:
    """The client's ``curve`` argument from the two key files; None when neither is given.

    Raises:
        ValueError: only one of the two is given.
        ConfigError: a file is missing or not a ZeroMQ key file, or the client's has no
            secret key.
    """
    from zbus.common.security import client_keys

    if secret_key is None and broker_public_key is None:
        return None
    if secret_key is None or broker_public_key is None:
        raise ValueError("--curve-secret-key and --broker-public-key go together")
    return client_keys(secret_key, broker_public_key, "--curve-secret-key")


def run(args: argparse.Namespace, cluster: Cluster) -> int:
    if args.jobs_command == "submit":
        return _submit(args, cluster)
    if args.jobs_command == "ls":
        return _ls(args, cluster)
    if args.jobs_command == "show":
        return _show(args, cluster)
    if args.jobs_command == "cancel":
        return _cancel(args, cluster)
    if args.jobs_command == "retry":
        return _act(args, cluster, "retry", "retried")
    raise AssertionError(args.jobs_command)


def _submit(args: argparse.Namespace, cluster: Cluster) -> int:
    from zbus.broker.client import BrokerClient, BrokerClientError, JobFailed

    try:
        params = parse_params(args.param, args.params)
        curve = curve_keys(args.curve_secret_key, args.broker_public_key)
    except ValueError as exc:  # ConfigError (a key file) is a ValueError too
        raise CliError(str(exc), 2) from None
    try:
        endpoint = cluster.broker_endpoint()
    except CliError as exc:
        raise CliError(str(exc), 2) from None  # a connection error, as it always was
    client = BrokerClient(endpoint, curve=curve)
    try:
        job_id = client.submit(
            args.queue,
            args.name,
            kwargs=params,
            retries=args.retries,
            timeout=args.job_timeout,
        )
        print(f"submitted {args.name} to {args.queue} as job {job_id}", file=sys.stderr)
        if args.wait <= 0:
            print(json.dumps({"job_id": job_id}))
            return 0
        result = client.result(job_id, args.wait)
    except JobFailed as exc:
        raise CliError(str(exc), 1) from None
    except TimeoutError as exc:
        raise CliError(str(exc), 3) from None
    except (BrokerClientError, ValueError) as exc:
        raise CliError(str(exc), 2) from None
    finally:
        client.close()
    print(json.dumps(result, indent=2, default=str))
    return 0


# --------------------------------------------------------------------------- admin API


def job_name(job: dict[str, Any]) -> str:
    """The callable a job runs, from its stored request (eventmq's ``["run", {...}]``)."""
    request = job.get("request")
    if isinstance(request, list) and len(request) > 1 and isinstance(request[1], dict):
        return str(request[1].get("callable", "?"))
    return "?"


def job_call(job: dict[str, Any]) -> dict[str, Any]:
    request = job.get("request")
    if isinstance(request, list) and len(request) > 1 and isinstance(request[1], dict):
        return request[1]
    return {}


def get_job(cluster: Cluster, job_id: str) -> dict[str, Any]:
    found = cluster.get(f"{cluster.broker_admin()}/api/v1/jobs/{_quoted(job_id)}", "the broker")
    if not isinstance(found, dict):
        raise CliError("the broker answered no job")
    return found


def _quoted(job_id: str) -> str:
    from urllib.parse import quote

    return quote(job_id, safe="")


def _short(text: Any, width: int = 60) -> str:
    line = " ".join(str(text).split()) if text else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _ls(args: argparse.Namespace, cluster: Cluster) -> int:
    if not 1 <= args.limit <= 1000:
        raise CliError("--limit must be between 1 and 1000", 2)
    query = {"queue": args.queue, "state": args.state, "limit": args.limit, "before": args.before}
    body, jobs = cluster.get_list(
        f"{cluster.broker_admin()}/api/v1/jobs",
        "the broker",
        "jobs",
        "the broker answered no job list",
        query,
    )
    if args.json:
        print_json(body)
        return 0
    rows = [
        [
            j.get("id"),
            j.get("queue"),
            job_name(j),
            j.get("state"),
            j.get("attempts"),
            ago(j.get("created")),
            ago(j.get("updated")),
            _short(j.get("error")),
        ]
        for j in jobs
        if isinstance(j, dict)
    ]
    table(
        ["ID", "QUEUE", "JOB", "STATE", "ATTEMPTS", "CREATED", "UPDATED", "ERROR"],
        rows,
        right=("ATTEMPTS",),
    )
    more = f"; next page: --before {body['next']}" if body.get("next") else ""
    print(f"{len(rows)} jobs{more}")
    return 0


def _show(args: argparse.Namespace, cluster: Cluster) -> int:
    job = get_job(cluster, args.job_id)
    if args.json:
        print_json(job)
        return 0
    show_job(job)
    return 0


def show_job(job: dict[str, Any]) -> None:
    """A job as a two-column table, its result below as JSON."""
    from rich import box
    from rich.table import Table

    call = job_call(job)
    view = Table(box=box.SIMPLE, show_header=False, pad_edge=False, show_edge=False)
    view.add_column(style="bold")
    view.add_column(overflow="fold")
    retries = job.get("max_retries")
    fields = [
        ("id", job.get("id")),
        ("job", job_name(job)),
        ("queue", job.get("queue")),
        ("state", job.get("state")),
        ("attempts", f"{job.get('attempts')} (retries allowed: {retries})"),
        ("args", json.dumps(call.get("args", []))),
        ("kwargs", json.dumps(call.get("kwargs", {}))),
        ("timeout", "-" if job.get("timeout") is None else f"{job['timeout']:g} s"),
        ("created", stamp(job.get("created"))),
        ("started", stamp(job.get("started"))),
        ("updated", stamp(job.get("updated"))),
        ("worker", identity(job.get("worker"))),
        ("error", job.get("error") or "-"),
    ]
    for name, value in fields:
        view.add_row(name, "" if value is None else str(value))
    console().print(view)
    result = job.get("result")
    if result is not None:
        print("result:")
        print(json.dumps(result, indent=2, default=str, ensure_ascii=False))


def _act(args: argparse.Namespace, cluster: Cluster, action: str, done: str) -> int:
    url = f"{cluster.broker_admin()}/api/v1/jobs/{_quoted(args.job_id)}/{action}"
    return _acted(args, cluster.post(url, "the broker"), done)


def _acted(args: argparse.Namespace, job: Any, done: str) -> int:
    """What ``cancel`` and ``retry`` print once the broker has ``done`` it: the job."""
    state = job.get("state") if isinstance(job, dict) else "?"
    return print_answer(job, args.json, f"job {args.job_id} {done} (state {state})")


def _cancel(args: argparse.Namespace, cluster: Cluster) -> int:
    url = f"{cluster.broker_admin()}/api/v1/jobs/{_quoted(args.job_id)}/cancel"
    status, body = cluster.request("POST", url, "the broker", ok=(200, 409))
    if status == 200:
        return _acted(args, body, "cancelled")
    # 409: running or finished. A running Spark job's Spark work can be cancelled
    # where it runs; the job then fails with JobCancelled.
    job = get_job(cluster, args.job_id)
    if job.get("state") == "running":
        for admin in cluster.sparkworkers():
            url = f"{admin}/api/v1/spark/jobs/{_quoted(args.job_id)}/cancel"
            status, answer = cluster.request("POST", url, "the sparkworker", ok=(200, 404))
            if status == 200:
                where = {**answer, "sparkworker": admin} if isinstance(answer, dict) else answer
                return print_answer(
                    where,
                    args.json,
                    f"job {args.job_id} is running on {admin}: its Spark work is cancelling",
                )
    detail = body.get("detail") if isinstance(body, dict) else None
    raise CliError(f"the broker answered HTTP 409: {detail or 'not cancelled'}")
