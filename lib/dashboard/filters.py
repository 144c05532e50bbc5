"""The dashboard's shared filters (teams, kinds, capacity type, date range) as plain data.

Every query in lib/dashboard/queries.py takes a `Filters`. The date range is inclusive of both days and
covers whole UTC days: [date_from 00:00, date_to + 1 day 00:00). `previous()` is the period of the
same length just before, for trends. No Streamlit here: app.py builds a Filters from its widgets.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

from lib.gate.terms import CAPACITIES, KINDS


@dataclass(frozen=True)
class Filters:
    date_from: dt.date
    date_to: dt.date                      # inclusive
    teams: tuple[str, ...] = ()           # empty: every team
    kinds: tuple[str, ...] = ()           # empty: every kind
    capacity: str | None = None           # None: both capacity types

    def __post_init__(self):
        if self.date_to < self.date_from:
            raise ValueError(f"date range ends ({self.date_to}) before it starts ({self.date_from})")
        if self.capacity is not None and self.capacity not in CAPACITIES:
            raise ValueError(f"capacity must be one of {CAPACITIES} or None, not {self.capacity!r}")
        bad = [k for k in self.kinds if k not in KINDS]
        if bad:
            raise ValueError(f"unknown kind(s) {bad}; expected some of {KINDS}")
        object.__setattr__(self, "teams", tuple(sorted(set(self.teams))))
        object.__setattr__(self, "kinds", tuple(k for k in KINDS if k in set(self.kinds)))

    @property
    def start(self) -> dt.datetime:
        """First instant of the period (UTC, naive)."""
        return dt.datetime.combine(self.date_from, dt.time())

    @property
    def end(self) -> dt.datetime:
        """First instant after the period (UTC, naive): exclusive end."""
        return dt.datetime.combine(self.date_to + dt.timedelta(days=1), dt.time())

    @property
    def days(self) -> int:
        return (self.date_to - self.date_from).days + 1

    def previous(self) -> "Filters":
        """The period of the same length immediately before this one, same team/kind/capacity."""
        n = dt.timedelta(days=self.days)
        return replace(self, date_from=self.date_from - n, date_to=self.date_to - n)

    def where(self, alias: str = "r", *, team_col: str = "team", kind_col: str = "kind",
              capacity_col: str | None = "capacity") -> tuple[str, dict]:
        """SQL conditions (joined with AND, never empty) and named parameters ($f_teams, $f_kinds,
        $f_capacity) for the team, kind and capacity filters. Dates are not included: each query
        decides which time a row is placed at. Values are bound, never formatted into the text.
        `capacity_col` may be an SQL expression (e.g. one reading a request's JSON) or None."""
        p = f"{alias}." if alias else ""
        parts, params = ["TRUE"], {}
        if self.teams:
            parts.append(f"list_contains($f_teams::VARCHAR[], {p}{team_col})")
            params["f_teams"] = list(self.teams)
        if self.kinds:
            parts.append(f"list_contains($f_kinds::VARCHAR[], {p}{kind_col})")
            params["f_kinds"] = list(self.kinds)
        if self.capacity and capacity_col:
            col = capacity_col if "(" in capacity_col else f"{p}{capacity_col}"
            parts.append(f"{col} = $f_capacity")
            params["f_capacity"] = self.capacity
        return " AND ".join(parts), params

    def describe(self) -> str:
        """A short plain-text description for captions and file names."""
        teams = ", ".join(self.teams) if self.teams else "all teams"
        kinds = ", ".join(self.kinds) if self.kinds else "all kinds"
        cap = self.capacity or "stable + preemptible"
        return f"{self.date_from} to {self.date_to} · {teams} · {kinds} · {cap}"


def default_filters(last_data_day: dt.date | None, today: dt.date | None = None,
                    days: int = 28) -> Filters:
    """The default period: the `days` days ending on the last day with data (or today, whichever
    is earlier; today when the ledger is empty)."""
    today = today or dt.datetime.now(dt.timezone.utc).date()
    end = min(today, last_data_day) if last_data_day else today
    return Filters(date_from=end - dt.timedelta(days=days - 1), date_to=end)
