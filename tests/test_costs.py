"""Money next to GPU-hours: GPU-hours x the price of their capacity type, on the same rows as the
hours the pages show; idle cost charged to the holder; no price, no money (never 0)."""
from __future__ import annotations

import datetime as dt

import pytest
from streamlit.testing.v1 import AppTest

from lib.dashboard import costs, idle_queries, overview_queries
from lib.dashboard.filters import Filters, default_filters
from lib.ledger.connection import open_ledger, transaction
from lib.ledger.teams_file import DEFAULT_TEAMS_FILE, sync_teams
from tests.fixtures_app import ROOT, page_script

NOW = dt.datetime(2026, 6, 15, 12, 0)
DAY = Filters(date_from=dt.date(2026, 6, 15), date_to=dt.date(2026, 6, 15))
BOTH = 'currency = "EUR"\nstable = 2.5\npreemptible = 0.9\n'
STABLE_ONLY = 'currency = "EUR"\nstable = 2.5\n'

TEAMS = """
[defaults]
max_gpu_mem_gb = 80
max_runtime_hours = 48
max_gpus_per_job = 8
monthly_budget_gpu_hours = 1000

[teams.alpha]
reserved_gpus = 8

[teams.beta]
reserved_gpus = 8
"""


def h(hours_before_now: float) -> dt.datetime:
    return NOW - dt.timedelta(hours=hours_before_now)


# run, team, capacity, gpus, reserved from/until, reserved GPU-h, started, ended, actual GPU-h
RUNS = [
    # 4 h window x 2 GPUs; started 1 h late, ended 1 h early: idle 2 + 2 = 4 GPU-h (stable)
    ("s-1", "alpha", "stable", 2, h(10), h(6), 8.0, h(9), h(7), 4.0),
    # 2 h window x 4 GPUs, never started, window passed: idle 8 GPU-h (preemptible)
    ("p-1", "beta", "preemptible", 4, h(10), h(8), 8.0, None, None, None),
    # 4 h window x 1 GPU, started on time, ended 2 h early: idle 2 GPU-h (preemptible)
    ("p-2", "alpha", "preemptible", 1, h(5), h(1), 4.0, h(5), h(3), 2.0),
]


def make_ledger(path, prices: str = "") -> None:
    """The three runs above, teams alpha and beta, and the [prices] given (none: no prices)."""
    toml = path.with_suffix(".toml")
    toml.write_text(TEAMS + (f"\n[prices]\n{prices}" if prices else ""), encoding="utf-8")
    with open_ledger(path) as con:
        sync_teams(con, toml)
        with transaction(con):
            for run in RUNS:
                con.execute("""INSERT INTO runs (run_id, team, kind, capacity, gpus, reserved_from, reserved_until,
                               reserved_gpu_hours, started_at, ended_at, actual_gpu_hours, source, updated_at)
                               VALUES (?, ?, 'exploratory', ?, ?, ?, ?, ?, ?, ?, ?, 'test', ?)""", [*run, NOW])


@pytest.fixture
def hand_ledger(tmp_path):
    def make(prices: str = BOTH):
        path = tmp_path / "costs.duckdb"
        make_ledger(path, prices)
        return path
    return make


def test_costs_are_gpu_hours_times_the_price_of_their_capacity_type(hand_ledger):
    o = costs.overview_costs(DAY, hand_ledger(), NOW)
    assert o["currency"] == "EUR" and o["unpriced"] == []
    rows = {r["capacity"]: r for r in o["by_capacity"].to_dict("records")}
    # stable: reserved 8, used 4, idle 4 GPU-h at 2.50; preemptible: reserved 12, used 2, idle 10 at 0.90
    assert rows["stable"]["reserved_cost"] == pytest.approx(20.0)
    assert rows["stable"]["used_cost"] == pytest.approx(10.0)
    assert rows["stable"]["idle_cost"] == pytest.approx(10.0)
    assert rows["preemptible"]["reserved_cost"] == pytest.approx(10.8)
    assert rows["preemptible"]["used_cost"] == pytest.approx(1.8)
    assert rows["preemptible"]["idle_cost"] == pytest.approx(9.0)
    assert o["current"] == pytest.approx({"reserved_cost": 30.8, "used_cost": 11.8, "idle_cost": 19.0})
    assert o["previous"] == pytest.approx({"reserved_cost": 0.0, "used_cost": 0.0, "idle_cost": 0.0})


def test_idle_cost_is_charged_to_the_team_that_held_the_reservation(hand_ledger):
    i = costs.idle_costs(DAY, hand_ledger(), NOW)
    by_team = {r["team"]: r for r in i["by_team"].to_dict("records")}
    assert by_team["alpha"]["stable_idle_gpu_hours"] == pytest.approx(4.0)
    assert by_team["alpha"]["preemptible_idle_gpu_hours"] == pytest.approx(2.0)
    assert by_team["alpha"]["idle_cost"] == pytest.approx(4 * 2.5 + 2 * 0.9)
    assert by_team["beta"]["stable_idle_gpu_hours"] == 0.0        # none in stable: 0 hours, not unknown
    assert by_team["beta"]["idle_cost"] == pytest.approx(8 * 0.9)
    assert list(i["by_team"]["team"]) == ["alpha", "beta"]           # most idle cost first
    assert i["total_idle_cost"] == pytest.approx(19.0)


def test_a_capacity_type_without_a_price_gets_no_money_not_zero(hand_ledger):
    db = hand_ledger(STABLE_ONLY)
    o = costs.overview_costs(DAY, db, NOW)
    assert o["unpriced"] == ["preemptible"] and list(o["by_capacity"]["capacity"]) == ["stable"]
    assert o["current"] == pytest.approx({"reserved_cost": 20.0, "used_cost": 10.0, "idle_cost": 10.0})
    i = costs.idle_costs(DAY, db, NOW)
    assert not any(c.startswith("preemptible") for c in i["by_team"].columns)
    assert i["total_idle_cost"] == pytest.approx(10.0)
    assert "no price set for preemptible" in costs.pricing_note(o)
    # filtered to the unpriced capacity type: no money at all
    only = Filters(DAY.date_from, DAY.date_to, capacity="preemptible")
    o, i = costs.overview_costs(only, db, NOW), costs.idle_costs(only, db, NOW)
    assert o["per_gpu_hour"] == {} and o["currency"] is None and o["by_capacity"].empty and o["current"] == {}
    assert i["total_idle_cost"] is None and i["by_team"].empty
    assert costs.pricing_note(o).startswith("No GPU-hour price is set for preemptible")


def test_money_uses_the_same_gpu_hours_as_the_pages(page_ledger):
    path, now = page_ledger
    with open_ledger(path) as con:
        sync_teams(con)                  # the shipped file's teams and example prices
    f = default_filters(now.date())
    prices = costs.pricing(f, path)["per_gpu_hour"]
    o, shown = costs.overview_costs(f, path, now), overview_queries.overview(f, path, now)["current"]
    for spend in costs.SPENDS:
        assert o["by_capacity"][f"{spend}_gpu_hours"].sum() == pytest.approx(shown[f"{spend}_gpu_hours"])
        assert o["current"][f"{spend}_cost"] == pytest.approx(sum(
            r[f"{spend}_gpu_hours"] * prices[r["capacity"]] for r in o["by_capacity"].to_dict("records")))
    idle = idle_queries.idle_capacity(f, path, now)["by_team"].set_index("team")["idle_gpu_hours"]
    i = costs.idle_costs(f, path, now)["by_team"].set_index("team")
    hours = i["stable_idle_gpu_hours"] + i["preemptible_idle_gpu_hours"]
    assert hours.sort_index().to_dict() == pytest.approx(idle.sort_index().to_dict())


# ------------------------------------------------------------------------------------- pages

def open_page(page: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    at.switch_page(page_script(page)).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def shown_text(at: AppTest) -> str:
    return " ".join([*(f"{m.label} {m.value}" for m in at.metric), *(c.value for c in at.caption),
                     *(s.value for s in at.subheader), *(str(d.value.columns.tolist()) for d in at.dataframe)])


@pytest.mark.parametrize("page", ["overview", "idle_capacity"])
def test_no_money_is_shown_when_no_price_is_set(page_ledger, page):
    at = open_page(page)
    text = shown_text(at)
    assert "cost" not in text.lower() and "USD" not in text and "Money" not in text
    assert "No GPU\\-hour price is set" in text


def test_pages_show_money_for_priced_capacity_and_say_which_has_no_price(page_ledger):
    path, now = page_ledger
    toml = path.with_suffix(".toml")
    toml.write_text(DEFAULT_TEAMS_FILE.read_text(encoding="utf-8").replace("preemptible = 0.90\n", ""),
                    encoding="utf-8")
    with open_ledger(path) as con:
        sync_teams(con, toml)
    at = open_page("overview")
    f = at.session_state["filters"]                  # the view the page shows
    minute = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None, second=0, microsecond=0)  # the page's now
    values = {m.label: m.value for m in at.metric}
    o = costs.overview_costs(f, path, minute)
    assert values["Reserved cost"] == costs.money_text(o["current"]["reserved_cost"], "USD")
    assert values["Idle reserved cost"] == costs.money_text(o["current"]["idle_cost"], "USD")
    assert "no price set for preemptible" in shown_text(at)
    at = open_page("idle_capacity")
    values = {m.label: m.value for m in at.metric}
    assert values["Idle reserved cost"] == costs.money_text(costs.idle_costs(f, path, minute)["total_idle_cost"], "USD")
    assert "no price set for preemptible" in shown_text(at)
    table = next(d.value for d in at.dataframe if "idle_cost" in d.value.columns)
    assert "preemptible_idle_cost" not in table.columns
