"""What a planner reads on the pages, under AppTest: the What-if's estimate items in words with sensible
rounding and its calibration said once, the Estimate accuracy table's notes saying only what its
other columns do not, Upload's Import button disabled (with the reason) when a re-import would change
nothing, and a tab title per page."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from lib.dashboard import estimate_queries
from lib.dashboard.filters import default_filters
from lib.gate.estimate import ITEMS
from tests.fixtures_app import open_app, run_count

pytestmark = pytest.mark.usefixtures("fresh_caches")


def check_pilot_request(at) -> dict:
    """Submit the What-if's pilot form as it opens (8 GPUs, a 50,000-step pilot); the decision."""
    at.radio(key="wi_estimate_from").set_value("pilot").run()
    at.selectbox(key="wi_team").set_value("vision")
    at.button[[b.label for b in at.button].index("Check this request")].click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at.session_state["whatif_result"]["decision"]


def test_what_if_estimate_items_are_words_and_numbers_are_rounded(page_ledger):
    at = open_app("what_if")
    decision = check_pilot_request(at)
    table = next(d.value for d in at.dataframe if "item" in d.value.columns)
    items = [i for i in table["item"] if i.startswith("raw item: ")]
    assert len(items) == len(ITEMS)
    assert not [i for i in table["item"] if "_" in i]                   # never snake_case
    for value in table["value"].dropna():
        assert value == round(value, 1 if abs(value) >= 10 else 2)      # no 4-decimal noise
    raw = decision["estimate"]["raw_gpu_hours"]
    assert table.loc[table["item"] == "raw total", "value"].iloc[0] == pytest.approx(raw, abs=0.05)


def test_what_if_says_the_calibration_once(page_ledger):
    at = open_app("what_if")
    cal = check_pilot_request(at)["estimate"]["calibration"]
    said = [c.value for c in at.caption if "past runs" in c.value]
    assert len(said) == 1
    text = said[0]
    assert len(re.findall(rf"\b{cal['n']}\b", text)) == 1            # the run count once
    assert cal["note"].split(" (")[0] not in text                     # not the calibration's note again
    assert "None" not in text


def test_the_calibration_tables_notes_do_not_repeat_its_columns(page_ledger):
    path, now = page_ledger
    table = estimate_queries.calibration_shown(default_filters(now.date()), path, now)["table"]
    assert len(table)
    for row in table.itertuples():
        assert f"{row.runs} runs" not in row.note and "scope" not in row.note, row.note
        # something to say only when the bound is unknown or followed a change
        assert bool(row.note) == (pd.isna(row.upper_factor) or not pd.isna(row.adapted_since)), row


def upload_csv(now, rows: list[str]) -> bytes:
    import datetime as dt
    head = ("run_id,team,kind,capacity,gpus,estimated_gpu_hours,estimate_source,reserved_from,reserved_until,"
            "reserved_gpu_hours,started_at,ended_at,actual_gpu_hours,stop_reason")

    def ts(hours_ago):
        return (now - dt.timedelta(hours=hours_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = [r.format(a=ts(60), b=ts(48), c=ts(59), d=ts(50)) for r in rows]
    return ("\n".join([head, *body]) + "\n").encode()


RUN = "{id},speech,exploratory,stable,4,40,stated,{{a}},{{b}},4800,{{c}},{{d}},3600,completed"


def test_import_is_disabled_with_the_reason_when_a_re_import_would_change_nothing(page_ledger):
    path, now = page_ledger
    data = upload_csv(now, [RUN.format(id="same-1"), RUN.format(id="same-2")])
    at = open_app("upload")
    at.file_uploader(key="upload_file").upload("history.csv", data, "text/csv").run()
    assert not at.button(key="upload_import").disabled
    at.button(key="upload_import").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert run_count(path) == 300 + 2

    again = open_app("upload")   # another session, the same file: every run is in the ledger as it is
    again.file_uploader(key="upload_file").upload("history.csv", data, "text/csv").run()
    button = again.button(key="upload_import")
    assert button.disabled
    reason = next(i.value for i in again.info if i.value.startswith("Nothing to import"))
    assert "2 unchanged" in reason   # said beside the button (a help tooltip on a disabled button draws it twice)

    changed = upload_csv(now, [RUN.format(id="same-1"), RUN.format(id="same-3")])   # one new run
    again.file_uploader(key="upload_file").upload("history2.csv", changed, "text/csv").run()
    assert not again.button(key="upload_import").disabled
    assert not [i for i in again.info if i.value.startswith("Nothing to import")]


def test_each_page_has_a_tab_title_of_its_own():
    from ui.pages import PAGE_TITLE, PAGES, tab_title
    titles = {tab_title(f"/srv/gate/{p.script}") for p in PAGES}
    assert len(titles) == len(PAGES)
    assert all(tab_title(p.script) == f"{p.title} · {PAGE_TITLE}" for p in PAGES)
    assert tab_title(None) == tab_title("/srv/gate/app.py") == PAGE_TITLE
