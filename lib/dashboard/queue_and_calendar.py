"""What waits and what is free ahead, read from the one forward plan (lib.planning.plan.forward over
lib.ledger.plan): the queue as the gate would serve it (each waiting request's planned start,
what is ahead of it, the reasons `check` gives it now), the capacity calendar (free accelerators per
team, capacity type and day, for experiments and for scheduled retraining), the pools, the expired
requests, and every reservation of the plan (the budget burn-down's committed part).
"""
from __future__ import annotations

import datetime as dt

import pandas as pd

from lib.dashboard.filters import Filters
from lib.dashboard.run_sql import ROW_LIMIT
from lib.gate.terms import next_month_start
from lib.ledger.calibration_scopes import ScopeRows
from lib.ledger.plan_inputs import QUEUE_DAYS, read_plan_inputs
from lib.planning.plan.forward import forward_plan

CALENDAR_DAYS = 14            # days the capacity calendar looks ahead, today included
AHEAD_LISTED = 5              # run IDs a queue row names as ahead of it (the rest counted)
__all__ = ["CALENDAR_DAYS", "QUEUE_DAYS", "forward_view"]   # QUEUE_DAYS: the queue's window, for the page

# key columns first, so they stay in view on a narrow screen (and are pinned)
QUEUE_COLUMNS = ["planned_start", "run_id", "team", "kind", "gpus", "capacity", "note", "reasons", "ahead",
                 "waited_hours", "waiting_since", "expires_at", "planned_end", "blocking"]
CALENDAR_COLUMNS = ["day", "team", "capacity", "free_gpus", "retraining_free_gpus", "committed_gpus", "quota_gpus",
                    "retraining_reserved_gpus", "over_committed_gpus", "pool_gpus", "pool_held_gpus", "window_gpus"]
POOL_COLUMNS = ["day", "pool", "free_gpus", "gpus", "held_gpus", "window_gpus", "quotas_gpus"]
EXPIRED_COLUMNS = ["expires_at", "run_id", "team", "kind", "gpus", "capacity", "waiting_since"]


def _ahead(row: dict) -> str:
    shown = row["ahead"][:AHEAD_LISTED]
    more = row["ahead_count"] - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _kept(rows: list[dict], f: Filters, kind_key: str | None = "kind") -> list[dict]:
    """The rows of the filter's teams (and kinds and capacity type, for the queue)."""
    out = [r for r in rows if not f.teams or r["team"] in f.teams]
    if kind_key:
        out = [r for r in out if (not f.kinds or r[kind_key] in f.kinds)
               and (not f.capacity or r["capacity"] == f.capacity)]
    return out


def forward_view(con, f: Filters, now: dt.datetime, *, scopes: ScopeRows | None = None) -> dict:
    """The forward plan from `now` as the Reservations page shows it (the team filter applies; the
    queue's kind and capacity filters too; the dates do not: a plan starts now).

    waiting: the queue (at most ROW_LIMIT rows of queue_count), planned start first (never last),
    then the order the gate serves; queue_by_team: {team: {requests, waiting_since (the oldest)}} over
    the whole queue; calendar: CALENDAR_DAYS days of `DayRow`s (over_committed_gpus:
    committed beyond the quota); pools: each pool per day; overcommit: each pool's accelerators
    against the sum of every team's quota; expired: the requests that waited past their team's
    queue_max_age_days (count, and at most ROW_LIMIT rows); holdings: every reservation of the plan
    that starts before the month ends (the burn-down's committed spend); plan_decisions. `scopes`: the
    calibration rows at `now` when the caller read them already (lib.ledger.calibration_scopes)."""
    inputs, expired = read_plan_inputs(con, now, scopes=scopes)
    month_end = next_month_start(now)
    days = max(CALENDAR_DAYS, (month_end.date() - now.date()).days)
    plan = forward_plan(inputs, days)
    queue = _kept(plan["queue"], f)
    by_team: dict[str, dict] = {}
    for r in queue:   # every waiting request, not only the rows shown
        t = by_team.setdefault(r["team"], {"requests": 0, "waiting_since": r["waiting_since"]})
        t["requests"] += 1
        t["waiting_since"] = min(t["waiting_since"], r["waiting_since"])
    waiting = pd.DataFrame([{**r, "reasons": ", ".join(r["reasons"]), "blocking": ", ".join(r["blocking"]),
                             "ahead": _ahead(r),
                             "waited_hours": (now - r["waiting_since"]).total_seconds() / 3600.0}
                            for r in queue[:ROW_LIMIT]], columns=QUEUE_COLUMNS)
    for col in ("planned_start", "planned_end", "waiting_since", "expires_at"):
        waiting[col] = pd.to_datetime(waiting[col])
    last_day = now.date() + dt.timedelta(days=CALENDAR_DAYS)
    calendar = pd.DataFrame([{**r, "day": r["date"], "over_committed_gpus": max(0, r["committed_gpus"] - r["quota_gpus"])}
                             for r in _kept(plan["calendar"], f, None) if r["date"] < last_day],
                            columns=CALENDAR_COLUMNS)
    calendar["day"] = pd.to_datetime(calendar["day"])
    pools = pd.DataFrame([{**r, "day": r["date"]} for r in plan["pools"] if r["date"] < last_day], columns=POOL_COLUMNS)
    pools["day"] = pd.to_datetime(pools["day"])
    quotas = sum(p["reserved_gpus"] for p in inputs["policies"].values())
    overcommit = pd.DataFrame([{"pool": name, "gpus": gpus, "quotas_gpus": quotas,
                                "overcommit_ratio": quotas / gpus if gpus else None,
                                "teams_above_pool": ", ".join(sorted(t for t, p in inputs["policies"].items()
                                                                     if p["reserved_gpus"] > gpus))}
                               for name, gpus in sorted(inputs["pools"].items())],
                              columns=["pool", "gpus", "quotas_gpus", "overcommit_ratio", "teams_above_pool"])
    gone = _kept(expired["rows"], f)
    return {"waiting": waiting, "queue_count": len(queue), "queue_by_team": by_team,
            "planned_count": sum(r["planned_start"] is not None for r in queue),
            "calendar": calendar, "pools": pools, "overcommit": overcommit,
            "expired": pd.DataFrame(gone[:ROW_LIMIT], columns=EXPIRED_COLUMNS),
            "expired_count": sum(c["requests"] for c in _kept(expired["counts"], f)),
            "holdings": [h for h in plan["holdings"] if not h["planned"] or h["start"] < month_end],
            "plan_days": days, "serve_order": plan["serve_order"], "plan_decisions": plan["decisions"]}
