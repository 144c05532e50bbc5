"""A deferred GPU job waits in Slurm's queue, held, and the gate releases it when its turn comes.

On the real test cluster (lib/slurm/cluster.sh), with a gate server of this module's own (its queue
keeper every 2 s) on a ledger where team vision has 2 GPUs: one scenario in steps (the tests run in
file order and share the module's jobs): a job that must wait is accepted held (JobHeldAdmin, its
admin comment and begin time from the gate's plan, the user told where it stands); it starts by
itself once the job ahead of it has ended, in the gate's order; a user's scancel takes a held job
out of the gate's line, and `python -m lib cancel` cancels its held job; after a kill -9 the
restarted server forgets no held job and releases none twice; a job that never fits, or any
deferral with TG_ON_DEFER=refuse, is refused as before.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest

from lib.slurm.holds import parse_hold_comment
from tests.fixtures_slurm import REPO, GateServerProcess, comment

pytestmark = pytest.mark.slurm

TAG = f"h{int(time.time())}"   # run IDs unique to this session (the accounting DB outlives sessions)
TEAMS = (REPO / "data" / "teams.toml").read_text(encoding="utf-8")
XDMOD_FIELDS = ("jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,eligible,start,"
                "end,elapsed,exitcode,state,nnodes,ncpus,reqcpus,reqmem,reqtres,alloctres,timelimit,"
                "nodelist,jobname")


def small_vision(tmp_path):
    """A ledger where team vision has 2 GPUs (data/teams.toml otherwise)."""
    from lib.ledger.connection import open_ledger
    from lib.ledger.teams_file import sync_teams
    text = TEAMS.replace("reserved_gpus = 96\nretraining_reserved_gpus = 8\n",
                         "reserved_gpus = 2\nretraining_reserved_gpus = 0\n")
    assert text != TEAMS
    f = tmp_path / "teams.toml"
    f.write_text(text, encoding="utf-8")
    db = tmp_path / "gate.duckdb"
    with open_ledger(db) as con:
        sync_teams(con, f)
    return db


class Scene:
    def __init__(self, cluster, db, sock):
        self.cluster, self.db, self.sock = cluster, db, sock
        self.server = self.start()
        self.jobs: dict[str, str] = {}   # run ID -> job ID

    def start(self):
        return GateServerProcess(self.db, self.sock, "--queue-interval-s", "2", "--windows-interval-s", "0")

    def sbatch(self, name: str, *, gpus: int = 2, minutes: int = 2, script: str = "sleep 1", user: str = "root"):
        run_id = f"{TAG}-{name}"
        as_user = [] if user == "root" else ["runuser", "-u", user, "--"]
        r = subprocess.run([*as_user, "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "--account=vision",
                            f"--gres=gpu:{gpus}", f"--time={minutes}",
                            f"--comment={comment(run_id=run_id, estimated_gpu_hours=gpus * minutes / 60)}",
                            "--wrap", script], env=self.cluster.env, capture_output=True, text=True, timeout=90)
        if r.returncode == 0:
            self.jobs[run_id] = r.stdout.strip().split(";")[0]
        return run_id, r

    def job(self, run_id: str) -> dict:
        """squeue --json's record of the run's job ({} once Slurm forgot it)."""
        out = self.cluster.slurm("squeue", "--json").stdout
        jid = int(self.jobs[run_id])
        return next((j for j in json.loads(out)["jobs"] if j["job_id"] == jid), {})

    def wait(self, run_id: str, test, what: str, timeout_s: float = 60) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            j = self.job(run_id)
            if test(j):
                return j
            if time.monotonic() > deadline:
                raise AssertionError(f"{run_id}: not {what} after {timeout_s} s: {j}")
            time.sleep(0.5)

    def import_sacct(self, run_id: str) -> None:
        """The ended job's accounting into the ledger (another process writes it: the keeper sees that)."""
        out = self.cluster.slurm("sacct", "--allusers", "--parsable2", "--noheader", "--allocations",
                                 "--duplicates", "-j", self.jobs[run_id], "-o", XDMOD_FIELDS)
        f = self.db.parent / f"sacct-{run_id}.txt"
        f.write_text(out.stdout)
        imp = subprocess.run([sys.executable, "-m", "lib", "--db", str(self.db), "import", str(f), "--format", "sacct"],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
        assert imp.returncode == 0, imp.stdout + imp.stderr

    def latest(self, run_id: str) -> dict:
        from lib.ledger.connection import open_ledger
        self.server.flush()
        with open_ledger(self.db, read_only=True) as con:
            r = con.execute("SELECT state, reason_codes, actor, decision_json FROM decisions WHERE run_id = ? "
                            "ORDER BY decided_at DESC, decision_id DESC LIMIT 1", [run_id]).fetchone()
        return {"state": r[0], "codes": list(r[1]), "actor": r[2], "decision": json.loads(r[3])}

    def line(self) -> list[str]:
        from lib.ledger.queue import queue_line
        self.server.flush()
        return [r["run_id"] for r in queue_line(self.db)["queue"]]


@pytest.fixture(scope="module")
def scene(cluster, tmp_path_factory):
    d = tmp_path_factory.mktemp("held")
    db = small_vision(d)
    s = Scene(cluster, db, d / "gate.sock")
    with cluster.hook_settings(GATE_DB=str(db), TG_GATE_SOCKET=str(s.sock)):
        try:
            yield s
        finally:
            s.server.stop()
            for jid in s.jobs.values():
                cluster.slurm("scancel", jid)


def test_a_job_that_must_wait_is_accepted_held_with_its_place_and_planned_start(scene):
    first, r = scene.sbatch("first", minutes=1, script="sleep 8")
    assert r.returncode == 0 and f"admitted run {first}" in r.stderr, r.stderr
    held, r = scene.sbatch("second", minutes=2, user="nobody")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stderr.splitlines() if "training-gate" in ln)
    assert f"training-gate: queued: run {held} queued for team vision, planned start 20" in line
    assert "it starts by itself, no need to resubmit" in line and "capacity" in line
    # held by the gate alone: an admin hold within a moment, which its owner cannot release
    j = scene.wait(held, lambda j: j.get("state_reason") == "JobHeldAdmin", "an admin hold", timeout_s=15)
    assert (j["job_state"], j["name"], j["user_name"]) == ("PENDING", held, "nobody")
    mine = subprocess.run(["runuser", "-u", "nobody", "--", "scontrol", "release", scene.jobs[held]],
                          env=scene.cluster.env, capture_output=True, text=True, timeout=30)
    assert mine.returncode != 0, mine.stdout + mine.stderr
    assert scene.job(held)["state_reason"] == "JobHeldAdmin"
    twice, r = scene.sbatch("second", minutes=2)   # one held job a run: a second would be released too
    assert r.returncode != 0 and "not held: it already waits in Slurm's queue" in r.stderr, r.stderr
    assert parse_hold_comment(j["admin_comment"])[0] == held
    assert scene.latest(held)["state"] == "defer" and held in scene.line()
    # the keeper's pass: the plan's place and planned start, in the admin comment and as the begin time
    j = scene.wait(held, lambda j: "1st in line for team vision" in j.get("admin_comment", ""), "placed")
    planned = j["admin_comment"].split("planned start ")[1][:16]
    start = datetime.fromtimestamp(j["start_time"], timezone.utc)
    assert start.strftime("%Y-%m-%d %H:%M") == planned
    shown = scene.cluster.slurm("squeue", "--start", "-h", "-j", scene.jobs[held], "-o", "%S").stdout.strip()
    assert shown[:16].replace("T", " ") == planned


def test_held_jobs_start_by_themselves_in_the_gates_order_after_the_job_ahead_ends(scene):
    third, r = scene.sbatch("third", minutes=1)
    assert r.returncode == 0 and "queued" in r.stderr, r.stderr
    first, second = f"{TAG}-first", f"{TAG}-second"
    assert scene.line() == [second, third]
    scene.cluster.wait_state(scene.jobs[first], timeout_s=120)
    scene.import_sacct(first)     # the first run's end reaches the ledger: its GPUs are free
    j = scene.wait(second, lambda j: j.get("state_reason") != "JobHeldAdmin", "released", timeout_s=60)
    assert j.get("job_state") in (None, "PENDING", "RUNNING", "COMPLETED", "COMPLETING")
    got = scene.latest(second)
    assert (got["state"], got["actor"]) == ("admit", "gate-queue") and got["decision"]["waiting_since"]
    # the third waits behind the second, still held by the gate
    assert scene.job(third)["state_reason"] == "JobHeldAdmin" and scene.line() == [third]
    assert scene.cluster.wait_state(scene.jobs[second], timeout_s=120) == "COMPLETED"
    scene.import_sacct(second)
    assert scene.cluster.wait_state(scene.jobs[third], timeout_s=120) == "COMPLETED"
    assert scene.latest(third)["actor"] == "gate-queue"
    scene.import_sacct(third)


def test_a_users_scancel_of_a_held_job_empties_its_place_in_the_gates_line(scene):
    blocker, r = scene.sbatch("blocker", minutes=30, script="sleep 600")
    assert r.returncode == 0 and "admitted" in r.stderr, r.stderr
    gone, r = scene.sbatch("gone")
    assert r.returncode == 0 and "queued" in r.stderr, r.stderr
    scene.wait(gone, lambda j: j.get("state_reason") == "JobHeldAdmin", "an admin hold", timeout_s=15)
    assert scene.line() == [gone]
    scene.cluster.slurm("scancel", scene.jobs[gone])
    deadline = time.monotonic() + 30
    while gone in scene.line():
        assert time.monotonic() < deadline, "the cancelled job's request still waits in the line"
        time.sleep(0.5)
    got = scene.latest(gone)
    assert (got["state"], got["codes"]) == ("reject", ["cancelled"])
    # and the other way: `python -m lib cancel` takes a request out of the line, the keeper its held job
    dropped, r = scene.sbatch("dropped")
    assert r.returncode == 0 and "queued" in r.stderr, r.stderr
    scene.server.flush()
    out = subprocess.run([sys.executable, "-m", "lib", "--db", str(scene.db), "cancel", dropped], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert scene.cluster.wait_state(scene.jobs[dropped], ("CANCELLED",), timeout_s=60) == "CANCELLED"


def test_a_killed_server_restarted_forgets_no_held_job_and_releases_none_twice(scene):
    blocker = f"{TAG}-blocker"
    fourth, r = scene.sbatch("fourth", minutes=1, script="sleep 1")
    assert r.returncode == 0 and "queued" in r.stderr, r.stderr
    scene.wait(fourth, lambda j: j.get("state_reason") == "JobHeldAdmin", "an admin hold", timeout_s=15)
    scene.server.stop(signal.SIGKILL)
    scene.server = scene.start()
    scene.cluster.slurm("scancel", scene.jobs[blocker])
    scene.cluster.wait_state(scene.jobs[blocker], ("CANCELLED",), timeout_s=60)
    scene.import_sacct(blocker)   # the blocker's end reaches the ledger: the fourth's turn comes
    scene.wait(fourth, lambda j: j.get("state_reason") != "JobHeldAdmin", "released", timeout_s=60)
    assert scene.cluster.wait_state(scene.jobs[fourth], timeout_s=120) == "COMPLETED"
    err = scene.server.stop()
    scene.server = scene.start()
    time.sleep(4)   # a pass of the next server: nothing left to release
    err += scene.server.stop()
    scene.server = scene.start()
    released = [json.loads(ln.split("queue: ", 1)[1])["released"] for ln in err.splitlines() if "queue: {" in ln]
    assert sum(released, []) == [scene.jobs[fourth]], err
    assert scene.latest(fourth)["actor"] == "gate-queue"
    scene.import_sacct(fourth)   # its end reaches the ledger: a run holds its accelerators until then


def test_a_job_that_never_fits_and_any_deferral_under_refuse_are_refused(scene):
    never, r = scene.sbatch("never", gpus=4)
    assert r.returncode != 0 and r.stdout.strip() == "", r.stderr
    assert f"deferred run {never}" in r.stderr and "not held: it never fits as asked" in r.stderr
    blocker, r = scene.sbatch("blocker2", minutes=30, script="sleep 600")
    assert r.returncode == 0 and "admitted" in r.stderr, r.stderr
    with scene.cluster.hook_settings(TG_ON_DEFER="refuse"):
        refused, r = scene.sbatch("refused")
    assert r.returncode != 0 and f"deferred run {refused}" in r.stderr and "queued" not in r.stderr
