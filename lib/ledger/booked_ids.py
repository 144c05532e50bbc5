"""The run IDs a ledger has booked, as 64-bit hashes: what the warm gate server keeps in memory to
refuse a run ID a second time without opening the ledger for every request.

A run ID is booked when its run holds a reservation or has run (lib.ledger.state.BOOKED): a resubmission
under it would double-book. The ledger's scan hashes every booked run ID with DuckDB's own string
`hash()`, far cheaper than an MD5 of each (the server reloads after every import; docs/benchmarks.md:
`bench_gate_reload`); `string_hash` computes the same number in Python for the one run
ID a request names. A DuckDB release that hashed strings differently would be caught by
`load_booked`'s check of fixed probes, asked once per DuckDB version in a process, which then falls
back on MD5 (`md5_number_lower`, the same in Python's hashlib).
Two IDs may share a hash, so a match is only a "maybe": the caller confirms it in the ledger.

Where the constants come from: DuckDB's source, `src/common/types/hash.cpp` (`HashBytes`, behind
`Hash(const char *, size_t)` and `Hash(string_t)`: the seed 0xe17a1465, the length multiplier
0xc6a4a7935bd1e995, the block multiplier 0xd6e8feb86659fd93) and
`src/include/duckdb/common/types/hash.hpp` (`MurmurHash64`, the finaliser) of the duckdb/duckdb
repository: the same in every release from v1.3.0 through v1.5.5 and on the v2.0 development line
(main at 044a04a7cd3, 2026-08-20). The DuckDB this project runs is 2.0.1 (`duckdb.__version__`,
engine commit 8d78114e90); the probes below and tests/test_booked_ids.py check it hashes alike.
"""
from __future__ import annotations

import hashlib
from typing import Callable

import duckdb
import numpy as np

from lib.ledger.state import BOOKED

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


_agrees: dict[str, bool] = {}   # duckdb.__version__ -> whether that DuckDB's string hash() is string_hash


def same_string_hash(con) -> bool:
    """True when this DuckDB's `hash()` of every probe string is `string_hash`'s. Asked once per
    DuckDB version in a process (the server reloads often, and the library it loaded does not change;
    another version, loaded in its place, is asked again)."""
    version = duckdb.__version__
    if version not in _agrees:
        got = con.execute("SELECT list_transform($p::VARCHAR[], lambda s: hash(s))", {"p": PROBES}).fetchone()[0]
        _agrees[version] = got == [string_hash(p) for p in PROBES]
    return _agrees[version]


def load_booked(con) -> BookedIds:
    """Every booked run ID of the ledger `con` reads, hashed (DuckDB's string hash, else MD5)."""
    sql, one = ("hash(run_id)", string_hash) if same_string_hash(con) else ("md5_number_lower(run_id)", md5_lower)
    hashes = con.execute(f"SELECT {sql} AS h FROM runs WHERE {BOOKED}").fetchnumpy()["h"]
    return BookedIds(np.sort(hashes), one)
