"""The schedules the broker holds (ADR 0003 decision 8): when each fires next.

eventmq's scheduler semantics, kept so that its clients see the same behaviour:

- an interval schedule first fires ``interval`` seconds after it is received and then
  keeps that cadence (eventmq's ``IntervalIter``); a cron schedule fires on the next
  matching minute after now.
- ``run_count:N`` in the headers limits the runs; the remaining count is kept in the
  stored headers, as eventmq keeps it in its stored message.

Where zbus differs: runs missed while the broker was down or late are not replayed in a
burst; a schedule that is due fires once and moves to its next run after now.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from datetime import tzinfo

from zbus.broker.core.cron import CronExpression
from zbus.broker.core.lifecycle import run_count, with_run_count
from zbus.broker.core.model import Schedule


class ScheduleBook:
    """Schedules by id, and a heap of their next runs (stale entries skipped lazily)."""

    def __init__(self, tz: tzinfo) -> None:
        self.tz = tz
        self.schedules: dict[str, Schedule] = {}
        self._heap: list[tuple[float, str]] = []
        self._crons: dict[str, CronExpression] = {}

    def cron(self, text: str) -> CronExpression:
        """The parsed expression (cached: schedules repeat the same few lines).

        Raises:
            CronError: when ``text`` does not parse.
        """
        expr = self._crons.get(text)
        if expr is None:
            expr = CronExpression.parse(text)
            if len(self._crons) > 1024:
                self._crons.clear()
            self._crons[text] = expr
        return expr

    def first_run(self, interval: float | None, cron: str | None, now: float) -> float:
        """When a schedule received at ``now`` first fires."""
        if interval is not None:
            return now + interval
        assert cron is not None
        return self.cron(cron).next_after(now, self.tz)

    def put(self, schedule: Schedule) -> None:
        self.schedules[schedule.id] = schedule
        heapq.heappush(self._heap, (schedule.next_run, schedule.id))

    def remove(self, schedule_id: str) -> Schedule | None:
        return self.schedules.pop(schedule_id, None)

    def with_body(self, body: bytes) -> list[str]:
        """Ids of the schedules whose job body is ``body`` (eventmq's UNSCHEDULE key)."""
        return [s.id for s in self.schedules.values() if s.body == body]

    def _valid(self, entry: tuple[float, str]) -> bool:
        schedule = self.schedules.get(entry[1])
        return schedule is not None and schedule.next_run == entry[0]

    def next_deadline(self) -> float | None:
        heap = self._heap
        while heap and not self._valid(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, now: float) -> list[Schedule]:
        """The schedules due at ``now``, taken off the heap (the caller puts them back)."""
        heap, due = self._heap, []
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            if self._valid(entry):
                due.append(self.schedules[entry[1]])
        return due

    @staticmethod
    def spend_run(schedule: Schedule) -> Schedule | None:
        """The schedule with one run of its ``run_count`` spent; ``None`` when none is left."""
        left = run_count(schedule.headers)
        if left is None:
            return schedule
        if left <= 1:
            return None
        return replace(schedule, headers=with_run_count(schedule.headers, left - 1))

    def advance(self, schedule: Schedule, now: float) -> Schedule | None:
        """The schedule after one run at ``now``, or ``None`` when its runs are used up."""
        spent = self.spend_run(schedule)
        if spent is None:
            return None
        if spent.interval is not None:
            following = spent.next_run + spent.interval
            if following <= now:  # late: skip the missed runs, keep the cadence
                missed = math.floor((now - following) / spent.interval) + 1
                following += missed * spent.interval
        else:
            assert spent.cron is not None
            following = self.cron(spent.cron).next_after(now, self.tz)
        return replace(spent, next_run=following)
