"""lib.ledger.booked_ids: the gate server's in-memory answer to "is this run ID taken?" never says
no for a run ID the ledger has booked, whichever hash it had to use."""
from __future__ import annotations

import random

import duckdb

from lib.ledger import booked_ids
from lib.ledger.booked_ids import load_booked, md5_lower, string_hash
from lib.ledger.connection import open_ledger


def _strings(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    alphabet = "abcXYZ-_./:0123456789éß日本🙂'\" "
    return ["", "a", "abcdefgh", "abcdefghi"] + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 70)))
                                                  for _ in range(n)]


def _duckdb(fn: str, strings: list[str]) -> list[int]:
    return duckdb.connect().execute(f"SELECT list_transform($s::VARCHAR[], lambda x: {fn}(x))",
                                    {"s": strings}).fetchone()[0]


def test_the_python_hashes_are_duckdbs_own():
    strings = _strings(5000)
    assert [string_hash(s) for s in strings] == _duckdb("hash", strings)
    assert [md5_lower(s) for s in strings] == _duckdb("md5_number_lower", strings)


def _booked_and_free(path) -> tuple[list[str], list[str]]:
    with open_ledger(path, read_only=True) as con:
        booked = [r[0] for r in con.execute(f"SELECT run_id FROM runs WHERE {booked_ids.BOOKED}").fetchall()]
    return booked, [f"{run_id}-not-booked" for run_id in booked[:500]]


def test_every_booked_run_id_is_found_and_unknown_ones_are_not(demo_ledger):
    booked, free = _booked_and_free(demo_ledger)
    with open_ledger(demo_ledger, read_only=True) as con:
        ids = load_booked(con)
    assert ids.hash_one is string_hash and len(ids) == len(booked) >= 300
    assert all(ids.maybe(run_id) for run_id in booked)
    assert sum(ids.maybe(run_id) for run_id in free) == 0   # 64-bit hashes: a clash would be a 1e-16 event


def test_a_duckdb_that_hashes_strings_otherwise_falls_back_on_md5(demo_ledger, monkeypatch):
    monkeypatch.setattr(booked_ids, "string_hash", lambda text: len(text))   # no longer DuckDB's hash
    monkeypatch.setattr(booked_ids, "_agrees", {})   # nothing probed yet in this process
    booked, free = _booked_and_free(demo_ledger)
    with open_ledger(demo_ledger, read_only=True) as con:
        assert not booked_ids.same_string_hash(con)
        ids = load_booked(con)
    assert ids.hash_one is md5_lower
    assert all(ids.maybe(run_id) for run_id in booked)
    assert sum(ids.maybe(run_id) for run_id in free) == 0


def test_the_probe_is_asked_once_per_duckdb_version(monkeypatch):
    """The answer is kept under duckdb.__version__: the same DuckDB is not probed again, another
    version loaded into the process is."""
    monkeypatch.setattr(booked_ids, "_agrees", {})
    probes = []
    con = duckdb.connect()
    real_execute = con.execute

    class Counting:
        def execute(self, sql, *args):
            probes.append(sql)
            return real_execute(sql, *args)

    assert booked_ids.same_string_hash(Counting()) and booked_ids.same_string_hash(Counting())
    assert len(probes) == 1 and list(booked_ids._agrees) == [duckdb.__version__]
    monkeypatch.setattr(duckdb, "__version__", duckdb.__version__ + "-another-build")
    assert booked_ids.same_string_hash(Counting())
    assert len(probes) == 2 and duckdb.__version__ in booked_ids._agrees and len(booked_ids._agrees) == 2
