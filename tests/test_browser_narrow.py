"""What a planner sees in a real browser at the widths they work at: on an 800 px screen beside the
sidebar no metric is cut ("USD…"), every page has a tab title of its own, and at 1400 px a What-if
fix that needs two lines is drawn on two lines rather than cut at the column's edge.

Debian's Chromium through Playwright against `streamlit run` (one server for the module); skips,
saying why, when /usr/bin/chromium is absent.
"""
from __future__ import annotations

import io

import pytest

from lib.ledger.connection import open_ledger, transaction
from tests.fixtures_app import BROWSER_TESTS, IDLE, TIMEOUT_MS, fill_ledger, serve_app

pytestmark = BROWSER_TESTS

# every element of a metric whose content is wider than the box showing it (a cut value or label)
CUT_IN_METRICS = """() => [...document.querySelectorAll('[data-testid="stMetric"] *')]
    .filter(e => e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1)
    .map(e => e.closest('[data-testid="stMetric"]').innerText.replace(/\\n/g, ' | '))"""


@pytest.fixture(scope="module")
def narrow_app(tmp_path_factory):
    """`streamlit run` on a 300-run ledger with prices (money beside the GPU-hours), for the module:
    {url, now}."""
    tmp = tmp_path_factory.mktemp("narrow")
    db = tmp / "gate.duckdb"
    now = fill_ledger(db, n_runs=300)
    with open_ledger(db) as con, transaction(con):   # money beside the GPU-hours, as data/teams.toml sets it
        con.executemany("INSERT INTO prices VALUES (?, ?, 'USD')", [("stable", 2.5), ("preemptible", 0.9)])
    with serve_app(db, tmp / "streamlit.log") as url:
        yield {"url": url, "now": now}


def open_page(browser, served, width: int, path: str = ""):
    ctx = browser.new_context(viewport={"width": width, "height": 1000})
    page = ctx.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(f"{served['url']}/{path}")
    page.wait_for_selector(IDLE)
    return ctx, page


def test_at_800px_no_metric_value_or_label_is_cut(browser, narrow_app):
    ctx, page = open_page(browser, narrow_app, 800)
    try:
        page.get_by_text("Reserved cost").first.wait_for()   # the money row: the widest values
        page.wait_for_selector(IDLE)
        metrics = page.locator('[data-testid="stMetric"]')
        assert metrics.count() >= 11
        texts = metrics.all_inner_texts()
        assert any("USD" in t for t in texts)
        assert not [t for t in texts if "…" in t]
        assert page.evaluate(CUT_IN_METRICS) == []
    finally:
        ctx.close()


def test_every_page_has_a_tab_title_of_its_own(browser, narrow_app):
    from ui.pages import PAGES
    ctx, page = open_page(browser, narrow_app, 1400)
    try:
        titles = {}
        for p in PAGES:
            page.locator('[data-testid="stSidebarNavLink"]', has_text=p.title).first.click()
            page.wait_for_function("t => document.title.startsWith(t)", arg=p.title)
            titles[p.title] = page.title()
        assert len(set(titles.values())) == len(PAGES), titles
        assert all(t.startswith(name) and t.endswith("Training Gate") for name, t in titles.items()), titles
    finally:
        ctx.close()


def _most_lines(png: bytes, top: int, bottom: int, slice_px: int = 40) -> int:
    """The most lines of text any cell shows between pixel rows `top` and `bottom` of a grid's
    screenshot: in each vertical slice `slice_px` wide, the bands of at least 4 pixel rows holding dark
    (text) pixels (a slice inside one column sees that cell's lines; a band of 1-2 rows is a
    descender or a dot, not a line)."""
    from PIL import Image   # Pillow comes with Streamlit; only this test reads pixels
    img = Image.open(io.BytesIO(png)).convert("L")
    most = 0
    for left in range(0, img.width - slice_px, slice_px // 2):
        inked = [any(img.getpixel((x, y)) < 110 for x in range(left, left + slice_px)) for y in range(top, bottom)]
        bands, run = 0, 0
        for ink in [*inked, False]:
            if ink:
                run += 1
                continue
            bands, run = bands + (run >= 4), 0
        most = max(most, bands)
    return most


def test_at_1400px_a_what_if_fix_needing_two_lines_is_drawn_on_two(browser, narrow_app):
    ctx, page = open_page(browser, narrow_app, 1400, "What-if")
    try:
        page.get_by_text("a stated estimate").click()
        page.locator(".st-key-wi_estimated_gpu_hours").wait_for()
        page.wait_for_selector(IDLE)
        page.locator(".st-key-wi_team").click()
        page.get_by_role("option", name="vision").click()
        page.locator(".st-key-wi_gpus input").fill("33")   # one over the per-job cap of 32
        page.locator('[data-testid="stFormSubmitButton"] button').click()
        page.get_by_text("Decision: DEFER").wait_for()
        page.wait_for_selector(IDLE)
        grid = page.locator('[data-testid="stDataFrame"]').first
        grid.scroll_into_view_if_needed()
        cells = grid.locator('td[aria-colindex="1"]')   # the grid's accessible copy: one per row
        cells.first.wait_for(state="attached")
        assert cells.all_text_contents() == ["gpu-cap"]    # one reason; its fix is about 85 characters
        page.wait_for_timeout(500)   # the grid draws on a canvas once laid out
        height, header = grid.bounding_box()["height"], 36
        assert height - header > 64 + 1   # a row taller than 4 rem: Streamlit's grid wraps text only then
        lines = _most_lines(grid.screenshot(), header + 2, int(height) - 2)
        assert lines == 2, f"the longest cell is drawn on {lines} line(s)"
    finally:
        ctx.close()
