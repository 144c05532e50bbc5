"""Hostile team names in a real browser (Debian's Chromium): plotly.js shows them as typed in the
charts — no live link, no bold — and a bare URL in the caption under the title is not a link."""
from __future__ import annotations

import pytest

from tests.fixtures_app import BROWSER_TESTS, IDLE, serve_app, TIMEOUT_MS
from tests.fixtures_hostile import make_hostile_ledger

pytestmark = BROWSER_TESTS


@pytest.fixture(scope="module")
def hostile_app(tmp_path_factory):
    """`streamlit run` on a 120-run ledger of hostile team names, for the module: its URL."""
    tmp = tmp_path_factory.mktemp("hostile_browser")
    db = tmp / "gate.duckdb"
    make_hostile_ledger(db, n_runs=120)
    with serve_app(db, tmp / "streamlit.log") as url:
        yield url


def test_charts_and_caption_show_hostile_names_as_typed(browser, hostile_app):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(hostile_app)
        page.wait_for_selector(IDLE)
        page.get_by_role("heading", name="Overview").first.wait_for()
        page.locator(".js-plotly-plot .legendtext").first.wait_for()
        legend = page.locator(".js-plotly-plot .legendtext").all_text_contents()
        assert "<b>bold</b> used" in legend, legend
        assert any(t.startswith('<a href="https://example.invalid/x">click</a>') for t in legend), legend
        plots = page.locator(".js-plotly-plot")
        for i in range(plots.count()):
            svg = plots.nth(i)
            assert svg.locator("a").count() == 0  # plotly.js turned no name into a link
            bold = svg.locator('tspan[style*="bold"]').all_text_contents()  # titles are bold
            assert not [t for t in bold if "bold" in t], bold
        # a bare URL as the only team filter: the caption under the title shows it, not a link
        page.locator('[data-testid="stSidebar"] [data-testid="stMultiSelect"]').first.click()
        page.get_by_role("option", name="https://example.invalid/y", exact=True).click()
        page.keyboard.press("Escape")
        page.wait_for_selector(IDLE)
        caption = page.locator('[data-testid="stCaptionContainer"]', has_text="example").first
        caption.wait_for()
        assert "https://example.invalid/y" in caption.inner_text().replace("\u2060", "")
        assert page.locator('[data-testid="stMain"] a[href*="example.invalid"]').count() == 0
        assert page.locator('[data-testid="stSidebar"] a[href*="example.invalid"]').count() == 0
    finally:
        ctx.close()
