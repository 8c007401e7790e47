"""Registering jobs: built-ins, the spark_jobs setting, entry points, and refusals."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from tests.support import spark_jobs
from zbus.common.settings import ConfigError
from zbus.sparkworker.jobs import JobRegistry, parse_job_specs


def test_builtins_and_user_jobs_by_module_path() -> None:
    jobs = JobRegistry()
    jobs.add_builtins("archive")
    jobs.add_specs(
        "squares=tests.support.spark_jobs:squares, table = tests.support.spark_jobs:numbers"
    )
    assert jobs.names == ["compact", "export", "squares", "table", "topic-stats"]
    spec = jobs.get("squares")
    assert spec is not None and spec.fn is spark_jobs.squares
    described = {d["name"]: d for d in jobs.describe()}
    assert described["squares"]["doc"] == "Sum of the squares of 0..n-1, computed by Spark."
    assert described["squares"]["source"] == "spark_jobs (tests.support.spark_jobs:squares)"
    assert described["topic-stats"]["doc"].startswith("Per-topic events, bytes")
    assert described["compact"]["source"] == "built-in"
    assert "compact" in jobs and "nope" not in jobs


def test_entry_points() -> None:
    jobs = JobRegistry()
    jobs.add_entry_points(
        [EntryPoint("nightly", "tests.support.spark_jobs:squares", "zbus.spark_jobs")]
    )
    spec = jobs.get("nightly")
    assert spec is not None and spec.fn is spark_jobs.squares
    assert spec.source.startswith("entry point nightly = tests.support.spark_jobs:squares")
    jobs.add_entry_points()  # the installed packages' group: none in this environment


def test_duplicates_name_both_sources() -> None:
    jobs = JobRegistry()
    jobs.add_builtins("archive")
    with pytest.raises(ConfigError, match=r"two jobs are named 'compact': one from built-in, one"):
        jobs.add_specs("compact=tests.support.spark_jobs:squares")
    jobs.add_specs("squares=tests.support.spark_jobs:squares")
    with pytest.raises(ConfigError, match=r"'squares': one from spark_jobs .*, one from entry"):
        jobs.add_entry_points(
            [EntryPoint("squares", "tests.support.spark_jobs:numbers", "zbus.spark_jobs")]
        )


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("squares", "expected name=module:function"),
        ("squares=tests.support.spark_jobs", "expected module:function"),
        ("-x=tests.support.spark_jobs:squares", "invalid job name '-x'"),
        ("a=tests.support.no_such_module:f", "job a: cannot import tests.support.no_such_module"),
        ("a=tests.support.spark_jobs:missing", "job a: tests.support.spark_jobs has no missing"),
        ("a=tests.support.spark_jobs:not_callable", "job a is not callable"),
    ],
)
def test_bad_specs(spec: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"^spark_jobs.*{problem}"):
        JobRegistry().add_specs(spec)


def test_entry_point_that_does_not_load() -> None:
    with pytest.raises(ConfigError, match=r"entry point broken = .* cannot load"):
        JobRegistry().add_entry_points(
            [EntryPoint("broken", "tests.support.no_such_module:f", "zbus.spark_jobs")]
        )


def test_spec_parsing() -> None:
    assert parse_job_specs(" a=m:f ,, b.c-d=pkg.mod:Cls.method") == [
        ("a", "m:f"),
        ("b.c-d", "pkg.mod:Cls.method"),
    ]
    assert parse_job_specs("") == []
