"""The Dramatiq side of the broker anchor: one no-op actor, Redis as broker and results
backend (``ZBUS_BENCH_REDIS``), for the workers (``python -m dramatiq`` imports this
module) and the client alike."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.results import Results
from dramatiq.results.backends import RedisBackend

REDIS = os.environ.get("ZBUS_BENCH_REDIS", "redis://127.0.0.1:6379/0")
broker = RedisBroker(url=REDIS)
broker.add_middleware(Results(backend=RedisBackend(url=REDIS)))
dramatiq.set_broker(broker)


@dramatiq.actor(store_results=True, max_retries=0)
def noop() -> None:
    return None
