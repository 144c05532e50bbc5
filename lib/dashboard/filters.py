"""The dashboard's shared filters (teams, kinds, capacity type, date range) as plain data.

Every page query of lib/dashboard (the `*_queries` modules) takes a `Filters`. The date range is
inclusive of both days and covers whole UTC days: [date_from 00:00, date_to + 1 day 00:00).
`previous()` is the period of the same length just before, for trends. No Streamlit here: ui.py
builds a Filters from its widgets.

Periods: besides explicit dates, a relative range (`RANGES`: last 7 / 30 / 90 days, this month, this
quarter) resolved against today (UTC) by `resolve_range`. The default period (`default_filters`) is the
28 days ending on the ledger's last day with data, so a ledger whose history ended in the past (the demo
history stops the day it was built) still opens on data.

Shareable views: `query_from_filters` writes the non-default filters as URL query parameters
(`teams`, `kinds`, `capacity`, `range` or `from` + `to`) and `filters_from_query` reads them back,
dropping what it cannot use and saying so in plain-text notes.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

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


# --------------------------------------------------------------------------- relative ranges

CUSTOM = "custom"   # explicit dates (the `from` and `to` parameters)
RANGES = {  # URL value -> label; "last N days" end today inclusive, month and quarter run to today
    "last-7-days": "Last 7 days",
    "last-30-days": "Last 30 days",
    "last-90-days": "Last 90 days",
    "this-month": "This month",
    "this-quarter": "This quarter",
}
RANGE_LABELS = {CUSTOM: "Custom dates", **RANGES}   # the sidebar's choices, in order
DATE_MIN = dt.date(2000, 1, 1)   # the earliest day the date picker (and a link) may name


def date_max(today: dt.date) -> dt.date:
    """The latest day the date picker (and a link) may name: the end of the year after next."""
    return dt.date(today.year + 2, 12, 31)


def resolve_range(name: str, today: dt.date) -> tuple[dt.date, dt.date]:
    """(date_from, date_to), both inclusive, of a relative range (a key of RANGES) as of `today`
    (the UTC date): "last N days" are the N days ending today; this month / quarter run from their
    first day to today."""
    if name.startswith("last-") and name in RANGES:
        days = int(name.split("-")[1])
        return today - dt.timedelta(days=days - 1), today
    if name == "this-month":
        return today.replace(day=1), today
    if name == "this-quarter":
        return dt.date(today.year, 3 * ((today.month - 1) // 3) + 1, 1), today
    raise ValueError(f"unknown range {name!r}; expected one of {tuple(RANGES)}")


# --------------------------------------------------------------------------- the URL

QUERY_KEYS = ("teams", "kinds", "capacity", "range", "from", "to")   # the parameters this module owns
_SHOWN_CHARS = 60   # a value quoted in a note is cut to this many characters


@dataclass(frozen=True)
class View:
    """What the sidebar shows: the filters and how the period was chosen (`range`: CUSTOM or a key of
    RANGES). `notes`: plain-text remarks on what a link asked for and could not be used."""
    filters: Filters
    range: str = CUSTOM
    notes: tuple[str, ...] = field(default=(), compare=False)


def query_from_filters(view: View, default: Filters) -> dict[str, list[str]]:
    """The query parameters (name -> values) of a view: only what differs from `default` (the
    default filters). Teams and kinds are comma-joined (`teams=a,b`), teams as repeated parameters
    should a team name hold a comma; a relative range is `range=<key>`, explicit dates other than the
    default's `from` and `to` (YYYY-MM-DD)."""
    f, q = view.filters, {}
    if f.teams:
        q["teams"] = list(f.teams) if any("," in t for t in f.teams) else [",".join(f.teams)]
    if f.kinds:
        q["kinds"] = [",".join(f.kinds)]
    if f.capacity:
        q["capacity"] = [f.capacity]
    if view.range != CUSTOM:
        q["range"] = [view.range]
    elif (f.date_from, f.date_to) != (default.date_from, default.date_to):
        q["from"], q["to"] = [f.date_from.isoformat()], [f.date_to.isoformat()]
    return q


def quoted_link_value(value: str) -> str:
    """A value from a link, quoted for a note: cut to a readable length. Plain text: the caller shows
    it as text (ui.as_text), never as markup."""
    value = str(value)
    cut = value[:_SHOWN_CHARS] + ("…" if len(value) > _SHOWN_CHARS else "")
    return f"“{cut}”"


def _listed(values: Sequence[str], known: Sequence[str]) -> list[str]:
    """The items of a list parameter: each value whole when it is a known item, else split on commas."""
    out = []
    for v in values:
        out.extend([v] if v in known else [p for p in v.split(",") if p])
    return out


def _date(text: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(text) if len(text) == 10 else None
    except ValueError:
        return None


def filters_from_query(query: Mapping[str, Sequence[str]], *, teams: Sequence[str], default: Filters,
                       today: dt.date) -> View:
    """The view a link asks for. `query`: parameter -> its values (as st.query_params.get_all gives
    them); `teams`: the teams the ledger knows; `default`: the default filters (what a parameter that
    is absent or unusable leaves); `today`: the UTC date relative ranges resolve against.

    Never raises on what a link holds: an unknown team is dropped, a bad kind, capacity, range or
    date is ignored, and each becomes a note naming the parameter and the value. Parameters this
    module does not own are left alone (no note)."""
    notes: list[str] = []

    def last(key: str) -> str:
        values = query.get(key) or [""]
        return values[-1].strip()

    def items(key: str, known: Sequence[str], what: str) -> tuple[str, ...]:
        got = _listed(query.get(key) or [], known)
        bad = [v for v in got if v not in known]
        notes.extend(f"{key}: {quoted_link_value(v)} is not {what}; left out." for v in bad[:5])
        if len(bad) > 5:
            notes.append(f"{key}: {len(bad) - 5} more values that are not {what} left out.")
        return tuple(v for v in got if v in known)

    team_list = items("teams", teams, "a team in the ledger")
    kind_list = items("kinds", KINDS, f"a kind ({', '.join(KINDS)})")
    capacity = last("capacity") or None
    if capacity is not None and capacity not in CAPACITIES:
        notes.append(f"capacity: {quoted_link_value(capacity)} is not {' or '.join(CAPACITIES)}; both are shown.")
        capacity = None

    period, date_from, date_to = last("range") or CUSTOM, default.date_from, default.date_to
    if period != CUSTOM and period not in RANGES:
        notes.append(f"range: {quoted_link_value(period)} is not one of {', '.join(RANGES)}; the default dates are shown.")
        period = CUSTOM
    if period != CUSTOM:
        date_from, date_to = resolve_range(period, today)
        if "from" in query or "to" in query:
            notes.append(f"from/to: ignored, range={period} sets the dates.")
    elif "from" in query or "to" in query:
        start, end = last("from"), last("to")
        parsed = {key: _date(text) for key, text in (("from", start), ("to", end))}
        for key, text in (("from", start), ("to", end)):
            day = parsed[key]
            if day is None or not DATE_MIN <= day <= date_max(today):
                problem = (f"{quoted_link_value(text)} is not a date (YYYY-MM-DD) between {DATE_MIN} and {date_max(today)}"
                           if text else "is missing")
                notes.append(f"{key}: {problem}; the default dates are shown.")
                parsed[key] = None
        if parsed["from"] and parsed["to"]:
            if parsed["to"] < parsed["from"]:
                notes.append(f"to: {parsed['to']} is before from {parsed['from']}; the default dates are shown.")
            else:
                date_from, date_to = parsed["from"], parsed["to"]
    return View(Filters(date_from=date_from, date_to=date_to, teams=team_list, kinds=kind_list,
                        capacity=capacity), period, tuple(notes))
