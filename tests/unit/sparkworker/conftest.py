"""The process's one SparkSession, and archives generated for each test."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.archive import ArchivedEvent, archive_mark, make_events, write_archive
from tests.support.spark import local_session

TOPICS = ("sensors/temp", "sensors/humidity", "orders/new", "orders/paid", "logs/app")
START = datetime(2024, 3, 9, 22, 0, tzinfo=UTC)  # spans midnight: two date partitions


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return local_session()


@pytest.fixture
def events() -> list[ArchivedEvent]:
    # 600 events 3 minutes apart: from 22:00 on the 9th to 04:00 on the 11th.
    return make_events(600, TOPICS, START, timedelta(minutes=3))


@pytest.fixture
def archive(tmp_path: Path, events: list[ArchivedEvent]) -> Path:
    root = tmp_path / "archive"
    write_archive(root, events)
    (root / "_zbus_archive.json").write_text(archive_mark(600))
    return root
