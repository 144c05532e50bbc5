"""The forecast over the ledger: weekly demand and the month's budget burn-down per team, read from the
ledger as of now or as of a past moment (then only what was known by that moment is read) and run through
the planning demand model (lib.planning.forecast.demand). `forecast` is what `python -m lib forecast`
prints, what the Slurm server's run-out days come from (lib.slurm.runouts) and what the pages' forecast
tables are made of (lib.dashboard.forecasts).

Weekly usage (GPU-hours, counted in the UTC week a run started): a run finished by the as-of moment
counts its actual GPU-hours; a run started but not finished by then counts its reserved GPU-hours
(what the gate expected it to use), so the last weeks are not understated by runs still running.
Only complete weeks before the as-of week are history; horizon 1 is the as-of week itself.
Every team's model is fitted (the pooled bands of a team with a short history need them all), once per
history: lib.planning.forecast.models caches the fits. The burn-down's spend still to come is the same
weekly forecast (lib.planning.forecast.demand.burn_down). Its committed part, when forecasting from now,
is the forward plan's (lib.ledger.plan.planned_holdings: the reservations the gate holds and the
waiting requests the plan starts before the month ends, each spending what it reserves at its end);
from a past moment, the reservations whose window had begun and not ended. The maths is
lib.planning.forecast.demand.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from lib.gate.terms import HOURS_PER_WEEK, InputError, month_start, next_month_start, utcnow
from lib.ledger.connection import LedgerError, ledger_path, open_ledger
from lib.ledger.plan import planned_holdings
from lib.planning.forecast.demand import (MAX_WEEKS, MIN_RATIOS, TeamForecast, burn_down,
                                          pooled_ratios, team_forecast, team_models)

CACHE_SUFFIX = ".forecast-models.json"   # beside the ledger: its teams' fitted models (lib.planning.forecast.cache)
METHOD = ("per team, the exponential smoothing model (statsmodels ETS: a level, a damped trend, a trend in the log "
          "of demand, or their mean, the default; any with the year-end weeks) whose own backtest missed least; "
          "P50/P90 from that model's own past errors "
          "(empirical quantiles of actual ÷ forecast per horizon)")


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
    """{team: (consumed GPU-hours this month up to as_of, the reservations it holds (reserved_until,
    GPU-hours))}, read for every team at once. `live`: the forward plan's reservations (`holdings`,
    when the caller has the plan; else the plan is made here) that end or start before the month
    ends; else those held at as_of as the ledger shows them."""
    consumed = dict(con.execute(
        "SELECT team, sum(actual_gpu_hours) FROM runs WHERE ended_at >= $start AND ended_at < $as_of "
        "AND list_contains($teams::VARCHAR[], team) GROUP BY team",
        {"start": month_start(as_of), "as_of": as_of, "teams": teams}).fetchall())
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
    return {t: (float(consumed.get(t) or 0.0), held[t]) for t in teams}


def team_forecasts(usage: pd.DataFrame, teams: list[str], first_week: dt.date,
                   cache: Path | None = None) -> dict[str, TeamForecast]:
    """The weekly forecast (MAX_WEEKS weeks from `first_week`) of each of `teams` from `usage` (every
    team's weekly usage: a team with a short history borrows the pooled bands of them all). `cache`:
    the file of fitted models (lib.planning.forecast.cache)."""
    series = {t: g["gpu_hours"].to_numpy(float) for t, g in usage.groupby("team", sort=True)}
    models = team_models({t: series.get(t, np.zeros(0)) for t in teams}, first_week, cache)
    pooled = None
    if any(min(r.size for r in m["ratios"]) < MIN_RATIOS for m in models.values()):
        pooled = pooled_ratios(team_models(series, first_week, cache).values())
    return {t: team_forecast(m, first_week, pooled) for t, m in models.items()}


def model_cache(db) -> Path:
    """The file beside the ledger that keeps its teams' fitted models between processes."""
    path = ledger_path(db)
    return path.with_name(path.name + CACHE_SUFFIX)


def forecast(db=None, *, as_of: dt.datetime | None = None, weeks: int = 8,
             teams: list[str] | None = None, live: bool | None = None, holdings: list | None = None) -> dict:
    """Per team: the chosen model, the next `weeks` weeks' P50/P90 GPU-hours with the quota's weekly
    capacity and the quota that would cover P90, and this month's burn-down from the same forecast
    (consumed, committed, projected month end P50/P90, projected exhaustion day). `as_of` None: now.
    `live` (default: as_of is None): the committed reservations are the gate's own (held now), not
    reconstructed for a past moment (`holdings`: the forward plan's, when the caller has made it). Also `history`: the weekly usage the forecast rests on (team,
    week, gpu_hours). InputError for `weeks` outside 1 .. MAX_WEEKS."""
    if type(weeks) is not int or not 1 <= weeks <= MAX_WEEKS:
        raise InputError(f"weeks must be a whole number from 1 to {MAX_WEEKS}, got {weeks!r}")
    live = as_of is None if live is None else live
    as_of = utcnow() if as_of is None else as_of
    with open_ledger(db, read_only=True) as con:
        try:
            usage = weekly_usage(con, as_of, live=live)
            policy = {t: (q, b) for t, q, b in con.execute(
                "SELECT team, reserved_gpus, monthly_budget_gpu_hours FROM teams").fetchall()}
            names = sorted(t for t in set(usage["team"]) | set(policy) if teams is None or t in teams)
            burn = _burn_inputs(con, [t for t in names if t in policy], as_of, live, holdings)
        except duckdb.Error as exc:  # a damaged block surfaces only when a query reaches it: name the file
            raise LedgerError(f"cannot read ledger {ledger_path(db)}: {exc}") from exc
    first = week_start(as_of)
    demand = team_forecasts(usage, names, first, model_cache(db))
    month_end = (next_month_start(as_of) - dt.timedelta(days=1)).date()
    history = usage[usage["team"].isin(names)].reset_index(drop=True)
    out = {}
    for team in names:
        quota, budget = policy.get(team, (None, None))
        entry = {"quota_gpus": quota,
                 "quota_gpu_hours_per_week": None if quota is None else quota * HOURS_PER_WEEK,
                 "history_weeks": int((history["team"] == team).sum()), "model": demand[team]["model"],
                 "weeks": demand[team]["weeks"][:weeks]}
        if team in burn:
            consumed, held = burn[team]
            entry["burn_down"] = burn_down(budget, consumed, as_of.date(), month_end, demand[team], held)
        out[team] = entry
    return {"as_of": as_of, "method": METHOD, "weeks": weeks, "teams": out, "history": history}
