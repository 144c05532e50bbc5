"""Overview's team board: one row per team with a policy, riskiest first, from the one forward plan and
the one burn-down (made once per render and shared).

Per team (GPU-hours unless said):
- budget_gpu_hours: the month's budget; budget_left_gpu_hours: budget less what ended this month
  (consumed) and what admitted reservations hold (committed now), as the gate's period-budget check
  counts them; when the cluster names a shared authority, both are the authority's (every cluster's
  spend and holds, lib.dashboard.cluster_queries.authority_board), as the gate decides against them; left_p50/p90_month_end_gpu_hours: budget less the burn-down's projected month-end spend
  (lib.dashboard.forecasts.budget_outlook; below 0: projected over); exhausts_p50/p90: its run-out day
  (empty: not this month);
- free_gpus_now: the most accelerators a (non-retraining) request of the team would be admitted with now,
  over its capacity types; fewest_free_7d_gpus: the least of that over the next 7 days (each at 00:00
  UTC), the capacity calendar Reservations shows (lib.dashboard.queue_and_calendar.forward_view);
- queued_requests, oldest_wait_hours: the plan's queue (every waiting request of the team);
- unended_past_limit: the team's runs with no end recorded a grace past their time limit, still holding
  their accelerators (lib.ledger.state.unended_past_limit): the operator should check those jobs;
- drift: the kinds whose calibration has a drift alarm (`with_drift`: the alarms Estimate accuracy shows,
  lib.dashboard.estimate_queries.calibration_from, from the calibration rows the plan read too);
- idle_gpu_hours, idle_cost: idle reserved GPU-hours of the period's closed windows and their money at
  [prices] (lib.dashboard.costs; no idle_cost column when no price is set).

Risk order: the earliest P90 run-out day first, then the earliest P50 one (a team without one after
every team with one), then the smallest share of the budget left at month end at P90, then team name.
"""
from __future__ import annotations

import datetime as dt
from collections import Counter

import pandas as pd

from lib.dashboard import costs
from lib.dashboard.cluster_queries import authority_board
from lib.dashboard.estimate_queries import BACKTEST_RUNS, calibration_from
from lib.dashboard.filters import Filters
from lib.dashboard.forecasts import budget_outlook
from lib.dashboard.queue_and_calendar import forward_view
from lib.dashboard.reading import read_frame, reader
from lib.dashboard.run_sql import IDLE_GPU_HOURS
from lib.gate.terms import KINDS, utcnow
from lib.ledger.calibration_scopes import ScopeRows
from lib.ledger.state import unended_past_limit

AHEAD_DAYS = 7     # the days after today whose fewest free accelerators a row shows
BOARD_COLUMNS = ["team", "runs_out_p90", "runs_out_p50", "budget_gpu_hours", "budget_left_gpu_hours",
                 "left_p50_month_end_gpu_hours", "left_p90_month_end_gpu_hours", "free_gpus_now",
                 "fewest_free_7d_gpus", "queued_requests", "oldest_wait_hours", "unended_past_limit", "drift",
                 "idle_gpu_hours", "idle_cost"]


def _free(calendar: pd.DataFrame, today: dt.date) -> dict[str, tuple[int, int | None]]:
    """{team: (free now, fewest free on the AHEAD_DAYS days after today)} from the plan's calendar:
    per day, the most over the team's capacity types."""
    if calendar.empty:
        return {}
    daily = calendar.groupby(["team", "day"], as_index=False)["free_gpus"].max()
    daily["day"] = daily["day"].dt.date
    out = {}
    for team, g in daily.groupby("team"):
        now = g.loc[g["day"] == today, "free_gpus"]
        ahead = g.loc[(g["day"] > today) & (g["day"] <= today + dt.timedelta(days=AHEAD_DAYS)), "free_gpus"]
        out[team] = (int(now.iloc[0]) if len(now) else None, int(ahead.min()) if len(ahead) else None)
    return out


def _drift(alarms: pd.DataFrame) -> dict[str, str]:
    """{team: "kind since YYYY-MM-DD, ..."} for the teams with a drift alarm."""
    out: dict[str, list[str]] = {}
    for row in alarms.itertuples(index=False):
        since = f" since {row.drift_since:%Y-%m-%d}" if pd.notna(row.drift_since) else ""
        out.setdefault(row.team, []).append(f"{row.kind}{since}")
    return {t: ", ".join(kinds) for t, kinds in out.items()}


def with_drift(board: pd.DataFrame, alarms: pd.DataFrame) -> pd.DataFrame:
    """`board` with its drift column filled from the calibration's drift alarms (team, kind,
    drift_since): "kind since YYYY-MM-DD, ..." for a team with one, "" otherwise."""
    drift = _drift(alarms)
    return board.assign(drift=[drift.get(t, "") for t in board["team"]])


def risk_order(board: pd.DataFrame) -> pd.DataFrame:
    """`board` riskiest first (see the module docstring)."""
    share = board["left_p90_month_end_gpu_hours"] / board["budget_gpu_hours"].where(board["budget_gpu_hours"] > 0)
    return (board.assign(_share=share.astype("float64"))
            .sort_values(["runs_out_p90", "runs_out_p50", "_share", "team"], na_position="last", kind="stable")
            .drop(columns="_share").reset_index(drop=True))


def team_board(f: Filters, db=None, now: dt.datetime | None = None) -> dict:
    """The board (`board`, BOARD_COLUMNS, riskiest first), the drift `alarms` it flags (as
    estimate_queries.calibration_shown gives them, for the team and kind filters), the burn-down's
    rows (`burn`, as forecasts.budget_outlook gives them: for the run-out warning), the money's `currency` and
    `pricing_note`, and where budget left comes from (`source`: "authority" or "ledger";
    `authority_error`: why a named authority could not be read). Team filter applies; the period applies to the idle cost only (the budget is this
    month's, the plan starts now)."""
    now = now or utcnow()
    where, p = f.where("r")
    p.update(start=f.start, end=f.end, now=now)
    with reader(db) as con:
        # one read of the calibration rows for the plan's calibrations and the drift alarms' backtests
        scopes = ScopeRows(con, now, replay=BACKTEST_RUNS)
        view = forward_view(con, f, now, scopes=scopes)
        idle = read_frame(con, f"""
          WITH idle AS (SELECT r.team, r.capacity, {IDLE_GPU_HOURS} FROM runs r
                        WHERE {where} AND r.reserved_from >= $start AND r.reserved_from < $end
                          AND r.reserved_until <= $now)
          SELECT team, capacity, sum(late_start_gpu_hours + early_end_gpu_hours + never_used_gpu_hours)
                 AS idle_gpu_hours
          FROM idle GROUP BY ALL ORDER BY team, capacity""", p)
        unended = Counter(h["team"] for h in unended_past_limit(con, now))
    alarms = calibration_from(scopes, list(f.teams) or scopes.teams, f.kinds or KINDS)["alarms"]
    burn = budget_outlook(f, db, now, view["holdings"])["burn"]
    price = costs.pricing(f, db)
    money = costs.idle_money(price, {"by_team_capacity": idle})
    idle_cost = dict(zip(money["by_team"]["team"], money["by_team"]["idle_cost"]))
    idle_hours = idle.groupby("team")["idle_gpu_hours"].sum().to_dict()
    held: dict[str, float] = {}
    for h in view["holdings"]:
        if not h["planned"]:
            held[h["team"]] = held.get(h["team"], 0.0) + h["gpu_hours"]
    free = _free(view["calendar"], now.date())
    rows = []
    for b in burn.to_dict("records"):
        team, budget = b["team"], b["budget_gpu_hours"]
        queue = view["queue_by_team"].get(team)
        now_free, fewest = free.get(team, (None, None))
        rows.append({
            "team": team, "runs_out_p90": b["exhausts_p90"], "runs_out_p50": b["exhausts_p50"],
            "budget_gpu_hours": budget,
            "budget_left_gpu_hours": budget - b["consumed_gpu_hours"] - held.get(team, 0.0),
            "left_p50_month_end_gpu_hours": budget - b["p50_month_end_gpu_hours"],
            "left_p90_month_end_gpu_hours": budget - b["p90_month_end_gpu_hours"],
            "free_gpus_now": now_free, "fewest_free_7d_gpus": fewest,
            "queued_requests": queue["requests"] if queue else 0,
            "oldest_wait_hours": (now - queue["waiting_since"]).total_seconds() / 3600.0 if queue else None,
            "unended_past_limit": unended.get(team, 0), "drift": None,
            "idle_gpu_hours": float(idle_hours.get(team, 0.0)),
            "idle_cost": float(idle_cost.get(team, 0.0)) if price["per_gpu_hour"] else None})
    board = pd.DataFrame(rows, columns=BOARD_COLUMNS)
    shared, error = authority_board(now, f.teams)
    if shared is not None:
        by_team = shared.set_index("team")
        known = board["team"].isin(by_team.index)
        board.loc[known, "budget_gpu_hours"] = board.loc[known, "team"].map(by_team["monthly_budget_gpu_hours"])
        board.loc[known, "budget_left_gpu_hours"] = board.loc[known, "team"].map(by_team["remaining_gpu_hours"])
    for col in ("runs_out_p90", "runs_out_p50"):
        board[col] = pd.to_datetime(board[col])
    for col in ("free_gpus_now", "fewest_free_7d_gpus"):
        board[col] = board[col].astype("Int64")
    for col in ("oldest_wait_hours", "idle_cost"):
        board[col] = board[col].astype("float64")
    if not price["per_gpu_hour"]:   # no price set: no money anywhere, not an empty money column
        board = board.drop(columns="idle_cost")
    return {"board": risk_order(with_drift(board, alarms)), "alarms": alarms, "burn": burn, "currency": price["currency"],
            "pricing_note": costs.pricing_note(price), "source": "ledger" if shared is None else "authority",
            "authority_error": error}


def runout_this_month(burn: pd.DataFrame) -> list[dict]:
    """The teams whose budget may run out this month (a P90 run-out day; the P50 one when there is
    one too): [{team, exhausts_p50, exhausts_p90}], earliest first (P90 day, then P50 day, then team)."""
    rows = [{"team": r["team"], "exhausts_p50": None if pd.isna(r["exhausts_p50"]) else r["exhausts_p50"],
             "exhausts_p90": None if pd.isna(r["exhausts_p90"]) else r["exhausts_p90"]}
            for r in burn.to_dict("records") if pd.notna(r["exhausts_p90"]) or pd.notna(r["exhausts_p50"])]
    far = dt.date.max
    return sorted(rows, key=lambda r: (r["exhausts_p90"] or far, r["exhausts_p50"] or far, r["team"]))
