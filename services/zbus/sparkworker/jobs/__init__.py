"""Pipeline jobs: what a job is, the built-ins, and the registry of jobs by name.

A job is a function ``(spark: SparkSession, params: dict) -> result``; see
:mod:`zbus.sparkworker.jobs.base` for the result shapes and the job's context. This
package is the API for writing Spark jobs (``pip install zbus[spark]``).
"""

from zbus.sparkworker.archive import read_archive
from zbus.sparkworker.jobs.base import (
    JobContext,
    JobFunction,
    TableResult,
    current_job,
    job_context,
)
from zbus.sparkworker.jobs.registry import (
    ENTRY_POINT_GROUP,
    JobRegistry,
    JobSpec,
    builtin_jobs,
    check_job_name,
    parse_job_specs,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "JobContext",
    "JobFunction",
    "JobRegistry",
    "JobSpec",
    "TableResult",
    "builtin_jobs",
    "check_job_name",
    "current_job",
    "job_context",
    "parse_job_specs",
    "read_archive",
]
