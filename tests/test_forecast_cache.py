"""The fitted models kept beside the ledger between processes: a forecast whose histories did not change
reads them (and never imports statsmodels), gives the forecast a fit gives, refits only a team whose
history changed, and a damaged or unwritable cache file changes nothing but the time taken."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest

from lib.ledger.connection import open_ledger, transaction
from lib.ledger.forecast import forecast, model_cache, week_start
from lib.planning import content_store
from lib.planning.forecast import cache as forecast_cache, models as forecast_models
from lib.planning.forecast.models import fit_team
from tests.fixtures_app import ROOT
from tests.fixtures_forecast import generated_histories

LAST = dt.date(2026, 11, 23)

# In a fresh process: the forecast as JSON, and whether it imported statsmodels.
CHILD = """
import json, sys
from lib.ledger.forecast import forecast
r = forecast(sys.argv[1], as_of=__import__("datetime").datetime.fromisoformat(sys.argv[2]), weeks=26)
print(json.dumps({"teams": r["teams"], "statsmodels": "statsmodels" in sys.modules}, default=str))
"""


def in_new_process(path, as_of: dt.datetime) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), as_of.isoformat()], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _add_run(path, run_id, team, started, actual):
    with open_ledger(path) as con, transaction(con):
        con.execute("""INSERT INTO runs (run_id, team, kind, gpus, started_at, ended_at, actual_gpu_hours,
                       reserved_gpu_hours, source, updated_at)
                       VALUES (?, ?, 'exploratory', 8, ?, ?, ?, ?, 'test', ?)""",
                    [run_id, team, started, started + dt.timedelta(hours=5), actual, actual, started])


def test_an_unchanged_ledger_is_forecast_from_the_cache_without_statsmodels(page_ledger):
    path, now = page_ledger
    as_of = dt.datetime.combine(week_start(now), dt.time())
    first = in_new_process(path, as_of)
    assert first["statsmodels"] and model_cache(path).exists()
    second = in_new_process(path, as_of)
    assert not second["statsmodels"]
    assert second["teams"] == first["teams"]


def test_a_changed_history_is_fitted_again_and_only_that_teams(page_ledger):
    path, now = page_ledger
    as_of = dt.datetime.combine(week_start(now), dt.time())
    before = forecast(path, as_of=as_of, weeks=26)
    _add_run(path, "late-huge", "vision", as_of - dt.timedelta(days=10), 5e4)
    forecast_models._fit_cached.cache_clear()
    after = forecast(path, as_of=as_of, weeks=26)
    assert forecast_models._fit_cached.cache_info().misses == 1      # vision's new history, no other team
    assert after["teams"]["vision"] != before["teams"]["vision"]
    model_cache(path).unlink()
    forecast_models._fit_cached.cache_clear()
    assert forecast(path, as_of=as_of, weeks=26)["teams"] == after["teams"]    # as a fit with no cache


@pytest.mark.parametrize("damage", ["", "{not json", '{"format": 1, "entries": {"k": {"name": 3}}}',
                                    '{"format": 1, "entries": []}', "[1, 2]"])
def test_a_damaged_cache_file_is_no_cache(page_ledger, damage):
    path, now = page_ledger
    as_of = dt.datetime.combine(week_start(now), dt.time())
    clean = forecast(path, as_of=as_of, weeks=26)["teams"]
    model_cache(path).write_text(damage)
    forecast_models._fit_cached.cache_clear()
    assert forecast(path, as_of=as_of, weeks=26)["teams"] == clean
    assert forecast_cache.load_models(model_cache(path))                     # and it was written again, whole


def test_a_cache_that_cannot_be_written_changes_nothing(tmp_path):
    y = generated_histories(3, 80, LAST, noise=0.1)["growing"]
    missing = tmp_path / "no-such-dir" / "cache.json"
    forecast_cache.save_models(missing, {"k": fit_team(y, LAST)})
    assert not missing.parent.exists() and forecast_cache.load_models(missing) == {}


def test_a_model_read_back_is_the_model_fitted_to_the_last_bit(tmp_path):
    cache = tmp_path / "cache.json"
    y = generated_histories(4, 120, LAST, noise=0.2)["step+dip"]
    model = fit_team(y, LAST)
    key = forecast_cache.model_key(y, LAST)
    forecast_cache.save_models(cache, {key: model})
    content_store._read.clear()                                      # parse the file, not the memo
    back = forecast_cache.load_models(cache)[key]
    assert back["name"] == model["name"] and back["scores"] == model["scores"]
    arrays = [(back[k], model[k]) for k in ("point",)] + list(zip(back["ratios"] + back["sums"],
                                                                 model["ratios"] + model["sums"]))
    assert all(a.tobytes() == b.tobytes() for a, b in arrays)
    assert forecast_cache.model_key(y[:-1], LAST) != key != forecast_cache.model_key(y, LAST + dt.timedelta(weeks=1))


def test_only_the_most_recently_used_histories_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(forecast_cache, "MAX_ENTRIES", 3)
    cache = tmp_path / "cache.json"
    model = fit_team([100.0] * 12, LAST)
    forecast_cache.save_models(cache, {str(k): model for k in range(5)})
    content_store._read.clear()
    assert list(forecast_cache.load_models(cache)) == ["2", "3", "4"]
