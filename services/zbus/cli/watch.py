"""``zbus jobs watch ID``: follow a job until it ends.

The job's state comes from the broker's admin API. A job on a sparkworker's queue (each
sparkworker's ``/api/v1/spark`` names its queue) also has Spark progress: its Spark
tasks done out of those known so far, from the sparkworker's ``/api/v1/spark/jobs/ID``,
shown as a progress bar; any other job gets a spinner. The total grows while Spark plans
new stages, so the bar can step back; it is full once the job succeeded.

``--json`` prints one JSON object per change instead. Exit status: 0 the job succeeded,
1 it failed, died or was cancelled, 3 it had not ended within ``--wait`` seconds.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from zbus.cli.common import CliError, Cluster
from zbus.cli.jobs import TERMINAL, get_job, job_name
from zbus.cli.output import console, duration, print_line

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["watch"]

POLL = 0.25  # seconds between two looks at the job


def _spark_admins(cluster: Cluster, queue: str) -> list[str]:
    """The sparkworkers that serve ``queue``."""
    found = []
    for admin in cluster.sparkworkers():
        try:
            info = cluster.get(f"{admin}/api/v1/spark", "the sparkworker")
        except CliError:
            continue  # one sparkworker down: the others may still run it
        if isinstance(info, dict) and info.get("queue") == queue:
            found.append(admin)
    return found


def _spark_progress(cluster: Cluster, admins: list[str], job_id: str) -> dict[str, Any] | None:
    for admin in admins:
        try:
            status, view = cluster.request(
                "GET", f"{admin}/api/v1/spark/jobs/{job_id}", "the sparkworker", ok=(200, 404)
            )
        except CliError:
            continue
        if status == 200 and isinstance(view, dict):
            return view
    return None


def _tasks(view: dict[str, Any] | None) -> tuple[int, int]:
    """(completed, total) Spark tasks of a sparkworker's job view."""
    progress = view.get("progress") if isinstance(view, dict) else None
    tasks = progress.get("tasks") if isinstance(progress, dict) else None
    if not isinstance(tasks, dict):
        return 0, 0
    return int(tasks.get("completed") or 0), int(tasks.get("total") or 0)


def _bar(spark: bool) -> Progress:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    if spark:
        return Progress(
            SpinnerColumn(finished_text="•"),
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            MofNCompleteColumn(),
            TextColumn("tasks"),
            TimeElapsedColumn(),
            console=console(),
        )
    return Progress(
        SpinnerColumn(finished_text="•"),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console(),
    )


def watch(args: argparse.Namespace, cluster: Cluster) -> int:
    if args.wait is not None and not 0 < args.wait <= 86400:
        raise CliError("--wait must be between 0 and 86400 seconds", 2)
    deadline = None if args.wait is None else time.monotonic() + args.wait
    job = get_job(cluster, args.job_id)
    name, queue = job_name(job), str(job.get("queue"))
    admins = _spark_admins(cluster, queue)
    spark = bool(admins)
    label = f"{name} on {queue}"
    last: tuple[Any, ...] | None = None
    view: dict[str, Any] | None = None
    bar = None if args.json else _bar(spark)
    try:
        if bar is not None:
            bar.start()
            task = bar.add_task(f"{label}: {job.get('state')}", total=None)
        while True:
            state = str(job.get("state"))
            if spark and state == "running":
                view = _spark_progress(cluster, admins, args.job_id) or view
            done, total = _tasks(view)
            if state == "succeeded":
                done = total = max(total, 1)  # stages Spark skipped never report as done
            if bar is not None:
                bar.update(
                    task,
                    description=f"{label}: {state}",
                    completed=done,
                    total=total or None,
                )
            elif (state, done, total, job.get("attempts")) != last:
                last = (state, done, total, job.get("attempts"))
                line: dict[str, Any] = {
                    "id": args.job_id,
                    "job": name,
                    "queue": queue,
                    "state": state,
                    "attempts": job.get("attempts"),
                }
                if spark:
                    tasks = _tasks(view)  # as Spark reported them
                    line["spark"] = {"tasks_completed": tasks[0], "tasks_total": tasks[1]}
                print_line(line)
            if state in TERMINAL:
                break
            if deadline is not None and time.monotonic() >= deadline:
                if bar is not None:
                    bar.stop()
                raise CliError(f"job {args.job_id} is still {state} after {args.wait:g} s", 3)
            time.sleep(POLL)
            job = get_job(cluster, args.job_id)
    except KeyboardInterrupt:
        if bar is not None:
            bar.stop()
        return 130
    if bar is not None:
        bar.stop()
    took = None
    if job.get("updated") is not None and job.get("created") is not None:
        took = float(job["updated"]) - float(job["created"])
    state = str(job.get("state"))
    if args.json:
        print_line({"id": args.job_id, "final": True, **job})
    else:
        error = f": {job.get('error')}" if job.get("error") else ""
        print(f"job {args.job_id} {state} after {duration(took)}{error}")
    return 0 if state == "succeeded" else 1
