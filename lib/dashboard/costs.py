"""Money next to GPU-hours: what the period's reserved, used and idle GPU-hours cost at the GPU-hour
prices of data/teams.toml (as the ledger holds them: lib.dashboard.settings). No Streamlit.

The rule: cost = GPU-hours x the price per GPU-hour of their capacity type, per capacity type, then
summed. The GPU-hours are exactly the ones the pages show: `overview_queries.overview` and
`idle_queries.idle_capacity` return them per capacity type (the headline numbers are those rows' sums),
so the money can never drift from the hours beside it. Idle cost is charged to the team that held the
reservation, as idle GPU-hours are.

A capacity type in scope (the capacity filter's, else both) without a price gets no money at all: it
is listed in `unpriced`, never costed at 0, and the totals cover the priced types only. Units:
GPU-hours; money in `currency` (a 3-letter code), unrounded.

Pages price the data they already read: `pricing` (cached like a query) and the pure
`overview_money` / `idle_money` over the page's own query result, so no query runs twice.
`overview_costs` / `idle_costs` do both for callers without that data.
"""
from __future__ import annotations

import datetime as dt
from typing import TypedDict

import pandas as pd

from lib.dashboard import idle_queries, overview_queries, settings
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


def pricing(f: Filters, db=None, now: dt.datetime | None = None) -> Pricing:
    """The prices of the capacity types the filters cover, and which of them have none (`now` is
    unused: the signature of a page query, so ui.PageData can cache it)."""
    p = settings.prices(db)
    scope = (f.capacity,) if f.capacity else CAPACITIES
    per_hour = {c: p["per_gpu_hour"][c] for c in scope if c in p["per_gpu_hour"]}
    return {"currency": p["currency"] if per_hour else None, "per_gpu_hour": per_hour,
            "unpriced": [c for c in scope if c not in per_hour]}


def _spend(by_capacity: pd.DataFrame, capacity: str, spend: str) -> float:
    rows = by_capacity.loc[by_capacity["capacity"] == capacity, f"{spend}_gpu_hours"]
    return float(rows.sum())


def overview_money(price: Pricing, overview: dict) -> OverviewCosts:
    """Reserved, used and idle cost for the period and the previous one, per priced capacity type and
    summed, from an overview_queries.overview result."""
    rows, totals = [], {"current": {}, "previous": {}}
    periods = {"current": overview["spend_by_capacity"], "previous": overview["previous_spend_by_capacity"]}
    for capacity, per_hour in price["per_gpu_hour"].items():
        row = {"capacity": capacity, "price_per_gpu_hour": per_hour}
        for period, by_capacity in periods.items():
            for spend in SPENDS:
                hours = _spend(by_capacity, capacity, spend)
                totals[period][f"{spend}_cost"] = totals[period].get(f"{spend}_cost", 0.0) + hours * per_hour
                if period == "current":
                    row[f"{spend}_gpu_hours"], row[f"{spend}_cost"] = hours, hours * per_hour
        rows.append(row)
    columns = ["capacity", "price_per_gpu_hour", *(f"{s}_{x}" for s in SPENDS for x in ("gpu_hours", "cost"))]
    return {**price, "by_capacity": pd.DataFrame(rows, columns=columns), **totals}


def overview_costs(f: Filters, db=None, now: dt.datetime | None = None) -> OverviewCosts:
    """`overview_money` of the prices and overview_queries.overview for these filters."""
    return overview_money(pricing(f, db), overview_queries.overview(f, db, now or utcnow()))


def idle_money(price: Pricing, idle: dict) -> IdleCosts:
    """Idle cost per team (charged to the team that held the reservation), split by priced capacity
    type, and its total, from an idle_queries.idle_capacity result."""
    priced = list(price["per_gpu_hour"])
    if not priced:
        return {**price, "by_team": pd.DataFrame({"team": pd.Series(dtype="object"),
                                                  "idle_cost": pd.Series(dtype="float64")}),
                "total_idle_cost": None}
    hours = (idle["by_team_capacity"].pivot_table(index="team", columns="capacity", values="idle_gpu_hours",
                                                  aggfunc="sum")
             .reindex(columns=priced))
    hours = hours.dropna(how="all").fillna(0.0)  # a team idle in one capacity type only: 0 in the other
    table = pd.DataFrame({"team": hours.index.astype("object")})
    for capacity in priced:
        table[f"{capacity}_idle_gpu_hours"] = hours[capacity].to_numpy("float64")
        table[f"{capacity}_idle_cost"] = table[f"{capacity}_idle_gpu_hours"] * price["per_gpu_hour"][capacity]
    table["idle_cost"] = table[[f"{c}_idle_cost" for c in priced]].sum(axis=1)
    table = table.sort_values(["idle_cost", "team"], ascending=[False, True], ignore_index=True)
    return {**price, "by_team": table, "total_idle_cost": float(table["idle_cost"].sum())}


def idle_costs(f: Filters, db=None, now: dt.datetime | None = None) -> IdleCosts:
    """`idle_money` of the prices and idle_queries.idle_capacity for these filters."""
    return idle_money(pricing(f, db), idle_queries.idle_capacity(f, db, now or utcnow()))


_SCALES = ((1e9, "B"), (1e6, "M"), (1e3, "k"))
COMPACT_FROM = 10_000      # amounts from here on are shown in thousands (k), millions (M), billions (B)


def money_text(amount: float, currency: str, *, whole: bool = False) -> str:
    """An amount for a page: whole units below COMPACT_FROM ("USD 9,876"), else to one decimal of
    thousands, millions or billions ("USD 12.3k", "USD 1.5M"), so that a headline metric fits its
    place on a narrow screen; `whole`: always whole units ("USD 12,345"), for a tooltip or a table."""
    if whole or not abs(amount) >= COMPACT_FROM:   # (a NaN is shown as it is, whole)
        return f"{currency} {amount:,.0f}"
    for scale, suffix in _SCALES:
        # the largest scale the amount reaches, or all but reaches (999,960 is "1.0M", not "1,000.0k";
        # 983,335 stays "983.3k", never "1.0M")
        if abs(amount) / scale >= 0.9995:
            return f"{currency} {amount / scale:,.1f}{suffix}"
    return f"{currency} {amount:,.0f}"   # not reached: COMPACT_FROM is at least a thousand


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
