"""lib.ledger.demo: a seeded, reproducible, internally consistent history (two years unless told)."""
from __future__ import annotations

from datetime import timedelta

import pytest

from lib.ledger.demo import build_demo, ensure_demo_history, insert, parameters
from lib.gate.reasons import CODES
from lib.gate.terms import ARTIFACT_STATUSES, CAPACITIES, ESTIMATE_SOURCES, KINDS, STOP_REASONS
from tests.fixtures_gate import NOW
from tests.fixtures_ledger import counts, query, run_cli

RUNS_SQL = "SELECT * EXCLUDE (updated_at) FROM runs ORDER BY run_id"


@pytest.fixture(scope="module")
def big_demo(tmp_path_factory):
    path = tmp_path_factory.mktemp("demo") / "big.duckdb"
    seen = []
    counts_ = build_demo(path, runs=3000, seed=1, now=NOW, progress=lambda f, m: seen.append((f, m)))
    return path, counts_, seen


def test_the_demos_subsets_and_weights_are_named_in_the_vocabulary():
    """The demo re-types no term: its subsets come from lib.gate.terms and lib.gate.reasons, and
    every dict of weights is keyed by their names."""
    p = parameters
    assert set(p.STOPS) <= set(STOP_REASONS) and set(p.SOURCES) <= set(ESTIMATE_SOURCES)
    assert set(p.CUT_SHORT) <= set(p.STOPS)
    assert set(p.DEFER_WEIGHTS) <= set(CODES) and set(p.DEFER_CODES) == set(p.DEFER_WEIGHTS)
    assert list(p.DEFER_CODES) == sorted(p.DEFER_CODES, key=list(CODES).index)
    per_kind = [p.GPU_P, p.WALL, p.PREEMPTIBLE_SHARE, p.EARLY_STOP_SHARE, p.OTHER_KIND_MIX,
                *p.KIND_MIX.values(), insert.KIND_LETTERS]
    assert all(set(weights) == set(KINDS) for weights in per_kind)
    assert len(p.ARTIFACT_OF_STOP) == len(p.STOPS)
    assert set(p.ARTIFACT_OF_STOP) <= set(range(len(ARTIFACT_STATUSES)))
    assert {p.STABLE, p.PREEMPTIBLE} == set(range(len(CAPACITIES)))


def test_same_seed_same_ledger_other_seed_other_ledger(tmp_path):
    a, b, c = (tmp_path / f"{n}.duckdb" for n in "abc")
    build_demo(a, runs=200, seed=5, now=NOW)
    build_demo(b, runs=200, seed=5, now=NOW)
    build_demo(c, runs=200, seed=6, now=NOW)
    assert query(a, RUNS_SQL) == query(b, RUNS_SQL)
    assert query(a, RUNS_SQL) != query(c, RUNS_SQL)
    dec = "SELECT * EXCLUDE (decision_id) FROM decisions ORDER BY decided_at, run_id, state"
    assert query(a, dec) == query(b, dec)


def test_counts_and_progress(big_demo):
    path, c, seen = big_demo
    # a run deferred MAX_ATTEMPTS times is given up (no run row): a few of 3000 may be
    assert 2970 <= c["runs"] <= 3000 and counts(path)["runs"] == c["runs"]
    assert counts(path)["decisions"] == c["decisions"] == c["runs"] + c["deferred"]
    assert counts(path)["teams"] == 8
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0


def test_two_years_ending_now_with_a_few_runs_still_going(big_demo):
    path, c, _ = big_demo
    first, last_end = query(path, "SELECT min(reserved_from), max(ended_at) FROM runs")[0]
    assert NOW - timedelta(days=735) <= first <= NOW - timedelta(days=700)
    assert last_end <= NOW
    running, future = query(path, "SELECT count(*) FILTER (WHERE started_at IS NOT NULL), "
                                  "count(*) FILTER (WHERE reserved_from > ?) FROM runs "
                                  "WHERE ended_at IS NULL", [NOW])[0]
    assert running > 0 and future > 0 and running + future == c["active"]
    # the reservations held now (admitted, unfinished, window not passed: the gate's count) hold no
    # more than each team's reserved accelerators; later ones were admitted after earlier ones end
    over = query(path, "SELECT r.team FROM runs r JOIN teams t USING (team) WHERE r.ended_at IS NULL "
                       "AND r.reserved_from <= ? AND r.reserved_until > ? "
                       "GROUP BY r.team, t.reserved_gpus HAVING sum(r.gpus) > t.reserved_gpus", [NOW, NOW])
    assert over == []


def test_items_and_times_are_consistent(big_demo):
    path, _, _ = big_demo
    bad = query(path, """
        SELECT
          count(*) FILTER (WHERE abs(estimated_gpu_hours - (est_compute_gpu_hours + est_checkpoint_gpu_hours
               + est_eval_gpu_hours + est_data_loading_gpu_hours + est_restart_gpu_hours)) > 1e-6),
          count(*) FILTER (WHERE act_checkpoint_gpu_hours + act_retry_gpu_hours + act_eval_gpu_hours
               + act_lost_work_gpu_hours > actual_gpu_hours + 1e-9),
          count(*) FILTER (WHERE started_at < reserved_from OR ended_at < started_at
               OR reserved_until < reserved_from),
          count(*) FILTER (WHERE actual_gpu_hours > budget_gpu_hours + 1e-6),
          count(*) FILTER (WHERE actual_gpu_hours < 0 OR estimated_gpu_hours <= 0),
          count(*) FILTER (WHERE restarts > interruptions)
        FROM runs""")[0]
    assert bad == (0, 0, 0, 0, 0, 0)
    stops = {r[0] for r in query(path, "SELECT DISTINCT stop_reason FROM runs WHERE stop_reason IS NOT NULL")}
    assert stops <= set(STOP_REASONS)
    assert {"completed", "early-stop", "budget", "wall-clock", "cancelled"} <= stops


def test_budget_stops_are_capped_incomplete_and_keep_a_checkpoint(big_demo):
    path, _, _ = big_demo
    rows = query(path, "SELECT actual_gpu_hours, budget_gpu_hours, artifact_status, last_valid_checkpoint "
                       "FROM runs WHERE stop_reason = 'budget'")
    assert len(rows) > 50
    assert all(a == pytest.approx(b, abs=1e-3) for a, b, _, _ in rows)
    assert {s for _, _, s, _ in rows} == {"incomplete"}
    assert sum(c is not None for *_, c in rows) > 0.8 * len(rows)
    statuses = dict(query(path, "SELECT stop_reason, any_value(artifact_status) FROM runs "
                                "WHERE stop_reason IN ('completed', 'early-stop', 'wall-clock', 'failed') "
                                "GROUP BY 1"))
    assert statuses == {"completed": "complete", "early-stop": "complete", "wall-clock": "incomplete",
                        "failed": "none"}


def test_realistic_mix(big_demo):
    path, _, _ = big_demo
    (kinds,) = query(path, "SELECT list(DISTINCT kind ORDER BY kind) FROM runs")[0:1]
    assert kinds[0] == ["exploratory", "production", "retraining"]
    inter = dict(query(path, "SELECT capacity, avg(interruptions) FROM runs GROUP BY 1"))
    assert inter["preemptible"] > 5 * inter["stable"]
    # team-specific biases: robotics and nlp-research overrun stated estimates more than ranking
    med = dict(query(path, "SELECT team, median(actual_gpu_hours / estimated_gpu_hours) FROM runs "
                           "WHERE estimate_source = 'stated' AND stop_reason IN ('completed', 'budget') "
                           "GROUP BY 1"))
    assert med["robotics"] > med["ranking"] + 0.15 and med["nlp-research"] > med["ranking"] + 0.15
    never_used, late = query(path, "SELECT count(*) FILTER (WHERE started_at IS NULL AND ended_at IS NOT NULL), "
                                   "count(*) FILTER (WHERE started_at > reserved_from + INTERVAL 1 HOUR) "
                                   "FROM runs")[0]
    assert never_used > 0 and late > 0
    over_reads = query(path, "SELECT count(*) FROM runs WHERE holdout_reads > holdout_allowance")[0][0]
    assert 0 < over_reads < 0.1 * 3000
    assert query(path, "SELECT count(*) FROM runs r JOIN pilots p USING (run_id) "
                       "WHERE r.estimate_source <> 'pilot'") == [(0,)]
    assert query(path, "SELECT count(*) FROM runs WHERE estimate_source = 'pilot'") == \
        query(path, "SELECT count(*) FROM pilots")


def test_deferred_decisions_carry_known_reason_codes(big_demo):
    path, c, _ = big_demo
    rows = query(path, "SELECT reason_codes, decision_json FROM decisions WHERE state = 'defer'")
    assert len(rows) == c["deferred"] > 0
    codes = {code for r, _ in rows for code in r}
    assert codes <= set(CODES) and "capacity" in codes and "budget" in codes
    assert all(list(r) == sorted(r, key=list(CODES).index) for r, _ in rows)
    later = query(path, "SELECT count(*) FROM decisions d JOIN runs r USING (run_id) WHERE d.state = 'defer' "
                        "AND d.decided_at < r.reserved_from")[0][0]
    assert later > 0  # deferred first, admitted later under the same run ID


def test_rebuild_replaces_the_demo_and_keeps_other_rows(demo_ledger):
    from lib.ledger.deciding import submit_request
    from tests.fixtures_ledger import demo_request as request
    submit_request(request(), db=demo_ledger, now=NOW)
    before = counts(demo_ledger)
    c = build_demo(demo_ledger, runs=300, seed=7, now=NOW)
    assert c["deleted_runs"] == 300
    assert counts(demo_ledger) == before
    assert query(demo_ledger, "SELECT source FROM runs WHERE run_id = 'vision-test-0001'") == [("submit",)]


def test_ensure_demo_history_only_fills_an_empty_ledger(demo_ledger, tmp_path):
    assert ensure_demo_history(demo_ledger) is False
    fresh = tmp_path / "fresh.duckdb"
    assert ensure_demo_history(fresh, runs=100, now=NOW) is True
    assert counts(fresh)["runs"] == 100
    assert ensure_demo_history(fresh) is False


def test_bad_run_count_is_refused(tmp_path):
    with pytest.raises(ValueError):
        build_demo(tmp_path / "x.duckdb", runs=0)


def test_days_set_the_length_of_history_at_the_same_run_count(tmp_path):
    short, long_ = tmp_path / "short.duckdb", tmp_path / "long.duckdb"
    build_demo(short, runs=2000, seed=3, now=NOW, days=90)
    build_demo(long_, runs=2000, seed=3, now=NOW, days=1500)
    span = "SELECT min(reserved_from), count(*) FILTER (WHERE reserved_from >= ?) FROM runs"
    (first_short, recent_short), = query(short, span, [NOW - timedelta(days=28)])
    (first_long, recent_long), = query(long_, span, [NOW - timedelta(days=28)])
    assert NOW - timedelta(days=95) <= first_short <= NOW - timedelta(days=80)
    assert NOW - timedelta(days=1505) <= first_long <= NOW - timedelta(days=1400)
    # the same runs over a longer history: fewer of them in the last four weeks
    assert recent_long * 5 < recent_short
    assert counts(long_)["runs"] == 2000


def test_a_history_too_short_for_the_demo_is_refused(tmp_path):
    with pytest.raises(ValueError, match="days"):
        build_demo(tmp_path / "x.duckdb", runs=100, days=30)
    p = run_cli("demo", "--runs", "100", "--days", "30", db=tmp_path / "y.duckdb")
    assert p.returncode == 2 and "--days: at least 60 days" in p.stderr


def test_a_build_larger_than_a_chunk_is_written_chunk_by_chunk_in_time_order(tmp_path, monkeypatch):
    import lib.ledger.demo as demo
    monkeypatch.setattr(demo, "CHUNK_RUNS", 1000)
    path = tmp_path / "chunked.duckdb"
    seen = []
    c = build_demo(path, runs=2500, seed=2, now=NOW, progress=lambda f, m: seen.append((f, m)))
    assert c["runs"] == 2500 and counts(path)["runs"] == 2500
    assert query(path, "SELECT count(DISTINCT run_id) FROM runs") == [(2500,)]
    assert counts(path)["decisions"] == c["decisions"] == 2500 + c["deferred"]
    assert c["active"] == query(path, "SELECT count(*) FROM runs WHERE ended_at IS NULL")[0][0] > 0
    # a deferral admitted later names a run the chunk inserted (its ID made in Python as in SQL)
    assert query(path, """SELECT count(*) FROM decisions d WHERE d.state = 'defer' AND d.run_id NOT LIKE '%-deferred-%'
                          AND d.run_id NOT IN (SELECT run_id FROM runs)""") == [(0,)]
    assert query(path, "SELECT count(*) FROM decisions WHERE state = 'defer' AND run_id NOT LIKE '%-deferred-%'")[0][0] > 0
    # each chunk's runs are stored by reservation start: the order breaks at most once per chunk
    breaks = query(path, """SELECT count(*) FROM (SELECT reserved_from < lag(reserved_from) OVER (ORDER BY rowid) AS back
                            FROM runs) WHERE back""")[0][0]
    assert breaks <= 2
    assert any("runs 2,001-2,500 of 2,500" in m for _, m in seen)
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
