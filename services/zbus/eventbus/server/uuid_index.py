"""Which uuids the event log holds, for dropping retried events: the writer's part.

Three tiers, so that an append costs a dict lookup per event and never a B-tree probe:

- the newest uuids (up to ``merge_every``) in a dict, uuid -> sequence, which an open
  rebuilds from the stored batches above the ``indexed`` mark (a bounded range);
- older ones in ``uuid_runs``: for each of 1,024 buckets (the top bits of a 64-bit key
  folded from the uuid), one row per merge holding that merge's (key, sequence) pairs in
  sequence order. A merge writes 1,024 rows for ``merge_every`` uuids, spread over eight
  appends; every 16th merge folds each bucket's rows into one (concatenated in merge
  order, dropping the pairs below the log's first sequence: a prefix of each row), so a
  lookup scans at most 16 small rows for the key's bytes;
- a blocked Bloom filter over every key appended (64-bit words, 16-96 bits per key, under
  0.6% false positives), stored with each merge: a batch's fresh uuids are checked and
  added in one pass, a word read per key, and only its positives read ``uuid_runs``.

Standard library only: a pair is a little-endian u64 key and i64 sequence (16 bytes), the
filter's words are little-endian u64s, both held in ``array``; a batch's keys are hashed
at once as 128-bit lanes of one Python int, so the per-key Python work is one read (and
maybe a write) of a filter word, and a merge's an append to its bucket.

A pair found is confirmed against the stored uuid (a key is 64 bits of 128); pairs of
events deleted by retention therefore never match.
"""

from __future__ import annotations

import sqlite3
import struct
import sys
from array import array
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter

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
_PAIR = 16  # bytes: u64 key, i64 sequence, little-endian
_MIN_WORDS = 1 << 17  # 1 MiB of filter
_SIZED_BITS = 24  # bits per key asked of Bloom.sized (callers ask for twice the keys held)
_FULL_BITS = 16  # fewer bits per key than this: resized from every key held
_CHUNK = 1 << 16  # keys hashed at a time (bounds the lane integers to 1 MiB)
_MULT = 0x9E3779B97F4A7C15  # odd: key * _MULT mixes every key bit into the high ones
_LOW64 = (1 << 64) - 1
_ONE_BIT = bytes(1 << (v & 7) for v in range(256))  # a byte -> the bit its low 3 bits name
_BIG_ENDIAN = sys.byteorder == "big"
_SEQ = struct.Struct("<q")


def _u64s(data: bytes) -> array[int]:
    """Little-endian u64s as an array."""
    out = array("Q")
    out.frombytes(data)
    if _BIG_ENDIAN:
        out.byteswap()
    return out


def _le(values: array[int]) -> bytes:
    """An array of u64s as little-endian bytes."""
    if _BIG_ENDIAN:
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _lanes(value: int, width: int, count: int) -> int:
    """``count`` lanes of ``width`` bytes each holding ``value``, as one int."""
    return int.from_bytes(value.to_bytes(width, "little") * count, "little")


_LOW_LANES = _lanes(_LOW64, 16, _CHUNK)  # the low half of every 128-bit lane
_HIGH_LANES = _LOW_LANES << 64


def key_of(raw: bytes) -> int:
    """The 64-bit key of a 16-byte uuid: both halves folded (time-ordered uuids like v7
    share their first half within a millisecond)."""
    return int.from_bytes(raw[:8], "little") ^ int.from_bytes(raw[8:], "little")


def _key_lanes(raws: bytes) -> int:
    """The keys of concatenated uuids (at most ``_CHUNK``), each in the low half of a
    128-bit lane."""
    whole = int.from_bytes(raws, "little")
    return (whole ^ (whole >> 64)) & _LOW_LANES


def keys_of(raws: bytes) -> array[int]:
    """The 64-bit keys of concatenated 16-byte uuids (see :func:`key_of`)."""
    out = array("Q")
    for at in range(0, len(raws), 16 * _CHUNK):
        part = raws[at : at + 16 * _CHUNK]
        out.extend(_u64s(_key_lanes(part).to_bytes(len(part), "little"))[0::2])
    return out


def _keys_in_lanes(keys: array[int]) -> int:
    """Keys (at most ``_CHUNK``), each in the low half of a 128-bit lane."""
    spread = array("Q", bytes(16 * len(keys)))
    spread[0::2] = keys
    return int.from_bytes(_le(spread), "little")


class Bloom:
    """A blocked Bloom filter over 64-bit keys, in 64-bit words (a power of two of them).

    A key hashes (times an odd constant, as a 128-bit product) to a word, the top bits of
    the product's low half, and to one bit in each of that word's eight bytes, the low
    three bits of each byte of the product's high half. A key is held when its word has
    all eight bits: one word to read per key.
    """

    def __init__(self, words: array[int], keys: int) -> None:
        self.words = words
        self.keys = keys
        self._bits = len(words).bit_length() - 1
        self._index_lanes = _lanes((1 << self._bits) - 1, 16, _CHUNK)

    @classmethod
    def sized(cls, keys: int) -> Bloom:
        size = _MIN_WORDS
        while size * 64 < keys * _SIZED_BITS:
            size <<= 1
        return cls(array("Q", bytes(8 * size)), 0)

    @classmethod
    def stored(cls, bits: bytes, keys: int) -> Bloom | None:
        """The filter as :meth:`tobytes` wrote it (None: not one)."""
        words = len(bits) // 8
        if len(bits) % 8 or words < 1 or words & (words - 1):
            return None
        return cls(_u64s(bits), keys)

    def tobytes(self) -> bytes:
        return _le(self.words)

    def full(self, more: int) -> bool:
        return (self.keys + more) * _FULL_BITS > len(self.words) * 64

    def _hash(self, key_lanes: int, count: int) -> tuple[array[int], array[int]]:
        """The keys' words (indexes) and the bits each key wants in its word."""
        product = key_lanes * _MULT
        both = (product & _HIGH_LANES) | ((product >> (64 - self._bits)) & self._index_lanes)
        halves = _u64s(both.to_bytes(16 * count, "little"))
        return halves[0::2], _u64s(_le(halves[1::2]).translate(_ONE_BIT))

    def check_and_add(self, raws: bytes) -> list[int]:
        """Add the keys of concatenated uuids; return the positions of those the filter
        may have held already."""
        held: list[int] = []
        words = self.words
        for first in range(0, len(raws) // 16, _CHUNK):
            part = raws[16 * first : 16 * (first + _CHUNK)]
            at, wanted = self._hash(_key_lanes(part), len(part) // 16)
            k = first
            for i, bits in zip(at, wanted, strict=True):
                word = words[i]
                if word & bits == bits:
                    held.append(k)
                else:
                    words[i] = word | bits
                k += 1
        self.keys += len(raws) // 16
        return held

    def add_uuids(self, raws: bytes) -> None:
        for first in range(0, len(raws), 16 * _CHUNK):
            part = raws[first : first + 16 * _CHUNK]
            self._set(*self._hash(_key_lanes(part), len(part) // 16))

    def add_keys(self, keys: array[int]) -> None:
        for first in range(0, len(keys), _CHUNK):
            part = keys[first : first + _CHUNK]
            self._set(*self._hash(_keys_in_lanes(part), len(part)))

    def _set(self, at: array[int], wanted: array[int]) -> None:
        words = self.words
        for i, bits in zip(at, wanted, strict=True):
            words[i] |= bits
        self.keys += len(at)


def _partition(keys: Iterable[int], seqs: Iterable[int]) -> list[array[int]]:
    """(key, seq) pairs by bucket, each bucket's in the order given."""
    buckets = [array("Q") for _ in range(_BUCKETS)]
    shift = 64 - _BUCKET_BITS
    for key, seq in zip(keys, seqs, strict=True):
        bucket = buckets[key >> shift]
        bucket.append(key)
        bucket.append(seq)
    return buckets


def _from_seq(pairs: bytes, first_live: int) -> bytes:
    """The pairs (in sequence order) from the first with a sequence >= ``first_live``."""
    count = len(pairs) // _PAIR
    if not count or _SEQ.unpack_from(pairs, 8)[0] >= first_live:
        return pairs
    if _SEQ.unpack_from(pairs, _PAIR * (count - 1) + 8)[0] < first_live:
        return b""
    lo, hi = 0, count - 1  # pair lo is below, pair hi at or above
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _SEQ.unpack_from(pairs, _PAIR * mid + 8)[0] < first_live:
            lo = mid
        else:
            hi = mid
    return pairs[_PAIR * hi :]


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
        bloom = None if row is None else Bloom.stored(row[1], row[0])
        if bloom is None or bloom.full(len(self.pending)):
            self._bloom = self._every_key()
        else:
            # The stored filter may lack the uuids above the mark (stored with a merge).
            bloom.add_uuids(b"".join(self.pending))
            self._bloom = bloom
        self._checked = False  # known() added this append's fresh uuids to the filter
        runs = conn.execute("SELECT count(*) FROM uuid_runs WHERE bucket = 0").fetchone()[0]
        self._runs: int = runs
        self._slice = _SLICES  # no merge under way
        self._plan: list[array[int]] | None = None
        self._hi = 0
        self._fold = False

    # ----------------------------------------------------------------- lookups

    def known(self, raws: list[bytes]) -> dict[bytes, int]:
        """The sequences of those uuids that the log already holds."""
        known: dict[bytes, int] = {}
        pending, merging = self.pending, self.merging
        probe = raws
        if not (
            pending.keys().isdisjoint(raws) and (not merging or merging.keys().isdisjoint(raws))
        ):
            probe = []
            for raw in raws:
                seq = pending.get(raw)
                if seq is None:
                    seq = merging.get(raw)
                if seq is None:
                    probe.append(raw)
                else:
                    known[raw] = seq
        self._checked = True
        if not probe:
            return known
        if self._bloom.full(len(probe)):
            self._bloom = self._every_key()
        # Added before the append commits: a filter may hold more than the log (an append
        # that fails leaves its keys behind, which only costs a false positive).
        for i in self._bloom.check_and_add(b"".join(probe)):
            raw = probe[i]
            seq = self._lookup(key_of(raw), raw)
            if seq is not None:
                known[raw] = seq
        return known

    def _lookup(self, key: int, raw: bytes) -> int | None:
        rows = self._conn.execute(
            "SELECT pairs FROM uuid_runs WHERE bucket = ?", (key >> (64 - _BUCKET_BITS),)
        )
        needle = key.to_bytes(8, "little")
        for (blob,) in rows:
            at = blob.find(needle)
            while at >= 0:
                if at % _PAIR == 0:  # a key, not bytes across a pair's two halves
                    seq: int = _SEQ.unpack_from(blob, at + 8)[0]
                    if self._uuid_at(seq) == raw:
                        return seq
                at = blob.find(needle, at + 1)
        return None

    # ----------------------------------------------------------------- updates

    def stored(self, raws: Sequence[bytes], seqs: Iterable[int]) -> None:
        """Remember the uuids of a committed append (in the filter too, unless
        :meth:`known` checked them after this append's :meth:`before_append`)."""
        self.pending.update(zip(raws, seqs, strict=False))
        if not self._checked:
            if self._bloom.full(len(raws)):
                self._bloom = self._every_key()
            else:
                self._bloom.add_uuids(b"".join(raws))

    def forget(self, raws: Iterable[bytes]) -> None:
        """Retention deleted these events: their uuids may come again."""
        for raw in raws:
            self.pending.pop(raw, None)
            self.merging.pop(raw, None)

    def before_append(self, last: int) -> None:
        """Start a merge when the dict is full (none under way). Called before each
        append, before :meth:`known`."""
        self._checked = False
        if self._slice < _SLICES or len(self.pending) < self._merge_every:
            return
        self.merging, self.pending = self.pending, {}
        seqs = list(self.merging.values())
        if seqs == sorted(seqs):
            raws = b"".join(self.merging)
        else:  # a dict keeps a key's first place: runs want sequence order
            items = sorted(self.merging.items(), key=itemgetter(1))
            seqs = [seq for _, seq in items]
            raws = b"".join(raw for raw, _ in items)
        self._plan = _partition(keys_of(raws), seqs)
        self._hi = last
        self._fold = self._runs + 1 >= _FOLD_EVERY
        self._slice = 0

    def merge_step(self) -> None:
        """Write the next eighth of a merge under way, in the caller's transaction. Buckets
        that fold drop the pairs below the log's first sequence (``batches``)."""
        if self._plan is None or self._slice >= _SLICES:
            return
        buckets = self._plan
        first_live = 0
        if self._fold:
            first_live = self._conn.execute(
                "SELECT coalesce(min(first_seq), 0) FROM batches"
            ).fetchone()[0]
        per = _BUCKETS // _SLICES
        rows: list[tuple[int, int, bytes]] = []
        conn = self._conn
        for b in range(self._slice * per, (self._slice + 1) * per):
            pairs = _le(buckets[b])
            if self._fold:
                old = [
                    _from_seq(blob, first_live)
                    for (blob,) in conn.execute(
                        "SELECT pairs FROM uuid_runs WHERE bucket = ? ORDER BY hi", (b,)
                    )
                ]
                pairs = b"".join([*old, _from_seq(pairs, first_live)])
                conn.execute("DELETE FROM uuid_runs WHERE bucket = ?", (b,))
            rows.append((b, self._hi, pairs))
        conn.executemany("INSERT OR REPLACE INTO uuid_runs VALUES (?, ?, ?)", rows)
        if self._slice == _SLICES - 1:
            bloom = self._bloom
            conn.execute(
                "INSERT OR REPLACE INTO bloom VALUES (0, ?, ?)", (bloom.keys, bloom.tobytes())
            )
            conn.execute("UPDATE meta SET value = ? WHERE key = 'indexed'", (self._hi,))
        self._slice += 1

    def _every_key(self) -> Bloom:
        """A filter sized for, and holding, every key in ``uuid_runs`` and the dicts."""
        keys = array("Q")
        for (blob,) in self._conn.execute("SELECT pairs FROM uuid_runs"):
            keys.extend(_u64s(blob)[0::2])
        bloom = Bloom.sized(2 * (len(keys) + len(self.pending) + len(self.merging)))
        bloom.add_keys(keys)
        bloom.add_uuids(b"".join(self.pending))
        bloom.add_uuids(b"".join(self.merging))
        return bloom

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


def bulk_index(conn: sqlite3.Connection, raws: bytes, seqs: Sequence[int], hi: int) -> None:
    """Index every (uuid, seq) at once, in the caller's transaction, up to the mark ``hi``:
    one row per bucket and the Bloom filter (a log migrated from the version-1 schema).
    ``seqs`` ascend."""
    keys = keys_of(raws)
    buckets = _partition(keys, seqs)
    conn.executemany(
        "INSERT INTO uuid_runs VALUES (?, ?, ?)",
        ((b, hi, _le(buckets[b])) for b in range(_BUCKETS)),
    )
    bloom = Bloom.sized(2 * len(keys))
    bloom.add_keys(keys)
    conn.execute("INSERT INTO bloom VALUES (0, ?, ?)", (bloom.keys, bloom.tobytes()))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'indexed'", (hi,))
