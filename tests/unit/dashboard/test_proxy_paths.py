"""The catalog's proxy forwards the dashboard's reads and actions and nothing else."""

from __future__ import annotations

import pytest

from zbus.dashboard.proxy import allowed


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "api/v1/info"),
        ("GET", "readyz"),
        ("GET", "api/v1/bus"),
        ("GET", "api/v1/topics"),
        ("GET", "api/v1/events"),
        ("GET", "api/v1/replication"),
        ("POST", "api/v1/events"),
        ("GET", "api/v1/queues"),
        ("GET", "api/v1/jobs/0b7c-1"),
        ("GET", "api/v1/jobs/0b7c-1/result"),
        ("POST", "api/v1/jobs"),
        ("POST", "api/v1/jobs/0b7c-1/retry"),
        ("POST", "api/v1/jobs/0b7c-1/cancel"),
        ("POST", "api/v1/queues/default/purge"),
        ("GET", "api/v1/worker"),
        ("GET", "api/v1/spark/jobs"),
        ("POST", "api/v1/spark/jobs/abc/cancel"),
    ],
)
def test_the_dashboards_calls_are_allowed(method: str, path: str) -> None:
    assert allowed(method, path)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "metrics"),  # not a JSON API
        ("GET", "docs"),
        ("GET", "api/v1/services"),  # the catalog's own, not a proxied service's
        ("DELETE", "api/v1/services/x"),
        ("POST", "api/v1/archive/flush"),
        ("POST", "api/v1/info"),  # a read is not an action
        ("GET", "api/v1/jobs/a/retry"),  # an action is not a read
        ("GET", "api/v1/jobs/a/b"),
        ("GET", "api/v1/jobs/../../metrics"),
        ("GET", "api/v1/jobs/./result"),
        ("GET", "api/v1//info"),
        ("GET", "/api/v1/info"),
        ("GET", ""),
        ("PUT", "api/v1/jobs"),
        ("GET", "api/v1/infox"),
        ("GET", "xapi/v1/info"),
    ],
)
def test_anything_else_is_refused(method: str, path: str) -> None:
    assert not allowed(method, path)
