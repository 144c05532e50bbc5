"""The gate inside a real Slurm: sbatch admits or refuses through job_submit.lua, and sacct's
accounting comes back into the ledger. Needs the single-node cluster of lib/slurm/cluster.sh; skips
with a visible reason when Slurm is not installed. One temp ledger for the module (teams and snapshots
of data/teams.toml, conftest's `cluster`); the hook config points at it while the tests run and is
restored afterwards."""
from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
import time

import pytest

from tests.fixtures_slurm import REPO, comment, decisions, make_slurm_ledger, run_row

pytestmark = pytest.mark.slurm

XDMOD_FIELDS = ("jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,eligible,start,"
                "end,elapsed,exitcode,state,nnodes,ncpus,reqcpus,reqmem,reqtres,alloctres,timelimit,"
                "nodelist,jobname")
TAG = f"t{int(time.time())}"  # run IDs unique to this session (the accounting DB outlives sessions)


@pytest.fixture(scope="module")
def admitted_job(cluster):
    """A job within its budget, submitted once for the module: (run_id, jobid, sbatch result)."""
    run_id = f"{TAG}-ok"
    r = cluster.sbatch("--account=vision", "--gres=gpu:2", "--time=5", "--job-name=anything",
                       f"--comment={comment(run_id=run_id, estimated_gpu_hours=0.5)}")
    return run_id, r.stdout.strip().split(";")[0], r


def test_a_job_within_budget_is_admitted_runs_and_completes(cluster, admitted_job):
    run_id, jobid, r = admitted_job
    assert r.returncode == 0, r.stderr
    assert f"training-gate: admitted run {run_id}" in r.stderr
    assert cluster.wait_state(jobid) == "COMPLETED"
    line = cluster.accounting(jobid, "jobname,account,alloctres", f"{run_id}|vision|")
    assert line.startswith(f"{run_id}|vision|") and "gres/gpu=2" in line  # renamed after the run
    (d,) = decisions(cluster.db, run_id)
    assert (d["state"], d["origin"], d["request"]["gpus"], d["request"]["max_runtime_hours"]) == \
        ("admit", "slurm", 2, pytest.approx(5 / 60))
    assert run_row(cluster.db, run_id)["reserved_gpu_hours"] > 0


def test_a_job_over_its_budget_is_refused_by_sbatch_with_reasons_and_fixes(cluster):
    run_id = f"{TAG}-over"
    r = cluster.sbatch("--account=vision", "--gpus=6", "--time=30",
                       f"--comment={comment(run_id=run_id, estimated_gpu_hours=30, budget_gpu_hours=2)}")
    assert r.returncode != 0 and r.stdout.strip() == ""  # no job ID
    line = next(ln for ln in r.stderr.splitlines() if "training-gate" in ln)
    assert f"deferred run {run_id}" in line and "[budget]" in line and "fix:" in line
    (d,) = decisions(cluster.db, run_id)
    assert (d["state"], d["reason_codes"], d["origin"]) == ("defer", ["budget"], "slurm")
    assert run_row(cluster.db, run_id) is None  # no reservation


def test_a_job_on_the_preemptible_partition_without_checkpointing_is_refused(cluster):
    run_id = f"{TAG}-spot"
    r = cluster.sbatch("--account=vision", "--partition=spot", "--gres=gpu:1", "--time=10",
                       f"--comment={comment(run_id=run_id, checkpoint_supported=False)}")
    assert r.returncode != 0
    assert "[no-recovery]" in r.stderr and "fix:" in r.stderr
    (d,) = decisions(cluster.db, run_id)
    assert (d["state"], d["reason_codes"], d["request"]["capacity"]) == ("defer", ["no-recovery"], "preemptible")


def test_a_job_without_gpus_passes_untouched(cluster):
    before = len(decisions(cluster.db))
    r = cluster.sbatch("--time=1", script="true")
    assert r.returncode == 0 and "training-gate" not in r.stderr
    assert len(decisions(cluster.db)) == before


def test_sacct_output_imports_onto_the_admitted_run_and_the_dashboard_sees_it(cluster, admitted_job, tmp_path):
    run_id, jobid, _ = admitted_job
    cluster.wait_state(jobid)
    cluster.accounting(jobid, "jobname", run_id)
    plain = cluster.sbatch("--time=1", script="true").stdout.strip()  # no GPU: skipped by the import
    cluster.wait_state(plain)
    out = cluster.slurm("sacct", "--allusers", "--parsable2", "--noheader", "--allocations",
                        "--duplicates", "-j", f"{jobid},{plain}", "-o", XDMOD_FIELDS)
    assert out.returncode == 0, out.stderr
    f = tmp_path / "sacct.txt"
    f.write_text(out.stdout)
    before = run_row(cluster.db, run_id)
    imp = subprocess.run([sys.executable, "-m", "lib", "--db", str(cluster.db), "import", str(f),
                          "--format", "sacct"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert imp.returncode == 0, imp.stdout + imp.stderr
    run = run_row(cluster.db, run_id)
    assert run["actual_gpu_hours"] > 0 and run["stop_reason"] == "completed"
    elapsed_s = (run["ended_at"] - run["started_at"]).total_seconds()
    assert run["actual_gpu_hours"] == pytest.approx(2 * elapsed_s / 3600, abs=1e-6)
    # the admitted estimate and reservation stay on the same run
    assert (run["estimated_gpu_hours"], run["estimate_source"]) == (before["estimated_gpu_hours"], "stated")
    assert run["reserved_gpu_hours"] == before["reserved_gpu_hours"]
    from lib.dashboard import estimate_queries, overview_queries
    from lib.dashboard.filters import Filters
    today = dt.datetime.now(dt.timezone.utc).date()
    f = Filters(today - dt.timedelta(days=1), today + dt.timedelta(days=1), teams=("vision",))
    ov = overview_queries.overview(f, db=cluster.db)
    assert ov["current"]["used_gpu_hours"] == pytest.approx(run["actual_gpu_hours"])
    acc = estimate_queries.estimate_accuracy(f, db=cluster.db)
    assert run_id in set(acc["points"]["run_id"])


@pytest.fixture
def ledger_held(cluster, tmp_path):
    """A ledger the gate server has not loaded yet, held read-write by another process (DuckDB then
    refuses every other opener): the server cannot read its state, so it cannot judge."""
    held = make_slurm_ledger(tmp_path / "held.duckdb")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from lib.ledger.connection import open_ledger\n"
         "with open_ledger(sys.argv[1]) as con:\n    print('held', flush=True); time.sleep(120)",
         str(held)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield held
    finally:
        holder.kill()
        holder.wait(timeout=10)


@pytest.mark.slow
def test_locked_ledger_refuses_by_default_and_accept_and_flag_lets_it_through(cluster, ledger_held):
    with cluster.hook_settings(TG_GATE_TIMEOUT_S="1", TG_ON_GATE_FAILURE="refuse", GATE_DB=ledger_held):
        r = cluster.sbatch("--account=vision", "--gres=gpu:1", "--time=5",
                           f"--comment={comment(run_id=f'{TAG}-locked-refused')}")
    assert r.returncode != 0
    assert "could not judge this job" in r.stderr and "locked" in r.stderr
    with cluster.hook_settings(TG_GATE_TIMEOUT_S="1", TG_ON_GATE_FAILURE="accept-and-flag", GATE_DB=ledger_held):
        r = cluster.sbatch("--account=vision", "--gres=gpu:1", "--time=5",
                           f"--comment={comment(run_id=f'{TAG}-locked-flagged')}")
    assert r.returncode == 0, r.stderr
    assert "WARNING" in r.stderr and "accepted unchecked" in r.stderr
    jobid = r.stdout.strip().split(";")[0]
    show = cluster.slurm("scontrol", "show", "job", jobid).stdout
    assert re.search(r"AdminComment=training-gate: accepted unchecked: LedgerLocked", show), show
    assert f"{TAG}-locked-flagged" in cluster.flag_log.read_text()


def test_incomplete_request_follows_the_failure_policy_in_both_settings(cluster):
    r = cluster.sbatch("--account=vision", "--gres=gpu:1", "--time=5")  # no --comment
    assert r.returncode != 0 and "incomplete request" in r.stderr
    with cluster.hook_settings(TG_ON_GATE_FAILURE="accept-and-flag"):
        r = cluster.sbatch("--account=vision", "--gres=gpu:1", "--time=5", f"--job-name={TAG}-nocomment")
    assert r.returncode == 0 and "accepted unchecked" in r.stderr
    jobid = r.stdout.strip().split(";")[0]
    assert "AdminComment=training-gate: accepted unchecked: incomplete request" in \
        cluster.slurm("scontrol", "show", "job", jobid).stdout


def test_the_comment_reaches_the_gate_verbatim_and_is_never_run_by_a_shell(cluster, tmp_path):
    marker = tmp_path / "pwned"
    note = f"it's $(touch {marker}) `touch {marker}` ; touch {marker} \"q\" \\ ü"
    run_id = f"{TAG}-quote"
    r = cluster.sbatch("--account=vision", "--gres=gpu:1", "--time=5", "--hold",
                       f"--comment={comment(run_id=run_id, note=note)}")
    assert r.returncode == 0, r.stderr
    cluster.slurm("scancel", r.stdout.strip().split(";")[0])
    assert not marker.exists()
    (d,) = decisions(cluster.db, run_id)
    assert d["request"]["note"] == note


def test_a_small_burst_through_the_gate_server_records_every_answered_decision_once(cluster):
    from concurrent.futures import ThreadPoolExecutor
    run_ids = [f"{TAG}-burst-{i}" for i in range(12)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda r: cluster.sbatch(
            "--account=vision", "--gres=gpu:1", "--time=5", "--hold", f"--comment={comment(run_id=r)}"), run_ids))
    jobids = [r.stdout.strip().split(";")[0] for r in results if r.returncode == 0]
    if jobids:
        cluster.slurm("scancel", *jobids)
    assert all("training-gate:" in r.stderr for r in results)  # every sbatch got the gate's answer
    recorded = [d["run_id"] for d in decisions(cluster.db) if d["run_id"] in run_ids]
    assert sorted(recorded) == sorted(run_ids)  # each once
    admitted = {d["run_id"] for d in decisions(cluster.db) if d["run_id"] in run_ids and d["state"] == "admit"}
    assert admitted == {r for r, res in zip(run_ids, results) if res.returncode == 0}
