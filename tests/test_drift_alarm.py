"""The drift alarm: a team x kind whose recent runs go over the calibrated bound (or stop at their
limit) far more often than the level allows is flagged, with since when and what to do; steady
scopes stay quiet."""
import numpy as np
import pandas as pd
import pytest

from lib.dashboard import estimate_queries, team_board
from lib.dashboard.filters import default_filters
from lib.gate.backtest import backtest, drift_alarm
from tests.fixtures_app import open_app
from tests.fixtures_calibration import ratio_stream


def _replayed(stream: dict, lag: int = 6, last: int = 100) -> dict:
    """Backtest of a stream whose runs are decided `lag` runs before they end (runs in flight)."""
    n = len(stream["r"])
    ended = np.arange(n, dtype=float)
    return backtest(stream["r"], stream["censored"], last=last, ended_at=ended, decided_at=ended - lag - 0.5)


def test_the_alarm_fires_on_a_shifted_scope_in_words_a_planner_reads():
    s = ratio_stream(1, 400, sigma=0.25, jump_at=388, factor=2.0)
    back = _replayed(s)
    times = [f"t{i}" for i in range(300, 400)]
    alarm = drift_alarm(back["outcomes"], times)
    assert alarm["alarm"]
    assert alarm["exceeded"] >= 7 and alarm["checked"] == 20
    assert alarm["message"] == (f"{alarm['exceeded']} of the last 20 runs exceeded the 90 % bound; "
                                "expected about 2")
    # since: the first of those 20 runs that went over
    assert alarm["since"] == times[80 + back["outcomes"][80:].index("exceeded")]


def test_a_steady_scope_stays_quiet():
    alarm = drift_alarm(_replayed(ratio_stream(2, 400))["outcomes"])
    assert not alarm["alarm"] and alarm["exceeded"] <= 5


def test_false_alarms_on_steady_streams_stay_under_5_percent_of_scopes():
    rng = np.random.default_rng(0)
    fired = 0
    for seed in range(200):
        s = ratio_stream(seed, 300, mu=rng.uniform(-0.2, 0.4), sigma=rng.uniform(0.1, 0.5),
                         censor_share=rng.choice([0.0, 0.3]))
        back = _replayed(s, lag=int(rng.integers(0, 8)), last=20)
        fired += drift_alarm(back["outcomes"], censored=s["censored"])["alarm"]
    assert fired / 200 < 0.05


def test_a_surge_of_budget_stops_fires_the_alarm_even_when_each_is_under_the_bound():
    # every recent run stopped at its budget, under the bound: none is a known exceedance
    outcomes = ["covered"] * 80 + ["unknown"] * 20
    censored = [i % 10 == 0 for i in range(280)] + [True] * 20
    alarm = drift_alarm(outcomes, censored=censored)
    assert alarm["alarm"] and alarm["exceeded"] == 0 and alarm["stopped"] == 20
    assert alarm["message"].startswith("20 of the last 20 runs stopped at their budget or time limit before "
                                       "finishing, where about 2 did before")
    # the same share of stops as before is no alarm
    assert not drift_alarm(["covered"] * 18 + ["unknown"] * 2, censored=censored[:280])["alarm"]


def test_when_budget_stops_are_the_evidence_the_alarm_says_so_against_before_the_change():
    # 1 run in 5 stopped at its budget before the change; 14 of the 16 since did, each under its bound
    censored = [i % 5 == 0 for i in range(300)] + [True] * 14 + [False] * 2
    after = [False] * 300 + [True] * 16
    outcomes = ["covered"] * 84 + ["unknown"] * 14 + ["covered"] * 2
    alarm = drift_alarm(outcomes, censored=censored, after_change=after)
    assert alarm["alarm"] and alarm["exceeded"] == 0 and alarm["stopped"] == 14
    assert alarm["message"].startswith("14 of the 16 runs since the change stopped at their budget or time limit; "
                                       "before the change about 1 in 5 did")
    # as many stops since the change as before it: no alarm from them
    usual = [i % 5 == 0 for i in range(316)]
    assert not drift_alarm(["covered"] * 100, censored=usual, after_change=after)["alarm"]


@pytest.fixture(scope="module")
def full_demo(tmp_path_factory):
    """The demo history at its default size (its cost shift needs months of runs), and its now."""
    from lib.ledger.demo import build_demo
    from tests.fixtures_gate import NOW
    path = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    build_demo(path, now=NOW)
    return path, NOW


def test_the_demo_history_shows_the_alarm_on_the_team_whose_costs_shift(full_demo):
    from lib.ledger.demo import COST_SHIFT
    path, now = full_demo
    out = estimate_queries.calibration_shown(default_filters(now.date()), path, now)
    alarms, table = out["alarms"], out["table"]
    shift = alarms[alarms["team"] == COST_SHIFT[0]]
    assert len(shift) and shift["what_to_do"].str.contains("re-run the pilots").all()
    assert (shift["drift_since"] >= now - np.timedelta64(COST_SHIFT[1] + 5, "D")).all()
    # the other ~20 team x kind scopes are steady; the alarm's own false-alarm rate (bench_calibration:
    # 4-17 % of steady teams raise one some time in 200 decisions) allows a chance one among them, no more
    assert (alarms["team"] != COST_SHIFT[0]).sum() <= 1, alarms
    shifted = table[table["team"] == COST_SHIFT[0]]
    assert shifted["adapted_since"].notna().any()
    # the coverage audit covers every method the gate uses, Tobit included
    tobit = table[(table["method"] == "tobit") & (table["scope"] == "team×kind") & (table["runs"] >= 50)]
    assert len(tobit) and tobit["backtest_coverage"].notna().all()


def test_the_estimate_accuracy_page_shows_the_alarm(full_demo, monkeypatch, fresh_caches):
    path, now = full_demo
    monkeypatch.setenv("GATE_DB", str(path))
    monkeypatch.setenv("GATE_DEMO", "0")
    at = open_app("estimate_accuracy", timeout_s=90)
    assert not at.exception, [e.value for e in at.exception]
    warnings = [w.value for w in at.warning]
    assert any(w.startswith("Drift alarm:") and "re-run the pilots" in w for w in warnings), warnings


def test_a_backtest_remembers_each_replayed_bound_by_the_runs_it_was_replayed_from():
    stream = ratio_stream(seed=5, n=400, jump_at=300, factor=2.0, censor_share=0.3)
    n = len(stream["r"])
    ended = np.arange(n, dtype=float)
    plain = backtest(stream["r"], stream["censored"], last=60, ended_at=ended, decided_at=ended - 6.5)
    memo: dict = {}
    first = backtest(stream["r"], stream["censored"], last=60, ended_at=ended, decided_at=ended - 6.5, memo=memo)
    assert first == plain and 0 < len(memo) <= 60
    filled = dict(memo)
    again = backtest(stream["r"], stream["censored"], last=60, ended_at=ended, decided_at=ended - 6.5, memo=memo)
    assert again == plain and memo == filled, "a second replay of the same runs replays nothing"
    # ten more runs ended: only the replays whose runs are new are added
    more = backtest(np.append(stream["r"], stream["r"][-10:]), np.append(stream["censored"], stream["censored"][-10:]),
                    last=60, ended_at=np.arange(n + 10.0), decided_at=np.arange(n + 10.0) - 6.5, memo=memo)
    assert len(memo) - len(filled) == 10 and len(more["outcomes"]) == 60
    # bounds made by other code (another tag) are never taken for this code's
    other: dict = {}
    backtest(stream["r"], stream["censored"], last=60, ended_at=ended, decided_at=ended - 6.5, memo=other,
             memo_tag=b"other code")
    assert not set(other) & set(filled)


def test_the_calibration_table_keeps_its_replayed_bounds_beside_the_ledger_and_reads_them_back(full_demo, tmp_path):
    import shutil
    path, now = full_demo
    ledger = tmp_path / "copy.duckdb"
    shutil.copy(path, ledger)
    f = default_filters(now.date())
    cold = estimate_queries.calibration_shown(f, ledger, now)
    saved = ledger.with_name(ledger.name + estimate_queries.BOUNDS_SUFFIX)
    assert saved.parent == ledger.parent and saved.stat().st_size > 0
    stamp = saved.stat().st_mtime_ns
    warm = estimate_queries.calibration_shown(f, ledger, now)
    assert saved.stat().st_mtime_ns == stamp, "nothing new replayed, nothing rewritten"
    saved.write_text("{ not json")                      # a damaged file is no store: computed again
    damaged = estimate_queries.calibration_shown(f, ledger, now)
    for got in (warm, damaged):
        pd.testing.assert_frame_equal(got["table"], cold["table"])
        pd.testing.assert_frame_equal(got["alarms"], cold["alarms"])


def test_the_boards_drift_flags_are_the_alarms_estimate_accuracy_shows(full_demo):
    from lib.ledger.demo import COST_SHIFT
    path, now = full_demo
    f = default_filters(now.date())
    got = team_board.team_board(f, path, now)
    shown = estimate_queries.calibration_shown(f, path, now)["alarms"]
    pd.testing.assert_frame_equal(got["alarms"], shown)
    flagged = got["board"].set_index("team")["drift"]
    assert flagged[COST_SHIFT[0]] != "" and flagged[COST_SHIFT[0]] == team_board.with_drift(
        got["board"], shown).set_index("team")["drift"][COST_SHIFT[0]]
    assert set(flagged[flagged != ""].index) == set(shown["team"])
