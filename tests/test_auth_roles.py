"""Who may do what in the dashboard, checked on the server: local mode is one user with every role on
loopback; with sign-in configured a signed-out session sees only the sign-in screen, each role sees
only the pages it may use, and a viewer's session cannot import even when it sends the upload widget's
messages itself. Real AppTest runs on a real ledger; st.user as AppTest presents a signed-in person."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from lib.dashboard.audit import recent_writes
from tests.fixtures_app import ROOT, page_script, run_count
from tests.fixtures_auth import MEMBER, PLANNER, STRANGER, VIEWER, auth_section, signed_in, write_access
from tests.test_app_ledger_errors import good_csv

TIMEOUT_S = 60
WJ = "\u2060"   # ui.as_text's word joiner after ':' and '@'


def text(elements) -> list[str]:
    return [str(e.value).replace("\\", "").replace(WJ, "") for e in elements]


@pytest.fixture
def signed(page_ledger, tmp_path, monkeypatch):
    """A factory of app.py sessions with sign-in configured, signed in as `email` (None: signed out)."""
    monkeypatch.setenv("GATE_ACCESS", str(write_access(tmp_path)))

    def make(email: str | None, script: str = "app.py", **claims) -> AppTest:
        at = AppTest.from_file(str(ROOT / script), default_timeout=TIMEOUT_S)
        at.secrets["auth"] = auth_section()
        at.user = signed_in(email, **claims) if email else {"is_logged_in": False}
        return at.run()
    return make


def test_local_mode_is_one_user_with_every_role_and_says_so(page_ledger):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S).run()
    assert "local mode: single user, every role" in text(at.sidebar.caption)
    at.switch_page(page_script("upload")).run()
    assert not at.exception and not at.error
    assert at.file_uploader(key="upload_file") is not None


@pytest.mark.usefixtures("every_interface")
def test_local_mode_beyond_loopback_refuses_to_import_or_export_and_says_why(page_ledger):
    for page in ("upload", "policy_replay"):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S).run()
        at.switch_page(page_script(page)).run()
        assert not at.exception, [e.value for e in at.exception]
        assert any("listens on 0.0.0.0 without sign-in" in e for e in text(at.error)), text(at.error)
        assert not at.get("file_uploader") and not at.get("download_button"), page
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S).run()
    at.switch_page(page_script("overview")).run()      # reading stays open
    assert not at.exception and not at.error and at.title


def test_a_signed_out_session_sees_only_the_sign_in_screen(signed):
    at = signed(None)
    assert not at.exception, [e.value for e in at.exception]
    assert [b.label for b in at.button] == ["Sign in"]
    assert not at.sidebar.get("multiselect")      # no filters, no data
    for page in ("upload", "overview"):           # a page script run on its own asks for sign-in too
        direct = signed(None, page_script(page))
        assert [b.label for b in direct.button] == ["Sign in"] and not direct.get("file_uploader")


def test_each_role_sees_and_may_use_its_own_pages(signed):
    planner = signed(PLANNER)
    assert any(f"Signed in as {PLANNER} · planner" in c for c in text(planner.sidebar.caption))
    planner.switch_page(page_script("upload")).run()
    assert planner.file_uploader(key="upload_file") is not None and not planner.error

    member = signed(MEMBER)
    member.switch_page(page_script("what_if")).run()
    assert not member.exception and not member.error
    assert member.selectbox(key="wi_team").options == ["vision"]      # the what-if for their own team only
    for page in ("upload", "policy_replay"):
        direct = signed(MEMBER, page_script(page))
        assert any("Your role (member) may not" in e for e in text(direct.error)), text(direct.error)
        assert not direct.get("file_uploader") and not direct.main.get("button")

    viewer = signed(VIEWER)
    viewer.switch_page(page_script("overview")).run()
    assert not viewer.exception and not viewer.error and viewer.title
    for page in ("upload", "policy_replay", "what_if"):
        direct = signed(VIEWER, page_script(page))
        assert any("Your role (viewer) may not" in e for e in text(direct.error)), text(direct.error)
        assert not direct.get("file_uploader") and not direct.get("form")


def test_a_group_claim_makes_a_member(signed):
    at = signed("someone@example.org", page_script("what_if"), groups=["team-vision"])
    assert not at.error and at.selectbox(key="wi_team").options == ["vision"]


def test_a_person_the_file_does_not_name_gets_no_entry_when_the_file_says_none(signed):
    at = signed(STRANGER)
    assert any("gives you no role" in e for e in text(at.error)), text(at.error)
    assert [b.label for b in at.button] == ["Sign out"] and not at.title


def test_a_malformed_access_file_lets_nobody_in_and_says_line_and_reason(signed, tmp_path):
    write_access(tmp_path, '[access]\nunknown = "maybe"\n')
    at = signed(PLANNER)
    errors = text(at.error)
    assert any("The access file cannot be used" in e and "line 2" in e for e in errors), errors
    assert not at.title


def test_a_viewer_session_cannot_import_even_when_it_sends_the_upload_widgets_messages(signed, page_ledger):
    """The session uploads and checks a file while a planner, then is a viewer (the access file or the
    sign-in changed) and sends the Import button's and the uploader's values again: the page refuses
    before writing — run straight (classic mode) and through app.py."""
    path, now = page_ledger
    before = run_count(path)
    for script in (page_script("upload"), "app.py"):
        at = signed(PLANNER, script)
        if script == "app.py":
            at.switch_page(page_script("upload")).run()
        at.file_uploader(key="upload_file").upload("history.csv", good_csv(now), "text/csv").run()
        assert not at.button(key="upload_import").disabled
        at.user = signed_in(VIEWER)
        at.button(key="upload_import").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert not at.success
        assert run_count(path) == before
        assert recent_writes(path).empty
    at = signed(PLANNER, page_script("upload"))          # the same file from the planner lands, audited
    at.file_uploader(key="upload_file").upload("history.csv", good_csv(now), "text/csv").run()
    at.button(key="upload_import").click().run()
    assert run_count(path) == before + 1
    audit = recent_writes(path)
    assert audit[["who", "origin", "action", "file_name", "runs_inserted"]].values.tolist() == \
        [[PLANNER, "app", "import", "history.csv", 1]]


def test_a_member_sees_only_their_own_teams_when_the_file_says_own_teams(signed, tmp_path):
    from tests.fixtures_auth import ACCESS
    write_access(tmp_path, ACCESS.replace('unknown = "none"', 'unknown = "none"\nmembers_see = "own-teams"'))
    at = signed(MEMBER)
    assert not at.exception and not at.error
    assert at.sidebar.multiselect(key="f_teams").options == ["vision"]
    assert at.session_state["filters"].teams == ("vision",)     # "all teams" is all of theirs
    planner = signed(PLANNER)
    assert len(planner.sidebar.multiselect(key="f_teams").options) > 1
    assert planner.session_state["filters"].teams == ()


def test_a_planners_policy_download_is_recorded_as_theirs(signed, page_ledger):
    path, _ = page_ledger
    at = signed(PLANNER, page_script("policy_replay"))
    next(b for b in at.button if b.label == "Replay").click().run()
    assert not at.exception, [e.value for e in at.exception]
    at.get("download_button")[-1].click().run()        # "Download the proposed teams.toml"
    assert not at.exception and not at.warning
    audit = recent_writes(path)
    assert audit[["who", "origin", "action", "file_name", "format"]].values.tolist() == \
        [[PLANNER, "app", "policy-export", "teams.toml", "toml"]]
