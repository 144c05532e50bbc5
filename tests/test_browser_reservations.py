"""The Reservations page in a real browser: the capacity calendar (chart and table) and the queue of
waiting requests render in Chromium, and the queue shows, first, the planned start the gate's fix names."""
from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from lib.ledger.connection import open_ledger, transaction
from lib.ledger.deciding import submit_request
from tests.fixtures_app import BROWSER_TESTS, IDLE, TIMEOUT_MS, fill_ledger, serve_app
from tests.fixtures_ledger import demo_request

pytestmark = BROWSER_TESTS

RUN_ID = "nlp-waits-for-capacity"


@pytest.fixture(scope="module")
def reservations_app(tmp_path_factory):
    """A 300-run ledger where nlp-research's quota (128) is nearly all held until now + 7 h 13 m, and a
    request of 16 accelerators submitted through the gate's service, deferred for capacity."""
    tmp = tmp_path_factory.mktemp("browser_reservations")
    db = tmp / "gate.duckdb"
    now = fill_ledger(db, n_runs=300)
    with open_ledger(db) as con, transaction(con):
        con.execute("""INSERT INTO runs (run_id, team, kind, gpus, reserved_from, reserved_until, reserved_gpu_hours,
                       started_at, source, updated_at)
                       VALUES ('nlp-big-hold', 'nlp-research', 'exploratory', 120, ?, ?, 1200.0, ?, 'test', ?)""",
                    [now - dt.timedelta(hours=1), now + dt.timedelta(hours=7, minutes=13), now - dt.timedelta(hours=1),
                     now])
    decision = submit_request(demo_request(run_id=RUN_ID, team="nlp-research", gpus=16), db=db)
    (fix,) = [r["fix"] for r in decision["reasons"] if r["code"] == "capacity"]
    fits_from = re.search(r"from (\S+) when running reservations end", fix).group(1)
    with serve_app(db, tmp / "streamlit.log") as url:
        yield {"url": url, "fits_from": fits_from}


@pytest.fixture
def reservations_page(browser, reservations_app):
    ctx = browser.new_context(accept_downloads=True, viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    pg.goto(reservations_app["url"] + "/Reservations")
    pg.get_by_role("heading", name="Reservations").first.wait_for()
    pg.wait_for_selector(IDLE)
    yield pg
    ctx.close()


def section(page, title: str):
    """The vertical block from the subheader `title` on (the elements after it)."""
    return page.locator('[data-testid="stHeading"]', has_text=title).first


def test_the_calendar_and_the_queue_render_without_exception(reservations_page):
    assert reservations_page.locator('[data-testid="stException"]').count() == 0
    section(reservations_page, "Capacity calendar").wait_for()
    section(reservations_page, "Queue: requests waiting now").wait_for()
    chart = reservations_page.locator('[data-testid="stPlotlyChart"]', has_text="Committed accelerators per day ahead")
    chart.locator(".main-svg").first.wait_for()
    assert chart.locator(".bars .point").count() > 0        # the bars are drawn
    # the calendar's and the queue's tables, each with its CSV download
    reservations_page.locator(".st-key-dl_res_calendar button").wait_for()
    reservations_page.locator(".st-key-dl_res_queue button").wait_for()
    assert reservations_page.locator('[data-testid="stDataFrame"]').count() >= 4


def test_the_queue_shows_the_planned_start_the_gate_named_first(reservations_page, reservations_app):
    # st.dataframe paints its cells on a canvas (no cell text in the DOM): the grid is checked drawn,
    # and its rows read through the table's own CSV download, made from the very frame the grid shows
    button = reservations_page.locator(".st-key-dl_res_queue button")
    grid = button.locator('xpath=preceding::div[@data-testid="stDataFrame"][1]')
    grid.locator("canvas").first.wait_for()
    assert grid.bounding_box()["height"] > 50
    with reservations_page.expect_download() as info:
        button.click()
    csv = Path(info.value.path()).read_text()
    assert csv.splitlines()[0].split(",")[:2] == ["planned_start", "run_id"]
    (line,) = [ln for ln in csv.splitlines() if f",{RUN_ID}," in ln]
    day, hour_minute = reservations_app["fits_from"].split("T")
    assert line.startswith(f"{day} {hour_minute}:"), (reservations_app["fits_from"], line)
    assert "when reservations end" in line
    reservations_page.get_by_text(re.compile(r"^\d+ waiting requests?")).first.wait_for()
