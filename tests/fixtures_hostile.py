"""Hostile user text: team names and run IDs that are markup, links, formulas or huge, and a ledger
(tests/fixtures_app.fill_ledger) whose teams, runs and decisions carry them."""
from __future__ import annotations

import datetime as dt

from lib.ledger.connection import open_ledger, transaction
from tests.fixtures_app import fill_ledger

HOSTILE = [
    "<b>bold</b>",
    '<a href="https://example.invalid/x">click</a>',
    "<img src=x onerror=alert(1)>",
    "javascript:alert(1)",
    "https://example.invalid/y",
    "[x](https://example.invalid/z)",
    '=HYPERLINK("https://example.invalid")',
    "\u202eevil-rtl",
    "L" * 10_000,
]
# what must never reach a rendered chart or page as markup or as a link
URL_HOSTS = ("example.invalid",)


def make_hostile_ledger(path, n_runs: int = 300) -> dt.datetime:
    """fill_ledger, then every team renamed to one of HOSTILE (run i and its decisions go to team
    HOSTILE[i % len(HOSTILE)]) and every run ID prefixed with a hostile string. Returns `now`."""
    now = fill_ledger(path, n_runs=n_runs)
    names = HOSTILE
    with open_ledger(path) as con, transaction(con):
        template = con.execute("SELECT * FROM teams WHERE team = 'vision'").fetchdf()
        cols = list(template.columns)
        con.execute("DELETE FROM teams")
        for name in names:
            values = [name if c == "team" else template.iloc[0][c] for c in cols]
            values = [v.tolist() if hasattr(v, "tolist") else v for v in values]
            con.execute(f"INSERT INTO teams ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", values)
        con.execute("UPDATE snapshots SET team = NULL")
        num = "CAST(regexp_extract(run_id, '([0-9]+)$', 1) AS BIGINT)"
        for table in ("runs", "decisions"):
            con.execute(f"UPDATE {table} SET team = ($n::VARCHAR[])[1 + ({num} % {len(names)})]",
                        {"n": names})
        con.execute(f"UPDATE decisions SET run_id = ($n::VARCHAR[])[1 + (({num} + 1) % {len(names)})] "
                    f"|| ' ' || run_id", {"n": names})
        con.execute(f"UPDATE runs SET run_id = ($n::VARCHAR[])[1 + (({num} + 1) % {len(names)})] "
                    f"|| ' ' || run_id", {"n": names})
    return now
