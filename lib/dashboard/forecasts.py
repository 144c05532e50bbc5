"""The forecast shaped for the pages: the Forecast page's tables (`plan_ahead`, `weeks_ahead`) and this
month's budget outlook that Overview, Reservations and the alerts show (`budget_outlook`), as DataFrames
of the live forecast over the ledger (lib.ledger.forecast.forecast, which reads the ledger and runs the
demand model; nothing is read here).
"""
from __future__ import annotations

import datetime as dt

import pandas as pd

from lib.gate.terms import utcnow
from lib.ledger.forecast import forecast, week_start
from lib.planning.forecast.demand import MAX_WEEKS

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


def budget_outlook(f, db=None, now: dt.datetime | None = None, holdings: list | None = None) -> dict:
    """This month's burn-down (Overview and Reservations), for the filtered teams with a policy, from
    the live forecast: burn (one row per team) and burn_path (team, day, P50/P90). `holdings`: the
    forward plan's, when the caller has made it."""
    result = forecast(db, as_of=now or utcnow(), teams=list(f.teams) or None, live=True, holdings=holdings)
    burn, path = _burn_frames({team: e["burn_down"] for team, e in result["teams"].items() if "burn_down" in e})
    return {"burn": burn, "burn_path": path}


def plan_ahead(f, db=None, now: dt.datetime | None = None) -> dict:
    """The Forecast page's data (a page query: a function of filters, path and now): the
    live forecast for the filtered teams (dates do not apply: a forecast starts now) as tables.
    weeks: team, week_start, horizon, p50/p90 GPU-hours, quota GPU-hours per week, quota for P90, for
    every horizon up to MAX_WEEKS (the page shows the first ones: `weeks_ahead`); models: team, the
    model chosen, weeks of history; history: the last HISTORY_WEEKS_SHOWN weeks of usage; burn: one
    row per team with a budget; burn_path: team, day, p50/p90 projected month-to-date GPU-hours."""
    result = forecast(db, as_of=now, weeks=MAX_WEEKS, teams=list(f.teams) or None, live=True)
    weeks = [{"team": team, **w, "quota_gpu_hours_per_week": e["quota_gpu_hours_per_week"]}
             for team, e in result["teams"].items() for w in e["weeks"]]
    models = [{"team": team, "model": e["model"], "history_weeks": e["history_weeks"]}
              for team, e in result["teams"].items()]
    burn, path = _burn_frames({team: e["burn_down"] for team, e in result["teams"].items() if "burn_down" in e})
    history = result["history"]
    if len(history):
        cut = week_start(result["as_of"]) - dt.timedelta(weeks=HISTORY_WEEKS_SHOWN)
        history = history[history["week"] >= cut].reset_index(drop=True)
    return {"as_of": result["as_of"], "method": result["method"],
            "weeks": pd.DataFrame(weeks, columns=["team", "week_start", "horizon", "p50_gpu_hours", "p90_gpu_hours",
                                                  "quota_gpu_hours_per_week", "quota_for_p90_gpus"]),
            "models": pd.DataFrame(models, columns=["team", "model", "history_weeks"]),
            "history": history, "burn": burn, "burn_path": path}


def weeks_ahead(weeks: pd.DataFrame, horizon: int) -> pd.DataFrame:
    """The rows of `weeks` (plan_ahead's) at most `horizon` weeks ahead."""
    return weeks[weeks["horizon"] <= horizon].reset_index(drop=True)
