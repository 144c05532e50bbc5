"""The Policy replay page's read model (no Streamlit): the proposal's effect as proposal - baseline per
team (lib.ledger.replay), the capacity what-if's pool sizes as the page's tables (the search itself:
lib.planning.replay.search), what a pool costs at the `[prices]`, the week the demand forecast
outgrows today's pool, and the quota right-sizing's tables (lib.planning.replay.rightsizing). Units:
accelerators (`gpus`), hours, GPU-hours; money in the `[prices]` currency.
"""
from __future__ import annotations

import datetime as dt

import pandas as pd

from lib.dashboard import settings
from lib.dashboard.labels import ALL_TEAMS
from lib.dashboard.reading import reader
from lib.ledger.forecast import forecast
from lib.gate.terms import HOURS_PER_WEEK
from lib.ledger.state import pool_sizes
from lib.planning.forecast.demand import MAX_WEEKS
from lib.planning.replay.data import ReplayResult
from lib.planning.replay.search import PoolSizes

# the measures a search's target may bound (lib.planning.replay.search.Target), as the page names them
TARGETS = {"p90_wait_hours": "P90 wait at most (hours)", "deferral_share": "deferral share at most (%)"}


def difference_table(result: ReplayResult) -> pd.DataFrame:
    """Proposal - baseline per team and measure: admits, deferrals (all, and per reason), mean and P90
    wait. Columns team, measure, unit ("decisions" | "hours"), baseline, proposed, difference
    (None where a P90 wait falls on requests that never fit by waiting)."""
    rows = []
    for t in result["teams"]:
        base, prop = t["baseline"], t["proposed"]
        pairs = [("admitted", "decisions", base["admit"], prop["admit"]),
                 ("deferred", "decisions", base["defer"], prop["defer"])]
        for code in sorted(set(base["deferrals_by_reason"]) | set(prop["deferrals_by_reason"])):
            pairs.append((f"deferred: {code}", "decisions", base["deferrals_by_reason"].get(code, 0),
                          prop["deferrals_by_reason"].get(code, 0)))
        pairs += [("mean wait", "hours", base["mean_wait_hours"], prop["mean_wait_hours"]),
                  ("P90 wait", "hours", base["p90_wait_hours"], prop["p90_wait_hours"])]
        for measure, unit, b, p in pairs:
            rows.append({"team": t["team"], "measure": measure, "unit": unit, "baseline": b, "proposed": p,
                         "difference": None if b is None or p is None else p - b})
    return pd.DataFrame(rows, columns=["team", "measure", "unit", "baseline", "proposed", "difference"])


def pool_size_rows(sizes: PoolSizes, ns: list[int]) -> pd.DataFrame:
    """Admits, deferrals and waits per team (and all teams) for each pool size in `ns` (replaying those
    not known yet). Columns pool_gpus, team, admitted, deferred, deferral_share,
    cluster_capacity_deferrals, mean_wait_hours, p90_wait_hours."""
    rows = []
    for n in ns:
        measures = sizes.at(n)
        for team, m in [(ALL_TEAMS, measures["overall"]), *measures["teams"].items()]:
            rows.append({"pool_gpus": n, "team": team, "admitted": m["admit"], "deferred": m["defer"],
                         "deferral_share": m["deferral_share"],
                         "cluster_capacity_deferrals": m["deferrals_by_reason"].get("cluster-capacity", 0),
                         "mean_wait_hours": m["mean_wait_hours"], "p90_wait_hours": m["p90_wait_hours"]})
    sizes.save()
    return pd.DataFrame(rows, columns=["pool_gpus", "team", "admitted", "deferred", "deferral_share",
                                       "cluster_capacity_deferrals", "mean_wait_hours", "p90_wait_hours"])


def pools_today(db=None) -> dict[str, int]:
    """The cluster's accelerators per capacity type as the ledger's [pools] hold them ({} when none)."""
    with reader(db) as con:
        return pool_sizes(con)


def pool_cost(gpus: int, capacity: str, window_hours: float, db=None) -> dict | None:
    """What `gpus` accelerators of `capacity` cost at its `[prices]` price per GPU-hour: per week and over
    the replay window ({currency, per_gpu_hour, per_week, per_window}); None when the type has no price."""
    p = settings.prices(db)
    price = p["per_gpu_hour"].get(capacity)
    if price is None:
        return None
    return {"currency": p["currency"], "per_gpu_hour": price, "per_week": gpus * HOURS_PER_WEEK * price,
            "per_window": gpus * window_hours * price}


def forecast_outgrows(pool_gpus: int, db=None, *, as_of: dt.datetime | None = None,
                      weeks: int = MAX_WEEKS) -> dict:
    """The first week of the `weeks`-week demand forecast whose P90, every team's added up, exceeds
    `pool_gpus` accelerators x 168 hours. The forecast is per team over every capacity type, so the pool
    is weighed against all demand. {"week_start" (None: not within the horizon), "p90_gpu_hours" of that
    week, "pool_gpu_hours_per_week", "weeks"}."""
    result = forecast(db, as_of=as_of, weeks=weeks)
    by_week: dict = {}
    for entry in result["teams"].values():
        for w in entry["weeks"]:
            by_week[w["week_start"]] = by_week.get(w["week_start"], 0.0) + float(w["p90_gpu_hours"] or 0.0)
    limit = pool_gpus * HOURS_PER_WEEK
    first = next(((week, hours) for week, hours in sorted(by_week.items()) if hours > limit), (None, None))
    return {"week_start": first[0], "p90_gpu_hours": first[1], "pool_gpu_hours_per_week": limit, "weeks": weeks}


def sizing_tables(sizing: dict) -> dict:
    """A right-sizing (lib.planning.replay.rightsizing.right_sizing) with its rows as the page's tables:
    {"rows": a DataFrame, one row per team, "proof": a DataFrame (team_cut, team, measure, baseline,
    with_cut), "edits": as it is}."""
    return {"rows": pd.DataFrame(sizing["rows"]), "proof": pd.DataFrame(
                sizing["proof"], columns=["team_cut", "team", "measure", "baseline", "with_cut"]),
            "edits": sizing["edits"]}
