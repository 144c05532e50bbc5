"""Calibrations kept beside the ledger by content: read back while their rows are unchanged, made
again for the team x kinds whose rows changed, and never different from calibrating afresh."""
import shutil

from lib.ledger import calibration_scopes
from lib.ledger.calibration_rows import KNOWN_TEAMS, calibration
from lib.ledger.calibration_scopes import calibrations
from lib.ledger.connection import open_ledger, transaction
from lib.planning import content_store
from tests.fixtures_gate import NOW

KINDS = ("exploratory", "production", "retraining")


def _pairs(con):
    return [(t, k) for (t,) in con.execute(KNOWN_TEAMS).fetchall() for k in KINDS]


def test_kept_calibrations_are_read_back_until_their_rows_change(busy_ledger, tmp_path):
    db = tmp_path / "ledger.duckdb"
    shutil.copy(busy_ledger, db)
    kept = db.with_name(db.name + calibration_scopes.CALIBRATIONS_SUFFIX)
    with open_ledger(db, read_only=True) as con:
        pairs = _pairs(con)
        first = calibrations(con, pairs, NOW)
    assert kept.exists() and len(content_store.load(kept, calibration_scopes.CALIBRATIONS_FORMAT)) == len(pairs)
    stamp = kept.stat().st_mtime_ns
    content_store._read.clear()                 # as a new process: the file is parsed again
    with open_ledger(db, read_only=True) as con:
        again = calibrations(con, pairs, NOW)
    assert again == first and kept.stat().st_mtime_ns == stamp, "nothing made again, nothing rewritten"

    # one team x kind's newest run used twice its estimate: that team's calibrations are made again
    team, kind = "nlp-research", "exploratory"
    with open_ledger(db) as con, transaction(con):
        con.execute("""UPDATE runs SET actual_gpu_hours = 2 * estimated_gpu_hours WHERE run_id = (
                         SELECT run_id FROM runs WHERE team = ? AND kind = ? AND actual_gpu_hours > 0
                           AND estimated_gpu_hours > 0 AND ended_at <= ? ORDER BY ended_at DESC LIMIT 1)""",
                    [team, kind, NOW])
    with open_ledger(db, read_only=True) as con:
        changed = calibrations(con, pairs, NOW)
        fresh = {pair: calibration(con, *pair, NOW) for pair in pairs}
    assert changed == fresh
    made = len(content_store.load(kept, calibration_scopes.CALIBRATIONS_FORMAT)) - len(pairs)
    # the team's kinds (their team scope changed), and any pair that fell back to everyone's runs
    assert 1 <= made <= len(KINDS) + sum(c["scope"] == "all" for c in fresh.values())


def test_a_place_beside_the_ledger_that_cannot_be_written_calibrates_all_the_same(busy_ledger, tmp_path):
    db = tmp_path / "ledger.duckdb"
    shutil.copy(busy_ledger, db)
    blocked = db.with_name(db.name + calibration_scopes.CALIBRATIONS_SUFFIX)
    blocked.mkdir()                              # neither read nor replaced (root or not)
    with open_ledger(db, read_only=True) as con:
        pairs = _pairs(con)
        got = calibrations(con, pairs, NOW)
        fresh = {pair: calibration(con, *pair, NOW) for pair in pairs}
    assert got == fresh and blocked.is_dir() and list(blocked.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == [], "no temporary file left"
