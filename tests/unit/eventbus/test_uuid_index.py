"""The writer's uuid index (zbus.eventbus.server.uuid_index) through the event log: every
uuid stored is found with its sequence across merges, a fold and reopens, and no other
uuid is, also when the Bloom filter answers "maybe" for nearly everything."""

from __future__ import annotations

import os
import random
import tempfile
import uuid as uuidlib
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zbus.eventbus.server import uuid_index
from zbus.eventbus.server.store import NewEvent, SqliteEventLog
from zbus.eventbus.server.uuid_index import Bloom, key_of, keys_of

TS = "2026-11-22T08:35:32.862Z"


def new_uuid(rng: random.Random) -> str:
    return str(uuidlib.UUID(int=rng.getrandbits(128)))


@contextmanager
def tiny_filter(tiny: bool) -> Iterator[None]:
    """A one-word Bloom filter: it soon holds every bit, so every lookup runs the
    bucket scan and the stored-uuid confirmation."""
    saved = uuid_index._MIN_WORDS
    if tiny:
        uuid_index._MIN_WORDS = 1
    try:
        yield
    finally:
        uuid_index._MIN_WORDS = saved


def check(log: SqliteEventLog, seq_of: dict[str, int], rng: random.Random) -> None:
    """Every stored uuid comes back as a duplicate of its sequence; fresh ones are stored."""
    sample = rng.sample(sorted(seq_of), min(len(seq_of), 60))
    result = log.append([NewEvent("/dup", "p", TS, u, b"") for u in sample], 0.0)
    assert result.stored == []
    assert sorted(result.duplicates) == sorted((u, seq_of[u]) for u in sample)
    fresh = [new_uuid(rng) for _ in range(30)]
    result = log.append([NewEvent("/new", "p", TS, u, b"") for u in fresh], 0.0)
    assert result.duplicates == []
    assert [e.uuid for e in result.stored] == fresh
    seq_of.update((e.uuid, e.seq) for e in result.stored)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**32 - 1),
    merge_every=st.integers(1, 12),
    batch=st.integers(1, 9),
    tiny=st.booleans(),
    reopen_every=st.sampled_from([0, 37, 61]),
)
def test_every_stored_uuid_is_found_and_no_other(
    seed: int, merge_every: int, batch: int, tiny: bool, reopen_every: int
) -> None:
    rng = random.Random(seed)
    # A merge takes eight appends, and at least as many as fill the dict: enough appends
    # for more than 16 merges (a fold).
    appends = 17 * max(8, -(-merge_every // batch)) + 16
    with tiny_filter(tiny), tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.db"
        log = SqliteEventLog(path, uuid_merge_every=merge_every)
        seq_of: dict[str, int] = {}
        try:
            for n in range(appends):
                events = [
                    NewEvent(f"/t{n % 5}", "p", TS, new_uuid(rng), b"x") for _ in range(batch)
                ]
                result = log.append(events, float(n))
                assert result.duplicates == []
                seq_of.update((e.uuid, e.seq) for e in result.stored)
                if reopen_every and n % reopen_every == reopen_every - 1:
                    log.close()
                    log = SqliteEventLog(path, uuid_merge_every=merge_every)
                if n % 50 == 49:
                    check(log, seq_of, rng)
            check(log, seq_of, rng)
            log.close()
            log = SqliteEventLog(path, uuid_merge_every=merge_every)
            check(log, seq_of, rng)
            runs = log._conn.execute("SELECT count(*) FROM uuid_runs WHERE bucket = 0")
            assert runs.fetchone()[0] < 16  # folded
        finally:
            log.close()


@pytest.mark.parametrize("tiny", [False, True])
def test_the_filter_holds_every_key_added(tiny: bool) -> None:
    with tiny_filter(tiny):
        raws = os.urandom(16 * 5_000)
        by_uuids = Bloom.sized(10_000)
        by_uuids.check_and_add(raws[: 16 * 2_500])
        by_uuids.add_uuids(raws[16 * 2_500 :])
        by_keys = Bloom.sized(10_000)
        by_keys.add_keys(keys_of(raws))
        for bloom in (by_uuids, by_keys, Bloom.stored(by_keys.tobytes(), by_keys.keys)):
            assert bloom is not None
            assert bloom.check_and_add(raws) == list(range(5_000))
        if not tiny:  # under 1% false positives
            assert len(by_keys.check_and_add(os.urandom(16 * 5_000))) < 50
    assert keys_of(raws) == array("Q", [key_of(raws[i : i + 16]) for i in range(0, len(raws), 16)])
