"""The Slurm submit hook without a cluster: job description -> gate request, the answer it gives
Slurm, and the failure policy. Real DuckDB ledgers in tmp_path where the ledger is involved."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from lib.slurm import hook as h
from lib.slurm.comment import (IncompleteRequest, Refusal, build_request, capacity_for, gpu_count, job_gpus,
                               parse_comment, runtime_hours)
from lib.slurm.in_process import judge_in_process
from lib.slurm.judge import Decided, judge_job
from lib.slurm.wire import (EXIT_ACCEPTED, EXIT_FAILED_ACCEPTED, EXIT_FAILED_REFUSED, EXIT_REFUSED, decode_request,
                            encode_request)
from lib.ledger.connection import LedgerLocked
from tests.fixtures_slurm import REPO, comment, decisions, job, make_slurm_ledger, run_row

NO_VAL, INFINITE = "4294967294", "4294967295"


def config(tmp_path=None, **changes) -> dict:
    c = h.config_from_env({})
    if tmp_path is not None:
        c["flag_log"] = str(tmp_path / "flags.jsonl")
    c.update(changes)
    return c


def flags(tmp_path) -> list[dict]:
    p = tmp_path / "flags.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


# --------------------------------------------------------------------------- GPUs, runtime, capacity

@pytest.mark.parametrize("spec, gpus", [
    ("gres:gpu:2", 2), ("gres/gpu:2", 2), ("gpu:6", 6), ("gres/gpu:6", 6), ("gres:gpu:a100:2", 2),
    ("gres/gpu=3", 3), ("gres:gpu", 1), ("cpu=4,gres/gpu:1", 1), ("gres:mps:100", None),
    ("", None), (None, None), ("gres:gpu:a100:1,gres:gpu:h100:2", 3),
])
def test_gpu_count_reads_every_tres_spelling(spec, gpus):
    assert gpu_count(spec) == gpus


def test_gpus_per_node_count_once_per_node_and_per_task_once_per_task():
    assert job_gpus(job(tres_per_node="gres:gpu:2", min_nodes="2")) == 4
    assert job_gpus(job(tres_per_node=None, tres_per_task="gres/gpu:1", num_tasks="6")) == 6
    assert job_gpus(job(tres_per_node=None, tres_per_job="gres/gpu:6")) == 6
    assert job_gpus(job(tres_per_node="gres:gpu:2", min_nodes=NO_VAL)) == 2  # unset: one node
    # several forms: the largest is judged, never fewer than Slurm may allocate
    assert job_gpus(job(tres_per_node="gres:gpu:1", tres_per_job="gres:gpu:3")) == 3
    assert job_gpus(job(tres_per_node=None)) is None


@pytest.mark.parametrize("limit, hours", [("30", 0.5), ("90", 1.5), (NO_VAL, None), (INFINITE, None),
                                          ("0", None), (None, None), ("", None)])
def test_time_limit_minutes_become_hours(limit, hours):
    assert runtime_hours(limit) == hours


def test_partition_maps_to_capacity_through_the_team_list():
    assert capacity_for("spot", ["spot"]) == "preemptible"
    assert capacity_for("gpu", ["spot"]) == "stable"
    assert capacity_for("gpu,spot", ["spot"]) == "preemptible"  # may land on spot
    assert capacity_for(None, ["spot"], default_partition="spot") == "preemptible"
    assert capacity_for(None, ["spot"], default_partition="gpu") == "stable"
    assert capacity_for("spot", []) == "stable"


# --------------------------------------------------------------------------- the request

def test_job_description_fills_gpus_runtime_team_capacity_and_comment_the_rest():
    req, time_to_set, notes = build_request(job(partition="spot"), preemptible_partitions=["spot"])
    assert req == {"run_id": "vision-slurm-ok", "kind": "exploratory", "gpu_mem_gb": 40,
                   "budget_gpu_hours": 4, "estimated_gpu_hours": 0.5, "checkpoint_supported": True,
                   "expected_interruptions": 0, "data_snapshot": "imagenet-21k-2024", "team": "vision",
                   "gpus": 2, "max_runtime_hours": 0.5, "capacity": "preemptible"}
    assert time_to_set is None and notes == []


def test_what_slurm_enforces_wins_over_the_comment_and_says_so():
    req, _, notes = build_request(job(comment=comment(gpus=1, team="ads", max_runtime_hours=9)),
                                    preemptible_partitions=[])
    assert (req["gpus"], req["team"], req["max_runtime_hours"]) == (2, "vision", 0.5)
    assert len(notes) == 3 and any("gpus from the job (2)" in n for n in notes)


def test_comment_fills_what_the_job_leaves_unset_and_its_runtime_becomes_the_time_limit():
    j = job(account=None, time_limit=NO_VAL, name="my-run-7",
            comment=comment(team="ads", max_runtime_hours=1.25, run_id=...))
    req, time_to_set, _ = build_request(j, preemptible_partitions=[])
    assert (req["team"], req["max_runtime_hours"], req["run_id"]) == ("ads", 1.25, "my-run-7")
    assert time_to_set == 75


def test_missing_fields_are_an_incomplete_request_naming_each_with_its_option():
    j = job(time_limit=NO_VAL, comment=comment(budget_gpu_hours=..., estimated_gpu_hours=...,
                                               data_snapshot=...))
    with pytest.raises(IncompleteRequest) as e:
        build_request(j, preemptible_partitions=[])
    text = str(e.value)
    for field in ("max_runtime_hours", "budget_gpu_hours", "estimated_gpu_hours or pilot"):
        assert field in text
    assert "--time=HH:MM:SS" in text
    # a missing snapshot is the gate's to judge (a no-snapshot deferral), not an unjudgeable job
    assert "data_snapshot" not in text


def test_a_job_without_a_data_snapshot_reaches_the_gate_and_is_deferred_for_it():
    req, _, _ = build_request(job(comment=comment(data_snapshot=...)), preemptible_partitions=[])
    assert "data_snapshot" not in req


def test_nan_and_infinity_in_the_comment_reach_the_gate_as_invalid_not_as_a_failure():
    text = comment().replace('"expected_interruptions": 0', '"expected_interruptions": NaN')
    assert "NaN" in text
    req, _, _ = build_request(job(comment=text), preemptible_partitions=[])
    assert req["expected_interruptions"] != req["expected_interruptions"]  # NaN: decide() rejects it as not finite
    from lib.gate.admission import decide
    from tests.fixtures_gate import policy, state
    assert decide({**req, "team": "vision"}, policy(), state())["state"] == "reject"
    inf = comment(max_runtime_hours=...).replace("{", '{"max_runtime_hours": Infinity, ', 1)
    _, time_to_set, _ = build_request(job(time_limit=NO_VAL, comment=inf), preemptible_partitions=[])
    assert time_to_set is None


def test_a_request_file_behind_a_symlink_is_refused(tmp_path):
    real = tmp_path / "real.json"
    real.write_text(comment(), encoding="utf-8")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    with pytest.raises(IncompleteRequest, match="cannot be read"):
        parse_comment(f"@{link}", uid=0)
    real.write_bytes(b"\xef\xbb\xbf" + comment().encode())  # a BOM is fine
    assert parse_comment(f"@{real}", uid=0)["kind"]


@pytest.mark.parametrize("text, words", [
    (None, "no --comment"), ("", "no --comment"), ("nightly run, ask bob", "not a JSON object"),
    ("[1, 2]", "not an object"), ('{"kind": "exploratory",', "not a JSON object"),
])
def test_a_comment_that_is_not_a_request_is_incomplete(text, words):
    with pytest.raises(IncompleteRequest, match=words):
        build_request(job(comment=text), preemptible_partitions=[])


def test_request_file_relative_to_the_work_dir_and_owned_by_the_submitter(tmp_path):
    f = tmp_path / "req.json"
    f.write_text(comment(run_id="from-file"))
    req, _, _ = build_request(job(comment="@req.json", work_dir=str(tmp_path)), preemptible_partitions=[])
    assert req["run_id"] == "from-file"
    # another user may not make the hook (running as SlurmUser) read a file that is not theirs
    with pytest.raises(IncompleteRequest, match="owned by the submitting user"):
        build_request(job(comment=f"@{f}", uid="4321"), preemptible_partitions=[])
    if os.geteuid() != 0:
        return  # giving the file to another user needs root
    os.chown(f, 4321, -1)
    req, _, _ = build_request(job(comment=f"@{f}", uid="4321"), preemptible_partitions=[])
    assert req["run_id"] == "from-file"
    with pytest.raises(IncompleteRequest, match="cannot be read"):
        build_request(job(comment="@missing.json", work_dir=str(tmp_path)), preemptible_partitions=[])


def test_array_jobs_with_gpus_are_refused_not_judged_once_for_many():
    with pytest.raises(Refusal, match="array jobs"):
        build_request(job(array="0-9"), preemptible_partitions=[])


# --------------------------------------------------------------------------- the answer to Slurm

ADMIT = {"state": "admit", "run_id": "vision-slurm-ok", "team": "vision", "reasons": [],
         "estimate": {"judged_gpu_hours": 0.5}, "reserved_gpu_hours": 0.5}
DEFER = {"state": "defer", "run_id": "vision-slurm-ok", "team": "vision", "reasons": [
    {"code": "budget", "message": "median estimate 30 GPU-h exceeds the budget 4 GPU-h",
     "fix": "fits if budget_gpu_hours ≥ 30"},
    {"code": "no-recovery", "message": "preemptible capacity and the job cannot checkpoint",
     "fix": "enable checkpointing"}]}


class Answering:
    """A JobDecider without a ledger: `answer(request)` gives the decision (or raises); the team has
    no policy, so the capacity is stable and no time limit is set."""

    def __init__(self, answer):
        self.answer = answer

    def decide_job(self, request, *, now, prepare, actor=None, caller=(None, None)):
        request = prepare(request, None)
        return Decided(self.answer(request), request, None, None)

    def settle(self, seq, answered):
        pass


def test_admit_accepts_and_names_the_job_after_the_run():
    out = judge_job(job(), config(), Answering(lambda r: ADMIT))
    assert out.code == EXIT_ACCEPTED
    assert "NAME vision-slurm-ok" in out.lines()
    assert any(line.startswith("MSG training-gate: admitted run vision-slurm-ok") for line in out.lines())


def test_deferral_is_one_line_with_every_reason_code_and_its_fix():
    out = judge_job(job(), config(), Answering(lambda r: DEFER))
    assert out.code == EXIT_REFUSED
    (msg,) = [line for line in out.lines() if line.startswith("MSG ")]
    assert "\n" not in msg
    assert "deferred run vision-slurm-ok" in msg
    assert "[budget]" in msg and "fix: fits if budget_gpu_hours ≥ 30" in msg
    assert "[no-recovery]" in msg and "fix: enable checkpointing" in msg


# --------------------------------------------------------------------------- failure policy

def locked(request):
    raise LedgerLocked("ledger x is locked by another process (waited 1.0 s)")


def test_gate_failure_refuses_by_default(tmp_path):
    out = judge_job(job(), config(tmp_path), Answering(locked))
    assert out.code == EXIT_FAILED_REFUSED
    assert "could not judge" in out.msg and "LedgerLocked" in out.msg and out.flag is None
    assert [f["action"] for f in flags(tmp_path)] == ["refused"]


def test_accept_and_flag_lets_the_job_through_flagged_and_logged(tmp_path):
    out = judge_job(job(), config(tmp_path, on_failure="accept-and-flag"), Answering(locked))
    assert out.code == EXIT_FAILED_ACCEPTED
    assert out.flag.startswith("training-gate: accepted unchecked: LedgerLocked")
    assert "NAME vision-slurm-ok" in out.lines() and "WARNING" in out.msg
    (f,) = flags(tmp_path)
    assert f["action"] == "accepted-and-flagged" and f["run_id"] == "vision-slurm-ok"
    assert f["job"]["account"] == "vision"


@pytest.mark.parametrize("policy, code", [("refuse", 3), ("accept-and-flag", 4)])
def test_incomplete_request_follows_the_failure_policy(tmp_path, policy, code):
    out = judge_job(job(comment=None), config(tmp_path, on_failure=policy), Answering(locked))
    assert out.code == code and "incomplete request" in out.msg


def test_a_crash_inside_the_gate_is_a_gate_failure_not_an_open_gate(tmp_path):
    def crash(request):
        raise ZeroDivisionError("boom")
    out = judge_job(job(), config(tmp_path), Answering(crash))
    assert out.code == EXIT_FAILED_REFUSED and "ZeroDivisionError" in out.msg


def test_an_unknown_policy_name_refuses(tmp_path):
    out = judge_job(job(), config(tmp_path, on_failure="accept"), Answering(locked))
    assert out.code == EXIT_FAILED_REFUSED
    assert flags(tmp_path)[0]["note"] == "unknown TG_ON_GATE_FAILURE 'accept', using refuse"


def test_the_gates_own_refusal_does_not_go_through_the_failure_policy(tmp_path):
    out = judge_job(job(array="1-4"), config(tmp_path, on_failure="accept-and-flag"), Answering(locked))
    assert out.code == EXIT_REFUSED


# --------------------------------------------------------------------------- against a real ledger

def test_real_ledger_admits_records_a_slurm_decision_and_a_reservation(tmp_path):
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    out = judge_in_process(job(), config(tmp_path, db=str(db)))
    assert out.code == EXIT_ACCEPTED, out.msg
    (d,) = decisions(db)
    assert (d["state"], d["origin"], d["request"]["capacity"]) == ("admit", "slurm", "stable")
    run = run_row(db, "vision-slurm-ok")
    assert run["reserved_gpu_hours"] > 0 and run["gpus"] == 2
    # whole seconds like Slurm's times: a job started in the same second is not "before" its reservation
    assert run["reserved_from"].microsecond == 0


def test_a_job_resubmitted_as_it_was_gets_the_recorded_admit_and_nothing_new_is_recorded(tmp_path):
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    first = judge_in_process(job(), config(tmp_path, db=str(db)))
    assert first.code == EXIT_ACCEPTED, first.msg
    reserved = run_row(db, "vision-slurm-ok")
    again = judge_in_process(job(), config(tmp_path, db=str(db)))  # sbatch retried: same job, same comment
    assert again.code == EXIT_ACCEPTED, again.msg
    assert again.lines() == first.lines() and again.decision["replayed"] is True
    assert len(decisions(db)) == 1 and run_row(db, "vision-slurm-ok") == reserved
    other = judge_in_process(job(tres_per_node="gres:gpu:4"), config(tmp_path, db=str(db)))
    assert other.code == EXIT_REFUSED and "already holds a reservation" in other.msg


def test_real_ledger_reads_preemptible_partitions_of_the_team(tmp_path):
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    out = judge_in_process(job(partition="spot", comment=comment(checkpoint_supported=False)),
                 config(tmp_path, db=str(db)))
    assert out.code == EXIT_REFUSED and "[no-recovery]" in out.msg
    (d,) = decisions(db)
    assert (d["state"], d["reason_codes"], d["request"]["capacity"]) == ("defer", ["no-recovery"], "preemptible")
    assert run_row(db, "vision-slurm-ok") is None


def test_the_in_process_hook_waits_its_turn_among_the_ledgers_writers_like_submit(tmp_path):
    import fcntl
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    held = os.open(f"{db}.writer-lock", os.O_RDWR | os.O_CREAT, 0o600)  # another writer's turn
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        out = judge_in_process(job(), config(tmp_path, db=str(db), timeout_s=0.3))
    finally:
        os.close(held)
    assert out.code == EXIT_FAILED_REFUSED and "for other submitters" in out.msg
    assert decisions(db) == []
    out = judge_in_process(job(), config(tmp_path, db=str(db)))
    assert out.code == EXIT_ACCEPTED, out.msg


def test_an_unreadable_ledger_is_a_gate_failure(tmp_path):
    bad = tmp_path / "not-a-ledger.duckdb"
    bad.write_bytes(b"this is not a DuckDB file" * 100)
    out = judge_in_process(job(), config(tmp_path, db=str(bad)))
    assert out.code == EXIT_FAILED_REFUSED
    out = judge_in_process(job(), config(tmp_path, db=str(bad), on_failure="accept-and-flag"))
    assert out.code == EXIT_FAILED_ACCEPTED


# --------------------------------------------------------------------------- the command Lua runs

def _run_hook(env_extra, *args):
    env = {**os.environ, "PYTHONPATH": str(REPO), **env_extra}
    return subprocess.run([sys.executable, "-S", str(REPO / "lib" / "slurm" / "hook.py"), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def _argv(j: dict) -> list[str]:
    out = []
    for k, v in j.items():
        out += ["--" + k.replace("_", "-"), "" if v is None else str(v)]
    return out


@pytest.mark.slow
def test_command_line_cold_and_through_the_warm_server_give_the_same_answer(tmp_path):
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    env = {"GATE_DB": str(db), "TG_FLAG_LOG": str(tmp_path / "flags.jsonl")}
    cold = _run_hook(env, *_argv(job(comment=comment(run_id="cold-1"))))
    assert cold.returncode == 0, cold.stderr
    assert "NAME cold-1" in cold.stdout.splitlines()
    sock_dir = tempfile.mkdtemp(prefix="tg-hook-")  # AF_UNIX paths are short: not under tmp_path
    sock = os.path.join(sock_dir, "gate.sock")
    server = subprocess.Popen([sys.executable, "-m", "lib.slurm.hook", "serve", "--socket", sock],
                              cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(sock):
            assert server.poll() is None and time.monotonic() < deadline, "gate server did not start"
            time.sleep(0.05)
        warm = _run_hook({**env, "TG_GATE_SOCKET": sock}, *_argv(job(comment=comment(run_id="warm-1"))))
        assert warm.returncode == 0, warm.stderr
        assert "NAME warm-1" in warm.stdout.splitlines()
        over = _run_hook({**env, "TG_GATE_SOCKET": sock},
                         *_argv(job(comment=comment(run_id="warm-2", estimated_gpu_hours=40))))
        assert over.returncode == 1 and "[budget]" in over.stdout
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert [d["origin"] for d in decisions(db)] == ["slurm", "slurm", "slurm"]
    # no server listening on the socket path: the hook decides in-process
    try:
        gone = _run_hook({**env, "TG_GATE_SOCKET": sock}, *_argv(job(comment=comment(run_id="cold-2"))))
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
    assert gone.returncode == 0, gone.stdout + gone.stderr


def test_the_socket_client_starts_with_the_wire_format_only():
    """What `python -S` loads before it asks the warm server: no judge, no gate, no DuckDB."""
    shown = "import sys, lib.slurm.hook; print(*sorted(m for m in sys.modules if m.startswith(('lib', 'duckdb'))))"
    got = subprocess.run([sys.executable, "-S", "-c", shown], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=60)
    assert got.stdout.split() == ["lib", "lib.slurm", "lib.slurm.hook", "lib.slurm.wire"], got.stderr


@pytest.mark.parametrize("policy, code", [("refuse", 3), ("accept-and-flag", 4)])
def test_a_server_that_takes_the_job_and_never_answers_is_a_gate_failure_not_a_second_decision(tmp_path, policy,
                                                                                              code):
    import socket
    import threading
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    sock_dir = tempfile.mkdtemp(prefix="tg-mute-")  # AF_UNIX paths are short: not under tmp_path
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mute.bind(os.path.join(sock_dir, "gate.sock"))
    mute.listen(1)

    def hang_up():
        conn, _ = mute.accept()
        conn.recv(1 << 20)
        conn.close()   # the job taken, no answer
    threading.Thread(target=hang_up, daemon=True).start()
    try:
        got = _run_hook({"GATE_DB": str(db), "TG_GATE_SOCKET": os.path.join(sock_dir, "gate.sock"),
                         "TG_ON_GATE_FAILURE": policy, "TG_FLAG_LOG": str(tmp_path / "flags.jsonl")},
                        *_argv(job()))
    finally:
        mute.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
    assert got.returncode == code, got.stdout + got.stderr
    assert "gate server did not answer" in got.stdout
    assert [f["why"].startswith("gate server did not answer") for f in flags(tmp_path)] == [True]
    assert decisions(db) == []


def test_the_wire_format_to_the_warm_server_keeps_any_text_and_drops_unset_fields():
    j = job(comment='{"note": "a \'quoted\' | pipe\\nnewline ünïcode $(rm -rf /)"}', partition=None)
    c = config(db="/tmp/some ledger.duckdb", timeout_s=2.5)
    fields, conf = decode_request(encode_request(j, c))
    assert fields == {k: v for k, v in j.items() if v is not None}
    assert conf["db"] == "/tmp/some ledger.duckdb" and conf["timeout_s"] == "2.5"  # the server checks it
    assert "flag_log" not in conf  # None is not sent
