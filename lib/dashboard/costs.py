"""Money next to GPU-hours: what the period's reserved, used and idle GPU-hours cost at the GPU-hour
prices of data/teams.toml (as the ledger holds them: lib.dashboard.settings). No Streamlit.

The rule: cost = GPU-hours x the price per GPU-hour of their capacity type, per capacity type, then
summed. The GPU-hours are exactly the ones the pages show: each capacity type's come from
`queries.overview` / `queries.idle_capacity` with the capacity filter set to that type — the same
rows, anchors and idle rule, so the money can never drift from the hours beside it. Idle cost is
charged to the team that held the reservation, as idle GPU-hours are.

A capacity type in scope (the capacity filter's, else both) without a price gets no money at all: it
is listed in `unpriced`, never costed at 0, and the totals cover the priced types only. Units:
GPU-hours; money in `currency` (a 3-letter code), unrounded.

Cost: one read-only open for the prices, plus, per priced capacity type in scope, the one open of
the query that gives its GPU-hours. With no price set nothing else is read.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from functools import reduce
from typing import TypedDict

import pandas as pd

from lib.dashboard import queries, settings
from lib.dashboard.filters import Filters
from lib.gate.terms import CAPACITIES, utcnow

SPENDS = ("reserved", "used", "idle")     # the GPU-hours Overview shows, each with its cost


class Pricing(TypedDict):
    currency: str | None         # None when no capacity type in scope has a price
    per_gpu_hour: dict[str, float]   # capacity type in scope -> price per GPU-hour (priced ones only)
    unpriced: list[str]          # capacity types in scope without a price: no money for them


class OverviewCosts(Pricing):
    by_capacity: pd.DataFrame    # capacity, price_per_gpu_hour, {reserved,used,idle}_gpu_hours, _cost
    current: dict                # {reserved,used,idle}_cost summed over priced types ({} when none)
    previous: dict               # the same for the previous period of the same length


class IdleCosts(Pricing):
    by_team: pd.DataFrame        # team, <capacity>_idle_gpu_hours, <capacity>_idle_cost, idle_cost
    total_idle_cost: float | None  # None when no capacity type in scope has a price


def pricing(f: Filters, db=None) -> Pricing:
    """The prices of the capacity types the filters cover, and which of them have none."""
    p = settings.prices(db)
    scope = (f.capacity,) if f.capacity else CAPACITIES
    per_hour = {c: p["per_gpu_hour"][c] for c in scope if c in p["per_gpu_hour"]}
    return {"currency": p["currency"] if per_hour else None, "per_gpu_hour": per_hour,
            "unpriced": [c for c in scope if c not in per_hour]}


def _only(f: Filters, capacity: str) -> Filters:
    return dataclasses.replace(f, capacity=capacity)


def overview_costs(f: Filters, db=None, now: dt.datetime | None = None) -> OverviewCosts:
    """Reserved, used and idle cost for the period and the previous one, per priced capacity type
    and summed: queries.overview's GPU-hours x price."""
    now = now or utcnow()
    price = pricing(f, db)
    rows, totals = [], {"current": {}, "previous": {}}
    for capacity, per_hour in price["per_gpu_hour"].items():
        o = queries.overview(_only(f, capacity), db, now)
        row = {"capacity": capacity, "price_per_gpu_hour": per_hour}
        for period in ("current", "previous"):
            for spend in SPENDS:
                cost = o[period][f"{spend}_gpu_hours"] * per_hour
                totals[period][f"{spend}_cost"] = totals[period].get(f"{spend}_cost", 0.0) + cost
                if period == "current":
                    row[f"{spend}_gpu_hours"], row[f"{spend}_cost"] = o[period][f"{spend}_gpu_hours"], cost
        rows.append(row)
    columns = ["capacity", "price_per_gpu_hour", *(f"{s}_{x}" for s in SPENDS for x in ("gpu_hours", "cost"))]
    return {**price, "by_capacity": pd.DataFrame(rows, columns=columns), **totals}


def idle_costs(f: Filters, db=None, now: dt.datetime | None = None) -> IdleCosts:
    """Idle cost per team (charged to the team that held the reservation), split by priced capacity
    type, and its total: queries.idle_capacity's idle GPU-hours per team x price."""
    now = now or utcnow()
    price = pricing(f, db)
    parts = []
    for capacity, per_hour in price["per_gpu_hour"].items():
        by_team = queries.idle_capacity(_only(f, capacity), db, now)["by_team"]
        part = pd.DataFrame({"team": by_team["team"].astype("object"),
                             f"{capacity}_idle_gpu_hours": by_team["idle_gpu_hours"].astype("float64")})
        part[f"{capacity}_idle_cost"] = part[f"{capacity}_idle_gpu_hours"] * per_hour
        parts.append(part)
    if not parts:
        return {**price, "by_team": pd.DataFrame({"team": pd.Series(dtype="object"),
                                                  "idle_cost": pd.Series(dtype="float64")}),
                "total_idle_cost": None}
    # a team with idle time in one capacity type only had none in the other: 0 GPU-hours, not unknown
    table = reduce(lambda a, b: a.merge(b, on="team", how="outer"), parts).fillna(0.0)
    table["idle_cost"] = table[[f"{c}_idle_cost" for c in price["per_gpu_hour"]]].sum(axis=1)
    table = table.sort_values(["idle_cost", "team"], ascending=[False, True], ignore_index=True)
    return {**price, "by_team": table, "total_idle_cost": float(table["idle_cost"].sum())}


def money_text(amount: float, currency: str) -> str:
    """An amount for a page, whole units: "USD 12,345"."""
    return f"{currency} {amount:,.0f}"


def pricing_note(price: Pricing) -> str:
    """One line saying which prices the money uses and which capacity types have none."""
    if not price["per_gpu_hour"]:
        return (f"No GPU-hour price is set for {' or '.join(price['unpriced'])} capacity ([prices] in "
                "data/teams.toml), so no money is shown.")
    rates = ", ".join(f"{price['currency']} {p:,.2f} ({c})" for c, p in price["per_gpu_hour"].items())
    note = f"Money at {rates} per GPU-hour"
    if price["unpriced"]:
        note += (f"; no price set for {' or '.join(price['unpriced'])}: its GPU-hours carry no money "
                 "here, so the amounts cover priced capacity only")
    return note + "."
