"""A real PostgreSQL 15 server for the tests marked `postgres` (Debian's `postgresql` package, which
.ci/run installs when missing), started once per session in a temp folder and stopped at the end.

PostgreSQL refuses to run as root: under root, initdb and pg_ctl run as the `postgres` user in a
folder that user owns. Host connections (127.0.0.1) need a password (scram-sha-256), the socket
in the folder is trusted for setting the server up. Each test gets a database of its own
(`PostgresServer.new_database`), and a role `gate` with a password, so URLs carry real credentials.

Not pytest-postgresql (10.0.0 tried): it runs `pg_ctl` as the calling user, and CI runs as root,
which pg_ctl refuses ("cannot be run as root"); it has no setting for the OS user (its `user` is the
database role). Through a wrapper that re-runs pg_ctl as `postgres`, its fixture still fails (its data
folder is in pytest's temp folder, mode 0700 root: "Permission denied"); its executor alone starts
the server in a folder postgres owns, but with a password initdb cannot read the file it writes
(0600, root's), and without one every connection is trusted (a wrong-password test could not fail).
And once installed, its plugin loads in every pytest run and imports psycopg, psutil and mirakuru:
about 0.4 s more before any test.
"""
from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_BIN = Path(os.environ.get("TG_PG_BIN", "/usr/lib/postgresql/15/bin"))
GATE_ROLE, GATE_PASSWORD = "gate", "pw-Zq7!never-shown"


def postgres_missing() -> str | None:
    """Why no test server can start here, or None."""
    if not (PG_BIN / "initdb").exists():
        return f"PostgreSQL 15 is not installed ({PG_BIN}/initdb missing: apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run the server as"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One postgres process in its own folder: `url(db)`, `restart()`, `stop()`."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="tg-postgres-"))
        self.data, self.port = self.dir / "data", free_port()
        self.log = self.dir / "server.log"
        self._n = 0
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth-local=trust",
                  "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync")
        self.start()
        self.admin(f"CREATE ROLE {GATE_ROLE} LOGIN PASSWORD '{GATE_PASSWORD}'")

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(PG_BIN / tool), *args]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=self.dir)
        if check and out.returncode != 0:
            raise RuntimeError(f"{tool} failed ({out.returncode}): {out.stderr or out.stdout}\n"
                               f"{self.log.read_text() if self.log.exists() else ''}")
        return out

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                  "-c max_connections=200", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def restart(self, down_s: float = 0.0) -> None:
        """Stop it at once (connections cut, as a crash would), stay down `down_s` s, start again."""
        self.stop("immediate")
        time.sleep(down_s)
        self.start()

    def admin(self, sql: str, db: str = "postgres") -> None:
        """Run `sql` as the superuser over the trusted socket (autocommit: CREATE DATABASE works)."""
        import psycopg
        with psycopg.connect(host=str(self.dir), port=self.port, user="postgres", dbname=db,
                             autocommit=True) as con:
            con.execute(sql)

    def new_database(self) -> str:
        """A fresh database owned by the gate role; its name."""
        self._n += 1
        name = f"tg_{os.getpid()}_{self._n}"
        self.admin(f"CREATE DATABASE {name} OWNER {GATE_ROLE}")
        return name

    def url(self, db: str, *, password: str | None = GATE_PASSWORD, **params) -> str:
        """The authority URL of database `db` as the gate role (with its password unless None)."""
        who = GATE_ROLE + (f":{password}" if password is not None else "")
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"postgresql://{who}@127.0.0.1:{self.port}/{db}" + (f"?{query}" if query else "")

    def close(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


def authority_env(url: str, cluster: str, **extra) -> dict:
    """The environment of a process of cluster `cluster` deciding against `url`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GATE_AUTHORITY", "GATE_CLUSTER", "GATE_AUTHORITY_OFFLINE_SHARE", "TG_GATE_SOCKET")}
    return {**env, "GATE_AUTHORITY": url, "GATE_CLUSTER": cluster, **extra}


# one team, 8 accelerators and 100 GPU-h a month, shared by every cluster in the tests
SHARED_TEAMS = """
[defaults]
max_gpu_mem_gb = 80
max_runtime_hours = 48
pilot_required_above_gpu_hours = 1000

[teams.shared]
reserved_gpus = {quota}
max_gpus_per_job = 8
monthly_budget_gpu_hours = {budget}

[[snapshots]]
snapshot = "shared-data-v1"
team = "shared"
"""


def shared_request(run_id: str, **changes) -> dict:
    """A request of team `shared` that fits every per-job limit: 2 accelerators, 10 GPU-h."""
    from tests.fixtures_ledger import demo_request
    return demo_request(**{"run_id": run_id, "team": "shared", "data_snapshot": "shared-data-v1", "gpus": 2,
                           **changes})


def make_clusters(tmp_path: Path, url: str, names=("a", "b"), *, quota: int = 8, budget: float = 100.0):
    """One ledger per cluster name (the same teams file loaded into each) and the authority's schema
    with the same policies: {name: ledger path}."""
    from lib.authority.store import init_schema
    from lib.gate.terms import utcnow
    from lib.ledger.connection import open_ledger
    from lib.ledger.teams_file import load_teams_file, sync_teams
    teams = tmp_path / "teams.toml"
    teams.write_text(SHARED_TEAMS.format(quota=quota, budget=budget), encoding="utf-8")
    ledgers = {}
    for name in names:
        ledgers[name] = tmp_path / f"cluster-{name}.duckdb"
        with open_ledger(ledgers[name]) as con:
            sync_teams(con, teams)
    init_schema(url, load_teams_file(teams)["teams"], utcnow())
    return ledgers
