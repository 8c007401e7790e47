"""Which uuids the event log holds, for dropping retried events: the writer's part.

Three tiers, so that an append costs a dict lookup per event and never a B-tree probe:

- the newest uuids (up to ``merge_every``) in a dict, uuid -> sequence, which an open
  rebuilds from the stored batches above the ``indexed`` mark (a bounded range);
- older ones in ``uuid_runs``: for each of 1,024 buckets (the top bits of a 64-bit key
  folded from the uuid), one row per merge holding that merge's (key, sequence) pairs in
  key order. A merge writes 1,024 rows for ``merge_every`` uuids, spread over eight
  appends; every 16th merge folds each bucket's rows into one, dropping pairs below the
  log's first sequence, so a lookup reads at most 16 small rows;
- a Bloom filter over every merged key (numpy, 12-24 bits per key, 5 probes, under 1% false
  positives), stored with the merge that filled it: a batch of fresh uuids is checked
  against it in one vector operation, and only its positives read ``uuid_runs``.

A pair found is confirmed against the stored uuid (a key is 64 bits of 128); pairs of
events deleted by retention therefore never match.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from typing import cast

import numpy as np
import numpy.typing as npt

SCHEMA = """
CREATE TABLE uuid_runs(
    bucket INTEGER NOT NULL, hi INTEGER NOT NULL, pairs BLOB NOT NULL,
    PRIMARY KEY(bucket, hi)) WITHOUT ROWID;
CREATE TABLE bloom(id INTEGER PRIMARY KEY, keys INTEGER NOT NULL, bits BLOB NOT NULL);
"""
_BUCKET_BITS = 10
_BUCKETS = 1 << _BUCKET_BITS
_SLICES = 8
_FOLD_EVERY = 16
_PROBES = 5
_MIN_BITS = 1 << 23
_PAIR = np.dtype([("key", "<u8"), ("seq", "<i8")])

U64 = npt.NDArray[np.uint64]


def keys_of(raws: bytes) -> U64:
    """The 64-bit keys of concatenated 16-byte uuids: both halves folded (time-ordered
    uuids like v7 share their first half within a millisecond)."""
    halves = np.frombuffer(raws, dtype=np.dtype("<u8")).reshape(-1, 2)
    return cast(U64, halves[:, 0] ^ halves[:, 1])


class Bloom:
    """A Bloom filter over 64-bit keys (random bits: uuids), ``size`` bits a power of two."""

    def __init__(self, bits: npt.NDArray[np.uint8], keys: int) -> None:
        self.bits = bits
        self.keys = keys
        self._mask = np.uint64(len(bits) * 8 - 1)

    @classmethod
    def sized(cls, keys: int) -> Bloom:
        size = _MIN_BITS
        while size < keys * 24:
            size <<= 1
        return cls(np.zeros(size // 8, dtype=np.uint8), 0)

    def full(self, more: int) -> bool:
        return (self.keys + more) * 12 > len(self.bits) * 8

    def _positions(self, keys: U64) -> U64:
        low = keys & np.uint64(0xFFFFFFFF)
        step = (keys >> np.uint64(32)) | np.uint64(1)
        probes = np.arange(_PROBES, dtype=np.uint64)
        return (low[:, None] + probes[None, :] * step[:, None]) & self._mask

    def add(self, keys: U64) -> None:
        pos = self._positions(keys).ravel()
        ones = np.left_shift(np.uint8(1), (pos & np.uint64(7)).astype(np.uint8))
        np.bitwise_or.at(self.bits, pos >> np.uint64(3), ones)
        self.keys += len(keys)

    def maybe(self, keys: U64) -> npt.NDArray[np.bool_]:
        pos = self._positions(keys)
        hit = (self.bits[pos >> np.uint64(3)] >> (pos & np.uint64(7)).astype(np.uint8)) & 1
        return hit.all(axis=1)  # type: ignore[no-any-return]


class UuidIndex:
    """The writer's uuid tiers. ``uuid_at(seq)`` reads the uuid stored at a sequence
    (None: no such event), to confirm a key's match."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        merge_every: int,
        indexed: int,
        window: Iterable[tuple[bytes, int]],
        uuid_at: Callable[[int], bytes | None],
    ) -> None:
        self._conn = conn
        self._merge_every = max(1, merge_every)
        self._uuid_at = uuid_at
        self.indexed = indexed
        self.pending: dict[bytes, int] = dict(window)
        self.merging: dict[bytes, int] = {}
        row = conn.execute("SELECT keys, bits FROM bloom WHERE id = 0").fetchone()
        self._bloom = None if row is None else Bloom(np.frombuffer(row[1], np.uint8).copy(), row[0])
        runs = conn.execute("SELECT count(*) FROM uuid_runs WHERE bucket = 0").fetchone()[0]
        self._runs: int = runs
        self._slice = _SLICES  # no merge under way
        self._plan: tuple[U64, npt.NDArray[np.int64], npt.NDArray[np.intp]] | None = None
        self._hi = 0
        self._fold = False

    # ----------------------------------------------------------------- lookups

    def known(self, raws: list[bytes]) -> dict[bytes, int]:
        """The sequences of those uuids that the log already holds."""
        known: dict[bytes, int] = {}
        probe: list[bytes] = []
        pending, merging = self.pending, self.merging
        for raw in raws:
            seq = pending.get(raw) or merging.get(raw)
            if seq is not None:
                known[raw] = seq
            else:
                probe.append(raw)
        if probe and self._bloom is not None:
            keys = keys_of(b"".join(probe))
            for i in np.flatnonzero(self._bloom.maybe(keys)).tolist():
                seq = self._lookup(int(keys[i]), probe[i])
                if seq is not None:
                    known[probe[i]] = seq
        return known

    def _lookup(self, key: int, raw: bytes) -> int | None:
        rows = self._conn.execute(
            "SELECT pairs FROM uuid_runs WHERE bucket = ?", (key >> (64 - _BUCKET_BITS),)
        )
        for (blob,) in rows:
            pairs = np.frombuffer(blob, dtype=_PAIR)
            lo = int(np.searchsorted(pairs["key"], np.uint64(key)))
            while lo < len(pairs) and int(pairs["key"][lo]) == key:
                seq = int(pairs["seq"][lo])
                if self._uuid_at(seq) == raw:
                    return seq
                lo += 1
        return None

    # ----------------------------------------------------------------- updates

    def stored(self, raws: Iterable[bytes], seqs: Iterable[int]) -> None:
        """Remember the uuids of a committed append."""
        self.pending.update(zip(raws, seqs, strict=False))

    def forget(self, raws: Iterable[bytes]) -> None:
        """Retention deleted these events: their uuids may come again."""
        for raw in raws:
            self.pending.pop(raw, None)
            self.merging.pop(raw, None)

    def before_append(self, last: int) -> None:
        """Start a merge when the dict is full (none under way)."""
        if self._slice < _SLICES or len(self.pending) < self._merge_every:
            return
        self.merging, self.pending = self.pending, {}
        keys = keys_of(b"".join(self.merging))
        seqs = np.fromiter(self.merging.values(), dtype=np.int64, count=len(self.merging))
        order = np.argsort(keys, kind="stable")
        keys, seqs = keys[order], seqs[order]
        bounds = np.searchsorted(
            keys >> np.uint64(64 - _BUCKET_BITS), np.arange(_BUCKETS + 1, dtype=np.uint64)
        )
        self._plan = (keys, seqs, bounds)
        self._hi = last
        self._fold = self._runs + 1 >= _FOLD_EVERY
        self._slice = 0

    def merge_step(self) -> None:
        """Write the next eighth of a merge under way, in the caller's transaction. Buckets
        that fold drop the pairs below the log's first sequence (``batches``)."""
        if self._plan is None or self._slice >= _SLICES:
            return
        keys, seqs, bounds = self._plan
        first_live = 0
        if self._fold:
            first_live = self._conn.execute(
                "SELECT coalesce(min(first_seq), 0) FROM batches"
            ).fetchone()[0]
        per = _BUCKETS // _SLICES
        rows: list[tuple[int, int, bytes]] = []
        conn = self._conn
        for b in range(self._slice * per, (self._slice + 1) * per):
            pairs = np.empty(int(bounds[b + 1] - bounds[b]), dtype=_PAIR)
            pairs["key"] = keys[bounds[b] : bounds[b + 1]]
            pairs["seq"] = seqs[bounds[b] : bounds[b + 1]]
            if self._fold:
                old = [
                    np.frombuffer(blob, dtype=_PAIR)
                    for (blob,) in conn.execute(
                        "SELECT pairs FROM uuid_runs WHERE bucket = ?", (b,)
                    )
                ]
                pairs = np.concatenate([*old, pairs])
                pairs = pairs[pairs["seq"] >= first_live]
                pairs = pairs[np.argsort(pairs["key"], kind="stable")]
                conn.execute("DELETE FROM uuid_runs WHERE bucket = ?", (b,))
            rows.append((b, self._hi, pairs.tobytes()))
        conn.executemany("INSERT OR REPLACE INTO uuid_runs VALUES (?, ?, ?)", rows)
        if self._slice == _SLICES - 1:
            self._finish(keys)
        self._slice += 1

    def _finish(self, keys: U64) -> None:
        bloom = self._bloom
        if bloom is None or bloom.full(len(keys)):
            # Sized anew from every pair held (the new ones are written by now).
            held = [
                np.frombuffer(blob, dtype=_PAIR)["key"]
                for (blob,) in self._conn.execute("SELECT pairs FROM uuid_runs")
            ]
            every = np.concatenate(held) if held else keys
            bloom = Bloom.sized(2 * len(every))
            bloom.add(every)
        else:
            bloom.add(keys)
        self._bloom = bloom
        self._conn.execute(
            "INSERT OR REPLACE INTO bloom VALUES (0, ?, ?)", (bloom.keys, bloom.bits.tobytes())
        )
        self._conn.execute("UPDATE meta SET value = ? WHERE key = 'indexed'", (self._hi,))

    def committed(self) -> None:
        """The append that carried the last merge step is committed."""
        if self._slice == _SLICES and self._plan is not None:
            self._plan = None
            self.indexed = self._hi
            self.merging = {}
            self._runs = 1 if self._fold else self._runs + 1

    def rolled_back(self) -> None:
        """The append that carried a merge step failed: redo that step next time."""
        if self._plan is not None and self._slice > 0:
            self._slice -= 1


def bulk_index(conn: sqlite3.Connection, raws: bytes, seqs: npt.NDArray[np.int64], hi: int) -> None:
    """Index every (uuid, seq) at once, in the caller's transaction, up to the mark ``hi``:
    one row per bucket and the Bloom filter (a log migrated from the version-1 schema)."""
    keys = keys_of(raws)
    order = np.argsort(keys, kind="stable")
    pairs = np.empty(len(keys), dtype=_PAIR)
    pairs["key"] = keys[order]
    pairs["seq"] = seqs[order]
    bounds = np.searchsorted(
        pairs["key"] >> np.uint64(64 - _BUCKET_BITS), np.arange(_BUCKETS + 1, dtype=np.uint64)
    )
    conn.executemany(
        "INSERT INTO uuid_runs VALUES (?, ?, ?)",
        ((b, hi, pairs[bounds[b] : bounds[b + 1]].tobytes()) for b in range(_BUCKETS)),
    )
    bloom = Bloom.sized(2 * len(keys))
    bloom.add(keys)
    conn.execute("INSERT INTO bloom VALUES (0, ?, ?)", (bloom.keys, bloom.bits.tobytes()))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'indexed'", (hi,))
