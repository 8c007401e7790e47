"""The jobs a sparkworker runs, by name: built-ins, the ``spark_jobs`` setting, and the
``zbus.spark_jobs`` entry point group of installed packages.

A name is 1-64 characters of letters, digits, ``_``, ``.`` and ``-``, starting with a
letter or digit (it becomes a directory of the output path and a metric label). Two
jobs under one name, from any two sources, stop the worker at start with both named.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from zbus.common.settings import ConfigError
from zbus.sparkworker.jobs.base import JobFunction
from zbus.sparkworker.jobs.compact import compact
from zbus.sparkworker.jobs.export import export
from zbus.sparkworker.jobs.topic_stats import topic_stats

__all__ = [
    "ENTRY_POINT_GROUP",
    "JobRegistry",
    "JobSpec",
    "builtin_jobs",
    "check_job_name",
    "parse_job_specs",
]

ENTRY_POINT_GROUP: Final = "zbus.spark_jobs"
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_TARGET: Final = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def check_job_name(name: str) -> str:
    """``name`` if it can name a job.

    Raises:
        ValueError: saying what a name may be.
    """
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"invalid job name {name!r}: 1-64 letters, digits, '_', '.', '-', "
            "starting with a letter or digit"
        )
    return name


def parse_job_specs(text: str) -> list[tuple[str, str]]:
    """``"name=module:function, ..."`` as ``[(name, "module:function"), ...]``.

    Raises:
        ValueError: an item without ``=``, a bad name, or a target not ``module:function``.
    """
    specs: list[tuple[str, str]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, target = (s.strip() for s in item.partition("="))
        if not sep:
            raise ValueError(f"expected name=module:function, got {item!r}")
        check_job_name(name)
        if not _TARGET.fullmatch(target):
            raise ValueError(f"job {name}: expected module:function, got {target!r}")
        specs.append((name, target))
    return specs


def _load_target(target: str) -> object:
    module_name, _, attr = target.partition(":")
    try:
        found: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name}: {exc}") from None
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ConfigError(f"{module_name} has no {attr}") from None
    return found


def _summary(fn: object) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A registered job: its name, function, where it came from, its docstring's first line."""

    name: str
    fn: JobFunction
    source: str
    doc: str


class JobRegistry:
    """Jobs by name; adding one twice is a :class:`ConfigError`."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobSpec] = {}

    def add(self, name: str, fn: object, source: str, doc: str | None = None) -> JobSpec:
        """Register ``fn`` as ``name``.

        Raises:
            ConfigError: a bad name, ``fn`` not callable, or the name already taken.
        """
        try:
            check_job_name(name)
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        if not callable(fn):
            raise ConfigError(f"{source}: job {name} is not callable: {fn!r:.100}")
        taken = self._jobs.get(name)
        if taken is not None:
            raise ConfigError(
                f"two jobs are named {name!r}: one from {taken.source}, one from {source}"
            )
        spec = JobSpec(name, fn, source, _summary(fn) if doc is None else doc)
        self._jobs[name] = spec
        return spec

    def add_builtins(self, archive_path: str) -> None:
        """The built-in jobs, reading the archive at ``archive_path`` by default."""
        for name, fn in builtin_jobs(archive_path).items():
            self.add(name, fn, "built-in")

    def add_specs(self, text: str, source: str = "spark_jobs") -> None:
        """Jobs from ``"name=module:function, ..."`` (the ``spark_jobs`` setting).

        Raises:
            ConfigError: a malformed item, a target that does not import, a duplicate.
        """
        try:
            specs = parse_job_specs(text)
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        for name, target in specs:
            try:
                fn = _load_target(target)
            except ConfigError as exc:
                raise ConfigError(f"{source}: job {name}: {exc}") from None
            self.add(name, fn, f"{source} ({target})")

    def add_entry_points(
        self, entry_points: Iterable[importlib.metadata.EntryPoint] | None = None
    ) -> None:
        """Jobs of the ``zbus.spark_jobs`` entry point group (default: installed packages).

        Raises:
            ConfigError: an entry point that does not load, or a duplicate name.
        """
        if entry_points is None:
            entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        for ep in entry_points:
            dist = getattr(ep.dist, "name", None) if ep.dist is not None else None
            source = f"entry point {ep.name} = {ep.value}" + (f" of {dist}" if dist else "")
            try:
                fn = ep.load()
            except Exception as exc:  # whatever importing user code raises
                raise ConfigError(f"{source}: cannot load: {exc}") from None
            self.add(ep.name, fn, source)

    def get(self, name: str) -> JobSpec | None:
        return self._jobs.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    @property
    def names(self) -> list[str]:
        return sorted(self._jobs)

    def describe(self) -> list[dict[str, str]]:
        """Name, docstring's first line and source of every job, by name."""
        return [
            {"name": s.name, "doc": s.doc, "source": s.source}
            for s in sorted(self._jobs.values(), key=lambda s: s.name)
        ]


def builtin_jobs(archive_path: str) -> dict[str, JobFunction]:
    """``topic-stats``, ``compact`` and ``export``, bound to the worker's archive."""
    jobs: dict[str, JobFunction] = {}
    for name, fn in (("topic-stats", topic_stats), ("compact", compact), ("export", export)):
        bound = functools.partial(fn, archive=archive_path)
        functools.update_wrapper(bound, fn)
        jobs[name] = bound
    return jobs
