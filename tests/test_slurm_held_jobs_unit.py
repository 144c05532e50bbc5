"""The pure parts of holding a deferred Slurm job (lib.slurm.holds): the hold-or-refuse choice, what
the user and the admin comment say, reading `squeue --json` and reconciling it with the gate's line
(a listing as plain data: no Slurm here)."""
from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings, strategies as st

from lib.slurm.holds import (HOLD_PREFIX, PendingJob, gate_tag, held_message, hold_choice, hold_comment, ordinal,
                             parse_hold_comment, pending_jobs, place_text, reconcile_holds)

NOW = datetime(2026, 12, 7, 18, 0, 0)
TAG = gate_tag("/srv/gate/gate.duckdb")


def deferral(*codes):
    return {"state": "defer", "run_id": "r1", "team": "vision",
            "reasons": [{"code": c, "message": c, "fix": "wait"} for c in codes]}


# ------------------------------------------------------------------ hold or refuse

def test_a_deferral_only_time_cures_is_held_unless_the_setting_says_refuse():
    soon = (NOW + timedelta(hours=2), "when reservations end")
    assert hold_choice(deferral("capacity"), "hold", soon) == (True, "")
    assert hold_choice(deferral("capacity", "period-budget"), "hold", soon) == (True, "")
    assert hold_choice(deferral("queue"), "hold", (NOW, "fits now")) == (True, "")
    assert hold_choice(deferral("capacity"), "refuse", soon) == (False, "")


def test_a_deferral_a_change_must_cure_and_a_job_that_never_fits_are_refused():
    assert hold_choice(deferral("capacity", "budget"), "hold", None) == (False, "")
    assert hold_choice({"state": "reject", "reasons": [{"code": "capacity"}]}, "hold", None) == (False, "")
    assert hold_choice({"state": "admit"}, "hold", None) == (False, "")
    hold, why = hold_choice(deferral("capacity"), "hold", (None, "needs 4 GPUs, above the 2 the team's quota leaves it"))
    assert not hold and why == "never fits as asked: needs 4 GPUs, above the 2 the team's quota leaves it"


# ------------------------------------------------------------------ what is said

def test_the_users_line_says_the_place_and_planned_start_and_that_it_starts_by_itself():
    where = place_text("vision", 3, datetime(2026, 12, 7, 22, 38, 10))
    assert where == "3rd in line for team vision, planned start 2026-12-07 22:38 UTC"
    msg = held_message("r1", "vision", ["capacity"], where)
    assert msg.startswith("training-gate: queued: run r1 3rd in line for team vision, planned start 2026-12-07 22:38 UTC; "
                          "it starts by itself, no need to resubmit")
    assert place_text("vision", None, None) == "queued for team vision, planned start not known yet"
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]


@settings(max_examples=300, deadline=None)
@given(run_id=st.text(min_size=1, max_size=80), tag=st.text("0123456789abcdef", min_size=8, max_size=8))
def test_any_run_id_comes_back_from_the_admin_comment_slurm_keeps(run_id, tag):
    text = hold_comment(run_id, tag, place_text("t", 1, None), ["capacity"])
    assert text.startswith(HOLD_PREFIX) and "\n" not in text
    assert parse_hold_comment(text) == (run_id, tag)


def test_other_admin_comments_are_not_the_gates_holds():
    for text in (None, "", "training-gate: ended: budget", "training-gate: queued run  [gate 12345678]",
                 "training-gate: queued run x [gate XYZ]"):
        assert parse_hold_comment(text) is None


# ------------------------------------------------------------------ squeue --json, reconciled

def squeue(*jobs):
    return {"jobs": [{"job_id": jid, "job_state": state, "state_reason": reason, "admin_comment": comment,
                      "start_time": 0, "time_limit": 30, "user_name": "ana"} for jid, state, reason, comment in jobs]}


def held_text(run_id, tag=TAG):
    return hold_comment(run_id, tag, place_text("vision", None, None), ["capacity"])


def test_only_this_gates_pending_held_jobs_are_read():
    listing = squeue((1, "PENDING", "JobHeldAdmin", held_text("a")),
                     (2, "RUNNING", "None", held_text("b")),
                     (3, "PENDING", "JobHeldAdmin", held_text("c", tag="ffffffff")),
                     (4, "PENDING", "Priority", ""),
                     (5, "PENDING", "JobHeldUser", held_text("e")))
    got = pending_jobs(listing, TAG)
    assert [(j.job_id, j.run_id, j.reason, j.time_limit_min) for j in got] == \
        [("1", "a", "JobHeldAdmin", 30), ("5", "e", "JobHeldUser", 30)]


def job(run_id, reason="JobHeldAdmin", comment=None, start=None, jid=None):
    return PendingJob(jid or run_id, run_id, reason, held_text(run_id) if comment is None else comment, start, 30, "ana")


def line_row(team_place, planned, codes=("capacity",)):
    return {"team": "vision", "team_place": team_place, "planned_start": planned, "reasons": list(codes)}


def test_an_admitted_run_is_released_a_waiting_one_kept_current_a_departed_one_cancelled():
    pending = [job("adm"), job("wait"), job("exp"), job("unknown"), job("released", reason="Priority")]
    acts = reconcile_holds(pending, watched={}, tag=TAG, now=NOW, admitted={"adm", "released"},
                           line={"wait": line_row(2, "2026-12-07T20:00:01")},
                           left={"exp": "[queue-expired] waited too long"})
    assert [j.run_id for j in acts.release] == ["adm"]   # once: a released job is not held any more
    ((upd, comment, start),) = acts.update
    assert upd.run_id == "wait" and start == datetime(2026, 12, 7, 20, 0, 1)
    assert "2nd in line for team vision, planned start 2026-12-07 20:00 UTC" in comment
    assert parse_hold_comment(comment)[0] == "wait"
    assert [(j.run_id, why) for j, why in acts.cancel_jobs] == [("exp", "[queue-expired] waited too long")]
    assert acts.cancel_waiting == [] and acts.admin_hold == []


def test_a_job_whose_comment_and_start_are_current_is_left_alone():
    planned = datetime(2026, 12, 7, 20, 0, 1)
    where = place_text("vision", 1, planned)
    current = job("w", comment=hold_comment("w", TAG, where, ["capacity"]), start=planned)
    acts = reconcile_holds([current], watched={}, tag=TAG, now=NOW, admitted=set(),
                           line={"w": line_row(1, planned.isoformat())}, left={})
    assert acts.update == [] and acts.release == []


def test_a_hold_its_user_could_release_is_made_an_admin_hold():
    acts = reconcile_holds([job("u", reason="JobHeldUser"), job("v", reason="JobHeldUser")], watched={}, tag=TAG,
                           now=NOW, admitted={"v"}, line={"u": line_row(1, None)}, left={})
    assert [j.run_id for j in acts.admin_hold] == ["u"] and [j.run_id for j in acts.release] == ["v"]


def test_a_held_job_gone_from_slurms_queue_takes_its_request_out_of_the_line():
    watched = {"seen": NOW - timedelta(seconds=5), "new": NOW - timedelta(seconds=5),
               "old": NOW - timedelta(minutes=5), "ran": NOW - timedelta(minutes=5), "here": NOW}
    line = {r: line_row(1, None) for r in ("seen", "new", "old", "here")}
    acts = reconcile_holds([job("here")], watched=watched, tag=TAG, now=NOW, admitted={"ran"}, line=line, left={},
                           seen={"seen", "here"})
    # seen pending before: cancelled at once; never seen: after the grace; admitted: only forgotten
    assert sorted(acts.cancel_waiting) == ["old", "seen"]
    assert sorted(acts.forget) == ["old", "ran", "seen"]


def test_a_job_held_at_submission_is_found_by_its_run_and_made_an_admin_hold_in_one_call():
    from types import SimpleNamespace

    from lib.slurm.queue_keeper import QueueKeeper
    calls = []

    def run(argv, timeout_s):   # Slurm's answers as plain text: squeue's listing, scontrol's silence
        calls.append(argv)
        return "11|JobHeldUser|r1\n12|JobHeldUser|other\n13|JobHeldAdmin|r2\n14|JobHeldUser|r2\n" \
            if argv[0] == "squeue" else ""
    keeper = QueueKeeper(SimpleNamespace(db="/srv/gate/gate.duckdb"), interval_s=0, run=run)
    keeper.held("r1", NOW)
    keeper.held("r2", NOW)
    assert keeper.adopt() == ["11", "14"]
    assert calls[-1] == ["scontrol", "hold", "11,14"] and len(calls) == 2
    assert keeper.adopt() == [] and len(calls) == 2   # adopted once: nothing left, Slurm not asked
