"""Shared pieces for the Slurm hook tests: a real ledger synced from data/teams.toml, and job
descriptions / --comment requests that the gate admits unless a test changes them."""
from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CLUSTER_SH = REPO / "lib" / "slurm" / "cluster.sh"

# a small exploratory run of team vision (data/teams.toml) that fits every limit
COMMENT_REQUEST = {
    "run_id": "vision-slurm-ok", "kind": "exploratory", "gpu_mem_gb": 40, "budget_gpu_hours": 4,
    "estimated_gpu_hours": 0.5, "checkpoint_supported": True, "expected_interruptions": 0,
    "data_snapshot": "imagenet-21k-2024",
}

# the fields job_submit.lua passes for `sbatch --account=vision --gres=gpu:2 --time=30 --comment=...`
JOB = {
    "account": "vision", "partition": None, "time_limit": "30", "name": "wrap", "comment": None,
    "user": "root", "uid": "0", "work_dir": "/tmp", "tres_per_node": "gres:gpu:2",
    "tres_per_job": None, "tres_per_task": None, "tres_per_socket": None,
    "num_tasks": "4294967294", "min_nodes": "4294967294", "array": None,
}


def comment(**changes) -> str:
    """The --comment JSON of COMMENT_REQUEST with `changes` (a value of ... drops the key)."""
    req = {**copy.deepcopy(COMMENT_REQUEST), **changes}
    return json.dumps({k: v for k, v in req.items() if v is not ...})


def job(**changes) -> dict:
    """A job description as the hook receives it; comment defaults to COMMENT_REQUEST."""
    out = {**JOB, "comment": comment()}
    out.update(changes)
    return out


def make_slurm_ledger(path) -> Path:
    """A new ledger file at `path` with the teams and snapshots of data/teams.toml."""
    from lib.ledger.connection import open_ledger
    from lib.ledger.teams_file import sync_teams
    path = Path(path)
    with open_ledger(path) as con:
        sync_teams(con)
    return path


def flush_gate_server(db) -> None:
    """Have the test cluster's gate server (if it serves `db`) move its journal into the ledger now."""
    from lib.slurm.wire import flush
    sock = Path(os.environ.get("TG_SLURM_DIR", "/tmp/tg-slurm")) / "run" / "gate.sock"
    if sock.exists():
        flush(str(sock), str(Path(db).resolve()))


def decisions(db, run_id=None) -> list[dict]:
    """The ledger's decision rows (oldest first), optionally of one run."""
    from lib.ledger.connection import open_ledger
    flush_gate_server(db)
    with open_ledger(db, read_only=True) as con:
        sql = "SELECT run_id, state, reason_codes, origin, request_json FROM decisions"
        args = []
        if run_id is not None:
            sql += " WHERE run_id = ?"
            args = [run_id]
        rows = con.execute(sql + " ORDER BY decision_id", args).fetchall()
    return [{"run_id": r[0], "state": r[1], "reason_codes": list(r[2]), "origin": r[3],
             "request": json.loads(r[4])} for r in rows]


def run_row(db, run_id) -> dict | None:
    from lib.ledger.connection import open_ledger
    flush_gate_server(db)
    with open_ledger(db, read_only=True) as con:
        cur = con.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
        names = [d[0] for d in cur.description]
        row = cur.fetchone()
    return dict(zip(names, row)) if row else None


def hook_request(run_id: str, **changes) -> dict:
    """The job fields of `job()` for run `run_id` (the gate's request in its comment)."""
    return job(comment=comment(run_id=run_id, **changes))


def raw_answer(sock, payload: bytes, timeout_s: float = 60) -> str:
    """The gate server's answer to raw bytes on its socket (any message, well-formed or not)."""
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    s.connect(str(sock))
    try:
        try:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may refuse before reading it all
        chunks = []
        while b := s.recv(65536):
            chunks.append(b)
    finally:
        s.close()
    return b"".join(chunks).decode("utf-8", "replace")


class GateServerProcess:
    """A real `python -m lib.slurm.server` process on `db`, listening on `sock`. Without a queue
    keeper (`--queue-interval-s 0`: deferred jobs refused, Slurm's queue untouched) unless `extra`
    names an interval."""

    def __init__(self, db, sock, *extra: str):
        self.db, self.sock = Path(db), str(sock)
        if "--queue-interval-s" not in extra:
            extra = (*extra, "--queue-interval-s", "0")
        Path(self.sock).unlink(missing_ok=True)  # a killed server's socket: wait for the new one
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lib.slurm.server", "--socket", self.sock, "--db", str(db), *extra],
            cwd=REPO, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        deadline = time.monotonic() + 60
        while not Path(self.sock).exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"gate server did not start: {self.stop()}")
            time.sleep(0.05)

    def ask(self, fields: dict, **config):
        """The hook's answer (lib.slurm.hook.Answer) for a job, as job_submit.lua would get it."""
        from lib.slurm.hook import ask_server
        return ask_server(self.sock, fields, {"db": str(self.db), **config}, 60)

    def flush(self) -> int:
        from lib.slurm.wire import flush
        return flush(self.sock, str(self.db.resolve()))

    def stop(self, sig=None) -> str:
        """Stop it (SIGTERM, or `sig`); its stderr."""
        import signal
        if self.proc.poll() is None:
            self.proc.send_signal(sig or signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=60)
        except Exception:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=30)
        return err or ""


# two teams: qa with a small quota (16 accelerators, 8 a job), qb with room for any burst
QUOTA_TEAMS = """
[defaults]
max_gpu_mem_gb = 80
max_runtime_hours = 72
[teams.qa]
reserved_gpus = {quota}
max_gpus_per_job = 8
monthly_budget_gpu_hours = 100000
[teams.qb]
reserved_gpus = 1000000
max_gpus_per_job = 8
monthly_budget_gpu_hours = 10000000
[[snapshots]]
snapshot = "snap"
"""


def quota_teams(quota: int = 16) -> str:
    """The teams file of QUOTA_TEAMS with qa's quota `quota`."""
    return QUOTA_TEAMS.format(quota=quota)


# --------------------------------------------------------------------------- the real test cluster

@dataclass
class Cluster:
    db: Path
    conf: Path
    flag_log: Path
    env: dict

    def sbatch(self, *args, script="sleep 2"):
        return subprocess.run(["sbatch", "--parsable", *args, "--wrap", script], env=self.env,
                              capture_output=True, text=True, timeout=90)

    def slurm(self, *cmd, timeout=30):
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout)

    def wait_state(self, jobid: str, states=("COMPLETED",), timeout_s=90) -> str:
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            out = self.slurm("sacct", "-n", "-P", "-X", "-j", jobid, "-o", "state").stdout.split()
            state = out[0] if out else ""
            if state in states:
                return state
            time.sleep(0.5)
        raise AssertionError(f"job {jobid} still {state or 'unknown'} after {timeout_s} s")

    def accounting(self, jobid: str, fields: str, expect_prefix: str, timeout_s=30) -> str:
        """sacct's line for the job once it starts with `expect_prefix` (slurmdbd may lag behind)."""
        deadline = time.monotonic() + timeout_s
        while True:
            line = self.slurm("sacct", "-n", "-P", "-X", "-j", jobid, "-o", fields).stdout.strip()
            if line.startswith(expect_prefix) or time.monotonic() > deadline:
                return line
            time.sleep(0.5)

    @contextlib.contextmanager
    def hook_settings(self, **settings):
        """Change KEY=VALUE lines of the hook config (re-read at every sbatch), restore afterwards."""
        saved = self.conf.read_text()
        lines = [ln for ln in saved.splitlines() if ln.split("=", 1)[0] not in settings]
        self.conf.write_text("\n".join(lines + [f"{k}={v}" for k, v in settings.items()]) + "\n")
        try:
            yield
        finally:
            self.conf.write_text(saved)


def pid_file_alive(pid_file: Path) -> bool:
    """True when the process a pid file names is alive."""
    try:
        os.kill(int(pid_file.read_text()), 0)
        return True
    except (OSError, ValueError):
        return False


def cluster_session(tmp_path_factory):
    """The body of a session fixture `cluster`: the test cluster started (cluster.sh start, when it is
    not running: then stopped afterwards) with its hook on a new ledger for the session (teams and
    snapshots of data/teams.toml); the hook config is restored afterwards. Skips where Slurm is not
    installed."""
    if not shutil.which("slurmctld") or not shutil.which("sbatch"):
        pytest.skip("slurmctld not installed: run lib/slurm/cluster.sh install")
    state = Path(os.environ.get("TG_SLURM_DIR", "/tmp/tg-slurm"))
    conf = state / "etc" / "job_submit_gate.conf"
    was_running = pid_file_alive(state / "run" / "slurmctld.pid")
    saved_conf = conf.read_text() if conf.exists() else None
    db = make_slurm_ledger(tmp_path_factory.mktemp("slurm") / "gate.duckdb")
    env = {**os.environ, "GATE_DB": str(db), "TG_ON_GATE_FAILURE": "refuse", "TG_GATE_TIMEOUT_S": "5",
           "TG_PYTHON": sys.executable, "TG_REPO": str(REPO)}
    started = subprocess.run(["bash", str(CLUSTER_SH), "start"], env=env, capture_output=True,
                             text=True, timeout=300)
    if started.returncode != 0:
        pytest.fail(f"lib/slurm/cluster.sh start failed:\n{started.stderr[-4000:]}")
    client_env = {**os.environ, "SLURM_CONF": str(state / "etc" / "slurm.conf"), "TZ": "UTC"}
    yield Cluster(db=db, conf=conf, flag_log=state / "log" / "gate-flags.jsonl", env=client_env)
    if was_running:
        if saved_conf is not None:
            conf.write_text(saved_conf)  # give the hook back its earlier ledger
    else:
        subprocess.run(["bash", str(CLUSTER_SH), "stop"], env=env, capture_output=True, timeout=120)
