"""A team's policy and state as the gate reads them from the ledger: the `policy` and `state` that
`lib.gate.admission.decide(request, policy, state)` takes, and the held reservations that count
against a quota (the dashboard's capacity views read the same ones).
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Callable

from lib.gate.contracts import CapacityWindow, InterruptionRate, Policy, PoolState, Reservation, State
from lib.gate.terms import INTERRUPTING_EVENTS, month_start, naive_utc, next_month_start, utcnow
from lib.ledger.calibration_rows import CALIBRATION_WINDOW_DAYS, calibration
from lib.ledger.cluster_windows import read_windows
from lib.ledger.teams_file import LATER_KEYS, POLICY_FIELDS


BOOKED = "(reserved_gpu_hours IS NOT NULL OR started_at IS NOT NULL OR ended_at IS NOT NULL)"  # a runs row's run ID is taken


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
    for key, default in LATER_KEYS.items():   # NULL in rows written before the key existed
        if policy[key] is None:
            policy[key] = default
    return policy


# Hours after a run's time limit (start + max_runtime_hours) with no end recorded before it is listed
# for the operator (`unended_past_limit`). Slurm kills a job at its limit; the epilog or the next sacct
# import records the end within minutes to a few hours (an import usually runs every few hours), so
# 6 hours past the limit with no end means the ledger missed it (an epilog that failed, a job that
# ran elsewhere): a person should check the job. The run still holds its accelerators: never freed silently.
OVERDUE_GRACE_HOURS = 6.0

# The columns of a reservation as `held_reservation` reads them (held_reservations, and the gate
# server's in-memory copy, lib.slurm.live); `start` is when it started holding as started.
HELD_COLUMNS = ("r.run_id, r.team, r.kind, r.gpus, r.reserved_gpu_hours, r.reserved_from, r.reserved_until, "
                "r.capacity, coalesce(r.started_at, r.reserved_from) AS start, r.estimated_gpu_hours, "
                "r.max_runtime_hours")


def held_condition(alias: str = "r", now: str = "$now") -> str:
    """The SQL condition selecting the reservations that count against their team's quota and pool at
    the time bound to `now` (a named placeholder such as $now: it appears twice): admitted
    (reserved_gpu_hours set), not ended (ended_at unset), and either started (coalesce(started_at,
    reserved_from) at or before now: held until the ledger knows its end, whatever its planned end)
    or with a window that has not passed (reserved_until unset or after now: one starting later
    counts too). The gate's state, the dashboard's earliest fit and committed budget and the forward
    plan use it (the gate server, lib.slurm.live, applies `held_reservation` to its own copy)."""
    p = f"{alias}." if alias else ""
    return (f"{p}reserved_gpu_hours IS NOT NULL AND {p}ended_at IS NULL "
            f"AND ({p}reserved_until IS NULL OR {p}reserved_until > {now} "
            f"OR coalesce({p}started_at, {p}reserved_from) <= {now})")


def overrun_end(start: datetime, gpus: int, estimated_gpu_hours: float | None, upper_factor: float | None,
                max_runtime_hours: float | None, now: datetime) -> datetime | None:
    """When a run that outlived its reservation (started at `start`, not ended, its planned end at or
    before `now`) is expected to end: at `start` + its estimate (GPU-hours) x its team x kind
    calibration's `upper_factor` / `gpus` hours, the calibrated upper bound of its time; if that is
    unknown or not after `now`, at `start` + `max_runtime_hours` (its time limit); if that is unknown
    or not after `now` either, None: no known end (lib.gate.capacity holds it indefinitely)."""
    bound = (estimated_gpu_hours * upper_factor / gpus
             if estimated_gpu_hours is not None and upper_factor is not None and gpus > 0 else None)
    for hours in (bound, max_runtime_hours):
        if hours is not None and start + timedelta(hours=hours) > now:
            return start + timedelta(hours=hours)
    return None


def held_reservation(row: tuple, now: datetime,
                     upper_factor: Callable[[str, str], float | None]) -> Reservation | None:
    """The Reservation a HELD_COLUMNS `row` of an admitted, unended run holds at `now`; None when it
    holds nothing (its window passed before it started). A started run past its planned end is held
    until `overrun_end` (`upper_factor(team, kind)`: its calibration's upper factor, asked only
    then), with `overrun` True and its `planned_until`; `past_limit` True once `now` is
    OVERDUE_GRACE_HOURS past its time limit (without one, past its reservation's planned end) (see `unended_past_limit`)."""
    run_id, team, kind, gpus, hours, reserved_from, until, capacity, start, estimate, limit = row
    held: Reservation = {"run_id": run_id, "team": team, "kind": kind, "gpus": int(gpus),
                         "reserved_gpu_hours": float(hours), "reserved_from": reserved_from,
                         "reserved_until": until, "capacity": capacity}
    if until is None or until > now:
        return held
    if start is None or start > now:
        return None
    # a run with no time limit is due at its reservation's planned end: never held unflagged for ever
    due = start + timedelta(hours=limit) if limit is not None else until
    return {**held, "reserved_until": overrun_end(start, int(gpus), estimate, upper_factor(team, kind), limit, now),
            "overrun": True, "planned_until": until,
            "past_limit": due + timedelta(hours=OVERDUE_GRACE_HOURS) <= now}


def held_row(booked: Reservation, start: datetime | None, estimated_gpu_hours: float | None,
             max_runtime_hours: float | None) -> tuple:
    """A HELD_COLUMNS row of a `booked` reservation (lib.ledger.recording.booked_reservation) not
    yet read back from the ledger, for `held_reservation`."""
    return (booked["run_id"], booked["team"], booked["kind"], booked["gpus"], booked["reserved_gpu_hours"],
            booked["reserved_from"], booked["reserved_until"], booked.get("capacity"), start,
            estimated_gpu_hours, max_runtime_hours)


def held_reservations(con, now: datetime, team: str | None = None) -> list[Reservation]:
    """The reservations that count against quotas and pools at `now` (see `held_condition`,
    `held_reservation`), of `team` or of every team, ordered by run ID, each with its capacity type
    (the pool it holds in). An overrunning run's expected end reads its team x kind calibration
    (lib.ledger.calibration_rows.calibration at `now`, once per team and kind)."""
    sql = (f"SELECT {HELD_COLUMNS} FROM runs r WHERE {held_condition('r', '$now')}"
           + (" AND r.team = $team" if team is not None else "") + " ORDER BY r.run_id")
    rows = con.execute(sql, {"now": now} if team is None else {"now": now, "team": team}).fetchall()
    factors: dict[tuple[str, str], float | None] = {}

    def upper(t: str, k: str) -> float | None:
        if (t, k) not in factors:
            factors[(t, k)] = calibration(con, t, k, now)["upper_factor"]
        return factors[(t, k)]
    return [h for h in (held_reservation(r, now, upper) for r in rows) if h is not None]


def unended_past_limit(con, now: datetime, team: str | None = None) -> list[Reservation]:
    """The held runs (of `team`, or every team's) with no end recorded OVERDUE_GRACE_HOURS after their
    time limit at `now`: the operator should check the job (it still holds its accelerators). Each as
    `held_reservations` gives it (`past_limit` True), by run ID."""
    return [h for h in held_reservations(con, now, team) if h.get("past_limit")]


def pool_sizes(con) -> dict[str, int]:
    """The cluster's accelerators per pool (capacity type), from the ledger's pools table."""
    return {p: int(g) for p, g in con.execute("SELECT pool, gpus FROM pools ORDER BY pool").fetchall()}


def pool_states(sizes: dict[str, int], held: list[Reservation], windows: list[CapacityWindow]) -> dict[str, PoolState]:
    """Each pool's state for `decide` (lib.gate.contracts.PoolState): its accelerators, the `held`
    reservations (every team's, run-ID order) of its capacity type, and the scheduler's `windows`."""
    return {name: {"name": name, "gpus": gpus, "reservations": [r for r in held if r.get("capacity") == name],
                   "windows": [w for w in windows if w["pool"] in (None, name)]}
            for name, gpus in sizes.items()}


def team_state(con, team, now=None, *, kind: str | None = None, rate: bool = True,
               window_days: int = CALIBRATION_WINDOW_DAYS) -> State:
    """The team's state at `now`: the `state` dict `decide` takes (now, reservations,
    period_spent_gpu_hours, snapshots, calibration_history, calibration).

    reservations: `held_reservations` of the team. period_spent_gpu_hours: actual GPU-hours of
    the team's runs that ended in now's calendar month (UTC). calibration: the correction for the
    team's `kind` runs (see `calibration`), read scope by scope from the ledger; None when no kind
    is given. interruption_rate: `interruption_rate`, or None without `rate` (a request on other than
    preemptible capacity, whose estimate it does not price). pools: when the ledger has pools, each with every team's held reservations on it and
    the scheduler's windows not ended by now (`pool_states`).
    """
    now = naive_utc(now) or utcnow()
    spent = con.execute(
        "SELECT coalesce(sum(actual_gpu_hours), 0) FROM runs "
        "WHERE team = ? AND ended_at >= ? AND ended_at < ?",
        [team, month_start(now), next_month_start(now)]).fetchone()[0]
    snapshots = {r[0] for r in con.execute(
        "SELECT snapshot FROM snapshots WHERE team = ? OR team IS NULL", [team]).fetchall()}
    sizes = pool_sizes(con)
    held = held_reservations(con, now) if sizes else None
    return {
        "now": now,
        "reservations": ([r for r in held if r["team"] == team] if held is not None
                         else held_reservations(con, now, team)),
        "period_spent_gpu_hours": float(spent),
        "snapshots": snapshots,
        "calibration_history": [],
        "calibration": (calibration(con, team, kind, now, window_days=window_days)
                        if kind is not None else None),
        "interruption_rate": interruption_rate(con, team, now, window_days=window_days) if rate else None,
        **({"pools": pool_states(sizes, held, read_windows(con, now))} if sizes else {}),
    }


MIN_RATE_RUNS = 20   # preemptible runs a team needs before its own interruption rate is used
_EVENTS_SQL = ", ".join(f"'{e}'" for e in INTERRUPTING_EVENTS)
# per run: the interruption events the ledger holds for it (rows of `interruptions` that are
# preempted, requeued or node-fail, recorded by `recover` or an sacct import); join it as `m`
MEASURED_EVENTS = (f"(SELECT run_id, count(*) AS n FROM interruptions WHERE event IN ({_EVENTS_SQL}) "
                   "GROUP BY run_id)")


def run_interruptions(alias: str = "r", measured: str = "m") -> str:
    """SQL of a run's interruptions as the rates count them: its measured events when the ledger holds
    any, else its recorded `interruptions` count (NULL: none recorded). `alias` is the run, `measured`
    MEASURED_EVENTS LEFT JOINed on run_id."""
    return f"coalesce({measured}.n, {alias}.interruptions)"


def interruption_rate(con, team: str, now: datetime, *,
                      window_days: int = CALIBRATION_WINDOW_DAYS) -> InterruptionRate | None:
    """Interruptions per GPU-hour observed on preemptible capacity over the finished runs of the
    calibration window (actual GPU-hours > 0) whose interruptions are known: each run counts its
    interruption events in the ledger when it has any, else its recorded count (`run_interruptions`);
    the team's rate when it has MIN_RATE_RUNS such runs, else everyone's; None when nobody has any
    (or no GPU-hours). source: "measured" when every run counted events, "counts" when none did,
    "mixed" otherwise."""
    return interruption_rates(con, [team], now, window_days=window_days)[team]


def interruption_rates(con, teams: list[str], now: datetime, *,
                       window_days: int = CALIBRATION_WINDOW_DAYS) -> dict[str, InterruptionRate | None]:
    """`interruption_rate` of each of `teams`, from one read of the window's runs (each team's sums and
    everyone's, as grouping sets of one query)."""
    sums: dict = {}
    for team, *row in con.execute(
            f"WITH w AS (SELECT r.team, r.actual_gpu_hours AS h, {run_interruptions()} AS n, "
            f"m.n IS NOT NULL AS measured FROM runs r LEFT JOIN {MEASURED_EVENTS} m ON m.run_id = r.run_id "
            "WHERE r.capacity = 'preemptible' AND r.ended_at > $since AND r.ended_at <= $now "
            "AND r.actual_gpu_hours > 0) "
            "SELECT CASE WHEN grouping(team) = 0 THEN team END, count(*), sum(h), sum(n), "
            "count(*) FILTER (WHERE measured) FROM w WHERE n IS NOT NULL GROUP BY GROUPING SETS ((team), ())",
            {"since": now - timedelta(days=window_days), "now": now}).fetchall():
        sums[team] = row
    everyone = sums.get(None, (0, None, None, 0))
    return {team: _rate(sums.get(team, (0, None, None, 0)), everyone) for team in teams}


def _rate(own: tuple, everyone: tuple) -> InterruptionRate | None:
    for scope, (runs, hours, interruptions, measured) in (("team", own), ("all", everyone)):
        if hours and (scope == "all" or runs >= MIN_RATE_RUNS):
            return {"per_gpu_hour": float(interruptions) / float(hours), "scope": scope, "runs": int(runs),
                    "gpu_hours": float(hours), "interruptions": int(interruptions),
                    "source": "measured" if measured == runs else "counts" if measured == 0 else "mixed"}
    return None
