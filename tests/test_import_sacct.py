"""Slurm `sacct --parsable2` import: field mapping, steps, arrays, het jobs, run id rule, merge rules."""
from __future__ import annotations

import pytest

from lib.ledger.imports import XDMOD_FIELDS, import_runs
from lib.ledger.connection import open_ledger
from tests.fixtures_imports import dump, runs

HEADER = ("JobID|JobIDRaw|Cluster|Partition|QOS|Account|Group|GID|User|UID|Submit|Eligible|Start|End|"
          "Elapsed|ExitCode|State|NNodes|NCPUS|ReqCPUS|ReqMem|ReqTRES|AllocTRES|Timelimit|NodeList|JobName")


def line(jobid="100", partition="gpu", account="vision", submit="2024-05-01T10:00:00",
         eligible="2024-05-01T10:00:00", start="2024-05-01T10:05:00", end="2024-05-01T12:05:00",
         elapsed="02:00:00", state="COMPLETED", reqtres="cpu=8,gres/gpu=2", alloctres="cpu=8,gres/gpu=2",
         timelimit="04:00:00", jobname="train", qos="normal"):
    values = dict(jobid=jobid, jobidraw=jobid.split(".")[0], cluster="c", partition=partition, qos=qos,
                  account=account, group="g", gid="1", user="u", uid="1", submit=submit, eligible=eligible,
                  start=start, end=end, elapsed=elapsed, exitcode="0:0", state=state, nnodes="1", ncpus="8",
                  reqcpus="8", reqmem="64G", reqtres=reqtres, alloctres=alloctres, timelimit=timelimit,
                  nodelist="n1", jobname=jobname)
    return "|".join(values[f] for f in XDMOD_FIELDS)



def sacct(*lines, header=True) -> bytes:
    return ("\n".join(([HEADER] if header else []) + list(lines)) + "\n").encode()


def test_completed_job_maps_to_a_run(import_ledger):
    r = import_runs(sacct(line()), fmt="sacct", db=import_ledger)
    assert r.errors == [] and r.inserted == 1
    run = runs(import_ledger)["slurm-100"]
    assert run["team"] == "vision" and run["gpus"] == 2 and run["actual_gpu_hours"] == 4.0
    assert run["stop_reason"] == "completed" and run["capacity"] == "stable"
    assert run["estimated_gpu_hours"] == 8.0 and run["estimate_source"] == "requested"
    assert str(run["reserved_from"]) == "2024-05-01 10:00:00"
    assert str(run["reserved_until"]) == "2024-05-01 14:05:00" and run["reserved_gpu_hours"] == 8.0
    assert run["source"] == "sacct"


def test_without_header_in_xdmod_order_and_reimport_unchanged(import_ledger):
    data = sacct(line(), header=False)
    assert import_runs(data, fmt="sacct", db=import_ledger).inserted == 1
    before = dump(import_ledger)
    r = import_runs(data, fmt="sacct", db=import_ledger)
    assert (r.inserted, r.updated, r.unchanged) == (0, 0, 1) and dump(import_ledger) == before


def test_any_field_order_and_extra_fields(import_ledger):
    fields = HEADER.split("|")
    values = line().split("|")
    order = list(reversed(range(len(fields))))
    text = ("|".join([fields[i] for i in order] + ["Comment"]) + "\n"
            + "|".join([values[i] for i in order] + ["hello"]) + "\n")
    r = import_runs(text.encode(), fmt="sacct", db=import_ledger)
    assert r.errors == [] and runs(import_ledger)["slurm-100"]["actual_gpu_hours"] == 4.0


def test_steps_fold_arrays_and_het_jobs_are_runs(import_ledger):
    r = import_runs(sacct(
        line(),
        line(jobid="100.batch", jobname="batch"), line(jobid="100.extern", jobname="extern"),
        line(jobid="100.0", jobname="python"),
        line(jobid="200_4", elapsed="1-02:00:00", state="TIMEOUT", timelimit="1-02:00:00",
             alloctres="cpu=8,gres/gpu:a100=4,gres/gpu=4", end="2024-05-02T12:05:00"),
        line(jobid="300+0"), line(jobid="300+1", alloctres="cpu=1,gres/gpu:h100=1")),
        fmt="sacct", db=import_ledger)
    assert r.errors == [] and r.inserted == 4 and r.skipped == 3
    stored = runs(import_ledger)
    assert set(stored) == {"slurm-100", "slurm-200_4", "slurm-300+0", "slurm-300+1"}
    assert stored["slurm-200_4"]["gpus"] == 4 and stored["slurm-200_4"]["actual_gpu_hours"] == 104.0
    assert stored["slurm-200_4"]["stop_reason"] == "wall-clock"
    assert stored["slurm-300+1"]["gpus"] == 1


@pytest.mark.parametrize("state,reason", [
    ("COMPLETED", "completed"), ("TIMEOUT", "wall-clock"), ("PREEMPTED", "preempted"),
    ("CANCELLED by 1000", "cancelled"), ("FAILED", "failed"), ("OUT_OF_MEMORY", "out-of-memory"),
    ("NODE_FAIL", "node-fail"), ("REQUEUED", "requeued")])
def test_state_to_stop_reason(import_ledger, state, reason):
    import_runs(sacct(line(state=state)), fmt="sacct", db=import_ledger)
    assert runs(import_ledger)["slurm-100"]["stop_reason"] == reason


def test_never_started_running_and_unlimited(import_ledger):
    r = import_runs(sacct(
        line(jobid="1", start="Unknown", end="2024-05-01T11:00:00", elapsed="00:00:00",
             state="CANCELLED by 1000", alloctres="", reqtres="cpu=8,gres/gpu=2"),
        line(jobid="2", start="None", end="Unknown", elapsed="00:00:00", state="PENDING", alloctres=""),
        line(jobid="3", end="Unknown", state="RUNNING", timelimit="UNLIMITED"),
        line(jobid="4", timelimit="Partition_Limit")), fmt="sacct", db=import_ledger)
    assert r.errors == []
    s = runs(import_ledger)
    assert s["slurm-1"]["started_at"] is None and s["slurm-1"]["actual_gpu_hours"] == 0.0
    assert s["slurm-1"]["gpus"] == 2 and s["slurm-1"]["stop_reason"] == "cancelled"
    assert s["slurm-2"]["stop_reason"] is None and s["slurm-2"]["ended_at"] is None
    assert s["slurm-3"]["ended_at"] is None and s["slurm-3"]["actual_gpu_hours"] is None
    assert s["slurm-3"]["estimated_gpu_hours"] is None and s["slurm-3"]["reserved_until"] is None
    assert s["slurm-4"]["max_runtime_hours"] is None


def test_job_without_gpus_is_skipped(import_ledger):
    r = import_runs(sacct(line(), line(jobid="9", reqtres="cpu=1", alloctres="cpu=1")), fmt="sacct", db=import_ledger)
    assert r.inserted == 1 and r.skipped == 1 and r.notes


def test_preemptible_partition_from_team_policy(import_ledger):
    import_runs(sacct(line(partition="spot")), fmt="sacct", db=import_ledger)
    assert runs(import_ledger)["slurm-100"]["capacity"] == "preemptible"


def test_job_name_lands_actuals_on_the_admitted_run_and_keeps_measured_estimate(import_ledger):
    with open_ledger(import_ledger) as con:
        con.execute(
            "INSERT INTO runs (run_id, team, kind, gpus, estimated_gpu_hours, estimate_source, reserved_from, "
            "reserved_until, reserved_gpu_hours, source, updated_at) VALUES ('vis-7', 'vision', 'production', "
            "2, 5, 'pilot', '2024-05-01 09:55', '2024-05-01 14:00', 8.2, 'submit', now())").fetchall()
    r = import_runs(sacct(line(jobname="vis-7"), line(jobid="101", jobname="run_id=vis-8")),
                    fmt="sacct", db=import_ledger)
    assert r.errors == [] and (r.inserted, r.updated) == (1, 1)
    s = runs(import_ledger)
    run = s["vis-7"]
    assert run["estimated_gpu_hours"] == 5 and run["estimate_source"] == "pilot"
    assert run["kind"] == "production" and run["reserved_gpu_hours"] == 8.2 and run["source"] == "submit"
    assert run["actual_gpu_hours"] == 4.0 and run["stop_reason"] == "completed"
    assert "vis-8" in s and "slurm-100" not in s


@pytest.mark.parametrize("bad,column,text", [
    (line(elapsed="2 hours"), "elapsed", "duration"),
    (line(start="yesterday"), "start", "time"),
    (line(state="EXPLODED"), "state", "unknown Slurm job state"),
    (line(alloctres="cpu8"), "alloctres", "TRES"),
    (line(jobid="abc"), "jobid", "job id"),
    (line() + "|extra", None, "fields"),
    ("100|100|c|gpu", None, "fields"),
    (line(jobid="555.batch"), "jobid", "job line"),
    (line(account="ghosts"), "team", "unknown team"),
])
def test_malformed_sacct_lines_are_errors_and_nothing_is_written(import_ledger, bad, column, text):
    import_runs(sacct(line(jobid="50")), fmt="sacct", db=import_ledger)
    before = dump(import_ledger)
    r = import_runs(sacct(line(jobid="90"), bad), fmt="sacct", db=import_ledger)
    assert not r.written and dump(import_ledger) == before
    hit = [e for e in r.errors if e["line"] == 3 and e["column"] == column and text in e["message"]]
    assert hit, r.errors


def test_duplicate_run_id_from_job_names(import_ledger):
    r = import_runs(sacct(line(jobname="run_id=x"), line(jobid="101", jobname="run_id=x")), fmt="sacct", db=import_ledger)
    assert any(e["line"] == 3 and "line 2" in e["message"] for e in r.errors)


def test_unknown_account_created_on_request(import_ledger):
    r = import_runs(sacct(line(account="ghosts")), fmt="sacct", db=import_ledger, create_teams=True)
    assert r.errors == [] and r.teams_created == ["ghosts"]
