"""A request whose estimated wall clock exceeds its own max_runtime_hours is admitted with a warning,
never silently: a note with its code and fix in the decision, a warning on the What-if page and in
the Slurm hook's message. Notes carry codes; a decision recorded before they did (plain-string notes)
is still read and shown."""
from __future__ import annotations

import json
import re

import duckdb
import pytest

from lib.dashboard.whatif import note_rows
from lib.gate.admission import decide
from lib.gate.reasons import NOTE_CODES, WARNING_NOTES, as_note, notes_of
from lib.ledger.deciding import check_request
from lib.slurm import hook as h
from lib.slurm.in_process import judge_in_process
from lib.slurm.wire import EXIT_ACCEPTED
from tests.fixtures_app import open_app
from tests.fixtures_gate import policy, request, state
from tests.fixtures_ledger import query
from tests.fixtures_slurm import comment, job, make_slurm_ledger


def walltime_notes(d: dict) -> list[dict]:
    return [n for n in d["notes"] if n["code"] == "walltime-exceeds-limit"]


def needed_limit(fix: str) -> float:
    return float(re.search(r"max_runtime_hours to ≥ ([0-9.]+)", fix).group(1))


def test_an_admit_whose_wall_clock_exceeds_its_limit_carries_the_warning_and_a_fix_that_works():
    req = request(estimated_gpu_hours=20.0, gpus=1, max_runtime_hours=10, budget_gpu_hours=30)
    d = decide(req, policy(max_runtime_hours=72), state(hist=[]))
    assert d["state"] == "admit" and d["reasons"] == []
    [n] = walltime_notes(d)
    assert n["code"] in WARNING_NOTES and "20.0 h" in n["message"]
    assert "the team's cap is 72 h" in n["fix"] and "resume" in n["fix"]
    limit = needed_limit(n["fix"])
    assert limit >= d["estimate"]["wall_hours"]
    again = decide({**req, "max_runtime_hours": limit}, policy(max_runtime_hours=72), state(hist=[]))
    assert again["state"] == "admit" and walltime_notes(again) == []


def test_without_checkpointing_the_fix_says_to_enable_it_before_accepting_a_resume():
    d = decide(request(estimated_gpu_hours=20.0, gpus=1, max_runtime_hours=10, budget_gpu_hours=30,
                       checkpoint_supported=False, expected_interruptions=0), policy(), state(hist=[]))
    [n] = walltime_notes(d)
    assert "enable checkpointing" in n["fix"]


def test_a_wall_clock_above_the_teams_cap_too_is_deferred_and_the_note_raises_no_limit_past_the_cap():
    d = decide(request(estimated_gpu_hours=100.0, gpus=1, max_runtime_hours=10, budget_gpu_hours=200),
               policy(max_runtime_hours=48, pilot_required_above_gpu_hours=1000), state(hist=[]))
    assert [r["code"] for r in d["reasons"]] == ["runtime-cap"]
    [n] = walltime_notes(d)
    assert "max_runtime_hours to ≥" not in n["fix"] and "cap 48 h" in n["fix"]


def test_within_its_limit_there_is_no_warning():
    d = decide(request(estimated_gpu_hours=5.0, gpus=1, max_runtime_hours=10), policy(), state(hist=[]))
    assert d["state"] == "admit" and walltime_notes(d) == []


def test_every_note_of_a_decision_has_a_known_code_and_a_message():
    d = decide(request(kind="retraining", estimated_gpu_hours=40.0, gpus=8, max_runtime_hours=1,
                       budget_gpu_hours=100), policy(),
               state(hist=[], reservations=[{"kind": "exploratory", "gpus": 12, "reserved_gpu_hours": 10.0,
                                             "reserved_until": None}]))
    assert {n["code"] for n in d["notes"]} >= {"walltime-exceeds-limit", "preempts-experiments"}
    assert all(n["code"] in NOTE_CODES and n["message"] for n in d["notes"])


def test_an_old_plain_string_note_is_read_as_a_note_without_a_code():
    assert as_note("estimated wall clock 3 h exceeds ...") == {"code": None, "message": "estimated wall clock 3 h exceeds ..."}
    assert notes_of({"notes": ["a", {"code": "calibration-unknown", "message": "b"}]}) == \
        [{"code": None, "message": "a"}, {"code": "calibration-unknown", "message": "b"}]
    assert notes_of({}) == []
    rows = note_rows({"notes": ["old words", {"code": "walltime-exceeds-limit", "message": "m", "fix": "f"}]})
    assert rows == [{"warning": False, "text": "old words", "fix": None},
                    {"warning": True, "text": "m", "fix": "f"}]


# ---------------------------------------------------------------- the Slurm hook and the recorded decision

LONG_JOB = dict(comment=comment(estimated_gpu_hours=3.0, budget_gpu_hours=10))   # 1.5 h on 2 GPUs, 30 min limit


def test_the_slurm_hook_admits_with_the_warning_and_its_fix_in_its_message(tmp_path):
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    out = judge_in_process(job(**LONG_JOB), h.config_from_env({}) | {"db": str(db)})
    assert out.code == EXIT_ACCEPTED, out.msg
    assert "WARNING [walltime-exceeds-limit] estimated wall clock 1.5 h exceeds the requested " \
           "max_runtime_hours 0.5" in out.msg
    assert "-> fix: raise max_runtime_hours to ≥ 1.5" in out.msg
    [(recorded,)] = query(db, "SELECT decision_json FROM decisions")   # recorded with its coded note
    assert [n["code"] for n in json.loads(recorded)["notes"]] == ["walltime-exceeds-limit"]


def test_a_decision_recorded_with_plain_string_notes_is_replayed_and_shown(tmp_path):
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    assert judge_in_process(job(**LONG_JOB), h.config_from_env({}) | {"db": str(db)}).code == EXIT_ACCEPTED
    with duckdb.connect(str(db)) as con:   # as an older release recorded it
        [(text,)] = con.execute("SELECT decision_json FROM decisions").fetchall()
        old = json.loads(text)
        old["notes"] = ["estimated wall clock 1.5 h exceeds the requested max_runtime_hours 0.5"]
        con.execute("UPDATE decisions SET decision_json = ?", [json.dumps(old)])
    again = judge_in_process(job(**LONG_JOB), h.config_from_env({}) | {"db": str(db)})
    assert again.code == EXIT_ACCEPTED and again.decision["replayed"] is True
    assert again.decision["notes"] == [{"code": None, "message": old["notes"][0]}]
    assert "(note estimated wall clock 1.5 h exceeds the requested max_runtime_hours 0.5)" in again.msg
    [(text,)] = query(db, "SELECT request_json FROM decisions")
    request = json.loads(text)
    assert check_request(request, db=db)["notes"] == again.decision["notes"]


# ---------------------------------------------------------------- the What-if page

def plain(markdown: str) -> str:
    """Page text as the reader sees it: without the escapes and word joiners that keep it from being markup."""
    return markdown.replace("\\", "").replace("\u2060", "")


@pytest.mark.usefixtures("fresh_caches")
def test_the_what_if_page_shows_the_wall_clock_warning_with_its_fix_not_a_grey_caption(page_ledger):
    at = open_app("what_if")
    at.radio(key="wi_estimate_from").set_value("estimate").run()
    at.selectbox(key="wi_team").set_value("speech")
    at.selectbox(key="wi_kind").set_value("exploratory")
    at.number_input(key="wi_gpus").set_value(2)
    at.number_input(key="wi_gpu_mem_gb").set_value(40.0)
    at.number_input(key="wi_max_runtime_hours").set_value(2.0)
    at.number_input(key="wi_budget_gpu_hours").set_value(5000.0)
    at.number_input(key="wi_estimated_gpu_hours").set_value(20.0)
    at.text_input(key="wi_data_snapshot").set_value("speech-asr-multilingual-v3")
    at.button[[b.label for b in at.button].index("Check this request")].click().run()
    assert not at.exception, [e.value for e in at.exception]
    [warning] = [plain(w.value) for w in at.warning if plain(w.value).startswith("Warning:")]
    assert "exceeds the requested max_runtime_hours 2" in warning
    assert "fix: raise max_runtime_hours to ≥" in warning and "resume" in warning
    assert any(s.value == "Decision: ADMIT" for s in at.success)
    assert not [c.value for c in at.caption if "wall clock" in plain(c.value)]


@pytest.mark.usefixtures("fresh_caches")
def test_the_what_if_form_sends_the_pilots_accelerators_and_the_page_notes_the_scaling(page_ledger):
    at = open_app("what_if")
    at.selectbox(key="wi_team").set_value("speech")
    at.text_input(key="wi_data_snapshot").set_value("speech-asr-multilingual-v3")
    at.number_input(key="wi_gpus").set_value(4)
    at.number_input(key="wi_pilot_gpus").set_value(8)
    at.button[[b.label for b in at.button].index("Check this request")].click().run()
    assert not at.exception, [e.value for e in at.exception]
    request = json.loads(next(c.value for c in at.code if c.language == "json"))
    assert request["gpus"] == 4 and request["pilot"]["gpus"] == 8
    assert any("pilot ran on 8 accelerators, this request asks for 4" in plain(c.value) for c in at.caption)
