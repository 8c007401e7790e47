"""Rows the broker rebuilds from, brought back into their ranges (ADR 0003 decision 2).

The core refuses every out-of-range number before it is stored, but a store may hold
rows written before those checks existed (a ``retry-count`` of 2**63 - 1, say), or by
hand. The rebuild never refuses to start over such a row and never lets one break a
later sum: each field outside its stored range is set to the nearest value the broker
would have accepted, a schedule that cannot run is dropped, and every change is
reported (the wiring logs each one and counts them) and written back.

Stored ranges (the request ranges of :mod:`zbus.broker.core.limits`, plus what the
broker itself adds):

- ``attempts``: 0..MAX_STORED_COUNT; ``max_retries``: 0..MAX_STORED_COUNT, since each
  broker restart during an attempt adds one; a value outside is set to the nearest of
  0 and MAX_RETRIES, the most a job may ask for;
- ``timeout``: none, or more than 0 and at most MAX_SECONDS;
- ``not_before``: a finite time at most MAX_SECONDS after the rebuild;
- a schedule's ``interval``: MIN_INTERVAL..MAX_INTERVAL, or a cron line that parses;
  its headers as a SCHEDULE must carry them; ``next_run``: a finite time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from zbus.broker.core.lifecycle import job_options, run_count
from zbus.broker.core.limits import (
    MAX_INTERVAL,
    MAX_RETRIES,
    MAX_SECONDS,
    MAX_STORED_COUNT,
    MIN_INTERVAL,
)
from zbus.broker.core.model import Job, Schedule
from zbus.broker.core.schedules import ScheduleBook

__all__ = ["Repairs", "repair_job", "repair_schedule", "repair_stored"]


@dataclass(slots=True)
class Repairs:
    """What the rebuild changed in the stored rows.

    Attributes:
        notes: one line per repaired or dropped row, saying what and why.
        jobs: the ids of jobs whose repaired value must be written back.
        schedules: the ids of schedules whose repaired value must be written back.
        dropped: the ids of schedules dropped (they cannot run).
    """

    notes: list[str] = field(default_factory=list)
    jobs: set[str] = field(default_factory=set)
    schedules: set[str] = field(default_factory=set)
    dropped: list[str] = field(default_factory=list)


def _count(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_STORED_COUNT


def _number(value: object) -> float | None:
    """``value`` as a finite float, or None when it is not one."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            return None
        return number if math.isfinite(number) else None
    return None


def _note(name: str, old: object, new: object) -> str:
    return f"{name} {old!r} -> {new!r}"


def repair_job(job: Job, now: float) -> tuple[Job, list[str]]:
    """``job`` with every number in its stored range, and what was changed."""
    notes: list[str] = []
    attempts, max_retries, timeout, not_before = (
        job.attempts,
        job.max_retries,
        job.timeout,
        job.not_before,
    )
    if not _count(attempts):
        attempts = MAX_STORED_COUNT if type(attempts) is int and attempts > 0 else 0
        notes.append(_note("attempts", job.attempts, attempts))
    if not _count(max_retries):
        max_retries = MAX_RETRIES if type(max_retries) is int and max_retries > 0 else 0
        notes.append(_note("max_retries", job.max_retries, max_retries))
    if timeout is not None:
        seconds = _number(timeout)
        if seconds is None or seconds <= 0:
            timeout = None
        elif seconds > MAX_SECONDS:
            timeout = float(MAX_SECONDS)
        if timeout != job.timeout:
            notes.append(_note("timeout", job.timeout, timeout))
    at = _number(not_before)
    if at is None or at > now + MAX_SECONDS:
        not_before = now if at is None else now + MAX_SECONDS
        notes.append(_note("not_before", job.not_before, not_before))
    if not notes:
        return job, notes
    fixed = replace(
        job, attempts=attempts, max_retries=max_retries, timeout=timeout, not_before=not_before
    )
    return fixed, notes


def repair_schedule(
    schedule: Schedule, now: float, book: ScheduleBook
) -> tuple[Schedule | None, list[str]]:
    """``schedule`` with its numbers in range, or None when it cannot run; and why."""
    try:
        job_options(schedule.headers, 0)
        run_count(schedule.headers)
    except (ValueError, TypeError) as exc:
        return None, [f"headers: {exc}"]
    notes: list[str] = []
    interval, cron, next_run = schedule.interval, schedule.cron, schedule.next_run
    if interval is None:
        if not isinstance(cron, str):
            return None, ["neither an interval nor a cron line"]
        try:
            book.cron(cron)
        except ValueError as exc:  # CronError
            return None, [f"cron line: {exc}"]
    else:
        seconds = _number(interval)
        if seconds is None:
            return None, [f"interval {interval!r} is not a number"]
        if not MIN_INTERVAL <= seconds <= MAX_INTERVAL:
            interval = float(min(max(seconds, MIN_INTERVAL), MAX_INTERVAL))
            notes.append(_note("interval", schedule.interval, interval))
    if _number(next_run) is None:
        next_run = book.first_run(interval, cron if interval is None else None, now)
        notes.append(_note("next_run", schedule.next_run, next_run))
    if not notes:
        return schedule, notes
    return replace(schedule, interval=interval, next_run=next_run), notes


def repair_stored(
    jobs: Sequence[Job], schedules: Sequence[Schedule], now: float, book: ScheduleBook
) -> tuple[list[Job], list[Schedule], Repairs]:
    """Every stored job and schedule, repaired where needed (see the module)."""
    repairs = Repairs()
    fixed_jobs: list[Job] = []
    for job in jobs:
        fixed, notes = repair_job(job, now)
        if notes:
            repairs.jobs.add(job.id)
            repairs.notes.append(f"job {job.id}: {'; '.join(notes)}")
        fixed_jobs.append(fixed)
    kept: list[Schedule] = []
    for schedule in schedules:
        repaired, notes = repair_schedule(schedule, now, book)
        if repaired is None:
            repairs.dropped.append(schedule.id)
            repairs.notes.append(f"schedule {schedule.id} dropped: {'; '.join(notes)}")
            continue
        if notes:
            repairs.schedules.add(schedule.id)
            repairs.notes.append(f"schedule {schedule.id}: {'; '.join(notes)}")
        kept.append(repaired)
    return fixed_jobs, kept, repairs
