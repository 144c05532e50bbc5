"""The forecast read model: weekly demand and the month's budget burn-down per team, from the ledger,
as of now or as of a past moment (then only what was known by that moment is read).

Weekly usage (GPU-hours, counted in the UTC week a run started): a run finished by the as-of moment
counts its actual GPU-hours; a run started but not finished by then counts its reserved GPU-hours
(what the gate expected it to use), so the last weeks are not understated by runs still running.
Only complete weeks before the as-of week are history; horizon 1 is the as-of week itself.
Committed reservations for the burn-down are, when forecasting from now, the forward plan's
(lib.ledger.plan_ledger.planned_holdings: the reservations the gate holds and the waiting requests
the plan starts before the month ends, each spending what it reserves at its end); from a past
moment, those whose window had begun and not ended.
The maths is lib.planning.forecast.
"""
from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd

from lib.dashboard.reading import reader
from lib.gate.terms import InputError, month_start, next_month_start, utcnow
from lib.ledger.plan_ledger import planned_holdings
from lib.planning.forecast import (BURN_HISTORY_DAYS, HOURS_PER_WEEK, MAX_WEEKS, burn_down, pooled_ratios,
                                   weekly_forecast)

METHOD = ("simple exponential smoothing of weekly GPU-hours (α = 0.3), P50/P90 from the method's own past "
          "errors (empirical quantiles of actual ÷ forecast per horizon)")


def week_start(t: dt.datetime | dt.date) -> dt.date:
    """Monday of t's week (UTC)."""
    d = t.date() if isinstance(t, dt.datetime) else t
    return d - dt.timedelta(days=d.weekday())


def weekly_usage(con, as_of: dt.datetime, teams: list[str] | None = None, *, live: bool = False) -> pd.DataFrame:
    """team, week (Monday), gpu_hours for every complete week before as_of's week, as known at as_of
    (missing weeks between a team's first week and the last complete week filled with 0). `live`
    (as_of is now): read from the ledger's team_weeks, which every write keeps (each run as the
    ledger holds it now: actual once ended, else reserved), instead of summing the whole history."""
    last = week_start(as_of)
    if live:
        df = con.execute("""
            SELECT team, week, gpu_hours FROM team_weeks WHERE week < $last
              AND ($teams IS NULL OR list_contains($teams::VARCHAR[], team)) ORDER BY team, week""",
                         {"last": last, "teams": teams}).df()
    else:
        df = con.execute("""
            SELECT team, date_trunc('week', started_at)::DATE AS week,
                   sum(CASE WHEN ended_at IS NOT NULL AND ended_at <= $as_of THEN coalesce(actual_gpu_hours, 0)
                            ELSE coalesce(reserved_gpu_hours, 0) END) AS gpu_hours
            FROM runs WHERE started_at IS NOT NULL AND started_at < $last
              AND ($teams IS NULL OR list_contains($teams::VARCHAR[], team))
            GROUP BY ALL ORDER BY team, week""",
                         {"as_of": as_of, "last": dt.datetime.combine(last, dt.time()), "teams": teams}).df()
    frames = []
    for team, g in df.groupby("team", sort=True):
        weeks = pd.date_range(pd.Timestamp(g["week"].min()), pd.Timestamp(last) - pd.Timedelta(weeks=1), freq="7D")
        full = g.set_index(pd.to_datetime(g["week"]))["gpu_hours"].reindex(weeks, fill_value=0.0)
        frames.append(pd.DataFrame({"team": team, "week": weeks.date, "gpu_hours": full.to_numpy(float)}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["team", "week", "gpu_hours"])


def _burn_inputs(con, teams: list[str], as_of: dt.datetime, live: bool, holdings: list | None = None) -> dict:
    """{team: (consumed GPU-hours this month up to as_of, its daily spend over the BURN_HISTORY_DAYS
    days before as_of's day, oldest first, the reservations it holds (reserved_until, GPU-hours))},
    read for every team at once, each over its time range only (so a long history is not scanned).
    `live`: the forward plan's reservations (`holdings`, when the caller has the plan); else those held
    at as_of as the ledger shows them."""
    start = month_start(as_of)
    day0 = dt.datetime.combine(as_of.date(), dt.time())
    first = day0 - dt.timedelta(days=BURN_HISTORY_DAYS)
    consumed = dict(con.execute(
        "SELECT team, sum(actual_gpu_hours) FROM runs WHERE ended_at >= $start AND ended_at < $as_of "
        "AND list_contains($teams::VARCHAR[], team) GROUP BY team",
        {"start": start, "as_of": as_of, "teams": teams}).fetchall())
    daily = {t: [0.0] * BURN_HISTORY_DAYS for t in teams}
    for team, day, hours in con.execute(
            "SELECT team, date_diff('day', $first, date_trunc('day', ended_at)) AS day, sum(actual_gpu_hours) "
            "FROM runs WHERE ended_at >= $first AND ended_at < $day0 AND list_contains($teams::VARCHAR[], team) "
            "GROUP BY ALL", {"first": first, "day0": day0, "teams": teams}).fetchall():
        daily[team][day] = float(hours or 0.0)
    held = {t: [] for t in teams}
    if live:
        month_end = next_month_start(as_of)
        for h in planned_holdings(con, as_of, month_end) if holdings is None else holdings:
            if h["team"] in held and (not h["planned"] or h["start"] < month_end):
                held[h["team"]].append((h["end"], h["gpu_hours"]))
    else:
        for team, until, hours in con.execute("""SELECT team, reserved_until, reserved_gpu_hours FROM runs
                WHERE list_contains($teams::VARCHAR[], team) AND reserved_gpu_hours IS NOT NULL
                AND reserved_from <= $as_of AND (ended_at IS NULL OR ended_at > $as_of)
                AND (reserved_until IS NULL OR reserved_until > $as_of)""", {"teams": teams, "as_of": as_of}).fetchall():
            held[team].append((until, hours))
    return {t: (float(consumed.get(t) or 0.0), daily[t], held[t]) for t in teams}


def forecast(db=None, *, as_of: dt.datetime | None = None, weeks: int = 8,
             teams: list[str] | None = None, live: bool | None = None) -> dict:
    """Per team: the next `weeks` weeks' P50/P90 GPU-hours with the quota's weekly capacity and the
    quota that would cover P90, and this month's burn-down (consumed, committed, projected month end
    P50/P90, projected exhaustion day). `as_of` None: now. `live` (default: as_of is None): the
    committed reservations are the gate's own (held now), not reconstructed for a past moment.
    Also `history`: the weekly usage the forecast rests on (team, week, gpu_hours). InputError for
    `weeks` outside 1 .. MAX_WEEKS."""
    if type(weeks) is not int or not 1 <= weeks <= MAX_WEEKS:
        raise InputError(f"weeks must be a whole number from 1 to {MAX_WEEKS}, got {weeks!r}")
    live = as_of is None if live is None else live
    as_of = utcnow() if as_of is None else as_of
    with reader(db) as con:
        usage = weekly_usage(con, as_of, teams, live=live)
        policy = {t: (q, b) for t, q, b in con.execute(
            "SELECT team, reserved_gpus, monthly_budget_gpu_hours FROM teams").fetchall()}
        names = sorted(set(usage["team"]) | ({t for t in policy if teams is None or t in teams}))
        burn = _burn_inputs(con, [t for t in names if t in policy], as_of, live)
    series = {t: g["gpu_hours"].to_numpy(float) for t, g in usage.groupby("team", sort=True)}
    pooled = pooled_ratios(series.values(), weeks)
    first = week_start(as_of)
    month_end = (next_month_start(as_of) - dt.timedelta(days=1)).date()
    out = {}
    for team in names:
        quota, budget = policy.get(team, (None, None))
        rows = weekly_forecast(series.get(team, np.zeros(0)), first, weeks, pooled)
        entry = {"quota_gpus": quota,
                 "quota_gpu_hours_per_week": None if quota is None else quota * HOURS_PER_WEEK,
                 "history_weeks": int(series.get(team, np.zeros(0)).size), "weeks": rows}
        if team in burn:
            consumed, daily, held = burn[team]
            entry["burn_down"] = burn_down(budget, consumed, as_of.date(), month_end, daily, held)
        out[team] = entry
    return {"as_of": as_of, "method": METHOD, "weeks": weeks, "teams": out, "history": usage}


HISTORY_WEEKS_SHOWN = 26
# the run-out dates right after the team, so they stay in view on a narrow screen
BURN_COLUMNS = ["team", "exhausts_p50", "exhausts_p90", "budget_gpu_hours", "consumed_gpu_hours",
                "committed_gpu_hours", "days_left", "p50_month_end_gpu_hours", "p90_month_end_gpu_hours"]


def _burn_frames(burns: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per team, the projected path per team and day) from {team: BurnDown}."""
    rows, path = [], []
    for team, b in burns.items():
        rows.append({"team": team, **{k: v for k, v in b.items() if k != "path"}})
        path += [{"team": team, **row} for row in b["path"]]
    return (pd.DataFrame(rows, columns=BURN_COLUMNS),
            pd.DataFrame(path, columns=["team", "day", "p50_gpu_hours", "p90_gpu_hours"]))


def budget_outlook(f, db=None, now: dt.datetime | None = None) -> dict:
    """This month's burn-down alone (no demand forecast: cheap enough for Overview and Reservations),
    for the filtered teams with a policy: burn (one row per team) and burn_path (team, day, P50/P90)."""
    now = now or utcnow()
    with reader(db) as con:
        return outlook_in(con, f, now)


def outlook_in(con, f, now: dt.datetime, holdings: list | None = None) -> dict:
    """budget_outlook through the caller's open ledger, on the forward plan's `holdings` when the caller
    has them (else the plan is made here)."""
    month_end = (next_month_start(now) - dt.timedelta(days=1)).date()
    policy = dict(con.execute("SELECT team, monthly_budget_gpu_hours FROM teams ORDER BY team").fetchall())
    teams = [t for t in policy if not f.teams or t in f.teams]
    burns = {team: burn_down(policy[team], consumed, now.date(), month_end, daily, held)
             for team, (consumed, daily, held) in _burn_inputs(con, teams, now, True, holdings).items()}
    burn, path = _burn_frames(burns)
    return {"burn": burn, "burn_path": path}


def plan_ahead(f, db=None, now: dt.datetime | None = None) -> dict:
    """The Forecast page's data (a page query: a function of filters, path and now): the
    live forecast for the filtered teams (dates do not apply: a forecast starts now) as tables.
    weeks: team, week_start, p50/p90 GPU-hours, quota GPU-hours per week, quota for P90;
    history: the last HISTORY_WEEKS_SHOWN weeks of usage; burn: one row per team with a budget;
    burn_path: team, day, p50/p90 projected month-to-date GPU-hours."""
    result = forecast(db, as_of=now, teams=list(f.teams) or None, live=True)
    weeks = [{"team": team, **w, "quota_gpu_hours_per_week": e["quota_gpu_hours_per_week"]}
             for team, e in result["teams"].items() for w in e["weeks"]]
    burn, path = _burn_frames({team: e["burn_down"] for team, e in result["teams"].items() if "burn_down" in e})
    history = result["history"]
    if len(history):
        cut = week_start(result["as_of"]) - dt.timedelta(weeks=HISTORY_WEEKS_SHOWN)
        history = history[history["week"] >= cut].reset_index(drop=True)
    return {"as_of": result["as_of"], "method": result["method"],
            "weeks": pd.DataFrame(weeks, columns=["team", "week_start", "horizon", "p50_gpu_hours", "p90_gpu_hours",
                                                  "quota_gpu_hours_per_week", "quota_for_p90_gpus"]),
            "history": history, "burn": burn, "burn_path": path}
