"""What the planners set in data/teams.toml besides policy, as the ledger holds it: team colours
and GPU-hour prices. No Streamlit; one read-only open per call
(lib.dashboard.reading.reader)."""
from __future__ import annotations

from lib.dashboard.reading import reader
from lib.ledger.teams_file import Prices


def colours(db=None) -> dict[str, str]:
    """{team: "#rrggbb"} for the teams whose colour is set (the others have none here)."""
    with reader(db) as con:
        rows = con.execute("SELECT team, colour FROM teams WHERE colour IS NOT NULL ORDER BY team").fetchall()
    return dict(rows)


def prices(db=None) -> Prices:
    """The ledger's GPU-hour prices: currency (None when no price is set) and price per GPU-hour
    per priced capacity type (a capacity type without a price is absent, never 0)."""
    with reader(db) as con:
        rows = con.execute("SELECT capacity, price_per_gpu_hour, currency FROM prices ORDER BY capacity").fetchall()
    return {"currency": rows[0][2] if rows else None, "per_gpu_hour": {c: float(p) for c, p, _ in rows}}
