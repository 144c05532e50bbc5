"""The dashboard in a real browser: Debian's Chromium driven by Playwright against `streamlit run`.

One server (on a free port, GATE_DB at a temp ledger, log in the temp dir) and one browser serve the
whole module; each test opens its own tab. Skips, saying why, when /usr/bin/chromium is absent.
"""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.fixtures_app import BROWSER_TESTS, fill_ledger, IDLE, ROOT, run_count, serve_app, TIMEOUT_MS

pytestmark = BROWSER_TESTS

PAGES = {  # navigation title -> (a heading it shows, charts it draws at least)
    "Overview": ("Overview", 2),
    "Reservations": ("Reservations", 3),
    "Idle reserved capacity": ("Idle reserved capacity", 3),
    "Forecast": ("Forecast", 2),
    "Estimate accuracy": ("Estimate accuracy", 4),
    "What-if": ("What-if", 0),
    "Upload": ("Upload run history", 0),
    "Stops and promotion": ("Stops and promotion", 1),
}


@pytest.fixture(scope="module")
def dashboard_app(tmp_path_factory):
    """`streamlit run` on a 300-run ledger for the module: {url, db, now, tmp}."""
    tmp = tmp_path_factory.mktemp("browser")
    db = tmp / "gate.duckdb"
    now = fill_ledger(db, n_runs=300)
    with serve_app(db, tmp / "streamlit.log") as url:
        yield {"url": url, "db": db, "now": now, "tmp": tmp}


@pytest.fixture
def page(browser, dashboard_app):
    ctx = browser.new_context(accept_downloads=True, viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    pg.goto(dashboard_app["url"])
    pg.wait_for_selector(IDLE)
    pg.get_by_role("heading", name="Overview").first.wait_for()
    yield pg
    ctx.close()


def go(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNavLink"]', has_text=title).first.click()
    page.get_by_role("heading", name=PAGES[title][0]).first.wait_for()
    page.wait_for_selector(IDLE)


def no_exception(page) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0, \
        page.locator('[data-testid="stException"]').first.inner_text()


def test_every_page_opens_and_draws_its_charts(page):
    for title, (_, charts) in PAGES.items():
        go(page, title)
        no_exception(page)
        if charts:
            page.locator('[data-testid="stPlotlyChart"]').nth(charts - 1).wait_for()
            assert page.locator('[data-testid="stPlotlyChart"]').count() >= charts, title
            page.locator('[data-testid="stPlotlyChart"] .main-svg').first.wait_for()


def test_the_what_if_form_shows_a_decision_and_the_request_json(page):
    go(page, "What-if")
    page.get_by_text("a stated estimate").click()
    page.locator(".st-key-wi_estimated_gpu_hours").wait_for()
    page.wait_for_selector(IDLE)
    page.locator('[data-testid="stFormSubmitButton"] button').click()
    page.get_by_text("Decision:").first.wait_for()
    no_exception(page)
    page.get_by_text("Request JSON").first.wait_for()
    assert '"estimated_gpu_hours"' in page.locator('[data-testid="stCode"]').first.inner_text()


def upload(page, tmp: Path, name: str, text: str) -> None:
    path = tmp / name
    path.write_text(text)
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(path))


def csv_rows(now: dt.datetime, *rows: str) -> str:
    head = ("run_id,team,kind,capacity,gpus,estimated_gpu_hours,estimate_source,reserved_from,reserved_until,"
            "reserved_gpu_hours,started_at,ended_at,actual_gpu_hours,stop_reason")
    return "\n".join([head, *rows]) + "\n"


def test_a_bad_file_shows_its_errors_and_a_good_one_imports(page, dashboard_app):
    now, tmp, db = dashboard_app["now"], dashboard_app["tmp"], dashboard_app["db"]
    ts = lambda h: (now - dt.timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    good = f"br-1,speech,exploratory,stable,4,40,stated,{ts(60)},{ts(48)},48,{ts(59)},{ts(50)},36,completed"
    before = run_count(db)
    go(page, "Upload")
    upload(page, tmp, "bad.csv", csv_rows(now, good, "br-2,speech,bogus,stable,4,10,stated,,,,,,,"))
    page.get_by_text("problem(s) found").first.wait_for()
    page.wait_for_selector(IDLE)
    assert page.locator(".st-key-upload_import button").is_disabled()
    assert run_count(db) == before
    upload(page, tmp, "good.csv", csv_rows(now, good))
    page.get_by_text("The file is valid.").first.wait_for()
    page.wait_for_selector(IDLE)
    page.locator(".st-key-upload_import button").click()
    page.locator('[data-testid="stToast"]', has_text="1 inserted").wait_for()
    assert run_count(db) == before + 1
    no_exception(page)


def test_a_table_downloads_as_csv(page, dashboard_app):
    go(page, "Stops and promotion")
    with page.expect_download() as info:
        page.locator(".st-key-dl_stop_reasons button").click()
    text = Path(info.value.path()).read_text()
    assert text.splitlines()[0] == "stop_reason,team,runs,actual_gpu_hours"
    assert len(text.splitlines()) > 1


def test_python_m_lib_submit_succeeds_while_the_app_serves_pages(page, dashboard_app):
    """The app never holds the ledger open between reruns, so the command line can write."""
    db, tmp = dashboard_app["db"], dashboard_app["tmp"]
    stop = threading.Event()
    # Playwright's sync API is bound to this thread: browse here, submit from a worker thread.
    results: list[subprocess.CompletedProcess] = []

    def submit_all():
        for i in range(3):
            req = {"run_id": f"cli-while-serving-{i}", "team": "speech", "kind": "exploratory", "gpus": 1,
                   "gpu_mem_gb": 40, "max_runtime_hours": 4, "budget_gpu_hours": 20,
                   "checkpoint_supported": True, "expected_interruptions": 0,
                   "data_snapshot": "speech-asr-multilingual-v3", "capacity": "stable",
                   "estimated_gpu_hours": 2}
            f = tmp / f"req-{i}.json"
            f.write_text(json.dumps(req))
            results.append(subprocess.run([sys.executable, "-m", "lib", "--db", str(db), "submit", str(f)],
                                          cwd=ROOT, capture_output=True, text=True, timeout=120))
        stop.set()

    worker = threading.Thread(target=submit_all)
    worker.start()
    try:
        while not stop.is_set():
            for title in ("Overview", "Reservations", "Estimate accuracy", "Stops and promotion"):
                go(page, title)
                if stop.is_set():
                    break
    finally:
        stop.set()
        worker.join(timeout=300)
    assert len(results) == 3
    for r in results:
        assert r.returncode in (0, 1), f"exit {r.returncode}: {r.stderr}"
        assert json.loads(r.stdout)["state"] in ("admit", "defer")
    no_exception(page)


def test_the_recovery_planner_draws_its_charts_and_a_decision(page):
    page.locator('[data-testid="stSidebarNavLink"]', has_text="Recovery planner").first.click()
    page.get_by_role("heading", name="Recovery planner").first.wait_for()
    page.wait_for_selector(IDLE)
    charts = page.locator('[data-testid="stPlotlyChart"]')
    charts.nth(2).wait_for()          # interval curve, completion time, the choices
    assert charts.count() >= 3
    page.locator('[data-testid="stPlotlyChart"] .main-svg').first.wait_for()
    page.locator('[data-testid="stMetric"]', has_text="P(budget breach)").first.wait_for()
    page.get_by_text("Decision:").first.wait_for()
    no_exception(page)
