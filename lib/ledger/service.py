"""The ledger's service functions for the gate: policy and state in, decisions and runs out.

`check_request` and `submit_request` call the same pure `lib.gate.admission.decide(request, policy, state)`
over the same policy and state built here; `check_request` opens the ledger read-only and writes
nothing, `submit_request` does everything in ONE write transaction (read policy + state, decide,
append the decision, reserve on admit). DuckDB admits one writing process per file, and
`lib.ledger.connection.open_ledger` retries a locked file for a bounded time, so concurrent submitters
serialize: each one sees every reservation committed before it, and none is double-booked.
Past the timeout `LedgerLocked` is raised (the command line turns it into exit code 3). Submitting
the admitted request again, unchanged, answers the recorded decision and writes nothing (a retry
after a lost answer); see `_recorded_admit`.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux
    fcntl = None

from lib.gate.calibration import DEFAULT_MAX_RUNS, calibrate_scopes
from lib.gate.contracts import (Calibration, CalibrationRow, Decision, InterruptionRate, Policy, Request,
                                Reservation, State)
from lib.gate.stopping import artifact_status_for
from lib.gate.terms import (ARTIFACT_STATUSES, CALIBRATION_STOPS, CENSORED_STOPS,
                            INCOMPLETE_STOPS, KINDS, STOP_REASONS, InputError, checked_count,
                            checked_number, finite_number, json_text, month_start, naive_utc,
                            next_month_start, utcnow)
from lib.ledger.connection import (LedgerError, LedgerLocked, NotALedger, ledger_path, open_ledger,
                                   owner_only_files, transaction)
from lib.ledger.decider_lock import deciding_in_process
from lib.ledger import team_weeks
from lib.ledger.teams_file import POLICY_FIELDS

CALIBRATION_WINDOW_DAYS = 365
# Every team a run names: each write path registers a run's team in `teams` before the run (an
# import refuses an unknown team unless told to create it; the gate decides only for teams with a
# policy; the demo syncs data/teams.toml first), so the small table answers without reading runs.
KNOWN_TEAMS = "SELECT team FROM teams"


class UnknownRun(LedgerError):
    """finish_run was given a run ID the ledger does not know."""


class FinishInputError(InputError):
    """finish_run was given a value it cannot record (the caller's input, not a gate failure)."""


# ---------------------------------------------------------------------------------------- reading

def team_policy(con, team) -> Policy | None:
    """The team's policy row as a dict (team, the teams_file.POLICY_FIELDS, policy_version), or None for an unknown team."""
    if type(team) is not str:
        return None
    cols = ("team", *POLICY_FIELDS, "policy_version")
    row = con.execute(f"SELECT {', '.join(cols)} FROM teams WHERE team = ?", [team]).fetchone()
    if row is None:
        return None
    policy = dict(zip(cols, row))
    policy["preemptible_partitions"] = list(policy["preemptible_partitions"] or [])
    return policy


def held_condition(alias: str = "r", now: str = "?") -> str:
    """The SQL condition selecting the reservations that count against their team's quota at the
    time bound to `now` (a placeholder such as ? or $now): admitted (reserved_gpu_hours set), not
    ended, and a window that has not passed (reserved_until unset or after now), whether or not it
    has started. The gate's state and the dashboard's earliest fit and committed budget use it."""
    p = f"{alias}." if alias else ""
    return (f"{p}reserved_gpu_hours IS NOT NULL AND {p}ended_at IS NULL "
            f"AND ({p}reserved_until IS NULL OR {p}reserved_until > {now})")


def held_reservations(con, now: datetime, team: str | None = None) -> list[Reservation]:
    """The reservations that count against quotas at `now` (see `held_condition`), of `team` or of
    every team, ordered by run ID."""
    sql = ("SELECT run_id, team, kind, gpus, reserved_gpu_hours, reserved_from, reserved_until FROM runs r "
           f"WHERE {held_condition('r', '?')}" + (" AND r.team = ?" if team is not None else "")
           + " ORDER BY r.run_id")
    rows = con.execute(sql, [now] if team is None else [now, team]).fetchall()
    return [{"run_id": r[0], "team": r[1], "kind": r[2], "gpus": int(r[3]), "reserved_gpu_hours": float(r[4]),
             "reserved_from": r[5], "reserved_until": r[6]} for r in rows]


def team_state(con, team, now=None, *, kind: str | None = None,
               window_days: int = CALIBRATION_WINDOW_DAYS) -> State:
    """The team's state at `now`: the `state` dict `decide` takes (now, reservations,
    period_spent_gpu_hours, snapshots, calibration_history, calibration).

    reservations: `held_reservations` of the team. period_spent_gpu_hours: actual GPU-hours of
    the team's runs that ended in now's calendar month (UTC). calibration: the correction for the
    team's `kind` runs (see `calibration`), read scope by scope from the ledger; None when no kind
    is given.
    """
    now = naive_utc(now) or utcnow()
    spent = con.execute(
        "SELECT coalesce(sum(actual_gpu_hours), 0) FROM runs "
        "WHERE team = ? AND ended_at >= ? AND ended_at < ?",
        [team, month_start(now), next_month_start(now)]).fetchone()[0]
    snapshots = {r[0] for r in con.execute(
        "SELECT snapshot FROM snapshots WHERE team = ? OR team IS NULL", [team]).fetchall()}
    return {
        "now": now,
        "reservations": held_reservations(con, now, team),
        "period_spent_gpu_hours": float(spent),
        "snapshots": snapshots,
        "calibration_history": [],
        "calibration": (calibration(con, team, kind, now, window_days=window_days)
                        if kind is not None else None),
        "interruption_rate": interruption_rate(con, team, now, window_days=window_days),
    }


MIN_RATE_RUNS = 20   # preemptible runs a team needs before its own interruption rate is used


def interruption_rate(con, team: str, now: datetime, *,
                      window_days: int = CALIBRATION_WINDOW_DAYS) -> InterruptionRate | None:
    """Interruptions per GPU-hour observed on preemptible capacity over the finished runs of the
    calibration window with a recorded interruption count: the team's when it has MIN_RATE_RUNS such
    runs, else everyone's; None when nobody has any (or no GPU-hours)."""
    row = con.execute(
        "SELECT count(*) FILTER (WHERE team = $team), sum(actual_gpu_hours) FILTER (WHERE team = $team), "
        "sum(interruptions) FILTER (WHERE team = $team), count(*), sum(actual_gpu_hours), sum(interruptions) "
        "FROM runs WHERE capacity = 'preemptible' AND ended_at > $since AND ended_at <= $now "
        "AND interruptions IS NOT NULL AND actual_gpu_hours > 0",
        {"team": team, "since": now - timedelta(days=window_days), "now": now}).fetchone()
    for scope, (runs, hours, interruptions) in (("team", row[:3]), ("all", row[3:])):
        if hours and (scope == "all" or runs >= MIN_RATE_RUNS):
            return {"per_gpu_hour": float(interruptions) / float(hours), "scope": scope, "runs": int(runs),
                    "gpu_hours": float(hours), "interruptions": int(interruptions)}
    return None


# The rows calibration reads, for the gate (one team and kind) and the dashboard (every team at
# once) alike: finished runs in the window ($since, $now] whose estimate was measured or stated (not
# 'requested') and whose stop reason says something about the estimate ($stops; $censored of them
# as censored). Parameters: `calibration_params`.
# CALIBRATION_ROW: which finished runs calibrate, whatever the window (a condition on a runs row).
CALIBRATION_ROW = ("estimated_gpu_hours > 0 AND actual_gpu_hours IS NOT NULL "
                   "AND estimate_source IS DISTINCT FROM 'requested' "
                   "AND list_contains($stops::VARCHAR[], stop_reason)")
CALIBRATION_ROWS_SQL = (
    "SELECT team, kind, run_id, ended_at, estimated_gpu_hours, actual_gpu_hours, "
    "list_contains($censored::VARCHAR[], stop_reason) AS censored, "
    "coalesce(least(reserved_from, started_at), ended_at) AS admitted_at "
    f"FROM runs WHERE ended_at > $since AND ended_at <= $now AND {CALIBRATION_ROW}")
CALIBRATION_ORDER = "ORDER BY ended_at DESC, run_id"  # most recent first; a scope keeps the first max_runs


def calibration_params(now: datetime, window_days: int = CALIBRATION_WINDOW_DAYS) -> dict:
    """The named parameters of CALIBRATION_ROWS_SQL for a calibration at `now`."""
    return {"since": now - timedelta(days=window_days), "now": now,
            "censored": list(CENSORED_STOPS), "stops": list(CALIBRATION_STOPS)}


def calibration(con, team: str, kind: str, now: datetime, *,
                window_days: int = CALIBRATION_WINDOW_DAYS, max_runs: int = DEFAULT_MAX_RUNS) -> Calibration:
    """lib.gate.calibration for `team`'s `kind` runs, reading CALIBRATION_ROWS_SQL one scope at a time
    (team × kind, team, everyone), each scope's `max_runs` most recent rows (`newest_rows`)."""
    params = calibration_params(now, window_days)

    def rows(scope_sql: str, scope_params: dict) -> list[CalibrationRow]:
        sql = (f"SELECT estimated_gpu_hours, actual_gpu_hours, censored, ended_at FROM ({CALIBRATION_ROWS_SQL}) "
               f"WHERE {scope_sql} {CALIBRATION_ORDER} LIMIT $max_runs")
        got = newest_rows(con, sql, {**params, **scope_params, "max_runs": max_runs}, max_runs)
        # oldest first, ties as the store orders them, so the change search reads them in time order
        return [{"estimated_gpu_hours": e, "actual_gpu_hours": a, "censored": c, "ended_at": t}
                for e, a, c, t in reversed(got)]

    def scoped():
        yield "team×kind", rows("team = $team AND kind = $kind", {"team": team, "kind": kind})
        yield "team", rows("team = $team", {"team": team})
        yield "all", rows("TRUE", {})
    return calibrate_scopes(scoped())


# Days back from now in which a scope's newest runs are looked for first, before the whole window.
NEWEST_FIRST_DAYS = (7, 28, 112)


def newest_cutoffs(con, rows_sql: str, params: dict, need: int, teams: list[str]) -> dict[tuple[str, str], datetime]:
    """{(team, kind): since} for every team x kind with rows in `rows_sql` (calibration rows with
    team, kind and ended_at, over the window ($since, $now] of `params`): the latest of the
    newest-first starts (NEWEST_FIRST_DAYS before $now) whose window holds `need` of its rows, else
    the whole window's $since. Reading each team x kind from its since on gives its `need` newest
    rows and so every team's and everyone's `need` newest (each of those is among its own team x
    kind's newest). The scopes still short after the widest newest-first start are counted over the
    whole window for their `teams` only, so a busy ledger never reads a year of runs."""
    from lib.gate.terms import KINDS
    count = (f"SELECT team, kind, count(*) FROM ({rows_sql}) c "
             "WHERE $teams IS NULL OR list_contains($teams::VARCHAR[], team) GROUP BY ALL")
    starts = [params["now"] - timedelta(days=d) for d in NEWEST_FIRST_DAYS]
    cut: dict[tuple[str, str], datetime] = {}
    for since in [s for s in starts if s > params["since"]] + [params["since"]]:
        whole = since == params["since"]
        short = sorted({t for t in teams for k in KINDS if (t, k) not in cut})
        if not short:
            break
        q = {**params, "since": since, "teams": short if whole else None}
        for team, kind, n in con.execute(count, {k: v for k, v in q.items() if f"${k}" in count}).fetchall():
            if (team, kind) not in cut and (n >= need or whole):
                cut[(team, kind)] = since
    return cut


# newest_cutoffs' answer as a CTE `cut` (team, kind, cut_since); its parameters: `cut_params`
CUT_SQL = ("cut AS (SELECT unnest($cut_team::VARCHAR[]) AS team, unnest($cut_kind::VARCHAR[]) AS kind, "
           "unnest($cut_since::TIMESTAMP[]) AS cut_since)")


def cut_params(cut: dict[tuple[str, str], datetime], since: datetime) -> dict:
    """CUT_SQL's parameters for `cut` (newest_cutoffs), and $since moved to its earliest cutoff
    (`since` when there is none), so a query over calibration rows reads no older runs."""
    return {"since": min(cut.values(), default=since), "cut_team": [t for t, _ in cut],
            "cut_kind": [k for _, k in cut], "cut_since": list(cut.values())}


def newest_rows(con, sql: str, params: dict, limit: int) -> list[tuple]:
    """The rows of `sql` (a query over runs ended after $since, newest first, LIMIT `limit`) with
    $since moved forward to NEWEST_FIRST_DAYS before $now, narrowest first, while that leaves fewer
    than `limit` rows; the last try is the whole window ($since as given). The answer is the same
    as the whole window's: when a narrower window already holds `limit` rows, they are the newest.
    Why: runs are stored roughly in the order they arrive, so DuckDB skips the row groups that end
    before $since (zone maps); a busy scope then costs the few days that hold its newest runs, not
    a year of a 10-million-run history."""
    since, now = params["since"], params["now"]
    for days in NEWEST_FIRST_DAYS:
        nearer = now - timedelta(days=days)
        if nearer <= since:
            break
        got = con.execute(sql, {**params, "since": nearer}).fetchall()
        if len(got) >= limit:
            return got
    return con.execute(sql, params).fetchall()


# ---------------------------------------------------------------------------------------- deciding

BOOKED = "(reserved_gpu_hours IS NOT NULL OR started_at IS NOT NULL OR ended_at IS NOT NULL)"  # a runs row's run ID is taken


def _booked(con, run_id) -> bool:
    """True when the run ID already holds a reservation or has run (a resubmission would double-book)."""
    if type(run_id) is not str:
        return False
    row = con.execute(f"SELECT {BOOKED} FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return bool(row and row[0])


def _recorded_admit(con, request, now: datetime) -> dict | None:
    """The admit recorded for this very request, while its reservation still waits for the run.

    "This very request": the same JSON object as the one recorded with the admit, compared after
    the same canonical serialisation (keys sorted), so key order does not matter but values and
    their types do. The reservation must not have started, ended or expired at `now`. The answer
    is the recorded decision as recorded, plus "replayed": true and "recorded_at" (ISO time of
    the decisions row). None when there is no such admit.
    """
    run_id = request.get("run_id")
    live = con.execute(
        "SELECT count(*) FROM runs WHERE run_id = ? AND reserved_gpu_hours IS NOT NULL "
        "AND started_at IS NULL AND ended_at IS NULL AND (reserved_until IS NULL OR reserved_until > ?)",
        [run_id, now]).fetchone()[0]
    if not live:
        return None
    row = con.execute(
        "SELECT decided_at, request_json, decision_json FROM decisions "
        "WHERE run_id = ? AND state = 'admit' ORDER BY decision_id DESC LIMIT 1", [run_id]).fetchone()
    if row is None or row[1] != canonical_json(request):
        return None
    return {**json.loads(row[2]), "replayed": True, "recorded_at": row[0].isoformat()}


class LedgerFacts:
    """What a decision reads, read from an open ledger connection. `decide_with` takes any object with
    these methods: the warm gate server (lib.slurm.server) answers them from the state it holds."""

    def __init__(self, con):
        self.con = con

    def policy(self, team: str) -> Policy | None:
        return team_policy(self.con, team)

    def known_teams(self) -> list[str]:
        return [r[0] for r in self.con.execute("SELECT team FROM teams ORDER BY team").fetchall()]

    def booked(self, run_id) -> bool:
        return _booked(self.con, run_id)

    def recorded_admit(self, request, now: datetime) -> dict | None:
        return _recorded_admit(self.con, request, now)

    def state(self, team: str, now: datetime, kind: str | None) -> State:
        return team_state(self.con, team, now, kind=kind)


def decide_in_ledger(con, request: Request, now: datetime) -> tuple[Decision, Policy | None]:
    """(decision, policy) for the request against the ledger as `con` sees it (see `decide_with`)."""
    return decide_with(request, now, LedgerFacts(con))


def decide_with(request: Request, now: datetime, facts) -> tuple[Decision, Policy | None]:
    """(decision, policy) for the request against `facts` (a `LedgerFacts` or the like).

    A request whose run ID is booked is refused, unless it is the very request that booked it and
    the reservation still waits for the run: then the answer is the recorded admit (see
    `_recorded_admit`), so a caller that lost the answer can retry safely.
    """
    from lib.gate.admission import decide, reject, unknown_team
    from lib.gate.reasons import reason
    from lib.gate.request import run_id_problem, team_name_problem

    team = request.get("team") if isinstance(request, dict) else None
    # an invalid team or run ID is never looked up (DuckDB refuses e.g. a lone surrogate): rejected by name
    policy = facts.policy(team) if team_name_problem(team) is None else None
    if policy is None:
        return unknown_team(request, known_teams=facts.known_teams(), now=now), None
    if run_id_problem(request.get("run_id")) is None and facts.booked(request["run_id"]):
        replayed = facts.recorded_admit(request, now)
        if replayed is not None:
            return replayed, policy
        return reject(request, [reason(
            "invalid-request", f"run_id {request['run_id']!r} already holds a reservation or has run",
            fix="choose a new run_id (one run ID per submission)", field="run_id")], now=now), policy
    kind = request.get("kind")
    state = facts.state(team, now, kind if kind in KINDS else None)
    return decide(request, policy, state), policy


def check_request(request: Request, *, db=None, now=None, timeout_s: float = 10.0) -> Decision:
    """The what-if: the decision submit would give now, from a read-only open. Writes nothing.

    For a request already admitted and still waiting for its run, that is the recorded admit.
    """
    now = naive_utc(now) or utcnow()
    with open_ledger(db, read_only=True, timeout_s=timeout_s) as con:
        decision, _ = decide_in_ledger(con, request, now)
    return decision


def canonical_json(obj) -> str:
    """The JSON a decision and its request are recorded as: sorted keys, so equal dicts give equal text."""
    return json_text(obj, sort_keys=True)


# estimate item columns <- item keys that decide() may use (first match wins)
_EST_ITEMS = {
    "est_compute_gpu_hours": ("compute",),   # compute_typical + compute_worst_case
    "est_checkpoint_gpu_hours": ("checkpoint",),
    "est_eval_gpu_hours": ("eval", "evaluation"),
    "est_data_loading_gpu_hours": ("data_loading", "data-loading", "dataloading"),
    "est_restart_gpu_hours": ("restart", "restarts", "lost_work", "restarts_and_lost_work"),
}


def estimate_items(items: dict | None) -> dict:
    """Map an estimate's itemised GPU-hours onto the runs table's est_* columns (summing parts).

    A stated estimate has no items (its only key is 'stated'): its est_* columns stay NULL.
    """
    out = dict.fromkeys(_EST_ITEMS)
    for key, value in (items or {}).items():
        v = finite_number(value)
        if v is None:
            continue
        k = key.lower().removesuffix("_gpu_hours")
        for col, names in _EST_ITEMS.items():
            if any(k == n or k.startswith(n) for n in names):
                out[col] = (out[col] or 0.0) + v
                break
    return out


@contextlib.contextmanager
def writer_turn(db=None, timeout_s: float = 10.0):
    """Wait for this process's turn among the gate's writers of this ledger; yields the time left.

    Submitters on one machine queue on a cheap OS lock (flock on `<ledger>.writer-lock`) instead of
    all polling DuckDB's file lock at once: with 20 submitters, polling DuckDB starves the process
    that holds the file of CPU on a small machine. The wait blocks in the kernel's queue of that
    lock, so writers get their turns in the order they arrived. DuckDB's own lock (and lib.ledger.connection's
    bounded retry) still guards against every other process (the app, an import). Without fcntl
    (Windows) this is a no-op. Raises LedgerLocked after `timeout_s` seconds.
    """
    if fcntl is None:  # pragma: no cover - not on Linux
        yield timeout_s
        return
    started = time.monotonic()
    path = ledger_path(db)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _lock_in_turn(_writer_lock_file(path), timeout_s)
    if fd is None:
        raise LedgerLocked(
            f"ledger {path} is locked by another process (waited {time.monotonic() - started:.1f} s "
            f"for other submitters, timeout {timeout_s:.1f} s); try again when they have finished")
    try:
        yield max(0.05, timeout_s - (time.monotonic() - started))
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _lock_in_turn(lock_path, timeout_s: float) -> int | None:
    """A descriptor holding an exclusive flock on `lock_path`, or None after `timeout_s` seconds.

    flock has no timeout, so a helper thread makes the blocking call while this thread waits at
    most `timeout_s`. When this thread stops waiting first, the descriptor is the helper's: it
    closes it (releasing the lock at once) when the kernel grants the lock.
    """
    owner_only_files()
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        pass
    except BaseException:
        os.close(fd)
        raise
    guard, granted = threading.Lock(), threading.Event()
    gave_up: list[bool] = []
    failed: list[OSError] = []

    def wait() -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            failed.append(exc)
        with guard:
            if gave_up:
                os.close(fd)
            else:
                granted.set()

    threading.Thread(target=wait, name="ledger-writer-turn", daemon=True).start()
    try:
        granted.wait(timeout_s)
    finally:
        with guard:
            if not granted.is_set():
                gave_up.append(True)
    if gave_up:
        return None
    if failed:
        os.close(fd)
        raise failed[0]
    return fd


def _writer_lock_file(ledger: Path) -> Path:
    """The file writers of `ledger` take turns on."""
    return ledger.with_name(ledger.name + ".writer-lock")


@contextlib.contextmanager
def _write_ledger(db, timeout_s: float):
    """The ledger opened for writing in this process's writer turn (see `writer_turn`).

    Raises LedgerLocked when the turn and DuckDB's file lock together take longer than `timeout_s`
    seconds; its message reports the whole time waited, both locks included.
    """
    started = time.monotonic()
    lock_file = _writer_lock_file(ledger_path(db))
    lock_existed = lock_file.exists()
    with writer_turn(db, timeout_s) as left_s, contextlib.ExitStack() as stack:
        try:
            con = stack.enter_context(open_ledger(db, read_only=False, timeout_s=left_s))
        except NotALedger:   # someone else's file: leave nothing of ours beside it
            if not lock_existed:
                lock_file.unlink(missing_ok=True)
            raise
        except LedgerLocked as exc:
            raise LedgerLocked(
                f"ledger {ledger_path(db)} is locked by another process (waited "
                f"{time.monotonic() - started:.1f} s, timeout {timeout_s:.1f} s); try again when the "
                "import or submit holding it has finished") from exc
        yield con


def submit_request(request: Request, *, db=None, origin: str = "cli", now=None,
                   timeout_s: float = 10.0, actor: str | None = None) -> Decision:
    """Decide and record (with `actor`, who asked, when known), in one write transaction; on admit
    the run becomes a reservation.

    Resubmitting the very request that was admitted (the caller lost the answer) records nothing
    new: the answer is the recorded admit, marked "replayed" (see `_recorded_admit`). Waits at most
    `timeout_s` seconds for the ledger, then raises LedgerLocked.
    """
    now = naive_utc(now) or utcnow()
    with deciding_in_process(ledger_path(db).resolve()), _write_ledger(db, timeout_s) as con:
        with transaction(con):
            decision, policy = decide_in_ledger(con, request, now)
            record_decision(con, request, decision, origin, now, actor=actor)
    return decision


def booked_reservation(request: Request, decision: Decision, now: datetime) -> Reservation:
    """The reservation an admit decided at `now` books (as `held_reservations` reads it back):
    from `now` for the estimate's wall-clock hours (else the request's max_runtime_hours)."""
    est = decision["estimate"] or {}
    wall_h = finite_number(est.get("wall_hours")) or finite_number(request["max_runtime_hours"])
    return {"run_id": request["run_id"], "team": request["team"], "kind": request["kind"],
            "gpus": int(request["gpus"]), "reserved_gpu_hours": finite_number(decision["reserved_gpu_hours"]),
            # whole seconds: schedulers report start times in whole seconds, and a job started in the
            # second it was admitted must not look as if it started before its reservation
            "reserved_from": now.replace(microsecond=0),
            "reserved_until": now + timedelta(hours=wall_h) if wall_h is not None else None}


def record_decision(con, request: Request, decision: Decision, origin: str, now: datetime, *,
                    actor: str | None = None) -> None:
    """Append the decision (`actor`: who asked, when known); on admit, book the run. A replayed
    decision is already recorded: no-op."""
    record_decisions(con, [(request, decision, origin, now, actor)])


_DECISION_COLS = ("decided_at", "run_id", "team", "kind", "state", "reason_codes", "judged_gpu_hours",
                  "reserved_gpu_hours", "policy_version", "origin", "request_json", "decision_json", "actor")
_PILOT_COLS = ("run_id", "measured_at", "steps_per_second", "worst_case_steps_per_second", "worst_case_share",
               "peak_mem_gb", "checkpoint_write_s", "planned_steps", "checkpoint_interval_steps", "pilot_json")


def record_decisions(con, decided: list[tuple[Request, Decision, str, datetime, str | None]]) -> None:
    """`record_decision` for many (request, decision, origin, decided_at, actor), in order, with one
    multi-row statement per table: a batch of 50 costs about what one decision costs (DuckDB's cost
    is per statement, ~2-3 ms)."""
    decided = [d for d in decided if d[1].get("replayed") is not True]
    if not decided:
        return
    rows, runs, pilots = [], [], []
    for request, decision, origin, now, actor in decided:
        est = decision["estimate"] or {}
        req = request if isinstance(request, dict) else {}
        rows.append([now, decision["run_id"], decision["team"], decision["kind"], decision["state"],
                     [r["code"] for r in decision["reasons"]], finite_number(est.get("judged_gpu_hours")),
                     finite_number(decision["reserved_gpu_hours"]), decision["policy_version"], origin,
                     canonical_json(request), canonical_json(decision), actor])
        if decision["state"] != "admit":
            continue
        runs.append(_booked_run_row(req, decision, now))
        pilot = req.get("pilot")
        if isinstance(pilot, dict):
            pilots.append([req["run_id"], now, finite_number(pilot["steps_per_second"]),
                           finite_number(pilot.get("worst_case_steps_per_second")),
                           finite_number(pilot.get("worst_case_share")), finite_number(pilot["peak_mem_gb"]),
                           finite_number(pilot.get("checkpoint_write_s")), _int(pilot["planned_steps"]),
                           _int(pilot.get("checkpoint_interval_steps")), canonical_json(pilot)])
    _insert_rows(con, "decisions", _DECISION_COLS, rows)
    if runs:
        cols = list(runs[0])
        # a plain INSERT costs ~3 ms where INSERT ... ON CONFLICT costs ~13 ms (measured on DuckDB 2.0.1);
        # a row that exists (an imported estimate) is updated
        existing = {r[0] for r in con.execute("SELECT run_id FROM runs WHERE list_contains(?, run_id)",
                                              [[r["run_id"] for r in runs]]).fetchall()}
        for row in runs:
            if row["run_id"] in existing:
                con.execute(f"UPDATE runs SET {', '.join(f'{c} = ?' for c in cols[1:])} WHERE run_id = ?",
                            [row[c] for c in cols[1:]] + [row["run_id"]])
        _insert_rows(con, "runs", cols, [[row[c] for c in cols] for row in runs if row["run_id"] not in existing])
    _insert_rows(con, "pilots", _PILOT_COLS, pilots)


def _booked_run_row(req: dict, decision: Decision, now: datetime) -> dict:
    """The runs row an admit writes (the reservation and the estimate)."""
    est = decision["estimate"] or {}
    held = booked_reservation(req, decision, now)
    return {
        "run_id": req["run_id"], "team": req["team"], "kind": req["kind"],
        "capacity": req["capacity"], "gpus": held["gpus"],
        "gpu_mem_gb": finite_number(req["gpu_mem_gb"]), "data_snapshot": req.get("data_snapshot"),
        "job_name": req.get("note"),
        "estimated_gpu_hours": finite_number(est["raw_gpu_hours"]),
        "estimate_source": est["source"], **estimate_items(est["items_gpu_hours"]),
        "budget_gpu_hours": finite_number(req["budget_gpu_hours"]),
        "max_runtime_hours": finite_number(req["max_runtime_hours"]),
        "reserved_from": held["reserved_from"], "reserved_until": held["reserved_until"],
        "reserved_gpu_hours": held["reserved_gpu_hours"],
        "holdout_allowance": int(req.get("holdout_allowance") or 0),
        "source": "submit", "updated_at": now,
    }


def _insert_rows(con, table: str, cols, rows: list[list], chunk: int = 200) -> None:
    """INSERT the rows in order, `chunk` rows per statement."""
    one = "(" + ", ".join("?" for _ in cols) + ")"
    for k in range(0, len(rows), chunk):
        part = rows[k:k + chunk]
        con.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES {', '.join(one for _ in part)}",
                    [v for row in part for v in row])


def _int(x):
    v = finite_number(x)
    return int(v) if v is not None else None


# ---------------------------------------------------------------------------------------- finishing

def _check_hours(name, value, *, required=False) -> float | None:
    if value is None:
        if required:
            raise FinishInputError(f"{name} is required")
        return None
    try:
        return checked_number(name, value)
    except InputError as exc:
        raise FinishInputError(str(exc)) from None


def _check_count(name, value) -> int | None:
    if value is None:
        return None
    if type(value) is not int:
        raise FinishInputError(f"{name} must be a whole number >= 0, got {value!r}")
    try:
        return checked_count(name, value, minimum=0)
    except InputError as exc:
        raise FinishInputError(str(exc)) from None


def finish_run(run_id, *, actual_gpu_hours, stop_reason, ended_at=None, started_at=None,
               last_valid_checkpoint=None, interruptions=None, restarts=None, artifact_status=None,
               full_evaluation=None, holdout_reads=None, act_checkpoint_gpu_hours=None,
               act_retry_gpu_hours=None, act_eval_gpu_hours=None, act_lost_work_gpu_hours=None,
               db=None, timeout_s: float = 10.0, who=None) -> dict:
    """Record a run's actuals and how it stopped against its run ID; returns the updated run row.
    The write is recorded in the audit in the same transaction (action "finish": the run ID and stop
    reason) as `who` (a lib.ledger.audit.Who; default: the OS user on the command line).

    ended_at defaults to now, started_at to what the ledger has (else the reservation start).
    artifact_status defaults from the stop reason: budget / wall-clock / failed-steps -> incomplete,
    completed / early-stop -> complete, anything else -> none. The act_* items are parts of
    actual_gpu_hours (the rest is useful compute), so they may not sum to more than it.
    Raises UnknownRun for a run ID not in the ledger, FinishInputError (an InputError) for bad values.
    """
    actual = _check_hours("actual_gpu_hours", actual_gpu_hours, required=True)
    if stop_reason not in STOP_REASONS:
        raise FinishInputError(f"stop_reason must be one of {', '.join(STOP_REASONS)}; got {stop_reason!r}")
    items = {
        "act_checkpoint_gpu_hours": _check_hours("act_checkpoint_gpu_hours", act_checkpoint_gpu_hours),
        "act_retry_gpu_hours": _check_hours("act_retry_gpu_hours", act_retry_gpu_hours),
        "act_eval_gpu_hours": _check_hours("act_eval_gpu_hours", act_eval_gpu_hours),
        "act_lost_work_gpu_hours": _check_hours("act_lost_work_gpu_hours", act_lost_work_gpu_hours),
    }
    parts = sum(v for v in items.values() if v is not None)
    if parts > actual * (1 + 1e-9) + 1e-9:
        raise FinishInputError(f"the act_* items sum to {parts:g} GPU-h, more than actual_gpu_hours {actual:g}")
    if artifact_status is None:
        artifact_status = artifact_status_for(stop_reason)
    elif artifact_status not in ARTIFACT_STATUSES:
        raise FinishInputError(f"artifact_status must be one of {', '.join(ARTIFACT_STATUSES)}")
    if stop_reason in INCOMPLETE_STOPS and artifact_status == "complete":
        raise FinishInputError(f"a run stopped for {stop_reason} cannot have a complete artifact")
    interruptions = _check_count("interruptions", interruptions)
    restarts = _check_count("restarts", restarts)
    holdout_reads = _check_count("holdout_reads", holdout_reads)
    if full_evaluation is not None and type(full_evaluation) is not bool:
        raise FinishInputError("full_evaluation must be true or false")
    if last_valid_checkpoint is not None and (type(last_valid_checkpoint) is not str or
                                              len(last_valid_checkpoint) > 2000):
        raise FinishInputError("last_valid_checkpoint must be a string of at most 2000 characters")
    from lib.ledger.audit import command_line, record
    who = who or command_line()
    now = utcnow()
    try:
        ended = naive_utc(ended_at) or now
        started = naive_utc(started_at)
    except ValueError as exc:
        raise FinishInputError(f"ended_at / started_at must be ISO-8601 times: {exc}") from None
    with _write_ledger(db, timeout_s) as con:
        with transaction(con):
            row = con.execute(
                "SELECT started_at, reserved_from FROM runs WHERE run_id = ?", [run_id]).fetchone()
            if row is None:
                raise UnknownRun(f"run {run_id!r} is not in the ledger (submit or import it first)")
            started = started or row[0] or row[1]
            if started is not None and ended < started:
                raise FinishInputError(f"ended_at {ended.isoformat()} is before started_at {started.isoformat()}")
            sets = {
                "actual_gpu_hours": actual, "stop_reason": stop_reason, "ended_at": ended,
                "started_at": started, "artifact_status": artifact_status,
                "last_valid_checkpoint": last_valid_checkpoint, "interruptions": interruptions,
                "restarts": restarts, "full_evaluation": full_evaluation,
                "holdout_reads": holdout_reads, **items, "updated_at": now,
            }
            # keep what the ledger already has for optional fields left unset
            keep = {"last_valid_checkpoint", "interruptions", "restarts", "full_evaluation",
                    "holdout_reads", *items}
            assignments = ", ".join(
                f"{c} = coalesce(?, {c})" if c in keep else f"{c} = ?" for c in sets)
            weeks = team_weeks.weeks_of(con, "SELECT ?", [run_id])
            con.execute(f"UPDATE runs SET {assignments} WHERE run_id = ?", [*sets.values(), run_id])
            team_weeks.refresh(con, weeks | team_weeks.weeks_of(con, "SELECT ?", [run_id]))
            cur = con.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
            names = [d[0] for d in cur.description]
            out = dict(zip(names, cur.fetchone()))
            record(con, who, "finish", updated=1, detail=f"run {run_id}: stopped {stop_reason}")
    return out
