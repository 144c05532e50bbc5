"""A fresh `streamlit run app.py` whose very first request goes straight to a page URL.

Streamlit 1.67 starts a process with a `pages/` folder beside app.py in its classic multipage mode, and
in that mode a page URL runs the page script alone, without app.py. Each page therefore draws the
shared frame itself (ui.frame): for every page, on a server that has served nothing yet, the page URL
shows the sidebar filters, the page's own title and no exception; the classic sidebar lists the pages
under their navigation titles at the URL paths st.navigation gives them. Then opening `/` (app.py's
st.navigation) switches the process to navigation mode, and the same page URL still works there.
"""
from __future__ import annotations


import pytest

from tests.fixtures_app import BROWSER_TESTS, fill_ledger, IDLE, PAGES, serve_app, TIMEOUT_MS

pytestmark = BROWSER_TESTS

NAV_LINK = '[data-testid="stSidebarNavLink"]'
HEADINGS = {"upload": "Upload run history"}  # the page's title where it is not its navigation title


@pytest.fixture(scope="module")
def ledger_file(tmp_path_factory):
    db = tmp_path_factory.mktemp("first_request") / "gate.duckdb"
    fill_ledger(db, n_runs=120)
    return db


def open_page(browser, url: str, heading: str):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    pg.goto(url)
    pg.wait_for_selector(IDLE)
    pg.get_by_role("heading", name=heading).first.wait_for()
    pg.wait_for_selector(IDLE)
    return ctx, pg


def assert_framed(pg, name: str, heading: str) -> None:
    """The shared frame (the sidebar filters) and the page itself, without an exception."""
    exc = pg.locator('[data-testid="stException"]')
    assert exc.count() == 0, (name, exc.first.inner_text())
    sidebar = pg.locator('[data-testid="stSidebar"]')
    sidebar.get_by_role("heading", name="Filters").first.wait_for()
    sidebar.locator(".st-key-f_teams").wait_for()          # the Teams multiselect
    sidebar.locator(".st-key-f_dates").wait_for()          # the date range
    assert pg.locator('[data-testid="stSidebar"] h2', has_text="Filters").count() == 1, name  # drawn once
    assert pg.locator("h1", has_text=heading).count() >= 1, name


def nav_links(pg) -> dict[str, str]:
    """Sidebar navigation: label (icon dropped) -> URL path."""
    out = {}
    for i in range(pg.locator(NAV_LINK).count()):
        link = pg.locator(NAV_LINK).nth(i)
        label = link.inner_text().strip().splitlines()[-1].strip()
        out[label] = link.get_attribute("href").split("/", 3)[-1]
    return out


def first_request(browser, url: str, name: str) -> None:
    """The server's first request, straight to the page's URL: classic multipage mode, where the page
    script runs without app.py."""
    _, title, url_path = PAGES[name]
    heading = HEADINGS.get(name, title)
    ctx, pg = open_page(browser, f"{url}/{url_path}", heading)
    try:
        assert_framed(pg, name, heading)
        links = nav_links(pg)
        # classic mode lists app.py first (as "app"), then every page under its navigation title at
        # the URL path st.navigation gives it
        assert list(links)[0] == "app", links
        assert {t: p for t, p in links.items() if t != "app"} == {t: u for _, t, u in PAGES.values()}, links
    finally:
        ctx.close()


@pytest.mark.parametrize("name", list(PAGES))
def test_a_page_url_as_the_first_request_of_a_fresh_server_draws_the_frame(browser, ledger_file, tmp_path, name):
    with serve_app(ledger_file, tmp_path / "streamlit.log") as url:
        first_request(browser, url, name)


def test_opening_the_root_switches_the_process_to_navigation_mode(browser, ledger_file, tmp_path):
    name = "reservations"
    _, title, url_path = PAGES[name]
    with serve_app(ledger_file, tmp_path / "streamlit.log") as url:
        first_request(browser, url, name)
        # `/` runs app.py: its st.navigation switches the whole process to navigation mode ...
        ctx, pg = open_page(browser, url, "Overview")
        try:
            assert_framed(pg, "overview", "Overview")
            links = nav_links(pg)
            assert list(links) == [t for _, t, _ in PAGES.values()], links
            assert links["Overview"] == ""
            assert all(links[t] == u for _, t, u in PAGES.values() if t != "Overview"), links
        finally:
            ctx.close()
        # ... where the same page URL runs through app.py, framed once
        ctx, pg = open_page(browser, f"{url}/{url_path}", title)
        try:
            assert_framed(pg, name, title)
            assert "app" not in nav_links(pg)
        finally:
            ctx.close()
