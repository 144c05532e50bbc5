"""Budget alerts: which thresholds a team's month has crossed, from its burn-down (pure).

A team crosses `budget-P` when its spend this month (GPU-hours of runs ended in the month) reaches
P % of its monthly budget, and `runout-p50` (`runout-p90`) when the burn-down's P50 (P90) projection
reaches the budget before the month ends. Each crossing is keyed by (team, alert, month): the ledger
keeps it, so it is raised, and sent, once a month however often the thresholds are evaluated.
"""
from __future__ import annotations

import datetime as dt
from typing import TypedDict


class Alert(TypedDict):
    id: str                          # "<team>/<alert>/<month>": the key a receiver can deduplicate on
    team: str
    alert: str                       # budget-80, budget-100, runout-p50, runout-p90
    month: str                       # YYYY-MM (UTC)
    raised_at: str                   # ISO time of the evaluation that found it
    budget_gpu_hours: float
    consumed_gpu_hours: float
    committed_gpu_hours: float
    percent_used: float              # consumed / budget x 100
    threshold: float | str           # the percent crossed, or the run-out level
    exhausts_p50: str | None         # ISO date the P50 projection reaches the budget (None: not this month)
    exhausts_p90: str | None


def _fmt_percent(p: float) -> str:
    return f"{p:g}"


def crossings(team: str, burn: dict, thresholds: dict, as_of: dt.datetime) -> list[Alert]:
    """The alerts `team`'s month has crossed at `as_of`, given its burn-down (`lib.planning.forecast.demand.
    burn_down`'s keys) and its thresholds ({"budget_percent": [...], "runout": ["p50", ...]})."""
    month = f"{as_of.year:04d}-{as_of.month:02d}"
    budget, consumed = burn["budget_gpu_hours"], burn["consumed_gpu_hours"]
    used = consumed / budget * 100.0 if budget > 0 else None
    common = {"team": team, "month": month, "raised_at": as_of.isoformat(timespec="seconds"),
              "budget_gpu_hours": budget, "consumed_gpu_hours": consumed,
              "committed_gpu_hours": burn["committed_gpu_hours"], "percent_used": used,
              "exhausts_p50": _day(burn["exhausts_p50"]), "exhausts_p90": _day(burn["exhausts_p90"])}
    out: list[Alert] = []
    if used is not None:
        for p in thresholds["budget_percent"]:
            if used >= p:
                name = f"budget-{_fmt_percent(p)}"
                out.append({"id": f"{team}/{name}/{month}", "alert": name, "threshold": p, **common})
    for level in thresholds["runout"]:
        if burn[f"exhausts_{level}"] is not None:
            name = f"runout-{level}"
            out.append({"id": f"{team}/{name}/{month}", "alert": name, "threshold": level, **common})
    return out


def _day(d) -> str | None:
    return None if d is None else d.isoformat()
