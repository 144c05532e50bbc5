"""Fixtures for the dashboard tests: a small, deterministic ledger built in SQL in a temp dir.

`fill_ledger()` writes teams, snapshots, runs and decisions relative to `now`, with every shape
the pages show (finished, running, upcoming and never-used reservations; budget stops with a last
checkpoint; holdout over-reads; requested-only estimates; pending deferrals). It is generated in
one INSERT ... SELECT over range(n), so bench/ can use it for large ledgers too.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from lib.dashboard import (estimate_queries, idle_queries, overview_queries, reservation_queries, stop_queries,
                           team_board)
from lib.ledger.connection import open_ledger, transaction

ROOT = Path(__file__).resolve().parent.parent
# the read models of the ledger-wide pages, each called as the page calls it: query(filters, path, now)
PAGE_QUERIES = {"overview": overview_queries.overview, "reservations": reservation_queries.reservations,
                "idle_capacity": idle_queries.idle_capacity, "estimate_accuracy": estimate_queries.estimate_accuracy,
                "stops_promotion": stop_queries.stops_promotion, "calibration": estimate_queries.calibration_shown,
                "team_board": team_board.team_board}
CHROMIUM = "/usr/bin/chromium"


def __getattr__(name: str):
    """`PAGES`: short name -> (page script, navigation title, URL path), in app.py's order, from the
    app's one page list (ui.pages). Made on first use (a module __getattr__, PEP 562), so importing
    this module, as conftest.py does for every test, does not import the UI kit and Streamlit."""
    if name != "PAGES":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ui.pages import PAGES, url_path
    pages = globals()["PAGES"] = {p.name: (p.script, p.title, url_path(p.script)) for p in PAGES}
    return pages


def open_app(page: str | None = None, timeout_s: float = 60):
    """app.py under AppTest (on $GATE_DB), switched to the page of short name `page` when given."""
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout_s)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    if page:
        at.switch_page(page_script(page)).run()
    return at


def page_script(name: str) -> str:
    """The script of a page by short name, as AppTest.switch_page takes it: 'pages/<n>_<Title>.py'."""
    from ui.pages import page_script as script
    return script(name)


CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'  # a run has finished
TIMEOUT_MS = 60_000   # a first render takes 3-5 s here; a whole flow up to 10 s, on a loaded machine more

# the marks of a browser test module: skipped, saying why, where Debian's Chromium is missing
BROWSER_TESTS = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason=f"no Chromium at {CHROMIUM}: install it with `apt-get install -y chromium` "
                              "(.ci/run does); Playwright's own browser download cannot work here"),
]

TEAMS = [
    # team, reserved, retraining_reserved, max_gpus_per_job, max_mem, max_runtime_h, monthly budget
    ("nlp-research", 128, 0, 64, 80.0, 168.0, 52000.0),
    ("vision", 96, 8, 32, 80.0, 72.0, 30000.0),
    ("speech", 32, 8, 16, 80.0, 48.0, 9000.0),
    ("safety", 16, 0, 8, 80.0, 48.0, 4000.0),
]
SNAPSHOTS = [("common-crawl-2025-04", None), ("speech-asr-multilingual-v3", "speech"),
             ("imagenet-21k-2024", "vision")]


def utc_now_hour() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None, minute=0, second=0, microsecond=0)


def insert_teams(con) -> None:
    for t in TEAMS:
        con.execute(
            """INSERT OR REPLACE INTO teams (team, reserved_gpus, retraining_reserved_gpus,
               max_gpus_per_job, max_gpu_mem_gb, max_runtime_hours, monthly_budget_gpu_hours,
               pilot_required_above_gpu_hours, preemptible_partitions, policy_version)
               VALUES (?, ?, ?, ?, ?, ?, ?, 200, ['spot'], ?)""",
            [*t, f"v-{t[0]}"])
    for snap, team in SNAPSHOTS:
        con.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, TIMESTAMP '2025-01-01')", [snap, team])


# u(k): a deterministic uniform in [0, 1) for row i and stream k.
_U = "((hash(i * 131 + {k} * 7919 + $seed) % 1000003) / 1000003.0)"


def _u(k: int) -> str:
    return _U.format(k=k)


def fill_ledger(path, n_runs: int = 300, now: dt.datetime | None = None, days: int = 120,
                seed: int = 1) -> dt.datetime:
    """Write `n_runs` runs (and their decisions) spread over the `days` days up to `now`.
    Returns `now` (UTC, naive)."""
    now = now or utc_now_hour()
    teams = [t[0] for t in TEAMS]
    with open_ledger(path) as con, transaction(con):
        insert_teams(con)
        con.execute(f"""
        CREATE TEMP TABLE g AS
        WITH base AS (
          SELECT i,
            ($teams::VARCHAR[])[1 + (i % {len(teams)})] AS team,
            CASE WHEN {_u(1)} < 0.6 THEN 'exploratory' WHEN {_u(1)} < 0.85 THEN 'production'
                 ELSE 'retraining' END AS kind,
            CASE WHEN {_u(2)} < 0.25 THEN 'preemptible' ELSE 'stable' END AS capacity,
            ([1, 2, 4, 8, 8, 16])[1 + floor({_u(3)} * 6)::INT] AS gpus,
            1 + {_u(4)} * 20 AS wall_h,
            CASE WHEN {_u(5)} < 0.5 THEN 'pilot' WHEN {_u(5)} < 0.85 THEN 'stated' ELSE 'requested' END
              AS estimate_source,
            exp(({_u(6)} + {_u(7)} - 1) * 0.9 + 0.1) AS ratio,
            $now::TIMESTAMP - to_microseconds(CAST(({days} * 86400e6) * (1 - (i + 0.5) / $n) - 3 * 86400e6 AS BIGINT))
              AS reserved_from,
            {_u(8)} AS u_start, {_u(9)} AS u_stop, {_u(10)} AS u_misc, {_u(11)} AS u_hold
          FROM range($n) t(i)
        ), est AS (
          SELECT *, gpus * wall_h AS est_h,
                 reserved_from + to_microseconds(CAST(wall_h * 1.2 * 3600e6 AS BIGINT)) AS reserved_until,
                 CASE WHEN u_start < 0.08 THEN NULL
                      ELSE reserved_from + to_microseconds(CAST(u_start * 2 * 3600e6 AS BIGINT)) END AS started_at
          FROM base
        ), act AS (
          SELECT *, least(est_h * ratio, est_h * 1.5) AS used_h,
                 est_h * ratio > est_h * 1.5 AS hit_budget
          FROM est
        )
        SELECT *, CASE WHEN started_at IS NULL THEN NULL
                       ELSE started_at + to_microseconds(CAST(used_h / gpus * 3600e6 AS BIGINT)) END AS end_t
        FROM act
        """, {"teams": teams, "now": now, "n": n_runs, "seed": seed})
        con.execute("""
        INSERT INTO runs
        SELECT 'run-' || lpad(i::VARCHAR, 7, '0'), team, kind, capacity, gpus, 80.0,
          CASE WHEN team = 'speech' THEN 'speech-asr-multilingual-v3' ELSE 'common-crawl-2025-04' END,
          'job-' || i, est_h, estimate_source,
          CASE WHEN estimate_source = 'requested' THEN NULL ELSE est_h * 0.80 END,
          CASE WHEN estimate_source = 'requested' THEN NULL ELSE est_h * 0.05 END,
          CASE WHEN estimate_source = 'requested' THEN NULL ELSE est_h * 0.10 END,
          CASE WHEN estimate_source = 'requested' THEN NULL ELSE est_h * 0.03 END,
          CASE WHEN estimate_source = 'requested' THEN NULL ELSE est_h * 0.02 END,
          est_h * 1.5, wall_h * 1.5,
          reserved_from, reserved_until, est_h * 1.2,
          CASE WHEN started_at <= $now THEN started_at END,
          CASE WHEN end_t <= $now THEN end_t END,
          CASE WHEN end_t <= $now THEN used_h END,
          CASE WHEN end_t <= $now THEN used_h * 0.06 * (0.5 + u_misc) END,
          CASE WHEN end_t <= $now THEN used_h * 0.03 * u_misc END,
          CASE WHEN end_t <= $now THEN used_h * 0.09 END,
          CASE WHEN end_t <= $now THEN used_h * 0.02 * u_misc END,
          CASE WHEN end_t > $now OR end_t IS NULL THEN NULL
               WHEN hit_budget THEN 'budget'
               WHEN capacity = 'preemptible' AND u_stop < 0.08 THEN 'preempted'
               WHEN u_stop < 0.15 THEN 'early-stop'
               WHEN u_stop < 0.19 THEN 'failed'
               ELSE 'completed' END,
          CASE WHEN capacity = 'preemptible' THEN floor(u_misc * 3)::INT ELSE 0 END,
          CASE WHEN capacity = 'preemptible' THEN floor(u_misc * 3)::INT ELSE 0 END,
          CASE WHEN end_t > $now OR end_t IS NULL THEN NULL WHEN hit_budget THEN 'incomplete'
               ELSE 'complete' END,
          CASE WHEN hit_budget AND end_t <= $now THEN 'ckpt/run-' || i || '/step-' || floor(u_misc * 9000 + 1000)::INT END,
          kind <> 'exploratory' AND u_hold > 0.1,
          CASE WHEN kind = 'production' THEN floor(u_hold * 3)::INT ELSE 0 END,
          CASE WHEN kind = 'production' THEN 1 ELSE 0 END,
          'demo', $now
        FROM g
        """, {"now": now})
        # one admit decision per run, plus deferred requests that never got in
        con.execute("""
        INSERT INTO decisions (decided_at, run_id, team, kind, state, reason_codes, judged_gpu_hours,
                               reserved_gpu_hours, policy_version, origin, request_json, decision_json)
        SELECT least(reserved_from, $now) - INTERVAL 5 MINUTE, 'run-' || lpad(i::VARCHAR, 7, '0'), team, kind, 'admit', [],
               est_h, est_h * 1.2, 'v-' || team, 'demo',
               json_object('team', team, 'kind', kind, 'gpus', gpus), '{}'
        FROM g
        UNION ALL
        SELECT least(reserved_from, $now - INTERVAL 1 HOUR), 'req-' || lpad(i::VARCHAR, 7, '0'), team, kind, 'defer',
               CASE WHEN u_misc < 0.5 THEN ['capacity'] WHEN u_misc < 0.8 THEN ['budget']
                    ELSE ['capacity', 'period-budget'] END,
               est_h, NULL, 'v-' || team, 'demo',
               json_object('team', team, 'kind', kind, 'gpus', gpus * 4), '{}'
        FROM g WHERE i % 10 = 3
        """, {"now": now})
        con.execute("DROP TABLE g")
    return now


def run_count(path) -> int:
    with open_ledger(path, read_only=True) as con:
        return con.execute("SELECT count(*) FROM runs").fetchone()[0]


def free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_app(db_path, log_path, timeout_s: float = 60.0, *, port: int | None = None, args=(), env=None):
    """`python -m streamlit run app.py` on a free port (or `port`) with GATE_DB at `db_path`, more
    `streamlit run` options in `args` and environment variables in `env`; yields the URL."""
    port = port or free_port()
    env = {**os.environ, "GATE_DB": str(db_path), "GATE_DEMO": "0", **(env or {})}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless=true",
             f"--server.port={port}", "--server.address=127.0.0.1",
             "--browser.gatherUsageStats=false", "--server.fileWatcherType=none", *args],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    with serving(proc, url + "/_stcore/health", lambda r: r.read().decode().strip() == "ok", log_path,
                 timeout_s, lambda why: pytest.fail(f"streamlit {why}")):
        yield url


@contextlib.contextmanager
def serving(proc: subprocess.Popen, probe: str, ready, log_path, timeout_s: float, fail):
    """Wait until a GET of `probe` answers `ready(response)`, hand over, then stop `proc`. When the
    process exits first or `timeout_s` passes: `fail(why)` (pytest.fail, or pytest.skip), with its log."""
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(probe, timeout=2) as r:
                    if ready(r):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                text = Path(log_path).read_text(errors="replace")
                fail(f"did not start (exit {proc.poll()}); log:\n{text}")
            time.sleep(0.2)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
