"""The dashboard's queries and pure helpers, on real DuckDB files in tmp_path."""
from __future__ import annotations

import datetime as dt
import io

import pandas as pd
import pytest

from lib.dashboard import (budget_queries, estimate_queries, idle_queries, labels, overview_queries,
                           reservation_queries, sidebar_queries, stop_queries)
from lib.gate.capacity import earliest_fit, fit_for_reasons
from lib.gate.terms import next_month_start
from lib.dashboard.filters import Filters, default_filters
from lib.ledger.connection import open_ledger, transaction
from lib.ledger.calibration_rows import calibration as store_calibration
from lib.ledger.recording import canonical_json
from lib.dashboard.tables import escape_markdown, neutralise, safe_csv_bytes
from lib.dashboard.whatif import request_from_form
from tests.fixtures_app import PAGE_QUERIES, fill_ledger, insert_teams
from tests.fixtures_gate import NOW
from tests.fixtures_ledger import demo_request

H = dt.timedelta(hours=1)


def period(days_before=10, days_after=0):
    return Filters(date_from=(NOW - dt.timedelta(days=days_before)).date(),
                   date_to=(NOW + dt.timedelta(days=days_after)).date())


def add_run(con, run_id, team="speech", kind="exploratory", gpus=2, **cols):
    row = {"run_id": run_id, "team": team, "kind": kind, "gpus": gpus, "source": "test", "updated_at": NOW, **cols}
    names = ", ".join(row)
    con.execute(f"INSERT INTO runs ({names}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


@pytest.fixture
def exact(tmp_path):
    """A hand-made ledger whose idle, overrun and fit numbers are known."""
    path = tmp_path / "exact.duckdb"
    with open_ledger(path) as con, transaction(con):
        insert_teams(con)
        t0 = NOW - dt.timedelta(days=3)
        # 2 GPUs x 10 h window; starts 1 h late, ends 2 h early -> 2 + 4 idle GPU-h; overran by 6
        add_run(con, "late-early", reserved_from=t0, reserved_until=t0 + 10 * H, reserved_gpu_hours=20.0,
                started_at=t0 + H, ended_at=t0 + 8 * H, actual_gpu_hours=26.0, estimated_gpu_hours=18.0,
                estimate_source="pilot", stop_reason="budget", artifact_status="incomplete",
                last_valid_checkpoint="ckpt/step-9", budget_gpu_hours=26.0,
                est_compute_gpu_hours=14.0, est_checkpoint_gpu_hours=1.0, est_eval_gpu_hours=2.0,
                est_data_loading_gpu_hours=0.5, est_restart_gpu_hours=0.5, act_checkpoint_gpu_hours=2.0,
                act_retry_gpu_hours=1.0, act_eval_gpu_hours=3.0, act_lost_work_gpu_hours=1.0)
        # 4 GPUs x 5 h window never used and passed -> 20 idle GPU-h; its end is recorded (cancelled at
        # the window's end): a run without one would still hold its accelerators (docs/rules.md)
        add_run(con, "never", gpus=4, reserved_from=t0, reserved_until=t0 + 5 * H, reserved_gpu_hours=20.0,
                ended_at=t0 + 5 * H, stop_reason="cancelled")
        # requested-only estimate: left out of error statistics
        add_run(con, "requested", reserved_from=t0, reserved_until=t0 + 4 * H, reserved_gpu_hours=8.0,
                started_at=t0, ended_at=t0 + 4 * H, actual_gpu_hours=8.0, estimated_gpu_hours=80.0,
                estimate_source="requested", stop_reason="completed")
        # running now: 8 GPUs until NOW + 5 h; another team's reservation
        add_run(con, "running", gpus=8, reserved_from=NOW - H, reserved_until=NOW + 5 * H,
                reserved_gpu_hours=48.0, started_at=NOW - H)
        add_run(con, "vision-run", team="vision", gpus=1, reserved_from=t0, reserved_until=t0 + 2 * H,
                reserved_gpu_hours=2.0, started_at=t0, ended_at=t0 + 2 * H, actual_gpu_hours=2.0,
                estimated_gpu_hours=2.0, estimate_source="stated", stop_reason="completed")
        # waiting: 16 accelerators (after waiting-2, waiting longest, takes 8 of speech's 24 for 10 h: it
        # was deferred 12 days ago, before the period the overview counts), and one over its budget (which
        # does not wait)
        for i, (codes, gpus, est, budget, waited) in enumerate([(["capacity"], 16, 10, 40, 2), (["budget"], 1, 10, 1, 2),
                                                                (["capacity"], 8, 80, 300, 12 * 24)]):
            request = demo_request(run_id=f"waiting-{i}", team="speech", gpus=gpus, budget_gpu_hours=budget,
                                   estimated_gpu_hours=est, data_snapshot="speech-asr-multilingual-v3")
            con.execute("""INSERT INTO decisions (decided_at, run_id, team, kind, state, reason_codes, origin,
                           request_json, decision_json) VALUES (?, ?, 'speech', 'exploratory', 'defer', ?, 'test', ?, '{}')""",
                        [NOW - waited * H, f"waiting-{i}", codes, canonical_json(request)])
    return path


# --------------------------------------------------------------------------- capacity timeline

def held(*pairs, kind="exploratory"):
    """Reservations holding (gpus, reserved_until)."""
    return [{"kind": kind, "gpus": g, "reserved_gpu_hours": 1.0, "reserved_until": e} for g, e in pairs]


def test_earliest_fit_is_now_when_there_is_room():
    assert earliest_fit(NOW, 10, held((4, NOW + H)), 6) == NOW


def test_earliest_fit_waits_for_enough_reservations_to_end():
    running = held((4, NOW + 3 * H), (4, NOW + H), (2, NOW + 2 * H))
    assert earliest_fit(NOW, 10, running, 4) == NOW + H
    assert earliest_fit(NOW, 10, running, 6) == NOW + 2 * H
    assert earliest_fit(NOW, 10, running, 7) == NOW + 3 * H
    assert earliest_fit(NOW, 10, running, 10) == NOW + 3 * H


def test_earliest_fit_never_when_above_quota_or_blocked_by_an_open_ended_reservation():
    assert earliest_fit(NOW, 10, [], 11) is None
    assert earliest_fit(NOW, 10, held((8, None), (2, NOW + H)), 4) is None
    assert earliest_fit(NOW, 10, held((8, None), (2, NOW + H)), 2) == NOW + H


def test_reservations_already_ended_do_not_count():
    assert earliest_fit(NOW, 4, held((4, NOW - H)), 4) == NOW


def test_fit_for_reasons_says_when_waiting_cannot_help():
    at, note = fit_for_reasons(NOW, ["capacity", "budget"], "exploratory", 10, 0, [], 2)
    assert at is None and "budget" in note
    at, _ = fit_for_reasons(NOW, ["capacity", "period-budget"], "exploratory", 10, 0, held((10, NOW + H)), 2)
    assert at == next_month_start(NOW) == dt.datetime(NOW.year + NOW.month // 12, NOW.month % 12 + 1, 1)
    assert next_month_start(dt.datetime(2026, 12, 31, 23)) == dt.datetime(2027, 1, 1)


# --------------------------------------------------------------------------------- filters

def test_the_previous_period_has_the_same_length_just_before():
    f = Filters(date_from=dt.date(2026, 3, 1), date_to=dt.date(2026, 3, 31), teams=("b", "a"))
    p = f.previous()
    assert (p.date_from, p.date_to, p.teams) == (dt.date(2026, 1, 29), dt.date(2026, 2, 28), ("a", "b"))
    assert f.end == dt.datetime(2026, 4, 1) and f.days == 31


def test_filters_refuse_nonsense():
    with pytest.raises(ValueError):
        Filters(date_from=dt.date(2026, 3, 2), date_to=dt.date(2026, 3, 1))
    with pytest.raises(ValueError):
        Filters(date_from=dt.date(2026, 3, 1), date_to=dt.date(2026, 3, 1), kinds=("bogus",))


def test_default_period_ends_on_the_last_day_with_data():
    f = default_filters(dt.date(2026, 5, 1), today=dt.date(2026, 6, 1), days=28)
    assert (f.date_from, f.date_to) == (dt.date(2026, 4, 4), dt.date(2026, 5, 1))
    assert default_filters(None, today=dt.date(2026, 6, 1)).date_to == dt.date(2026, 6, 1)


def test_team_names_are_bound_never_spliced_into_sql(exact):
    evil = "speech' OR '1'='1"
    f = Filters(date_from=period().date_from, date_to=period().date_to, teams=(evil,))
    out = overview_queries.overview(f, exact, NOW)
    assert out["current"]["runs"] == 0


# ---------------------------------------------------------------------------- page queries

def test_idle_capacity_splits_late_start_early_end_and_never_used(exact):
    out = idle_queries.idle_capacity(period(), exact, NOW)
    by_run = out["top"].set_index("run_id")
    assert by_run.loc["late-early", "late_start_gpu_hours"] == pytest.approx(2.0)
    assert by_run.loc["late-early", "early_end_gpu_hours"] == pytest.approx(4.0)
    assert by_run.loc["never", "never_used_gpu_hours"] == pytest.approx(20.0)
    assert "running" not in by_run.index and "vision-run" not in by_run.index
    speech = out["by_team"].set_index("team").loc["speech"]
    assert speech["idle_gpu_hours"] == pytest.approx(26.0)   # charged to the team that held it


def test_overview_numbers_for_a_known_ledger(exact):
    out = overview_queries.overview(period(), exact, NOW)
    cur = out["current"]
    assert cur["reserved_gpu_hours"] == pytest.approx(20 + 20 + 8 + 48 + 2)
    assert cur["used_gpu_hours"] == pytest.approx(26 + 8 + 2)
    assert cur["budget_stopped"] == 1
    assert cur["deferred"] == 2
    assert cur["requested_runs"] == 1
    # the requested-only estimate (8 / 80 = 0.1) is left out of the error statistics
    assert cur["median_ratio"] == pytest.approx((26 / 18 + 1.0) / 2)
    assert out["previous"]["runs"] == 0
    assert dict(zip(out["deferred_by_reason"]["reason"], out["deferred_by_reason"]["requests"])) == \
        {"capacity": 1, "budget": 1}


def test_a_team_filter_changes_the_numbers(exact):
    speech = overview_queries.overview(Filters(period().date_from, period().date_to, teams=("speech",)), exact, NOW)
    vision = overview_queries.overview(Filters(period().date_from, period().date_to, teams=("vision",)), exact, NOW)
    everyone = overview_queries.overview(period(), exact, NOW)
    assert vision["current"]["reserved_gpu_hours"] == pytest.approx(2.0)
    assert speech["current"]["reserved_gpu_hours"] + vision["current"]["reserved_gpu_hours"] == \
        pytest.approx(everyone["current"]["reserved_gpu_hours"])


def test_reservations_overruns_budget_and_planned_start(exact):
    out = reservation_queries.reservations(period(), exact, NOW)
    assert list(out["overruns"]["run_id"]) == ["late-early"]
    assert out["overruns"]["overrun_gpu_hours"].iloc[0] == pytest.approx(6.0)
    assert list(out["current"]["run_id"]) == ["running"]
    budget = out["budget"].set_index("team").loc["speech"]
    assert budget["committed_gpu_hours"] == pytest.approx(48.0)
    assert budget["consumed_gpu_hours"] == pytest.approx(26 + 8)
    assert budget["remaining_gpu_hours"] == pytest.approx(9000 - 48 - 34)
    waiting = out["waiting"].set_index("run_id")
    # speech: 32 reserved, 8 set aside for retraining -> 24 for exploratory; 8 running until NOW + 5 h,
    # 8 more from the plan's start of waiting-2 now: 16 fit when "running" ends
    assert waiting.loc["waiting-2", "planned_start"] == pd.Timestamp(NOW)
    assert waiting.loc["waiting-0", "planned_start"] == pd.Timestamp(NOW + 5 * H)
    assert waiting.loc["waiting-0", "ahead"] == "waiting-2"
    # deferred for its own budget: waiting cannot cure it, so it does not wait in the line
    assert "waiting-1" not in waiting.index and out["queue_count"] == 2
    day = out["over_time"].set_index(["day", "team"])
    assert day.loc[(pd.Timestamp((NOW - dt.timedelta(days=3)).date()), "vision"), "reserved_gpus"] == \
        pytest.approx(2.0 / 24)


def test_estimate_accuracy_marks_requested_estimates(exact):
    out = estimate_queries.estimate_accuracy(period(), exact, NOW)
    pts = out["points"].set_index("run_id")
    assert pts.loc["requested", "estimate_source"] == labels.REQUESTED_LABEL
    assert out["counts"] == {"runs": 3, "requested_runs": 1}
    sources = out["sources"].set_index("source")["error_gpu_hours"].to_dict()
    assert sources == pytest.approx({"runtime": 4.5, "checkpoint overhead": 1.0, "retries and lost work": 1.5,
                                     "evaluation": 1.0})   # together: actual 26 - estimated 18


def test_stops_and_promotion(exact):
    out = stop_queries.stops_promotion(period(), exact, NOW)
    stopped = out["limit_stopped"].set_index("run_id")
    assert stopped.loc["late-early", "last_valid_checkpoint"] == "ckpt/step-9"
    assert stopped.loc["late-early", "artifact_status"] == "incomplete"
    assert out["candidate_count"] == 0


@pytest.mark.parametrize("max_runs", [None, 15])
def test_the_calibration_table_is_what_the_gate_applies(tmp_path, max_runs):
    path = tmp_path / "cal.duckdb"
    now = fill_ledger(path, n_runs=400)
    out = estimate_queries.calibration_shown(default_filters(now.date()), path, now, max_runs=max_runs)["table"]
    assert len(out) == 4 * 3
    limit = {} if max_runs is None else {"max_runs": max_runs}
    with open_ledger(path, read_only=True) as con:
        for row in out.itertuples():
            gate = store_calibration(con, row.team, row.kind, now, **limit)
            assert (row.factor, row.method, row.scope, row.runs, row.censored_runs) == \
                (pytest.approx(gate["factor"]), gate["method"], gate["scope"], gate["n"], gate["n_censored"])
            assert (pd.isna(row.upper_factor) and gate["upper_factor"] is None) or \
                row.upper_factor == pytest.approx(gate["upper_factor"])
    # the replayed coverage rests on at most BACKTEST_RUNS runs and is a share when anything was checked
    assert (out["backtest_checked"] <= estimate_queries.BACKTEST_RUNS).all() and out["backtest_checked"].sum() > 0
    checked = out[out["backtest_checked"] > 0]["backtest_coverage"]
    assert ((checked >= 0) & (checked <= 1)).all()
    speech = estimate_queries.calibration_shown(Filters(now.date(), now.date(), teams=("speech",), kinds=("production",)),
                                 path, now)["table"]
    assert list(zip(speech["team"], speech["kind"])) == [("speech", "production")]


def test_every_page_query_runs_on_a_generated_ledger_and_on_an_empty_one(tmp_path):
    full, empty = tmp_path / "full.duckdb", tmp_path / "empty.duckdb"
    now = fill_ledger(full, n_runs=200)
    with open_ledger(empty):
        pass
    for db in (full, empty):
        f = default_filters(sidebar_queries.sidebar_options(db)["last_day"], today=now.date())
        for query in PAGE_QUERIES.values():
            assert isinstance(query(f, db, now), dict)
    assert sidebar_queries.sidebar_options(empty) == {"teams": [], "runs": 0, "first_day": None, "last_day": None}


def test_a_query_leaves_the_ledger_free_for_a_writer(exact):
    overview_queries.overview(period(), exact, NOW)
    with open_ledger(exact, timeout_s=0.5) as con:   # would raise LedgerLocked if a handle were kept
        con.execute("UPDATE runs SET gpus = gpus WHERE run_id = 'never'")


# ---------------------------------------------------------------------------- small helpers

def test_csv_exports_neutralise_formula_cells():
    df = pd.DataFrame({"run_id": ["=HYPERLINK(1)", "+1", "-cmd", "@x", "ok"], "n": [-1, 2, 3, 4, 5]})
    text = safe_csv_bytes(df).decode()
    back = pd.read_csv(io.StringIO(text))
    assert list(back["run_id"]) == ["'=HYPERLINK(1)", "'+1", "'-cmd", "'@x", "ok"]
    assert list(back["n"]) == [-1, 2, 3, 4, 5]
    assert neutralise(-3) == -3


def test_markdown_in_user_text_is_escaped():
    assert escape_markdown("<b>x</b> [a](b) *c*") == "\\<b\\>x\\</b\\> \\[a\\]\\(b\\) \\*c\\*"


def test_the_what_if_form_builds_a_contract_request():
    base = {"run_id": " r1 ", "team": "speech", "kind": "exploratory", "gpus": 2.0, "gpu_mem_gb": 40,
            "max_runtime_hours": 12, "budget_gpu_hours": 60, "checkpoint_supported": True,
            "expected_interruptions": 0.5, "capacity": "stable", "data_snapshot": "", "estimate_from": "estimate",
            "estimated_gpu_hours": 20, "steps_per_second": 3.0, "max_wall_clock_hours": 0,
            "early_stop_metric": "", "holdout_allowance": 0}
    r = request_from_form(base)
    assert r == {"run_id": "r1", "team": "speech", "kind": "exploratory", "gpus": 2, "gpu_mem_gb": 40.0,
                 "max_runtime_hours": 12.0, "budget_gpu_hours": 60.0, "checkpoint_supported": True,
                 "expected_interruptions": 0.5, "capacity": "stable", "estimated_gpu_hours": 20.0}
    p = request_from_form({**base, "estimate_from": "pilot", "planned_steps": 1000, "peak_mem_gb": 30,
                       "checkpoint_interval_steps": 0, "early_stop_metric": "val_loss", "early_stop_mode": "min",
                       "early_stop_patience": 3, "max_wall_clock_hours": 10})
    assert "estimated_gpu_hours" not in p
    assert p["pilot"] == {"steps_per_second": 3.0, "peak_mem_gb": 30.0, "planned_steps": 1000}
    assert p["stop_policy"] == {"max_wall_clock_hours": 10.0, "early_stop": {"metric": "val_loss", "mode": "min",
                                                                               "patience": 3, "min_delta": 0.0}}


def test_every_write_path_registers_a_runs_team_so_the_team_list_reads_only_the_teams_table(demo_ledger, tmp_path):
    from lib.ledger.imports import import_runs
    from lib.ledger.deciding import submit_request
    from lib.ledger.finishing import finish_run
    from tests.fixtures_ledger import demo_request, query
    csv = tmp_path / "new-team.csv"
    csv.write_text("run_id,team,kind,gpus\nnew-team-001,brand-new,exploratory,2\n", encoding="utf-8")
    import_runs(csv, db=demo_ledger, create_teams=True)
    decision = submit_request(demo_request(run_id="listed-001"), db=demo_ledger)
    assert decision["state"] == "admit"
    finish_run("listed-001", actual_gpu_hours=1.0, stop_reason="completed", db=demo_ledger)
    assert query(demo_ledger, "SELECT count(*) FROM runs WHERE team NOT IN (SELECT team FROM teams)") == [(0,)]
    assert "brand-new" in sidebar_queries.sidebar_options(demo_ledger)["teams"]


def test_no_two_page_functions_share_a_cache_key():
    """ui.PageData and its charts key their caches by a function's qualified name: every public
    function of lib/dashboard, and each month's budget query, must have one of its own."""
    import importlib
    import inspect
    import pkgutil

    import lib.dashboard
    from ui.data import qualified_name
    functions = {fn for info in pkgutil.iter_modules(lib.dashboard.__path__, "lib.dashboard.")
                 for _, fn in inspect.getmembers(importlib.import_module(info.name), inspect.isfunction)
                 if fn.__module__.startswith("lib.dashboard.")}
    months = [budget_queries.monthly_budget_in(dt.date(2026, m, 1)) for m in (11, 12)]
    keys = [qualified_name(fn) for fn in [*functions, *months]]
    assert len(keys) == len(set(keys))
