"""Sign-in through a real OpenID Connect provider, in a real browser: oidc-provider-mock on a free
loopback port, `streamlit run app.py` with an [auth] secrets file pointing at it, and Debian's Chromium
following the real redirects. A planner, a team member and a viewer each sign in and see what their
role may use; signing out ends the session. And, in local mode, a file over the upload limit is refused
with the limit. Skips, saying why, without Chromium or when the provider cannot start."""
from __future__ import annotations

import pytest

from tests.fixtures_app import BROWSER_TESTS, IDLE, TIMEOUT_MS, fill_ledger, free_port, run_count, serve_app
from tests.fixtures_auth import (MEMBER, PLANNER, VIEWER, auth_section, oidc_provider, secrets_toml,
                                 write_access)
from tests.test_app_ledger_errors import good_csv

pytestmark = [*BROWSER_TESTS, pytest.mark.auth]

NAV = '[data-testid="stSidebarNavLink"]'


@pytest.fixture(scope="module")
def signin_app(tmp_path_factory):
    """`streamlit run` with sign-in through oidc-provider-mock, on a 300-run ledger, for the module:
    {url, db, now, tmp}."""
    tmp = tmp_path_factory.mktemp("auth")
    db = tmp / "gate.duckdb"
    now = fill_ledger(db, n_runs=300)
    port = free_port()
    with oidc_provider(tmp / "provider.log") as provider:
        secrets = tmp / "secrets.toml"
        secrets.write_text(secrets_toml(auth_section(provider, port)), encoding="utf-8")
        env = {"GATE_ACCESS": str(write_access(tmp))}
        with serve_app(db, tmp / "streamlit.log", port=port, args=[f"--secrets.files={secrets}"], env=env) as url:
            yield {"url": url, "db": db, "now": now, "tmp": tmp}


@pytest.fixture
def context(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    ctx.set_default_timeout(TIMEOUT_MS)
    yield ctx
    ctx.close()


def sign_in(page, url: str, who: str) -> None:
    """Open the app signed out, press Sign in, pick `who` on the provider's form, land back signed in."""
    page.goto(url)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Authorize Client").wait_for()
    page.get_by_role("button", name=who, exact=True).click()
    page.wait_for_url(url + "/**")
    page.get_by_text("Signed in as").first.wait_for()
    page.wait_for_selector(IDLE)


def signed_in_as(page) -> str:
    """The sidebar's "Signed in as …" line, as read (ui.as_text's invisible word joiners removed)."""
    return page.get_by_text("Signed in as").first.inner_text().replace("\u2060", "")


def nav_titles(page) -> list[str]:
    return [t.strip().split("\n")[-1].strip() for t in page.locator(NAV).all_inner_texts()]   # after the icon


def test_a_signed_out_visitor_sees_only_the_sign_in_button(signin_app, context):
    page = context.new_page()
    page.goto(signin_app["url"])
    page.get_by_role("button", name="Sign in").wait_for()
    page.wait_for_selector(IDLE)
    assert page.locator(NAV).count() == 0
    assert page.get_by_role("heading", name="Overview").count() == 0


def test_a_planner_signs_in_imports_and_the_audit_names_them(signin_app, context, tmp_path):
    page = context.new_page()
    sign_in(page, signin_app["url"], "planner")
    assert f"Signed in as {PLANNER} · planner" in signed_in_as(page)
    assert {"Upload", "Policy replay", "What-if"} <= set(nav_titles(page))
    page.locator(NAV, has_text="Upload").first.click()
    page.get_by_role("heading", name="Upload run history").wait_for()
    csv = tmp_path / "history.csv"
    csv.write_bytes(good_csv(signin_app["now"]))
    before = run_count(signin_app["db"])
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(csv))
    page.get_by_text("The file is valid.").wait_for()
    page.get_by_role("button", name="Import").click()
    page.get_by_text("Imported:").first.wait_for()
    assert run_count(signin_app["db"]) == before + 1
    page.get_by_text("Who imported what, and when").first.click()
    page.locator('[data-testid="stDataFrame"]').first.wait_for()


def test_a_team_member_may_run_the_what_if_for_their_team_only_and_cannot_upload(signin_app, context):
    page = context.new_page()
    sign_in(page, signin_app["url"], "member")
    assert f"Signed in as {MEMBER} · member (vision)" in signed_in_as(page)
    titles = nav_titles(page)
    assert "What-if" in titles and "Upload" not in titles and "Policy replay" not in titles
    page.locator(NAV, has_text="What-if").first.click()
    page.get_by_role("heading", name="What-if").first.wait_for()
    page.wait_for_selector(IDLE)
    page.get_by_role("button", name="Check this request").wait_for()
    team_box = page.locator('[data-testid="stSelectbox"]', has_text="Team").first
    team_box.click()
    options = [o.strip() for o in page.get_by_role("option").all_inner_texts()]
    assert options == ["vision"], options
    page.keyboard.press("Escape")
    page.goto(signin_app["url"] + "/Upload")           # the page's own URL: refused on the server
    page.get_by_text("Signed in as").first.wait_for()
    page.wait_for_selector(IDLE)
    assert page.locator('[data-testid="stFileUploader"]').count() == 0


def test_a_viewer_reads_dashboards_and_sign_out_ends_the_session(signin_app, context):
    page = context.new_page()
    sign_in(page, signin_app["url"], "viewer")
    assert f"Signed in as {VIEWER} · viewer" in signed_in_as(page)
    titles = nav_titles(page)
    assert "Overview" in titles
    assert not {"Upload", "Policy replay", "What-if"} & set(titles), titles
    page.get_by_role("heading", name="Overview").first.wait_for()
    page.get_by_role("button", name="Sign out").click()
    page.get_by_role("button", name="End session").click()   # the provider's end of the session (RP-initiated logout)
    page.get_by_role("button", name="Sign in").wait_for()
    page.goto(signin_app["url"])                        # the session cookie is gone: signed out for good
    page.get_by_role("button", name="Sign in").wait_for()
    page.wait_for_selector(IDLE)
    assert page.locator(NAV).count() == 0
    assert page.get_by_text(f"Signed in as {VIEWER}").count() == 0


def test_a_file_over_the_upload_limit_is_refused_with_the_limit(browser, tmp_path):
    db = tmp_path / "gate.duckdb"
    fill_ledger(db, n_runs=50)
    big = tmp_path / "history.csv"
    big.write_bytes(b"run_id,team\n" + b"x" * (2 * 1024 * 1024))    # 2 MB against a 1 MB limit
    with serve_app(db, tmp_path / "streamlit.log", args=["--server.maxUploadSize=1"]) as url:
        ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
        try:
            page = ctx.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(url + "/Upload")
            page.get_by_role("heading", name="Upload run history").wait_for()
            page.wait_for_selector(IDLE)
            page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(big))
            page.get_by_text("File must be 1.0MB or smaller.").wait_for()
            page.wait_for_selector(IDLE)
            assert page.get_by_text("The file is valid.").count() == 0
        finally:
            ctx.close()
