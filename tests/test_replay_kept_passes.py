"""A replay keeps the passes that do not depend on the proposal beside the ledger (lib.planning.replay.kept,
`replay_ledger(..., keep=True)`): the result is the same, to the byte, with the store empty, filled, or
unwritable, and a window replayed before runs only the proposal's pass.

Ledgers are made by real `submit` and `finish` calls (tests/fixtures_replay.py).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from lib.ledger.replay import kept_file, read_window, replay_ledger, replay_read
from tests.test_replay_baseline import teams, window
from tests.fixtures_replay import POOLED_TEAMS

ROOT = Path(__file__).resolve().parent.parent


def as_json(result) -> str:
    return json.dumps(result, sort_keys=True, default=str)


def passes_run(db, **kw) -> tuple[str, set[str]]:
    """(the result as JSON, the passes that ran: the modes the progress messages name)."""
    modes: set[str] = set()

    def progress(fraction, message):
        if ":" in message:
            modes.add(message.split(":")[0])
    return as_json(replay_ledger(db, progress=progress, **kw)), modes


def private(ledger, tmp_path) -> Path:
    copy = tmp_path / "pooled.duckdb"
    shutil.copyfile(ledger[0], copy)
    return copy


def test_a_kept_baseline_gives_the_same_result_and_only_the_proposal_runs(pooled_submitted_ledger, tmp_path):
    db, w = private(pooled_submitted_ledger, tmp_path), window(*pooled_submitted_ledger[1:])
    quotas = sum(t["reserved_gpus"] for t in teams(POOLED_TEAMS).values())
    for pools in ({"stable": 4}, {"stable": quotas}, {"stable": 8}):
        made = kept_file(db).exists()
        plain, ran = passes_run(db, pools=pools, **w)
        assert ran == {"proposed", "baseline", "recorded"}
        assert kept_file(db).exists() == made      # without keep, nothing is written
        cold, ran_cold = passes_run(db, pools=pools, keep=True, **w)
        warm, ran_warm = passes_run(db, pools=pools, keep=True, **w)
        assert cold == plain and warm == plain
        # the baseline and the recorded pass are the same whatever the pool: kept once, read after
        assert ran_cold == (ran if not made else {"proposed"}) and ran_warm == {"proposed"}
    assert os.stat(kept_file(db)).st_mode & 0o777 == 0o600


def test_a_proposal_equal_to_the_policy_stays_its_own_baseline_with_a_kept_store(submitted_ledger):
    db, first, last = submitted_ledger
    same = list(teams().values())
    plain = replay_ledger(db, same, **window(first, last))
    replay_ledger(db, same, keep=True, **window(first, last))
    warm = replay_ledger(db, same, keep=True, **window(first, last))
    assert as_json(warm) == as_json(plain)
    assert warm["baseline_is_proposed"] is True and warm["proposed"] == warm["baseline"]
    assert warm["overall"]["proposed"] == warm["overall"]["baseline"]
    # a changed policy over the same window reads the kept baseline, and gives what it gives without
    alpha = {**teams()["alpha"], "reserved_gpus": 2}
    changed = replay_ledger(db, [alpha], keep=True, **window(first, last))
    assert as_json(changed) == as_json(replay_ledger(db, [alpha], **window(first, last)))
    assert changed["overall"]["baseline"] == plain["overall"]["baseline"]


def test_a_changed_window_finds_no_kept_pass(pooled_submitted_ledger, tmp_path):
    db, w = private(pooled_submitted_ledger, tmp_path), window(*pooled_submitted_ledger[1:])
    data = read_window(db, **w)
    kept = kept_file(db)
    replay_read(data, pools={"stable": 5}, kept=kept)
    # the same window with a smaller cluster today: the baseline changes, and is not read back stale
    smaller = data._replace(world={**data.world, "pools": {"stable": 6}})
    with_store = replay_read(smaller, pools={"stable": 5}, kept=kept)
    without = replay_read(smaller, pools={"stable": 5})
    assert as_json(with_store) == as_json(without)
    assert with_store["pools"]["baseline"] == {"stable": 6}


def test_an_unwritable_store_computes_as_before(pooled_submitted_ledger, tmp_path):
    db, w = private(pooled_submitted_ledger, tmp_path), window(*pooled_submitted_ledger[1:])
    data = read_window(db, **w)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    kept = blocker / "replay.json"          # its folder is a file: nothing can be written there
    for _ in range(2):
        result = replay_read(data, pools={"stable": 4}, kept=kept)
        assert as_json(result) == as_json(replay_read(data, pools={"stable": 4}))
    assert not kept.exists()


def test_calibrations_kept_by_one_process_are_found_by_another(submitted_ledger):
    """The fingerprints keying kept calibrations are the same in every process (Python's str hash is
    seeded per process): a second process with another seed adds nothing to the file."""
    db, first, last = submitted_ledger
    w = window(first, last)
    code = ("import sys; from datetime import datetime; from lib.ledger.replay import replay_ledger; "
            f"replay_ledger(sys.argv[1], [{{**{teams()['alpha']!r}, 'reserved_gpus': 2}}], keep=True, "
            f"start=datetime.fromisoformat({w['start'].isoformat()!r}), "
            f"end=datetime.fromisoformat({w['end'].isoformat()!r}))")
    runs = []
    for seed in ("1", "2"):
        subprocess.run([sys.executable, "-c", code, str(db)], cwd=ROOT, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed})
        runs.append(json.loads(kept_file(db).read_text()))
    assert runs[0] == runs[1]
    fits = [v for v in runs[0]["entries"].values() if isinstance(v, dict) and "outcomes" not in v]
    assert fits and all(len(f) > 0 for f in fits)


def test_daily_calibration_and_a_changed_level_read_the_kept_fits_to_the_same_result(pooled_submitted_ledger, tmp_path):
    db, w = private(pooled_submitted_ledger, tmp_path), window(*pooled_submitted_ledger[1:])
    proposal = [{**teams(POOLED_TEAMS)["alpha"], "max_gpus_per_job": 4}]
    kw = {"refresh": "daily", "levels": {"alpha": 0.8}, "pools": {"stable": 6}, **w}
    plain = as_json(replay_ledger(db, proposal, **kw))
    cold = as_json(replay_ledger(db, proposal, keep=True, **kw))
    stamp = kept_file(db).stat().st_mtime_ns
    warm, ran = passes_run(db, proposed=proposal, keep=True, **kw)
    assert cold == plain and warm == plain and ran == {"proposed"}
    assert kept_file(db).stat().st_mtime_ns == stamp   # nothing new to keep: every fit was found
