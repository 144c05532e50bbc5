"""The cluster's reservations reach the gate from a real Slurm: a maintenance reservation created with
scontrol is read into the ledger by `python -m lib slurm windows --sync` and by the warm gate server
within its interval, and leaves it when deleted; `teams --from-slurm` proposes the test cluster's 8
GPUs per pool and writes nothing. Needs the single-node cluster of lib/slurm/cluster.sh (started when
it is not running, stopped afterwards then); skips with a visible reason when Slurm is not installed."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from lib.gate.reasons import CODES
from lib.gate.terms import utcnow
from lib.ledger.cluster_windows import read_windows
from lib.ledger.connection import open_ledger
from tests.fixtures_slurm import CLUSTER_SH, REPO, GateServerProcess, make_slurm_ledger

pytestmark = pytest.mark.slurm

STATE = Path(os.environ.get("TG_SLURM_DIR", "/tmp/tg-slurm"))
TAG = f"tgw{int(time.time())}"   # reservation names unique to this session


def _alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text()), 0)
        return True
    except (OSError, ValueError):
        return False


@pytest.fixture(scope="module")
def slurm_env(tmp_path_factory):
    """The client environment of a running test cluster (started here when it was not running)."""
    if not shutil.which("slurmctld") or not shutil.which("scontrol"):
        pytest.skip("slurmctld not installed: run lib/slurm/cluster.sh install")
    was_running = _alive(STATE / "run" / "slurmctld.pid")
    env = {**os.environ, "TG_PYTHON": sys.executable, "TG_REPO": str(REPO)}
    if not was_running:
        env["GATE_DB"] = str(make_slurm_ledger(tmp_path_factory.mktemp("slurm-windows") / "hook.duckdb"))
        started = subprocess.run(["bash", str(CLUSTER_SH), "start"], env=env, capture_output=True, text=True,
                                 timeout=300)
        if started.returncode != 0:
            pytest.fail(f"lib/slurm/cluster.sh start failed:\n{started.stderr[-4000:]}")
    yield {**os.environ, "SLURM_CONF": str(STATE / "etc" / "slurm.conf"), "PYTHONPATH": str(REPO)}
    if not was_running:
        subprocess.run(["bash", str(CLUSTER_SH), "stop"], env=env, capture_output=True, timeout=120)


def scontrol(env, *args: str) -> subprocess.CompletedProcess:
    p = subprocess.run(["scontrol", *args], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p


@pytest.fixture
def maintenance(slurm_env):
    """A maintenance reservation of every node starting in an hour, for an hour: (name, the window its
    start must fall in, as measured around its creation)."""
    name = f"{TAG}-{os.urandom(3).hex()}"
    before = utcnow().replace(microsecond=0)
    scontrol(slurm_env, "create", "reservation", f"reservationname={name}", "starttime=now+1hour",
             "duration=60", "flags=maint,ignore_jobs", "nodes=ALL", "users=root")
    after = utcnow()
    try:
        yield name, (before + timedelta(hours=1), after + timedelta(hours=1))
    finally:
        subprocess.run(["scontrol", "delete", f"reservation={name}"], env=slurm_env, capture_output=True, timeout=30)


def ledger_windows(db) -> dict:
    with open_ledger(db, read_only=True, timeout_s=30) as con:
        return {w["name"]: w for w in read_windows(con, utcnow())}


def lib_cli(env, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lib", *args], cwd=REPO, env=env, input=stdin, capture_output=True,
                          text=True, timeout=120)


def assert_is_the_maintenance(window: dict, span) -> None:
    assert span[0] <= window["start"] <= span[1], (window, span)
    assert window["end"] - window["start"] == timedelta(hours=1)
    # the node's 8 GPUs (scontrol's TRES names none), in every pool (it serves gpu and spot)
    assert (window["gpus"], window["pool"], window["users"]) == (8, None, ["root"])


def test_the_command_line_reads_a_maintenance_reservation_into_the_ledger(slurm_env, maintenance, tmp_path):
    name, span = maintenance
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    p = lib_cli(slurm_env, "--db", str(db), "slurm", "windows", "--sync")
    assert p.returncode == 0, p.stderr
    printed = {w["name"]: w for w in json.loads(p.stdout)}
    assert printed[name]["gpus"] == 8 and "written into the ledger" in p.stderr
    assert_is_the_maintenance(ledger_windows(db)[name], span)
    scontrol(slurm_env, "delete", f"reservation={name}")
    assert lib_cli(slurm_env, "--db", str(db), "slurm", "windows", "--sync").returncode == 0
    assert name not in ledger_windows(db)


def test_the_gate_server_syncs_a_new_reservation_within_its_interval_and_drops_a_deleted_one(
        slurm_env, tmp_path, monkeypatch):
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    monkeypatch.setenv("SLURM_CONF", slurm_env["SLURM_CONF"])   # the server process inherits it
    server = GateServerProcess(db, tmp_path / "gate.sock", "--windows-interval-s", "1")
    try:
        name = f"{TAG}-srv"
        before = utcnow().replace(microsecond=0)
        scontrol(slurm_env, "create", "reservation", f"reservationname={name}", "starttime=now+1hour",
                 "duration=60", "flags=maint,ignore_jobs", "nodes=ALL", "users=root")
        span = (before + timedelta(hours=1), utcnow() + timedelta(hours=1))
        try:
            deadline = time.monotonic() + 30
            while name not in (got := ledger_windows(db)):
                assert time.monotonic() < deadline, f"the server did not write {name} within 30 s: {got}"
                time.sleep(0.5)
            assert_is_the_maintenance(got[name], span)
        finally:
            scontrol(slurm_env, "delete", f"reservation={name}")
        deadline = time.monotonic() + 30
        while name in ledger_windows(db):
            assert time.monotonic() < deadline, f"the server kept {name} 30 s after it was deleted"
            time.sleep(0.5)
        with open_ledger(db, read_only=True, timeout_s=30) as con:
            rows = con.execute("SELECT origin FROM audit WHERE action = 'cluster-windows'").fetchall()
        origins = {r[0] for r in rows}
        assert origins == {"slurm"}
    finally:
        err = server.stop()
    assert "cannot read the cluster's reservations" not in err, err


def test_teams_from_slurm_proposes_the_test_clusters_gpus_per_pool_and_writes_nothing(slurm_env, tmp_path):
    teams = REPO / "data" / "teams.toml"
    digest = hashlib.sha256(teams.read_bytes()).hexdigest()
    db = tmp_path / "none.duckdb"
    p = lib_cli(slurm_env, "--db", str(db), "teams", "--from-slurm")
    assert p.returncode == 0, p.stderr
    # one node, Gres=gpu:8, in partition gpu (stable) and spot (preemptible in data/teams.toml)
    assert tomllib.loads(p.stdout)["pools"] == {"stable": {"gpus": 8}, "preemptible": {"gpus": 8}}
    c = subprocess.run(["bash", str(CLUSTER_SH), "capacity"], env=slurm_env, capture_output=True, text=True,
                       timeout=120)
    assert c.returncode == 0 and tomllib.loads(c.stdout) == tomllib.loads(p.stdout), c.stderr
    assert hashlib.sha256(teams.read_bytes()).hexdigest() == digest and not db.exists()


@pytest.mark.skipif("cluster-capacity" not in CODES, reason="the pool check (reason cluster-capacity) is not in "
                    "lib/gate yet: this end-to-end test needs it")
def test_a_request_that_fits_the_next_hour_only_if_it_ended_before_the_maintenance_gets_a_fix_after_it(
        slurm_env, maintenance, tmp_path, monkeypatch):
    name, span = maintenance
    teams = tmp_path / "teams.toml"
    teams.write_text((REPO / "data" / "teams.toml").read_text() + "\n[pools.stable]\ngpus = 8\n"
                     "\n[pools.preemptible]\ngpus = 8\n")
    db = tmp_path / "gate.duckdb"
    with open_ledger(db) as con:
        from lib.ledger.teams_file import sync_teams  # here: only this test needs the teams file's pools
        sync_teams(con, teams)
    monkeypatch.setenv("SLURM_CONF", slurm_env["SLURM_CONF"])
    server = GateServerProcess(db, tmp_path / "gate.sock", "--windows-interval-s", "1")
    try:
        deadline = time.monotonic() + 30
        while name not in ledger_windows(db):
            assert time.monotonic() < deadline, "the server did not read the maintenance window"
            time.sleep(0.5)
        ask = {"run_id": f"{TAG}-fits", "team": "vision", "kind": "exploratory", "gpus": 8, "gpu_mem_gb": 40,
               "budget_gpu_hours": 100, "checkpoint_supported": True, "expected_interruptions": 0,
               "capacity": "stable", "data_snapshot": "imagenet-21k-2024"}
        long = {**ask, "max_runtime_hours": 2, "estimated_gpu_hours": 16}      # 8 GPUs for 2 h from now
        short = {**ask, "run_id": f"{TAG}-short", "max_runtime_hours": 0.5, "estimated_gpu_hours": 4}
        # the gate server (from the windows it read) and an in-process check (from the ledger's) agree
        for env in ({**slurm_env, "TG_GATE_SOCKET": str(tmp_path / "gate.sock")}, slurm_env):
            p = lib_cli(env, "--db", str(db), "check", "-", stdin=json.dumps(long))
            decision = json.loads(p.stdout)
            assert decision["state"] == "defer", decision
            (why,) = [r for r in decision["reasons"] if r["code"] == "cluster-capacity"]
            fixes = [datetime.fromisoformat(t) for t in re.findall(r"from (\d{4}-\d\d-\d\dT\d\d:\d\d)", why["fix"])]
            window_ends = span[0] + timedelta(hours=1)          # the earliest the window can end
            assert fixes and all(t >= window_ends.replace(second=0) for t in fixes), why   # never inside it
            # the same 8 GPUs for half an hour end before the window: admitted now
            p = lib_cli(env, "--db", str(db), "check", "-", stdin=json.dumps(short))
            assert json.loads(p.stdout)["state"] == "admit", p.stdout
    finally:
        server.stop()
