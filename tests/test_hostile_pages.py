"""Every page on a ledger whose team names and run IDs are hostile (markup, links, bare URLs,
formulas, an RTL override, 10,000 characters): no exception, and no Markdown body on the page turns
user text into markup or a link (Streamlit renders st.caption / st.markdown / alerts as GitHub-
flavoured Markdown, which also links bare URLs and e-mail addresses)."""
from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest

import ui
from tests.fixtures_app import PAGES, ROOT, page_script
from tests.fixtures_hostile import HOSTILE

TIMEOUT_S = 60
pytestmark = pytest.mark.usefixtures("fresh_caches")


def shown(body: str) -> str:
    """The text a reader sees of a Markdown body made by ui.as_text: escapes and joiners removed."""
    return re.sub(r"\\(.)", r"\1", body).replace(ui.WORD_JOINER, "")


def markup_in(body: str) -> list[str]:
    """What in a Markdown body would render as markup or a link (empty: plain text)."""
    found = []
    if re.search(r"(?<!\\)<", body):
        found.append("an unescaped '<' (HTML)")
    if re.search(r"(?<!\\)\]\s*(?<!\\)\(", body):
        found.append("a Markdown link '[..](..)'")
    text = re.sub(r"\\(.)", r"\1", body)  # what remark-gfm's autolink transform sees
    if re.search(r"(?i)https?://|www\.", text):
        found.append("a bare URL (autolinked)")
    if re.search(r"[-.\w+]@[-\w]+(\.[-\w]+)+", text):
        found.append("an e-mail address (autolinked)")
    return found


def markdown_bodies(at: AppTest):
    for kind in ("title", "header", "subheader", "markdown", "caption", "info", "warning", "error", "success",
                 "toast"):
        for el in getattr(at, kind):
            yield kind, el.value
    for el in at.sidebar.caption:
        yield "sidebar caption", el.value


def open_with_hostile_teams(page: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.sidebar.multiselect(key="f_teams").set_value(HOSTILE).run()
    assert not at.exception, [e.value for e in at.exception]
    at.switch_page(page_script(page)).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_shows_hostile_names_as_text(hostile_ledger, page):
    at = open_with_hostile_teams(page)
    assert at.title
    assert at.sidebar.multiselect(key="f_teams").value == HOSTILE
    for kind, body in markdown_bodies(at):
        assert not markup_in(body), (page, kind, markup_in(body), body[:300])


def test_the_caption_under_the_title_shows_a_url_as_typed_not_as_a_link(hostile_ledger):
    at = open_with_hostile_teams("overview")
    body = next(c.value for c in at.caption if "example" in c.value)
    assert not markup_in(body), markup_in(body)
    for name in HOSTILE:  # every name reads exactly as typed (an invisible bidi control made visible)
        assert name.replace("\u202e", "[U+202E]") in shown(body)
    assert "\u202e" not in body  # it would reverse the rest of the caption
    # the element-level check: the URL is broken for the autolinker by an invisible word joiner
    assert "https\\:" + ui.WORD_JOINER + "//example\\.invalid/y" in body


@pytest.mark.parametrize("text", [*HOSTILE, "mail me: a.b@example.invalid", "www.example.invalid",
                                  "HTTPS://EXAMPLE.INVALID", ":smile: :red[x]", "Note: 5 < 6 & 7 > 3"])
def test_as_text_never_leaves_markup_or_a_link(text):
    body = ui.as_text(text)
    assert not markup_in(body), markup_in(body)
    assert shown(body) == text.replace("\u202e", "[U+202E]")


def test_a_zero_change_shows_no_arrow_and_no_colour(tmp_path, monkeypatch, fresh_caches):
    from lib.ledger.connection import open_ledger
    from tests.fixtures_app import fill_ledger
    path = tmp_path / "gate.duckdb"
    fill_ledger(path, n_runs=300)
    with open_ledger(path) as con:  # a team without any run: every change is zero
        con.execute("INSERT INTO teams (team, reserved_gpus, max_gpus_per_job, max_gpu_mem_gb, max_runtime_hours, "
                    "monthly_budget_gpu_hours, policy_version) VALUES ('quiet', 1, 1, 1, 1, 1, 'v')")
    monkeypatch.setenv("GATE_DB", str(path))
    monkeypatch.setenv("GATE_DEMO", "0")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)
    at.run()
    at.sidebar.multiselect(key="f_teams").set_value(["quiet"]).run()
    assert not at.exception, [e.value for e in at.exception]
    deferred = next(m for m in at.metric if m.label == "Deferred requests")
    assert deferred.value == "0"
    assert deferred.proto.delta == "no change"
    assert deferred.proto.color == deferred.proto.MetricColor.GRAY
    assert deferred.proto.direction == deferred.proto.MetricDirection.NONE  # no arrow
    for m in at.metric:
        assert m.proto.delta in ("", "no change"), (m.label, m.proto.delta)
        assert "+0" not in m.proto.delta
