"""The run IDs a ledger has booked, as 64-bit hashes: what the warm gate server keeps in memory to
refuse a run ID a second time without opening the ledger for every request.

A run ID is booked when its run holds a reservation or has run (service.BOOKED): a resubmission
under it would double-book. The ledger's scan hashes every booked run ID with DuckDB's own string
`hash()` (about 0.6 s for ten million runs, where an MD5 of each takes 3.5 s: the server reloads
after every import); `string_hash` computes the same number in Python for the one run ID a request
names. A DuckDB release that hashed strings differently would be caught by `load_booked`'s check
of fixed probes, which then falls back on MD5 (`md5_number_lower`, the same in Python's hashlib).
Two IDs may share a hash, so a match is only a "maybe": the caller confirms it in the ledger.
"""
from __future__ import annotations

import hashlib
from typing import Callable

import numpy as np

from lib.ledger.deciding import BOOKED

_M = 0xd6e8feb86659fd93
_MASK = (1 << 64) - 1
# every length up to five blocks of 8 bytes, and the longest run ID a request may name; non-ASCII too
PROBES = ([""] + ["gate-probe-éß-0123456789abcdefghijklmnopqrstuvwxyz"[:n] for n in range(1, 41)]
          + ["日本語🙂", "a'b\"c", "é-run-" * 33 + "🙂x"])


def string_hash(text: str) -> int:
    """DuckDB's `hash()` of a VARCHAR (its HashBytes of the UTF-8 bytes: a seed mixed with the
    length, each 8-byte little-endian block xor-ed in and multiplied, the rest likewise, then the
    MurmurHash64 finaliser), as an unsigned 64-bit integer."""
    b = text.encode("utf-8")
    n = len(b)
    h = 0xe17a1465 ^ ((n * 0xc6a4a7935bd1e995) & _MASK)
    whole = n - (n & 7)
    for i in range(0, whole, 8):
        h = ((h ^ int.from_bytes(b[i:i + 8], "little")) * _M) & _MASK
    if n & 7:
        h = ((h ^ int.from_bytes(b[whole:], "little")) * _M) & _MASK
    h ^= h >> 32
    h = (h * _M) & _MASK
    h ^= h >> 32
    h = (h * _M) & _MASK
    return h ^ (h >> 32)


def md5_lower(text: str) -> int:
    """DuckDB's `md5_number_lower()` of a VARCHAR: the MD5 digest's last 8 bytes, little-endian."""
    return int.from_bytes(hashlib.md5(text.encode("utf-8")).digest()[8:], "little")


class BookedIds:
    """The sorted hashes (uint64) of a ledger's booked run IDs and the function that made them."""

    def __init__(self, hashes: np.ndarray, hash_one: Callable[[str], int]):
        self.hashes, self.hash_one = hashes, hash_one

    def __len__(self) -> int:
        return len(self.hashes)

    def maybe(self, run_id: str) -> bool:
        """False when the run ID is surely not booked in the ledger as loaded; True when it may be."""
        h = np.uint64(self.hash_one(run_id))
        i = int(np.searchsorted(self.hashes, h))
        return i < len(self.hashes) and self.hashes[i] == h


_agrees: dict = {}   # string_hash (the function) -> whether it is this process's DuckDB's hash


def same_string_hash(con) -> bool:
    """True when this DuckDB's `hash()` of every probe string is `string_hash`'s. Asked once per
    process (a few ms: the server reloads often, and the library it loaded does not change)."""
    fn = string_hash
    if fn not in _agrees:
        got = con.execute("SELECT list_transform($p::VARCHAR[], lambda s: hash(s))", {"p": PROBES}).fetchone()[0]
        _agrees[fn] = got == [fn(p) for p in PROBES]
    return _agrees[fn]


def load_booked(con) -> BookedIds:
    """Every booked run ID of the ledger `con` reads, hashed (DuckDB's string hash, else MD5)."""
    sql, one = ("hash(run_id)", string_hash) if same_string_hash(con) else ("md5_number_lower(run_id)", md5_lower)
    hashes = con.execute(f"SELECT {sql} AS h FROM runs WHERE {BOOKED}").fetchnumpy()["h"]
    return BookedIds(np.sort(hashes), one)
