"""Who decides a Slurm job is one list (lib.slurm.judge.JobDecider): the warm gate server's LiveGate and
the hook's in-process decider both have every member with a signature that takes the judge's call,
and the judge gives the same answer through either, for the same jobs on the same ledger: the same
Judged (but for the journal entry only the server has to settle) and the same rows in the ledger.
Real DuckDB ledgers in tmp_path."""
from __future__ import annotations

import shutil
import typing
from dataclasses import replace

import pytest

from lib.gate.terms import utcnow
from lib.ledger.connection import open_ledger
from lib.slurm.hook import config_from_env
from lib.slurm.in_process import InProcessDecider
from lib.slurm.judge import JobDecider, judge_job
from lib.slurm.live import LiveGate
from lib.slurm.wire import EXIT_ACCEPTED, EXIT_FAILED_REFUSED, EXIT_REFUSED
from tests.fixtures_slurm import comment, job, make_slurm_ledger
from tests.test_decision_facts import protocol_members, signature_problem

IMPLEMENTATIONS = (LiveGate, InProcessDecider)

# in turn on one ledger, so each job meets what the ones before it booked
JOBS = [
    ("admit", job(comment=comment(run_id="same-1")), EXIT_ACCEPTED),
    ("spend-limit", job(comment=comment(run_id="same-2", stop_policy={"spend_limit_gpu_hours": 0.5})), EXIT_ACCEPTED),
    ("runtime-from-comment", job(time_limit=None, comment=comment(run_id="same-3", max_runtime_hours=2)), EXIT_ACCEPTED),
    ("preemptible", job(partition="spot", comment=comment(run_id="same-4", checkpoint_supported=False)), EXIT_REFUSED),
    ("over-budget", job(comment=comment(run_id="same-5", estimated_gpu_hours=40)), EXIT_REFUSED),
    ("unknown-team", job(account="nobody", comment=comment(run_id="same-6")), EXIT_REFUSED),
    ("resubmitted", job(comment=comment(run_id="same-1")), EXIT_ACCEPTED),
    ("run-id-taken", job(tres_per_node="gres:gpu:4", comment=comment(run_id="same-1")), EXIT_REFUSED),
    ("incomplete", job(comment=None), EXIT_FAILED_REFUSED),
]


def test_the_protocol_names_what_the_judge_asks_of_a_decider():
    assert set(protocol_members(JobDecider)) == {"decide_job", "settle"}
    assert typing.get_type_hints(judge_job)["decider"] is JobDecider


@pytest.mark.parametrize("cls", IMPLEMENTATIONS, ids=lambda c: c.__name__)
def test_each_decider_has_every_member_with_a_signature_that_takes_the_same_call(cls):
    problems = [p for name, sig in protocol_members(JobDecider).items() if (p := signature_problem(cls, name, sig))]
    assert problems == []


def test_the_check_fails_for_a_decider_that_lost_or_renamed_a_member():
    class Renamed(InProcessDecider):
        decide_job = None

        def decide(self, request, *, now, prepare, actor=None, caller=(None, None)):
            return super().decide_job(request, now=now, prepare=prepare, actor=actor, caller=caller)

    class Positional(InProcessDecider):
        def decide_job(self, request, now, prepare, actor=None, caller=(None, None)):
            return super().decide_job(request, now=now, prepare=prepare, actor=actor, caller=caller)

    members = protocol_members(JobDecider)
    assert signature_problem(Renamed, "decide_job", members["decide_job"]) is not None
    assert signature_problem(Positional, "decide_job", members["decide_job"]) is not None


def test_both_deciders_are_job_deciders_at_run_time(tmp_path):
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    live = LiveGate(db, flusher=False)
    live.close()   # what isinstance looks for stays after the close: the members
    assert [isinstance(d, JobDecider) for d in (live, InProcessDecider(db), object())] == [True, True, False]


def ledger_rows(db) -> dict:
    with open_ledger(db, read_only=True) as con:
        return {
            "decisions": con.execute(
                "SELECT decided_at, run_id, team, kind, state, reason_codes, judged_gpu_hours, reserved_gpu_hours, "
                "policy_version, origin, request_json, decision_json, actor FROM decisions "
                "ORDER BY decision_id").fetchall(),
            "runs": con.execute(
                "SELECT run_id, team, kind, capacity, gpus, max_runtime_hours, reserved_from, reserved_until, "
                "reserved_gpu_hours FROM runs ORDER BY run_id").fetchall()}


def test_the_judge_gives_the_same_answer_through_either_decider_on_the_same_ledger(tmp_path):
    served_db = make_slurm_ledger(tmp_path / "served.duckdb")
    cold_db = tmp_path / "cold.duckdb"
    shutil.copyfile(served_db, cold_db)
    config = {**config_from_env({}), "flag_log": str(tmp_path / "flags.jsonl")}
    now = utcnow().replace(microsecond=0)
    live = LiveGate(served_db, flusher=False)
    cold = InProcessDecider(cold_db)
    judged = {}
    try:
        for name, fields, code in JOBS:
            served = judge_job(fields, config, live, now=now)
            live.settle(served.seq, answered=True)
            in_process = judge_job(fields, config, cold, now=now)
            cold.settle(in_process.seq, answered=True)
            assert in_process.code == code, (name, in_process.msg)
            assert in_process.seq is None
            # only a new decision of the server has a journal entry to settle
            assert (served.seq is not None) == (served.request is not None and not served.decision.get("replayed"))
            assert replace(served, seq=None) == in_process, name
            judged[name] = in_process
        live.flush()
    finally:
        live.close()
    # what the judge adds to the decision: the time limits, the capacity from the team's partitions
    assert (judged["spend-limit"].time_min, judged["runtime-from-comment"].time_min) == (14, 120)
    assert judged["preemptible"].request["capacity"] == "preemptible"
    assert judged["resubmitted"].decision["replayed"] is True
    rows = ledger_rows(served_db)
    assert len(rows["decisions"]) == 7 and len(rows["runs"]) == 3   # three admits; no row for a replay or a failure
    assert rows == ledger_rows(cold_db)
