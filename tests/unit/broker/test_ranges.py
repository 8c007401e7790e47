"""The broker's ranges (zbus.broker.core.limits): every number from the wire, a client or
the store is in its documented range, or refused with an error naming the field and
counted; nothing out of range reaches the store, and what the store already holds out of
range is repaired at start, never fatal. The core's changes are written to a real SQLite
store, which is where an out-of-range integer used to fail."""

from __future__ import annotations

import itertools
import math
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FUZZ_EXAMPLES
from zbus.broker.client.base import check_worker, job_headers
from zbus.broker.core.broker import BrokerCore, CoreConfig
from zbus.broker.core.errors import HeaderError, RangeError
from zbus.broker.core.interface import OutOfRange
from zbus.broker.core.limits import (
    MAX_INTERVAL,
    MAX_RETRIES,
    MAX_SECONDS,
    MAX_STORED_COUNT,
    MAX_WORKER_QUEUES,
    MAX_WORKER_SLOTS,
    parse_count,
    parse_seconds,
)
from zbus.broker.core.model import Job, JobState, Schedule
from zbus.broker.server.config import BrokerSettings
from zbus.broker.server.store import JobStore
from zbus.common.protocols.emqp import (
    EventmqCall,
    Headers,
    Inform,
    Ready,
    Reply,
    Request,
    build_call_body,
)
from zbus.common.protocols.emqp import Schedule as ScheduleCommand
from zbus.common.settings import ConfigError

T0 = 1_700_000_000.0
BODY = build_call_body(EventmqCall(callable="f", path="m"))
EXAMPLES = max(50, FUZZ_EXAMPLES // 20)

huge = st.one_of(
    st.sampled_from([0, 1, 1000, 1001, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**20]),
    st.integers(),
)
number_text = st.one_of(
    huge.map(str),
    st.integers(1, 6000).map(lambda n: "9" * n),
    st.sampled_from(
        ["", "-1", "-0", "+5", "1e3", "1e400", "inf", "nan", "0x10", " 5", "1_0", "٣", "2.5"]
    ),
    st.floats().map(repr),
    st.text(max_size=8),
)
extreme_float = st.one_of(
    st.floats(),
    st.sampled_from([0.0, -1.0, 1e300, float(MAX_SECONDS) + 1, math.nan, math.inf]),
)


@pytest.fixture(scope="module")
def store() -> Iterator[JobStore]:
    with tempfile.TemporaryDirectory() as folder:
        store = JobStore(Path(folder) / "jobs.db")
        yield store
        store.close()


def _core(jobs: Sequence[Job] = (), schedules: Sequence[Schedule] = ()) -> BrokerCore:
    ids = itertools.count()
    return BrokerCore(
        CoreConfig(), jobs, schedules, now=T0, wall=T0, new_id=lambda: f"m{next(ids)}"
    )


def _write(core: BrokerCore, store: JobStore) -> None:
    changes = core.take_changes()
    store.write(changes.jobs, changes.schedules, changes.deleted_schedules)


def _assert_in_range(job: Job) -> None:
    assert 0 <= job.attempts <= MAX_STORED_COUNT
    assert 0 <= job.max_retries <= MAX_STORED_COUNT
    assert job.timeout is None or 0 < job.timeout <= MAX_SECONDS
    assert math.isfinite(job.not_before) and job.not_before <= T0 + MAX_SECONDS


# --------------------------------------------------------------------------- from the wire


@settings(max_examples=EXAMPLES)
@given(
    name=st.sampled_from(["retry-count", "timeout", "delay"]),
    text=number_text,
    n=st.integers(0, 10**9),
)
def test_request_numbers_are_in_range_or_refused_by_name(
    store: JobStore, name: str, text: str, n: int
) -> None:
    core = _core()
    headers: Headers = ((name, text),) if text and "," not in text else ()
    notice = core.client_message(b"C", Request(f"job-{n}", "default", headers, BODY), T0, wall=T0)
    job = core.job(f"job-{n}")
    if notice is None:
        assert job is not None
        _assert_in_range(job)
        assert job.max_retries <= MAX_RETRIES
    else:
        assert isinstance(notice, OutOfRange) and notice.startswith(f"header {name}: expected")
        assert job is None and core.counters["out_of_range"] == 1
    _write(core, store)  # an integer beyond SQLite's used to fail here, in the router


@pytest.mark.parametrize(
    "value", ["99999999999999999999", "9223372036854775807", "1001", "-1", "9" * 5000]
)
def test_the_issue_retry_counts_are_refused(store: JobStore, value: str) -> None:
    core = _core()
    notice = core.client_message(
        b"C", Request("j", "q", (("retry-count", value),), BODY), T0, wall=T0
    )
    assert isinstance(notice, OutOfRange)
    assert notice.startswith("header retry-count: expected a whole number in 0..1000, got")
    assert len(notice) < 200  # a 5,000-digit value is not copied into the message
    (refusal,) = core.take_outbox()
    assert isinstance(refusal.command, Reply) and b'"state":"rejected"' in refusal.command.body
    assert core.take_changes().jobs == []
    assert core.counters["rejected_requests"] == core.counters["out_of_range"] == 1


@settings(max_examples=EXAMPLES)
@given(interval=st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, MAX_INTERVAL + 1]))
def test_schedule_intervals_are_in_range_or_refused(store: JobStore, interval: int) -> None:
    core = _core()
    notice = core.client_message(
        b"C", ScheduleCommand("s", "default", (("nohaste", ""),), interval, BODY, ""), T0, wall=T0
    )
    if 1 <= interval <= MAX_INTERVAL:
        assert notice is None and core.schedules()[0].interval == interval
    else:
        assert isinstance(notice, OutOfRange) and notice.startswith("SCHEDULE interval")
        assert core.schedules() == []
    _write(core, store)


@pytest.mark.parametrize(
    ("headers", "cron", "fragment"),
    [
        ((("run_count", "99999999999999999999"),), "", "header run_count"),
        ((("run_count", "-5"),), "", "header run_count"),
        ((("retry-count", "1001"),), "", "header retry-count"),
        ((), "* " * 200, "SCHEDULE cron line: expected 1 to 256 characters"),
    ],
)
def test_schedule_headers_and_cron_lines_are_bounded(
    headers: Headers, cron: str, fragment: str
) -> None:
    core = _core()
    interval = -1 if cron else 60
    notice = core.client_message(
        b"C", ScheduleCommand("s", "q", headers, interval, BODY, cron), T0, wall=T0
    )
    assert isinstance(notice, OutOfRange) and fragment in notice
    assert core.schedules() == [] and core.counters["rejected_schedules"] == 1


def test_identifiers_are_bounded() -> None:
    core = _core()
    assert isinstance(
        core.client_message(b"C", Request("j" * 257, "q", (), BODY), T0, wall=T0), OutOfRange
    )
    notice = core.client_message(b"C", Request("j", "q" * 257, (), BODY), T0, wall=T0)
    assert isinstance(notice, OutOfRange) and notice.startswith("queue: expected 1 to 256")
    assert isinstance(
        core.client_message(b"C", Request("j", "", (), BODY), T0, wall=T0), OutOfRange
    )
    assert core.client_message(b"C", Request("j" * 256, "q" * 256, (), BODY), T0, wall=T0) is None


def test_a_worker_holds_a_bounded_number_of_slots_and_queues() -> None:
    core = _core()
    many = tuple((f"q{i}", 10) for i in range(MAX_WORKER_QUEUES + 1))
    notice = core.worker_message(b"W", Inform("i", many), T0, wall=T0)
    assert isinstance(notice, OutOfRange) and notice.startswith("INFORM queues: expected")
    assert core.worker_views() == []
    assert core.worker_message(b"W", Inform("i", many[:MAX_WORKER_QUEUES]), T0, wall=T0) is None
    for _ in range(MAX_WORKER_SLOTS):
        assert core.worker_message(b"W", Ready("r"), T0, wall=T0) is None
    notice = core.worker_message(b"W", Ready("r"), T0, wall=T0)
    assert isinstance(notice, OutOfRange) and "READY beyond 1024" in notice
    assert core.worker_views()[0].slots_free == MAX_WORKER_SLOTS


# --------------------------------------------------------------------------- from the store


def _stored(state: JobState, **fields: object) -> Job:
    job = Job("j", "default", (), BODY, b"C", state, 1, 0, None, T0, T0, T0, worker=b"W")
    return replace(job, **fields)  # type: ignore[arg-type]


@settings(max_examples=EXAMPLES)
@given(
    state=st.sampled_from([JobState.QUEUED, JobState.RUNNING]),
    attempts=st.integers(-(2**63), 2**63 - 1),
    max_retries=st.integers(-(2**63), 2**63 - 1) | st.sampled_from([2**63 - 1, 2**31 - 1]),
    timeout=st.none() | extreme_float,
    not_before=extreme_float,
)
def test_stored_rows_out_of_range_are_repaired_not_fatal(
    store: JobStore,
    state: JobState,
    attempts: int,
    max_retries: int,
    timeout: float | None,
    not_before: float,
) -> None:
    row = _stored(
        state, attempts=attempts, max_retries=max_retries, timeout=timeout, not_before=not_before
    )
    core = _core([row])  # the rebuild: a running job gets a retry back
    job = core.job("j")
    assert job is not None and job.state is JobState.QUEUED
    _assert_in_range(job)
    if core.counters["repaired_rows"]:
        assert core.repairs and core.repairs[0].startswith("job j: ")
    _write(core, store)  # max_retries 2**63 - 1, plus one: the overflow of the issue
    core.tick(T0 + MAX_SECONDS + 1, wall=T0 + MAX_SECONDS + 1)
    _write(core, store)


def test_the_issue_row_is_repaired_and_its_restart_credit_stops_at_the_stored_bound() -> None:
    core = _core([_stored(JobState.RUNNING, max_retries=2**63 - 1)])
    job = core.job("j")
    assert job is not None and job.max_retries == MAX_RETRIES + 1  # repaired, then + 1
    assert core.repairs == [f"job j: max_retries {2**63 - 1} -> {MAX_RETRIES}"]
    assert core.counters["repaired_rows"] == 1
    saturated = _core([_stored(JobState.RUNNING, max_retries=MAX_STORED_COUNT)])
    job = saturated.job("j")
    assert job is not None and job.max_retries == MAX_STORED_COUNT
    assert saturated.repairs == []


@pytest.mark.parametrize(
    ("interval", "cron", "next_run", "kept"),
    [
        (0.0, None, T0, 1.0),
        (-5.0, None, T0, 1.0),
        (1e300, None, T0, float(MAX_INTERVAL)),
        (60.0, None, math.nan, 60.0),
        (math.nan, None, T0, None),
        (None, None, T0, None),
        (None, "61 * * * *", T0, None),
        (None, "*/5 * * * *", math.inf, "cron"),
    ],
)
def test_stored_schedules_out_of_range_are_repaired_or_dropped(
    store: JobStore, interval: float | None, cron: str | None, next_run: float, kept: object
) -> None:
    row = Schedule("s", "default", (), BODY, interval, cron, next_run, T0)
    core = _core(schedules=[row])
    assert core.counters["repaired_rows"] == 1 and len(core.repairs) == 1
    changes = core.take_changes()
    if kept is None:
        assert core.schedules() == [] and changes.deleted_schedules == ["s"]
        assert "dropped" in core.repairs[0]
    else:
        (schedule,) = core.schedules()
        assert changes.schedules == [schedule] and math.isfinite(schedule.next_run)
        assert schedule.interval == (None if kept == "cron" else kept)
    store.write(changes.jobs, changes.schedules, changes.deleted_schedules)
    for step in range(1, 4):  # an interval of 0 used to divide by zero here
        core.tick(T0 + step * 3600, wall=T0 + step * 3600)
        _write(core, store)


def test_a_stored_schedule_with_bad_headers_is_dropped() -> None:
    headers = (("retry-count", "99999999999999999999"),)
    core = _core(schedules=[Schedule("s", "q", headers, BODY, 60.0, None, T0, T0)])
    assert core.schedules() == [] and "header retry-count" in core.repairs[0]


# --------------------------------------------------------------------------- parsers


@settings(max_examples=EXAMPLES)
@given(text=number_text, low=st.sampled_from([0, -1]), high=st.sampled_from([1000, 10**9]))
def test_parse_count_gives_a_count_in_range_or_a_header_error(
    text: str, low: int, high: int
) -> None:
    try:
        value = parse_count("h", text, low, high)
    except HeaderError as exc:
        assert exc.header == "h" and str(exc).startswith("header h: expected")
    else:
        assert type(value) is int and low <= value <= high


@settings(max_examples=EXAMPLES)
@given(text=number_text)
def test_parse_seconds_gives_seconds_in_range_or_a_header_error(text: str) -> None:
    try:
        value = parse_seconds("h", text, MAX_SECONDS)
    except HeaderError:
        pass
    else:
        assert 0 <= value <= MAX_SECONDS


# --------------------------------------------------------------------------- clients, settings


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"retries": 10**20}, "retries"),
        ({"retries": MAX_RETRIES + 1}, "retries"),
        ({"retries": 1.0}, "retries"),
        ({"timeout": 1e300}, "timeout"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": 10**400}, "timeout"),
        ({"delay": math.inf}, "delay"),
        ({"delay": MAX_SECONDS + 1}, "delay"),
    ],
)
def test_job_headers_refuse_out_of_range_options_by_name(
    options: dict[str, float], field: str
) -> None:
    with pytest.raises(ValueError, match=f"^{field}: expected"):
        job_headers(**options)  # type: ignore[arg-type]


def test_job_headers_at_the_edges() -> None:
    assert job_headers(MAX_RETRIES, MAX_SECONDS, 0) == (
        ("reply-requested", ""),
        ("retry-count", "1000"),
        ("timeout", "2592000"),
        ("delay", "0"),
    )


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"concurrency": 10**6}, "concurrency"),
        ({"concurrency": 0}, "concurrency"),
        ({"misses": 10**20}, "misses"),
        ({"heartbeat_interval": 1e9}, "heartbeat_interval"),
        ({"heartbeat_interval": math.nan}, "heartbeat_interval"),
        ({"drain_timeout": 0}, "drain_timeout"),
        ({"queues": ["q" * 257]}, "queues"),
        ({"queues": [f"q{i}" for i in range(MAX_WORKER_QUEUES + 1)]}, "queues"),
    ],
)
def test_worker_arguments_are_bounded(arguments: dict[str, object], field: str) -> None:
    values: dict[str, object] = {
        "queues": ["default"],
        "concurrency": 4,
        "heartbeat_interval": 3.0,
        "misses": 3,
        "drain_timeout": 10.0,
    }
    values.update(arguments)
    with pytest.raises(ValueError, match=f"^{field}: expected"):
        check_worker(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("default_retries", 10**20),
        ("default_retries", MAX_RETRIES + 1),
        ("backoff_max", 1e300),
        ("heartbeat_interval", 1e9),
        ("heartbeat_misses", 10**6),
    ],
)
def test_settings_and_core_config_share_the_ranges(setting: str, value: float) -> None:
    with pytest.raises(ConfigError, match=setting):
        BrokerSettings.load([f"--{setting.replace('_', '-')}", str(value)])
    with pytest.raises(RangeError, match=f"^CoreConfig.{setting}: expected"):
        CoreConfig(**{setting: value})  # type: ignore[arg-type]
