"""The budget alerts the ledger keeps (table `alerts`): each crossing raised once per (team, alert,
month), and its delivery. A crossing is written before it is sent, and marked sent only after the
webhook took it, so one that could not be delivered is sent on a later run, never lost; a run that
dies between the webhook's answer and the mark would send it again, which the body's `id` lets a
receiver recognise."""
from __future__ import annotations

import json
from datetime import datetime

from lib.gate.terms import json_text
from lib.ledger.audit import Who, record
from lib.ledger.connection import transaction
from lib.ledger.writer import write_ledger

MAX_ERROR_CHARS = 300


def raise_new(alerts: list[dict], *, db=None, timeout_s: float = 10.0, who: Who) -> int:
    """Keep the crossings not raised before (by team, alert, month); returns how many were new."""
    if not alerts:
        return 0
    with write_ledger(db, timeout_s) as con, transaction(con):
        new = 0
        for a in alerts:
            seen = con.execute("SELECT 1 FROM alerts WHERE team = ? AND alert = ? AND month = ?",
                               [a["team"], a["alert"], a["month"]]).fetchone()
            if seen is None:
                con.execute("INSERT INTO alerts (team, alert, month, raised_at, payload_json) VALUES (?, ?, ?, ?, ?)",
                            [a["team"], a["alert"], a["month"], datetime.fromisoformat(a["raised_at"]),
                             json_text(a, sort_keys=True)])
                new += 1
        if new:
            record(con, who, "alert", inserted=new, detail=f"{new} budget alert(s) raised")
    return new


def unsent(con) -> list[dict]:
    """The alerts raised and not yet delivered, oldest first (their payloads)."""
    rows = con.execute("SELECT payload_json FROM alerts WHERE sent_at IS NULL ORDER BY raised_at, team, alert").fetchall()
    return [json.loads(r[0]) for r in rows]


def delivered(alert: dict, at: datetime, error: str | None, *, db=None, timeout_s: float = 10.0,
              who: Who) -> None:
    """Record one delivery attempt: sent at `at`, or its error (kept for the next run to retry)."""
    key = [alert["team"], alert["alert"], alert["month"]]
    with write_ledger(db, timeout_s) as con, transaction(con):
        if error is None:
            con.execute("UPDATE alerts SET sent_at = ?, attempts = attempts + 1, last_error = NULL "
                        "WHERE team = ? AND alert = ? AND month = ? AND sent_at IS NULL", [at, *key])
            record(con, who, "alert", updated=1, detail=f"sent {alert['id']}")
        else:
            con.execute("UPDATE alerts SET attempts = attempts + 1, last_error = ? "
                        "WHERE team = ? AND alert = ? AND month = ?", [error[:MAX_ERROR_CHARS], *key])
