"""Shareable views in a real browser (Debian's Chromium through Playwright against `streamlit run`):
the sidebar filters travel in the URL, a copied URL opens the same view in a new browser context, a page
URL with a query string opens filtered, and no request leaves the machine.

One server (free port, GATE_DB at a temp ledger) and one browser serve the module (one case starts a
second, fresh server); each test opens its own browser context. Skips, saying why, when /usr/bin/chromium is absent."""
from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from ui import WORD_JOINER
from tests.fixtures_app import BROWSER_TESTS, IDLE, PAGES, TIMEOUT_MS, fill_ledger, serve_app
from tests.test_pages_first_request import HEADINGS, open_page   # a new context (no session) on a URL

pytestmark = BROWSER_TESTS

SIDEBAR = '[data-testid="stSidebar"]'


@pytest.fixture(scope="module")
def url_ledger(tmp_path_factory):
    """A 300-run ledger (tests/fixtures_app.fill_ledger) for `url_app` and the fresh server of one case."""
    db = tmp_path_factory.mktemp("browser_url") / "gate.duckdb"
    fill_ledger(db, n_runs=300)
    return db


@pytest.fixture(scope="module")
def url_app(url_ledger):
    """`streamlit run` on url_ledger for the module: its URL."""
    with serve_app(url_ledger, url_ledger.with_name("streamlit.log")) as url:
        yield url


def query(pg) -> dict[str, list[str]]:
    return parse_qs(urlsplit(pg.url).query, keep_blank_values=True)


def wait_for_query(pg, key: str, value: str) -> None:
    """Wait until the page's URL carries key=value (the app writes it after the run)."""
    pg.wait_for_function("([k, v]) => new URLSearchParams(location.search).get(k) === v", arg=[key, value])
    pg.wait_for_selector(IDLE)


def pick(pg, key: str, option: str) -> None:
    """Choose `option` in the sidebar multiselect or selectbox with widget key `key`."""
    pg.locator(f"{SIDEBAR} .st-key-{key} input").click()
    pg.get_by_role("option", name=option, exact=True).click()
    pg.keyboard.press("Escape")


def shown_filters(pg) -> dict:
    """What the sidebar filters show: chips of the multiselects, the capacity and period choices, the
    dates in the date picker."""
    sb = pg.locator(SIDEBAR)
    return {
        "teams": sb.locator('.st-key-f_teams [data-testid="stMultiSelectTagsContainer"]').inner_text(),
        "kinds": sb.locator('.st-key-f_kinds [data-testid="stMultiSelectTagsContainer"]').inner_text(),
        "capacity": sb.locator(".st-key-f_capacity input:checked").first.evaluate(
            "e => e.closest('label').innerText"),
        "period": sb.locator(".st-key-f_range input").input_value(),
        "dates": sb.locator('.st-key-f_dates [data-testid="stDateInputField"]').inner_text(),
    }


def shown_numbers(pg) -> dict:
    """The main area's captions and metrics (label and value), as the reader sees them."""
    main = pg.locator('[data-testid="stMain"]')
    return {"captions": main.locator('[data-testid="stCaptionContainer"]').all_inner_texts(),
            "metrics": main.locator('[data-testid="stMetric"]').all_inner_texts()}


def go(pg, name: str) -> None:
    """Open a page through the sidebar navigation and wait for its run to end."""
    _, title, url_path = PAGES[name]
    pg.locator('[data-testid="stSidebarNavLink"]', has_text=title).first.click()
    paths = {f"/{url_path}", "/"} if name == next(iter(PAGES)) else {f"/{url_path}"}  # the default page is /
    pg.wait_for_url(lambda url: urlsplit(url).path in paths)
    pg.get_by_role("heading", name=HEADINGS.get(name, title)).first.wait_for()
    pg.wait_for_selector(IDLE)


def test_a_copied_url_opens_the_same_view_in_a_new_browser(browser, url_app):
    ctx, pg = open_page(browser, url_app, "Overview")
    try:
        assert query(pg) == {}                              # the default view adds nothing
        pick(pg, "f_teams", "speech")
        wait_for_query(pg, "teams", "speech")
        pick(pg, "f_kinds", "production")
        wait_for_query(pg, "kinds", "production")
        pick(pg, "f_range", "Last 30 days")
        wait_for_query(pg, "range", "last-30-days")
        assert query(pg) == {"teams": ["speech"], "kinds": ["production"], "range": ["last-30-days"]}
        pg.locator('[data-testid="stMetric"]').first.wait_for()
        before, numbers = shown_filters(pg), shown_numbers(pg)
        assert "speech" in before["teams"] and "production" in before["kinds"], before
        assert before["period"] == "Last 30 days", before
        assert numbers["metrics"], "the Overview shows no metric"
        assert any("speech · production" in c for c in numbers["captions"]), numbers["captions"]
        link = pg.url
        # the view survives moving between pages: st.navigation's switch keeps (or gets back) the query
        go(pg, "reservations")
        wait_for_query(pg, "range", "last-30-days")
        assert query(pg) == {"teams": ["speech"], "kinds": ["production"], "range": ["last-30-days"]}
        assert shown_filters(pg) == before
        go(pg, "overview")
        assert query(pg) == {"teams": ["speech"], "kinds": ["production"], "range": ["last-30-days"]}
    finally:
        ctx.close()
    ctx2, other = open_page(browser, link, "Overview")
    try:
        other.locator('[data-testid="stMetric"]').first.wait_for()
        assert shown_filters(other) == before
        assert shown_numbers(other) == numbers
        assert other.url == link
    finally:
        ctx2.close()


@pytest.mark.parametrize("server", ["fresh", "navigating"])
def test_a_page_url_with_a_query_string_opens_filtered(browser, url_app, url_ledger, server):
    """On a fresh server the first request runs the page script alone (Streamlit's classic multipage
    mode); once `/` has been served, st.navigation runs it: the link works either way."""
    if server == "fresh":
        with serve_app(url_ledger, url_ledger.with_name("fresh.log")) as url:
            opens_filtered(browser, url)
    else:
        ctx, _ = open_page(browser, url_app, "Overview")   # `/` switches the process to st.navigation
        ctx.close()
        opens_filtered(browser, url_app)


def opens_filtered(browser, served: str) -> None:
    _, title, url_path = PAGES["reservations"]
    ctx, pg = open_page(browser, f"{served}/{url_path}?teams=vision&capacity=preemptible&range=this-month",
                       title)
    try:
        shown = shown_filters(pg)
        assert (shown["teams"], shown["kinds"], shown["capacity"], shown["period"]) == \
            ("vision", "", "preemptible", "This month"), shown
        captions = shown_numbers(pg)["captions"]
        assert any("vision · all kinds · preemptible" in c for c in captions), captions
        assert query(pg) == {"teams": ["vision"], "capacity": ["preemptible"], "range": ["this-month"]}
        assert urlsplit(pg.url).path == f"/{url_path}"
        assert pg.locator('[data-testid="stException"]').count() == 0
    finally:
        ctx.close()


def test_a_bad_parameter_in_a_url_is_named_in_a_warning_and_dropped(browser, url_app):
    ctx, pg = open_page(browser, f"{url_app}/?teams=vision,%3Cb%3Enobody%3C/b%3E&capacity=javascript:alert(1)",
                       "Overview")
    try:
        warning = pg.locator('[data-testid="stAlert"]', has_text="could not be used")
        warning.wait_for()
        text = warning.inner_text().replace(WORD_JOINER, "")   # as_text's invisible joiners
        assert "teams: “<b>nobody</b>”" in text and "capacity: “javascript:alert(1)”" in text, text
        assert warning.locator("b, a").count() == 0            # shown as typed: no bold, no link
        assert query(pg) == {"teams": ["vision"]}
    finally:
        ctx.close()


def test_no_request_leaves_the_machine(browser, url_app):
    """Every page, reached through the sidebar, loads nothing but from the app's own host (fonts,
    icons, scripts, the websocket) or data:/blob: URLs."""
    origin = urlsplit(url_app).netloc
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    requested: list[str] = []
    ctx.on("request", lambda request: requested.append(request.url))
    pg = ctx.new_page()
    pg.on("websocket", lambda ws: requested.append(ws.url))
    pg.set_default_timeout(TIMEOUT_MS)
    try:
        pg.goto(url_app)
        pg.get_by_role("heading", name="Overview").first.wait_for()
        pg.wait_for_selector(IDLE)
        for name in PAGES:
            go(pg, name)
            if pg.locator('[data-testid="stPlotlyChart"]').count():
                pg.locator('[data-testid="stPlotlyChart"] .main-svg').first.wait_for()
        pg.wait_for_load_state("networkidle")
        assert len(requested) > 10, requested                  # the recording saw the page load
        offenders = sorted({u for u in requested
                            if not (u.startswith(("data:", "blob:")) or urlsplit(u).netloc == origin)})
        assert offenders == [], f"{len(offenders)} request(s) left the machine: {offenders}"
    finally:
        ctx.close()
