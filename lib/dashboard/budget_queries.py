"""A month's budget per team (consumed, committed, remaining GPU-hours) and the months the budget
month picker offers.
"""
from __future__ import annotations

import datetime as dt

from lib.dashboard.cluster_queries import authority_board
from lib.dashboard.filters import Filters
from lib.dashboard.reading import read_frame, reader
from lib.gate.terms import month_start as month_start_of, next_month_start, utcnow
from lib.ledger.state import held_condition

BUDGET_MONTHS = 36            # months the budget month picker offers at most


def budget_of_month(con, f: Filters, now: dt.datetime, month: dt.date) -> dict:
    """{"budget": per team (team filter only): monthly_budget_gpu_hours, consumed_gpu_hours (actual
    GPU-hours of runs that ended in `month`, any day of it), committed_gpu_hours (the current month:
    held reservations' reserved GPU-hours, as the gate counts them; a past month: 0),
    remaining_gpu_hours = budget - consumed - committed; "month": its first day; "current_month"}."""
    twhere, tp = Filters(f.date_from, f.date_to, teams=f.teams).where("t")
    start = month_start_of(dt.datetime.combine(month, dt.time()))
    current = start == month_start_of(now)
    tp.update(now=now, month_start=start, next_month=next_month_start(start))
    committed = (f"""coalesce((SELECT sum(reserved_gpu_hours) FROM runs r WHERE r.team = t.team
                               AND {held_condition("r", "$now")}), 0)""" if current else "0.0")
    budget = read_frame(con, f"""
      SELECT t.team, t.monthly_budget_gpu_hours,
             coalesce((SELECT sum(actual_gpu_hours) FROM runs r WHERE r.team = t.team
                       AND r.ended_at >= $month_start AND r.ended_at < $next_month), 0) AS consumed_gpu_hours,
             {committed} AS committed_gpu_hours
      FROM teams t WHERE {twhere} ORDER BY t.team""", tp)
    budget["remaining_gpu_hours"] = (budget["monthly_budget_gpu_hours"] - budget["consumed_gpu_hours"]
                                     - budget["committed_gpu_hours"])
    return {"budget": budget, "month": start.date(), "current_month": current}


def monthly_budget(f: Filters, db=None, now: dt.datetime | None = None, *, month: dt.date | None = None) -> dict:
    """The monthly budget of `month` (any day of it; default now's month) per team: see
    `budget_of_month`. Only the team filter applies."""
    now = now or utcnow()
    with reader(db) as con:
        out = budget_of_month(con, f, now, month or now.date())
    return shared_budget(out, f, now) if out["current_month"] else out


def shared_budget(out: dict, f: Filters, now: dt.datetime) -> dict:
    """This month's budget as the shared authority counts it, when the cluster names one (every
    cluster's spend and holds: lib.dashboard.cluster_queries.authority_board); `out` unchanged
    without one. "source": "authority" or "ledger"; "authority_error": why it could not be read."""
    board, error = authority_board(now, f.teams)
    if board is None:
        return {**out, "source": "ledger", "authority_error": error}
    shared = board[["team", "monthly_budget_gpu_hours", "month_spent_gpu_hours", "committed_gpu_hours",
                    "remaining_gpu_hours"]].rename(columns={"month_spent_gpu_hours": "consumed_gpu_hours"})
    return {**out, "budget": shared.reset_index(drop=True), "source": "authority", "authority_error": None}


def monthly_budget_in(month: dt.date):
    """`monthly_budget` of `month` as a page query (filters, db, now): its qualified name carries the
    month, so the page cache (ui.PageData, keyed by that name) keeps one result per month."""
    def query(f: Filters, db=None, now: dt.datetime | None = None) -> dict:
        return monthly_budget(f, db, now, month=month)
    query.__qualname__ = f"monthly_budget_in({month.isoformat()})"
    return query


def budget_months(first_day: dt.date | None, now: dt.datetime) -> list[dt.date]:
    """The months the budget picker offers (their first days), newest first: now's month back to
    the month of `first_day` (the ledger's first data; None: now's month only), at most BUDGET_MONTHS."""
    month = month_start_of(now).date()
    first = first_day.replace(day=1) if first_day else month
    out = []
    while month >= first and len(out) < BUDGET_MONTHS:
        out.append(month)
        month = (month - dt.timedelta(days=1)).replace(day=1)
    return out
