"""The dashboard pages under Streamlit's AppTest, each on its own small ledger in tmp_path."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest
from streamlit.testing.v1 import AppTest

from lib.ledger.connection import open_ledger
from lib.ledger.deciding import check_request
from tests.fixtures_app import PAGES as PAGE_SCRIPTS, ROOT, open_app, page_script, run_count

PAGES = ["overview", "reservations", "idle_capacity", "forecast", "estimate_accuracy", "what_if", "upload",
         "stops_promotion"]


pytestmark = pytest.mark.usefixtures("fresh_caches")


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def upload_csv(now: dt.datetime, rows: list[str]) -> bytes:
    head = ("run_id,team,kind,capacity,gpus,estimated_gpu_hours,estimate_source,reserved_from,reserved_until,"
            "reserved_gpu_hours,started_at,ended_at,actual_gpu_hours,stop_reason")
    return ("\n".join([head, *rows]) + "\n").encode()


def good_rows(now: dt.datetime) -> list[str]:
    def ts(hours_ago):
        return (now - dt.timedelta(hours=hours_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [f"up-1,speech,exploratory,stable,4,40,stated,{ts(60)},{ts(48)},4800,{ts(59)},{ts(50)},3600,completed",
            f"up-2,speech,production,stable,2,20,pilot,{ts(60)},{ts(48)},2400,{ts(60)},{ts(49)},3000,budget"]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_without_exception(page_ledger, page):
    at = open_app(page)
    assert not at.exception, [e.value for e in at.exception]
    assert at.title, f"{page} shows no title"
    assert not at.error, [e.value for e in at.error]


@pytest.mark.parametrize("page", list(PAGE_SCRIPTS))
def test_every_page_draws_the_shared_frame_once_after_switch_page(page_ledger, page):
    """AppTest starts every run in Streamlit's classic multipage mode (pages/ beside app.py), where
    switch_page runs the page script without app.py: the page's own ui.frame() draws the filters,
    and through app.py (the first run) the page's call finds them drawn."""
    at = open_app()
    assert [h.value for h in at.sidebar.header] == ["Filters"]
    at.switch_page(page_script(page)).run()
    assert not at.exception, [e.value for e in at.exception]
    assert [h.value for h in at.sidebar.header] == ["Filters"]
    assert at.sidebar.multiselect(key="f_teams").label == "Teams"
    assert at.sidebar.date_input(key="f_dates").value
    assert at.title


def test_the_sidebar_filters_change_the_numbers(page_ledger):
    at = open_app("overview")
    everyone = metric(at, "Reserved GPU-hours")
    at.sidebar.multiselect(key="f_teams").set_value(["speech"]).run()
    assert not at.exception
    speech_only = metric(at, "Reserved GPU-hours")
    assert speech_only != everyone
    assert float(speech_only.replace(",", "")) < float(everyone.replace(",", ""))
    # the filter is kept when another page opens, and applies there too
    at.switch_page(page_script("stops_promotion")).run()
    assert at.sidebar.multiselect(key="f_teams").value == ["speech"]
    teams_shown = set(at.dataframe[0].value["team"])
    assert teams_shown == {"speech"}


def test_an_empty_period_says_what_to_do(page_ledger):
    at = open_app("overview")
    at.sidebar.date_input(key="f_dates").set_value((dt.date(2001, 1, 1), dt.date(2001, 1, 31))).run()
    assert not at.exception
    assert any("widen the dates" in i.value for i in at.info)


def fill_what_if(at: AppTest, *, team="speech", gpus=2, budget=60.0, estimate=20.0, run_id="whatif-1", start=None):
    at.radio(key="wi_estimate_from").set_value("estimate").run()
    if start is not None:   # a start time (UTC): decided on the state the forward plan reaches then
        at.date_input(key="whatif_start_day").set_value(start.date())
        at.time_input(key="whatif_start_time").set_value(start.time())
    at.text_input(key="wi_run_id").set_value(run_id)
    at.selectbox(key="wi_team").set_value(team)
    at.selectbox(key="wi_kind").set_value("exploratory")
    at.number_input(key="wi_gpus").set_value(gpus)
    at.number_input(key="wi_gpu_mem_gb").set_value(40.0)
    at.number_input(key="wi_max_runtime_hours").set_value(12.0)
    at.number_input(key="wi_budget_gpu_hours").set_value(budget)
    at.number_input(key="wi_estimated_gpu_hours").set_value(estimate)
    at.text_input(key="wi_data_snapshot").set_value("speech-asr-multilingual-v3")
    at.button[[b.label for b in at.button].index("Check this request")].click().run()
    assert not at.exception, [e.value for e in at.exception]


def shown_request(at: AppTest) -> dict:
    return json.loads(next(c.value for c in at.code if c.language == "json"))


@pytest.mark.parametrize("budget,estimate,gpus", [(60.0, 20.0, 2), (5.0, 20.0, 2), (60.0, 20.0, 64)])
def test_what_if_gives_the_decision_python_m_lib_check_gives(page_ledger, tmp_path, budget, estimate, gpus):
    path, _ = page_ledger
    at = open_app("what_if")
    fill_what_if(at, budget=budget, estimate=estimate, gpus=gpus)
    request = shown_request(at)
    assert request["budget_gpu_hours"] == budget and request["gpus"] == gpus
    req_file = tmp_path / "request.json"
    req_file.write_text(json.dumps(request))
    cli = subprocess.run([sys.executable, "-m", "lib", "--db", str(path), "check", str(req_file)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert cli.returncode in (0, 1, 2), cli.stderr
    cli_decision = json.loads(cli.stdout)
    shown_state = next(a.value for a in [*at.success, *at.warning, *at.error] if a.value.startswith("Decision:"))
    assert shown_state == f"Decision: {cli_decision['state'].upper()}"
    shown_codes = list(at.dataframe[0].value["code"]) if cli_decision["reasons"] else []
    assert shown_codes == [r["code"] for r in cli_decision["reasons"]]
    assert check_request(request, db=path)["state"] == cli_decision["state"]


def test_the_what_if_result_stays_until_the_inputs_change(page_ledger):
    at = open_app("what_if")
    fill_what_if(at)
    assert any(a.value.startswith("Decision:") for a in [*at.success, *at.warning, *at.error])
    at.run()  # any rerun, e.g. a sidebar change
    assert any(a.value.startswith("Decision:") for a in [*at.success, *at.warning, *at.error])
    at.radio(key="wi_estimate_from").set_value("pilot").run()  # inputs changed: result gone
    assert not any(a.value.startswith("Decision:") for a in [*at.success, *at.warning, *at.error])


def test_an_upload_with_one_bad_line_shows_the_error_and_writes_nothing(page_ledger):
    path, now = page_ledger
    before = run_count(path)
    data = upload_csv(now, [*good_rows(now), "up-3,speech,bogus,stable,4,10,stated,,,,,,,"])
    at = open_app("upload")
    at.file_uploader(key="upload_file").upload("history.csv", data, "text/csv").run()
    assert not at.exception, [e.value for e in at.exception]
    errors = at.dataframe[0].value
    assert list(errors["line"]) == [4] and list(errors["column"]) == ["kind"]
    assert at.button(key="upload_import").disabled
    assert run_count(path) == before


def test_a_good_upload_lands_and_the_overview_changes(page_ledger):
    path, now = page_ledger
    before = run_count(path)
    at = open_app("overview")
    at.sidebar.multiselect(key="f_teams").set_value(["speech"]).run()
    reserved_before = metric(at, "Reserved GPU-hours")
    at.switch_page(page_script("upload")).run()
    at.file_uploader(key="upload_file").upload("history.csv", upload_csv(now, good_rows(now)), "text/csv").run()
    assert not at.exception, [e.value for e in at.exception]
    assert run_count(path) == before  # the check wrote nothing
    at.button(key="upload_import").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert run_count(path) == before + 2
    assert any("2 inserted" in t.value for t in at.toast)
    at.switch_page(page_script("overview")).run()
    assert metric(at, "Reserved GPU-hours") != reserved_before


def test_user_text_is_shown_as_text(page_ledger):
    path, _ = page_ledger
    with open_ledger(path) as con:
        con.execute("INSERT INTO teams (team, reserved_gpus, max_gpus_per_job, max_gpu_mem_gb, max_runtime_hours, "
                    "monthly_budget_gpu_hours, policy_version) VALUES ('<b>evil</b> [x](http://e)', 1, 1, 1, 1, 1, 'v')")
    at = open_app("overview")
    at.sidebar.multiselect(key="f_teams").set_value(["<b>evil</b> [x](http://e)"]).run()
    assert not at.exception
    caption = next(c.value for c in at.caption if "evil" in c.value)
    assert "\\<b\\>" in caption and "\\[x\\]" in caption


def test_first_start_on_an_empty_ledger_builds_demo_history(tmp_path, monkeypatch):
    path = tmp_path / "empty.duckdb"
    monkeypatch.setenv("GATE_DB", str(path))
    monkeypatch.setenv("GATE_DEMO", "1")
    at = open_app()
    assert run_count(path) > 0
    assert float(metric(at, "Runs in period").replace(",", "")) > 0


def test_without_demo_an_empty_ledger_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("GATE_DB", str(tmp_path / "empty.duckdb"))
    monkeypatch.setenv("GATE_DEMO", "0")
    for page in ("overview", "estimate_accuracy", "stops_promotion", "idle_capacity", "reservations"):
        at = open_app(page)
        assert not at.exception, (page, [e.value for e in at.exception])
        assert at.info, f"{page} shows no empty-state message"


def test_what_if_from_pilot_numbers_matches_check_request(page_ledger):
    path, _ = page_ledger
    at = open_app("what_if")
    at.selectbox(key="wi_team").set_value("speech")
    at.text_input(key="wi_data_snapshot").set_value("speech-asr-multilingual-v3")
    at.number_input(key="wi_planned_steps").set_value(20_000)
    at.button[[b.label for b in at.button].index("Check this request")].click().run()
    assert not at.exception, [e.value for e in at.exception]
    request = shown_request(at)
    assert "pilot" in request and request["pilot"]["planned_steps"] == 20_000
    expected = check_request(request, db=path)
    shown = next(a.value for a in [*at.success, *at.warning, *at.error] if a.value.startswith("Decision:"))
    assert shown == f"Decision: {expected['state'].upper()}"
