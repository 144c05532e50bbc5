"""After the start, through the scheduler, on the test cluster (lib/slurm/cluster.sh): a gated job in the
preemptible partition `spot` is preempted by a job of `gpu` and requeued, and the gate's epilog
records the interruption, the work lost since the job's own checkpoint, and the Recovery planner's
decision; an **end** keeps the requeued job from running again and says why in `scontrol show job`;
a job that reaches its spend limit is signalled and ended by Slurm and recorded as stopped for
budget; with the gate down, the interruption is recorded when it comes back, once.

Jobs save checkpoints with `python -m lib checkpoint` and note the time they did so themselves, so
the lost GPU-hours are checked against the job's own clock and sacct's attempts, not against the
ledger's arithmetic. Needs Slurm (skips with a reason when it is not installed); ~5 minutes."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest

from lib.gate.promotion import promotion_status
from lib.ledger.connection import open_ledger
from lib.ledger.imports import XDMOD_FIELDS
from lib.slurm.attempts import ATTEMPT_FIELDS, parse_attempts
from tests.fixtures_slurm import REPO, comment, flush_gate_server, run_row

pytestmark = pytest.mark.slurm

TAG = f"p{int(time.time())}"   # run IDs unique to this session (the accounting DB outlives sessions)
PY = sys.executable
ONE_GPU_MINUTE = 1 / 60        # GPU-hours: "within a minute of GPU time"


def wait_for(what: str, probe, timeout_s: float = 90, every_s: float = 0.5):
    """probe()'s first truthy value within timeout_s, else fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(every_s)


def rows(db, sql: str, args=()) -> list[tuple]:
    flush_gate_server(db)
    with open_ledger(db, read_only=True, timeout_s=30) as con:
        return con.execute(sql, list(args)).fetchall()


def interruptions(db, run_id: str) -> list[tuple]:
    return rows(db, "SELECT event, occurred_at, attempt_started_at, attempt_gpu_hours, lost_gpu_hours, action, "
                    "source FROM interruptions WHERE run_id = ? ORDER BY occurred_at", [run_id])


def attempts(cluster, jobid: str) -> list[dict]:
    out = cluster.slurm("sacct", "--duplicates", "--allocations", "--parsable2", "--noheader", "-o",
                        ATTEMPT_FIELDS, "-j", jobid).stdout
    return parse_attempts(out)[0].get(jobid, [])


def squeue_state(cluster, jobid: str) -> str:
    return cluster.slurm("squeue", "-h", "-j", jobid, "-o", "%T").stdout.strip()


def show_job(cluster, jobid: str) -> str:
    return cluster.slurm("scontrol", "show", "job", jobid).stdout


def job_script(db, run_id: str, stamp, *, checkpoint_after_s: int | None = 2, term_marker=None) -> str:
    """A training job: saves checkpoint ckpt-1 after a while (noting when, by its own clock, in
    `stamp`), then works until stopped; with `term_marker`, notes a SIGTERM there and exits."""
    parts = [f"trap 'echo TERM >> {term_marker}; exit 0' TERM"] if term_marker else []
    if checkpoint_after_s is not None:
        parts.append(f"sleep {checkpoint_after_s}; {PY} -m lib --db {db} checkpoint {run_id} ckpt-1 >/dev/null "
                     f"&& date -u +%s.%N >> {stamp}")
    parts.append("sleep 600 & wait")
    return "; ".join(parts)


def submit(cluster, tmp_path, run_id: str, *, team="vision", partition="spot", gpus=8, minutes=10, script="sleep 5",
           **request) -> str:
    """A gated job of `team` (each test its own team: the decision reads the team's interruption rate,
    which the other tests' preemptions would raise)."""
    request.setdefault("data_snapshot", "common-crawl-2025-04")   # a snapshot every team may use
    r = cluster.sbatch(f"--account={team}", f"--partition={partition}", f"--gres=gpu:{gpus}", f"--time={minutes}",
                       "--requeue", f"--chdir={REPO}", f"--output={tmp_path}/slurm-%j.out",
                       f"--comment={comment(run_id=run_id, **request)}", script=script)
    assert r.returncode == 0, r.stderr
    assert f"admitted run {run_id}" in r.stderr
    return r.stdout.strip().split(";")[0]


def preempt(cluster, tmp_path, run_id: str) -> str:
    """A job of the higher partition that needs every GPU: the spot job must make way."""
    return submit(cluster, tmp_path, run_id, partition="gpu", minutes=5, script="sleep 5",
                  estimated_gpu_hours=0.5)


def stamps(path) -> list[datetime]:
    return [datetime.fromtimestamp(float(x), timezone.utc).replace(tzinfo=None)
            for x in path.read_text().split()] if path.exists() else []


def held(shown: str) -> str:
    return shown if "Reason=JobHeldAdmin" in shown and "Comment=training-gate: ended:" in shown else ""


def stopped(run: dict | None) -> dict | None:
    return run if run and run["stop_reason"] else None


def import_sacct(cluster, tmp_path, jobid: str) -> None:
    """The job's attempts (sacct --duplicates) imported into the ledger, as an operator would."""
    out = cluster.slurm("sacct", "--allusers", "--parsable2", "--noheader", "--allocations", "--duplicates",
                        "-j", jobid, "-o", ",".join(XDMOD_FIELDS))
    f = tmp_path / f"sacct-{jobid}.txt"
    f.write_text(out.stdout)
    imp = subprocess.run([PY, "-m", "lib", "--db", str(cluster.db), "import", str(f), "--format", "sacct"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert imp.returncode == 0, imp.stdout + imp.stderr


def cancel(cluster, *jobids) -> None:
    cluster.slurm("scancel", *[j for j in jobids if j])


def test_a_preempted_job_is_requeued_and_resumes_with_its_interruption_and_lost_work_recorded(cluster, tmp_path):
    run_id, stamp = f"{TAG}-resume", tmp_path / "ckpt-times"
    # a spend limit of 1.2 GPU-h on 8 GPUs: 9 min, less the margin: 8 min (below the 10 asked)
    job = submit(cluster, tmp_path, run_id, script=job_script(cluster.db, run_id, stamp), estimated_gpu_hours=0.5,
                 stop_policy={"spend_limit_gpu_hours": 1.2})
    hi = None
    try:
        assert "TimeLimit=00:08:00" in show_job(cluster, job)
        wait_for("the job's checkpoint", lambda: stamps(stamp), 90)
        time.sleep(4)   # work after the checkpoint: lost at the preemption
        hi = preempt(cluster, tmp_path, f"{TAG}-resume-hi")
        [(event, at, started, billed, lost, action, source)] = wait_for(
            "the interruption in the ledger", lambda: interruptions(cluster.db, run_id), 90)
        first = attempts(cluster, job)[0]
        assert (event, action, source) == ("preempted", "resume", "slurm")
        assert first["state"] == "PREEMPTED" and (at, started) == (first["end"], first["start"])
        saved = max(t for t in stamps(stamp) if t <= at)
        assert abs(lost - (at - saved).total_seconds() / 3600 * 8) <= ONE_GPU_MINUTE
        assert lost > 0 and abs(billed - first["elapsed_s"] / 3600 * 8) <= ONE_GPU_MINUTE
        # resume: Slurm runs the job again (after its requeue delay), the decision recorded
        # the next attempt may spend what is left: 1.2 GPU-h less the first attempt's, in whole minutes less one
        left_min = int((1.2 - first["elapsed_s"] / 3600 * 8) * 60 / 8) - 1
        assert left_min == 7
        wait_for("the lowered time limit", lambda: f"TimeLimit=00:0{left_min}:00" in show_job(cluster, job), 20)
        wait_for("the requeued job running again", lambda: squeue_state(cluster, job) == "RUNNING", 150)
        assert "Restarts=1" in show_job(cluster, job)
        run = run_row(cluster.db, run_id)
        assert (run["interruptions"], run["restarts"], run["ended_at"]) == (1, 1, None)
    finally:
        cancel(cluster, job, hi)


def test_an_end_decision_holds_the_requeued_job_and_scontrol_says_why(cluster, tmp_path):
    run_id = f"{TAG}-end"
    # 2 GPU-h of work and a spend limit of 1 GPU-h: once preempted without a checkpoint, the spend
    # left cannot pay for a rerun, so the decision ends the run
    job = submit(cluster, tmp_path, run_id, team="search", script="sleep 600", estimated_gpu_hours=2,
                 budget_gpu_hours=4, stop_policy={"spend_limit_gpu_hours": 1.0})
    hi = None
    try:
        wait_for("the job running", lambda: squeue_state(cluster, job) == "RUNNING", 60)
        time.sleep(3)
        hi = preempt(cluster, tmp_path, f"{TAG}-end-hi")
        [(event, at, *_, action, source)] = wait_for("the interruption in the ledger",
                                                     lambda: interruptions(cluster.db, run_id), 90)
        assert (event, action, source) == ("preempted", "end", "slurm")
        shown = wait_for("the hold", lambda: held(show_job(cluster, job)), 30)
        assert re.search(r"JobState=PENDING Reason=JobHeldAdmin", shown), shown
        assert re.search(r"Comment=training-gate: ended: budget-insufficient: ", shown), shown
        run = run_row(cluster.db, run_id)
        assert (run["stop_reason"], run["artifact_status"], run["ended_at"]) == ("budget", "incomplete", at)
        time.sleep(45)   # past the requeue delay (AuthInfo cred_expire=30) and the preemptor's end
        assert squeue_state(cluster, job) == "PENDING"
        assert [a["start"] is not None for a in attempts(cluster, job)] == [True, False]   # never ran again
    finally:
        cancel(cluster, job, hi)


def test_a_job_reaching_its_spend_limit_is_signalled_ended_and_recorded_as_a_budget_stop(cluster, tmp_path):
    run_id, stamp, term = f"{TAG}-spend", tmp_path / "ckpt-times", tmp_path / "term"
    request = comment(run_id=run_id, estimated_gpu_hours=0.05, data_snapshot="common-crawl-2025-04",
                      stop_policy={"spend_limit_gpu_hours": 0.07})
    r = cluster.sbatch("--account=ranking", "--partition=gpu", "--gres=gpu:2", "--time=10", f"--chdir={REPO}",
                       f"--output={tmp_path}/slurm-%j.out", f"--comment={request}",
                       script=job_script(cluster.db, run_id, stamp, checkpoint_after_s=10, term_marker=term))
    assert r.returncode == 0, r.stderr
    assert "time limit set to 1 min from the spend limit 0.07 GPU-h on 2 GPUs (asked 10 min" in r.stderr
    job = r.stdout.strip().split(";")[0]
    try:
        assert "TimeLimit=00:01:00" in show_job(cluster, job)
        assert cluster.wait_state(job, ("TIMEOUT",), timeout_s=200) == "TIMEOUT"
        assert term.exists() and "TERM" in term.read_text()      # Slurm signalled it at the limit
        run = wait_for("the budget stop in the ledger", lambda: stopped(run_row(cluster.db, run_id)), 90)
        assert (run["stop_reason"], run["artifact_status"], run["last_valid_checkpoint"]) == \
            ("budget", "incomplete", "ckpt-1")
        assert run["actual_gpu_hours"] <= 0.07                   # it never spent past its limit
        assert not promotion_status(run)["promotable"]
        [(event, *_, action, source)] = interruptions(cluster.db, run_id)
        assert (event, action, source) == ("budget", "end", "slurm")
        import_sacct(cluster, tmp_path, job)   # sacct says TIMEOUT: still the gate's budget stop
        after = run_row(cluster.db, run_id)
        assert (after["stop_reason"], after["artifact_status"]) == ("budget", "incomplete")
    finally:
        cancel(cluster, job)


@pytest.fixture
def gate_down(cluster, tmp_path):
    """Make the gate unreachable: the ledger held read-write by another process (DuckDB then refuses
    every other opener) and the epilog's worker giving up after 5 s. Yields a function that brings
    the gate back."""
    holder = None

    def down():
        nonlocal holder
        flush_gate_server(cluster.db)
        holder = subprocess.Popen(
            [PY, "-c", "import sys, time; from lib.ledger.connection import open_ledger\n"
             "with open_ledger(sys.argv[1], timeout_s=60) as con:\n    print('held', flush=True); time.sleep(600)",
             str(cluster.db)], cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"

    def back():
        holder.kill()
        holder.wait(timeout=10)

    with cluster.hook_settings(TG_EPILOG_TIMEOUT_S="5"):
        try:
            yield down, back
        finally:
            if holder is not None and holder.poll() is None:
                back()


def test_with_the_gate_down_the_interruption_is_recorded_when_it_comes_back_once(cluster, tmp_path, gate_down):
    down, back = gate_down
    run_id, stamp = f"{TAG}-down", tmp_path / "ckpt-times"
    spool = cluster.conf.parent.parent / "spool" / "epilog"
    job = submit(cluster, tmp_path, run_id, team="speech", script=job_script(cluster.db, run_id, stamp),
                 estimated_gpu_hours=0.5, stop_policy={"spend_limit_gpu_hours": 4})
    hi = None
    try:
        wait_for("the job's checkpoint", lambda: stamps(stamp), 90)
        down()
        # a job of the higher partition that needs both of the node's CPUs and no GPU (the gate, down,
        # could not judge a GPU job): the spot job must make way
        r = cluster.sbatch("--partition=gpu", "--cpus-per-task=2", "--time=2", f"--output={tmp_path}/slurm-%j.out",
                           script="sleep 5")
        assert r.returncode == 0 and "training-gate" not in r.stderr, r.stderr
        hi = r.stdout.strip().split(";")[0]
        wait_for("the preemption", lambda: any(a["state"] == "PREEMPTED" for a in attempts(cluster, job)), 60)
        log = cluster.conf.parent.parent / "log" / "gate-epilog.log"
        wait_for("the epilog's worker giving up",
                 lambda: f"job {job}: left in the spool" in (log.read_text() if log.exists() else ""), 60)
        assert (spool / f"{job}.1").exists()
        back()
        assert interruptions(cluster.db, run_id) == []          # nothing was recorded while it was down
        env = {**cluster.env, "PYTHONPATH": str(REPO), "GATE_DB": str(cluster.db), "TG_EPILOG_SPOOL": str(spool),
               "TG_EPILOG_TIMEOUT_S": "60"}
        caught = subprocess.run([PY, "-m", "lib.slurm.epilog", "catch-up"], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=180)
        assert caught.returncode == 0, caught.stdout + caught.stderr
        assert not (spool / f"{job}.1").exists()
        [(event, at, *_, action, source)] = interruptions(cluster.db, run_id)
        assert (event, source) == ("preempted", "slurm") and at == attempts(cluster, job)[0]["end"]
        # the decision, carried out: the Recovery planner reads everyone's interruption rate when the
        # team has too few runs, and the other tests' preempted runs make it high, so it may be an end
        if action == "end":
            wait_for("the hold", lambda: held(show_job(cluster, job)), 30)
        else:
            assert action in ("resume", "restart") and "JobHeldAdmin" not in show_job(cluster, job)
        # a catch-up over sacct's whole window, and again: nothing new
        since = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
        for _ in range(2):
            again = subprocess.run([PY, "-m", "lib.slurm.epilog", "catch-up", "--since", since], cwd=REPO, env=env,
                                   capture_output=True, text=True, timeout=180)
            assert again.returncode == 0, again.stdout + again.stderr
        assert len(interruptions(cluster.db, run_id)) == 1
        assert run_row(cluster.db, run_id)["interruptions"] == 1
        import_sacct(cluster, tmp_path, job)   # sacct's attempts: the same interruption, counted once
        assert len(interruptions(cluster.db, run_id)) == 1
        assert run_row(cluster.db, run_id)["interruptions"] == 1
    finally:
        cancel(cluster, job, hi)
