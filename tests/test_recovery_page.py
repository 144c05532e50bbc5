"""The Recovery planner page under AppTest, on the small ledger of tests/fixtures_app.py."""
from __future__ import annotations

import datetime as dt

import pytest
from streamlit.testing.v1 import AppTest

from lib.dashboard import recovery_view, sidebar_queries
from lib.dashboard.filters import default_filters
from lib.dashboard.labels import ALL_TEAMS
from lib.dashboard.lost_work_queries import lost_work
from lib.ledger.imports import import_runs
from tests.fixtures_app import ROOT, page_script
from tests.test_import_sacct import line, sacct

TIMEOUT_S = 60
PAGE = page_script("recovery_planner")


pytestmark = pytest.mark.usefixtures("fresh_caches")


def open_page() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def decision(at: AppTest) -> str:
    return next(a.value for a in [*at.success, *at.warning, *at.error] if a.value.startswith("Decision:"))


def press(at: AppTest, label: str) -> None:
    at.button[[b.label for b in at.button].index(label)].click().run()
    assert not at.exception, [e.value for e in at.exception]


def expected_rates(path):
    f = default_filters(sidebar_queries.sidebar_options(path)["last_day"])
    return recovery_view.recovery_inputs(f, path)["rates"]


def test_the_page_renders_on_the_small_ledger(page_ledger):
    at = open_page()
    assert at.title[0].value == "Recovery planner"
    assert not at.error, [e.value for e in at.error]
    labels = {m.label for m in at.metric}
    assert {"Young interval", "Daly interval", "Exact interval", "P(budget breach)", "Recommendation"} <= labels
    assert decision(at).startswith("Decision: ")
    assert len(at.dataframe) >= 3  # rates, preemptible vs stable, the choices


def test_the_mtbf_and_restart_are_prefilled_from_the_ledger(page_ledger):
    path, _ = page_ledger
    rates = expected_rates(path)
    at = open_page()
    assert at.selectbox(key="rp_src_team").value == ALL_TEAMS
    assert at.radio(key="rp_src_capacity").value == "preemptible"
    pooled = rates[(rates["team"] == ALL_TEAMS) & (rates["capacity"] == "preemptible")].iloc[0]
    assert at.number_input(key="rp_mtbf_h").value == pytest.approx(pooled["mtbf_h"])
    assert at.number_input(key="rp_restart_min").value == pytest.approx(pooled["restart_h"] * 60)
    # another team: its own numbers
    team = next(t for t in rates["team"] if t != ALL_TEAMS and
                len(rates[(rates["team"] == t) & (rates["capacity"] == "preemptible")]))
    at.selectbox(key="rp_src_team").set_value(team).run()
    own = rates[(rates["team"] == team) & (rates["capacity"] == "preemptible")].iloc[0]
    assert at.number_input(key="rp_mtbf_h").value == pytest.approx(own["mtbf_h"])
    assert at.number_input(key="rp_restart_min").value == pytest.approx(own["restart_h"] * 60)


def test_a_typed_mtbf_survives_reruns_and_page_switches(page_ledger):
    at = open_page()
    at.number_input(key="rp_mtbf_h").set_value(3.25)
    press(at, "Plan")
    at.run()
    assert at.number_input(key="rp_mtbf_h").value == 3.25
    at.switch_page(page_script("overview")).run()
    at.switch_page(PAGE).run()
    assert at.number_input(key="rp_mtbf_h").value == 3.25


def test_a_budget_breach_changes_the_decision_shown(page_ledger):
    at = open_page()
    assert decision(at) == "Decision: RESUME (resume-from-checkpoint)"
    at.radio(key="rp_event").set_value("budget-breach")
    press(at, "Decide")
    assert decision(at) == "Decision: END (budget-breach)"
    at.number_input(key="rp_sc_increase").set_value(200.0)   # an approved increase lets it resume
    press(at, "Decide")
    assert decision(at) == "Decision: RESUME (resume-from-checkpoint)"


def test_the_breach_probability_follows_the_budget(page_ledger):
    at = open_page()
    at.number_input(key="rp_budget_gpu_hours").set_value(1.0)
    press(at, "Plan")
    assert metric(at, "P(budget breach)") == "100.0%"
    at.number_input(key="rp_budget_gpu_hours").set_value(100_000.0)
    press(at, "Plan")
    assert metric(at, "P(budget breach)") == "0.0%"


def test_lost_work_is_shown_measured_beside_expected(page_ledger):
    path, _ = page_ledger
    at = open_page()   # no interruption recorded yet: the page says how to get some
    assert any("No interrupted attempt recorded" in i.value for i in at.info)
    f = default_filters(sidebar_queries.sidebar_options(path)["last_day"])
    day = f.date_to - dt.timedelta(days=2)
    t = [f"{day}T{h}" for h in ("08:00:00", "09:00:00", "09:30:00", "12:30:00")]
    requeued = sacct(  # a job requeued twice on vision: 1 h and 3 h on 2 GPUs, then done
        line(jobid="4242", account="vision", jobname="run_id=lost-1", start=t[0], end=t[1], elapsed="01:00:00",
             state="PREEMPTED"),
        line(jobid="4242", account="vision", jobname="run_id=lost-1", start=t[1], end=t[3], elapsed="03:00:00",
             state="NODE_FAIL"),
        line(jobid="4242", account="vision", jobname="run_id=lost-1", start=t[3], end=t[3], elapsed="00:00:00",
             state="RUNNING"))
    assert import_runs(requeued, fmt="sacct", db=path).written
    groups = lost_work(f, path)["groups"]
    at = open_page()
    assert metric(at, "Lost, measured (GPU-h)") == f"{2 * 1 + 2 * 3:,.1f}"
    assert metric(at, "Lost, expected (GPU-h)") == f"{groups['expected_lost_gpu_hours'].sum():,.1f}"
    assert metric(at, "Interrupted attempts") == "2"
    (shown,) = [d.value for d in at.dataframe if "expected_lost_gpu_hours" in d.value.columns]
    row = shown[shown["team"] == "vision"].iloc[0]
    assert (row["attempts"], row["from_sacct"]) == (2, 2)
    assert float(row["lost_gpu_hours"]) == pytest.approx(8.0)
    assert float(row["expected_lost_gpu_hours"]) == pytest.approx(groups["expected_lost_gpu_hours"].iloc[0])
    charts = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("Work lost to interruptions" in c and '"expected (closed form)"' in c for c in charts)
