"""The gate's Slurm epilog without a cluster: sacct's attempts read (lib.slurm.attempts), the events
they make, and each recorded once in a real ledger with the Recovery planner's decision
(lib.slurm.aftermath.reconcile, no Slurm command run: the job is not asked about); epilog.sh's spool
entry and its detached worker as real processes."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from lib.gate.promotion import promotion_status
from lib.gate.terms import utcnow
from lib.ledger.deciding import submit_request
from lib.ledger.imports import import_runs
from lib.ledger.recovering import checkpoint_run
from lib.slurm.aftermath import reconcile
from lib.slurm.attempts import ATTEMPT_FIELDS, ended_count, job_events, parse_attempts
from lib.slurm.epilog import _entry_name
from tests.fixtures_ledger import query
from tests.fixtures_slurm import COMMENT_REQUEST, REPO, run_row
from tests.test_import_sacct import line, sacct

H = 3600.0


def sacct_line(job="42", account="vision", state="COMPLETED", start="2026-03-01T10:00:00",
               end="2026-03-01T10:05:00", elapsed="300", limit="5", alloc="billing=1,cpu=1,gres/gpu=2,node=1",
               req="billing=1,cpu=1,gres/gpu=2,node=1", name="run-a") -> str:
    return "|".join((job, account, state, start, end, elapsed, limit, alloc, req, name))


# --------------------------------------------------------------------------- sacct's attempts

def test_attempts_are_read_in_their_order_with_names_that_hold_the_delimiter():
    text = "\n".join([
        sacct_line(state="PENDING", start="Unknown", end="Unknown", elapsed="0", alloc="", name="a|b c"),
        sacct_line(state="PREEMPTED", start="2026-03-01T10:00:00", end="2026-03-01T10:05:00", name="a|b c"),
        sacct_line(job="43", state="CANCELLED by 0", limit="UNLIMITED", alloc="", req="cpu=1,gres/gpu:a100=3",
                   name="x"),
        "not|a|sacct|line",
    ])
    jobs, problems = parse_attempts(text)
    assert [a["state"] for a in jobs["42"]] == ["PREEMPTED", "PENDING"]   # by Start; not started: last
    assert {a["name"] for a in jobs["42"]} == {"a|b c"}
    assert jobs["42"][1]["start"] is None and jobs["42"][1]["gpus"] == 2   # ReqTRES when never allocated
    (cancelled,) = jobs["43"]
    assert (cancelled["state"], cancelled["limit_min"], cancelled["gpus"]) == ("CANCELLED", None, 3)
    assert problems == [f"sacct line 4: 4 fields, not 10 ({ATTEMPT_FIELDS})"]
    assert ended_count(jobs["42"]) == 1


def test_an_interrupted_attempt_is_an_event_once_it_was_requeued_and_a_last_timeout_is_one_too():
    first = sacct_line(state="PREEMPTED", end="2026-03-01T10:05:00", elapsed="300")
    again = sacct_line(state="TIMEOUT", start="2026-03-01T10:06:00", end="2026-03-01T10:08:10", elapsed="130")
    jobs, _ = parse_attempts("\n".join([first, again]))
    preempted, timeout = job_events(jobs["42"])
    assert (preempted["event"], preempted["attempt"], preempted["at"].isoformat(), preempted["started_at"].isoformat(),
            preempted["gpu_hours"]) == ("preempted", 1, "2026-03-01T10:05:00", "2026-03-01T10:00:00", 300 * 2 / H)
    assert (timeout["event"], timeout["attempt"], timeout["spent_before_gpu_hours"]) == ("timeout", 2, 300 * 2 / H)
    # the latest attempt ended PREEMPTED: an interruption only when the job was requeued after it
    alone, _ = parse_attempts(first)
    assert job_events(alone["42"]) == []
    assert [e["event"] for e in job_events(alone["42"], requeued_through=1)] == ["preempted"]


# --------------------------------------------------------------------------- reconcile, in a real ledger

def admit(db, run_id: str, at, **changes) -> dict:
    request = {**COMMENT_REQUEST, "run_id": run_id, "team": "vision", "gpus": 2, "max_runtime_hours": 2,
               "capacity": "preemptible", **changes}
    decision = submit_request(request, db=db, origin="slurm", now=at)
    assert decision["state"] == "admit", decision
    return decision


def attempt(run_id: str, state: str, start, end, *, limit=120, gpus=2) -> dict:
    return {"job_id": "42", "name": run_id, "account": "vision", "state": state, "start": start, "end": end,
            "elapsed_s": int((end - start).total_seconds()) if start and end else 0, "limit_min": limit,
            "gpus": gpus}


def interruptions(db, run_id) -> list[tuple]:
    return query(db, "SELECT event, occurred_at, attempt_started_at, attempt_gpu_hours, lost_gpu_hours, action, "
                     "source FROM interruptions WHERE run_id = ? ORDER BY occurred_at", [run_id])


def test_a_preempted_attempt_is_recorded_once_from_its_start_with_the_work_lost_since_its_checkpoint(slurm_ledger):
    t0 = utcnow().replace(microsecond=0) - timedelta(hours=1)
    admit(slurm_ledger, "pre-1", t0, estimated_gpu_hours=0.5, stop_policy={"spend_limit_gpu_hours": 4})
    start, end = t0 + timedelta(seconds=5), t0 + timedelta(seconds=305)
    checkpoint_run("pre-1", "step-100", at=t0 + timedelta(seconds=125), db=slurm_ledger)
    attempts = [attempt("pre-1", "PREEMPTED", start, end), attempt("pre-1", "PENDING", None, None)]
    first = reconcile("42", attempts, requeued_through=1, db=slurm_ledger)
    again = reconcile("42", attempts, requeued_through=1, db=slurm_ledger)   # a catch-up after the epilog
    (decision,) = first["recorded"]
    assert decision["action"] == "resume" and first["action"] is None   # no job given: nothing done in Slurm
    assert again["recorded"] == first["recorded"]
    [(event, at, started, billed, lost, action, source)] = interruptions(slurm_ledger, "pre-1")
    assert (event, at, started, action, source) == ("preempted", end, start, "resume", "slurm")
    assert billed == pytest.approx(300 * 2 / H)        # from the attempt's Start, not the admission
    assert lost == pytest.approx(180 * 2 / H)          # since the checkpoint, on 2 GPUs
    run = run_row(slurm_ledger, "pre-1")
    assert (run["interruptions"], run["restarts"], run["ended_at"]) == (1, 1, None)


def test_a_preemption_the_spend_left_cannot_rerun_ends_the_run_and_keeps_it_ended(slurm_ledger):
    t0 = utcnow().replace(microsecond=0) - timedelta(hours=1)
    admit(slurm_ledger, "pre-end", t0, estimated_gpu_hours=0.5, stop_policy={"spend_limit_gpu_hours": 0.3})
    start, end = t0 + timedelta(seconds=3), t0 + timedelta(seconds=303)
    result = reconcile("42", [attempt("pre-end", "PREEMPTED", start, end), attempt("pre-end", "PENDING", None, None)],
                       requeued_through=1, db=slurm_ledger)
    (decision,) = result["recorded"]
    assert decision["action"] == "end" and decision["code"] == "budget-insufficient"
    run = run_row(slurm_ledger, "pre-end")
    assert (run["stop_reason"], run["artifact_status"], run["ended_at"]) == ("budget", "incomplete", end)
    assert run["actual_gpu_hours"] == pytest.approx(300 * 2 / H)


def test_a_timeout_at_the_spend_limit_is_a_budget_stop_incomplete_and_never_promotable(slurm_ledger):
    t0 = utcnow().replace(microsecond=0) - timedelta(hours=1)
    admit(slurm_ledger, "spent-1", t0, estimated_gpu_hours=0.05, stop_policy={"spend_limit_gpu_hours": 0.07})
    start, end = t0 + timedelta(seconds=2), t0 + timedelta(seconds=2 + 75)
    checkpoint_run("spent-1", "ckpt-1", at=t0 + timedelta(seconds=40), db=slurm_ledger)
    # the hook set 1 min from 0.07 GPU-h on 2 GPUs; Slurm stopped it at its 30 s check
    result = reconcile("42", [attempt("spent-1", "TIMEOUT", start, end, limit=1)], db=slurm_ledger)
    (decision,) = result["recorded"]
    assert (decision["action"], decision["code"]) == ("end", "budget-breach")
    [(event, at, _, _, lost, action, source)] = interruptions(slurm_ledger, "spent-1")
    assert (event, at, action, source) == ("budget", end, "end", "slurm")
    assert lost == pytest.approx(37 * 2 / H)   # since the checkpoint
    run = run_row(slurm_ledger, "spent-1")
    assert (run["stop_reason"], run["artifact_status"], run["last_valid_checkpoint"]) == \
        ("budget", "incomplete", "ckpt-1")
    assert run["actual_gpu_hours"] == pytest.approx(75 * 2 / H) and run["actual_gpu_hours"] <= 0.07
    status = promotion_status(run)
    assert not status["promotable"] and any("stopped for budget" in m for m in status["missing"])


def test_sacct_imported_after_the_gate_ended_a_run_keeps_the_gates_end(slurm_ledger):
    t0 = utcnow().replace(microsecond=0) - timedelta(hours=1)
    admit(slurm_ledger, "spent-2", t0, estimated_gpu_hours=0.05, stop_policy={"spend_limit_gpu_hours": 0.07})
    start, end = t0 + timedelta(seconds=2), t0 + timedelta(seconds=77)
    reconcile("42", [attempt("spent-2", "TIMEOUT", start, end, limit=1)], db=slurm_ledger)
    fmt = "%Y-%m-%dT%H:%M:%S"
    timed_out = sacct(line(jobid="42", partition="gpu", jobname="spent-2", submit=t0.strftime(fmt),
                           eligible=t0.strftime(fmt), start=start.strftime(fmt), end=end.strftime(fmt),
                           elapsed="00:01:15", state="TIMEOUT", timelimit="00:01:00"))
    report = import_runs(timed_out, fmt="sacct", db=slurm_ledger)
    assert report.errors == []
    run = run_row(slurm_ledger, "spent-2")
    assert (run["stop_reason"], run["ended_at"], run["artifact_status"]) == ("budget", end, "incomplete")
    # a run the gate did not end takes sacct's stop reason as before
    admit(slurm_ledger, "own-2", t0, stop_policy={"spend_limit_gpu_hours": 1.0})
    report = import_runs(sacct(line(jobid="43", partition="gpu", jobname="own-2", submit=t0.strftime(fmt),
                                    eligible=t0.strftime(fmt), start=start.strftime(fmt), end=end.strftime(fmt),
                                    elapsed="00:01:15", state="TIMEOUT", timelimit="00:01:00")),
                         fmt="sacct", db=slurm_ledger)
    assert report.errors == [] and run_row(slurm_ledger, "own-2")["stop_reason"] == "wall-clock"


def test_a_timeout_at_the_jobs_own_lower_limit_is_no_budget_stop(slurm_ledger):
    t0 = utcnow().replace(microsecond=0) - timedelta(hours=1)
    admit(slurm_ledger, "own-1", t0, stop_policy={"spend_limit_gpu_hours": 1.0})   # would allow 29 min on 2 GPUs
    start = t0 + timedelta(seconds=2)
    result = reconcile("42", [attempt("own-1", "TIMEOUT", start, start + timedelta(seconds=80), limit=1)],
                       db=slurm_ledger)
    assert result["recorded"] == [] and interruptions(slurm_ledger, "own-1") == []
    assert run_row(slurm_ledger, "own-1")["ended_at"] is None   # the sacct import records the wall-clock stop


def test_a_job_of_no_admitted_run_is_left_alone(slurm_ledger):
    now = utcnow()
    result = reconcile("42", [attempt("never-admitted", "PREEMPTED", now, now), attempt("x", "PENDING", None, None)],
                       db=slurm_ledger)
    assert result["recorded"] == [] and "no run the gate admitted" in result["skipped"][0]


# --------------------------------------------------------------------------- epilog.sh, real processes

def epilog_script(tmp_path, ledger, python=sys.executable) -> tuple:
    """epilog.sh pointed at a hook config in tmp_path (as cluster.sh installs it): (script, spool, log)."""
    spool, log, conf = tmp_path / "spool", tmp_path / "epilog.log", tmp_path / "job_submit_gate.conf"
    conf.write_text(f"TG_PYTHON={python}\nTG_REPO={REPO}\nGATE_DB={ledger}\nTG_EPILOG_SPOOL={spool}\n"
                    f"TG_EPILOG_LOG={log}\nTG_EPILOG_TIMEOUT_S=5\n", encoding="utf-8")
    script = tmp_path / "epilog_slurmctld.sh"
    text = (REPO / "lib" / "slurm" / "epilog.sh").read_text(encoding="utf-8")
    script.write_text("\n".join(f"HOOK_CONF='{conf}'" if ln.startswith("HOOK_CONF=") else ln
                                for ln in text.splitlines()) + "\n", encoding="utf-8")
    return script, spool, log


def run_epilog(script, **env):
    t = time.monotonic()
    p = subprocess.run(["sh", str(script)], env={k: v for k, v in env.items() if v is not None},
                       capture_output=True, timeout=30)
    return p, time.monotonic() - t


def test_the_epilog_spools_a_commented_job_hands_it_to_a_detached_worker_and_returns_at_once(tmp_path, slurm_ledger):
    script, spool, log = epilog_script(tmp_path, slurm_ledger)
    p, took = run_epilog(script, SLURM_JOB_ID="77", SLURM_JOB_NAME="not-a-gated-run", SLURM_JOB_COMMENT="{}",
                         SLURM_JOB_RESTART_COUNT="1")
    assert p.returncode == 0 and took < 2
    deadline = time.monotonic() + 60
    while (spool / "77.1").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (spool / "77.1").exists()   # the worker found no admitted run of that name: done
    assert "no run the gate admitted is named 'not-a-gated-run'" in log.read_text()
    p, _ = run_epilog(script, SLURM_JOB_ID="78", SLURM_JOB_NAME="no-comment")   # a job without a request
    assert p.returncode == 0 and not (spool / "78.0").exists()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1,
                    max_size=200))
def test_the_job_name_reaches_the_worker_exactly_whatever_it_holds(tmp_path, slurm_ledger, name):
    # no worker: the entry stays
    script, spool, _ = epilog_script(tmp_path, slurm_ledger, python="/nonexistent/python")
    p, _ = run_epilog(script, SLURM_JOB_ID="91", SLURM_JOB_NAME=name, SLURM_JOB_COMMENT="{}")
    assert p.returncode == 0
    assert _entry_name(spool / "91.0") == name
    os.remove(spool / "91.0")
