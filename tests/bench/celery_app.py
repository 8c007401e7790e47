"""The Celery side of the broker benchmark: one no-op task, Redis as broker and backend."""

from __future__ import annotations

import os

from celery import Celery

REDIS = os.environ.get("ZBUS_BENCH_REDIS", "redis://127.0.0.1:6379/0")
app = Celery("zbus_bench", broker=REDIS, backend=REDIS)
app.conf.update(worker_prefetch_multiplier=64, task_acks_late=False, result_expires=600)


@app.task(name="noop")
def noop() -> None:
    return None
