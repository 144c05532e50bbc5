"""The budget alerts the ledger keeps (table `alerts`): each crossing raised once per (team, alert,
month), and its delivery. A crossing is written before it is sent, and marked sent only after the
webhook took it, so one that could not be delivered is sent on a later run, never lost.

A run sends only what it `claim`ed: one transaction marks every alert that is unsent and unclaimed
(or whose claim's lease ran out) as this run's until now + the lease, so two runs at once never send
the same alert (the ledger's writer lock serialises the claims). Each outcome is `settle`d as it comes:
sent (the claim ends with it), or failed, which releases the claim for the next run; what a run did
not try is `release`d. A run killed mid-way leaves its claims, which become claimable once their lease
ends (CLAIM_LEASE_S). A run that dies between the webhook's answer and the mark, or whose answer was
lost (a timeout), sends it again later with the same `id`, which lets a receiver drop the repeat."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

from lib.gate.terms import json_text
from lib.ledger.audit import Who, record
from lib.ledger.connection import transaction
from lib.ledger.writer import write_ledger

MAX_ERROR_CHARS = 300
CLAIM_LEASE_S = 600.0   # a claim's life, seconds: far beyond a run's sends (lib.dashboard.alerts stops
                        # starting them well before), so only a killed run's claims ever run out


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


def claim(owner: str, now: datetime, *, lease_s: float = CLAIM_LEASE_S, db=None, timeout_s: float = 10.0) -> list[dict]:
    """Claim, for run `owner` until `now` + `lease_s` s, every alert unsent and not claimed by a live
    claim (one transaction); their payloads, oldest first."""
    with write_ledger(db, timeout_s) as con, transaction(con):
        rows = con.execute("UPDATE alerts SET claimed_by = ?, claimed_until = ? WHERE sent_at IS NULL "
                           "AND (claimed_until IS NULL OR claimed_until <= ?) "
                           "RETURNING raised_at, team, alert, payload_json",
                           [owner, now + timedelta(seconds=lease_s), now]).fetchall()
    return [json.loads(r[3]) for r in sorted(rows, key=lambda r: r[:3])]


def settle(owner: str, outcomes: list[tuple[dict, datetime, str | None]], *, db=None, timeout_s: float = 10.0,
           who: Who) -> None:
    """Record delivery attempts of run `owner`: (alert, at, None) sent at `at`, (alert, at, error) not
    sent (its claim released for the next run)."""
    if not outcomes:
        return
    with write_ledger(db, timeout_s) as con, transaction(con):
        sent = []
        for alert, at, error in outcomes:
            key = [alert["team"], alert["alert"], alert["month"]]
            if error is None:
                con.execute("UPDATE alerts SET sent_at = ?, attempts = attempts + 1, last_error = NULL, "
                            "claimed_by = NULL, claimed_until = NULL "
                            "WHERE team = ? AND alert = ? AND month = ? AND sent_at IS NULL", [at, *key])
                sent.append(alert["id"])
            else:
                con.execute("UPDATE alerts SET attempts = attempts + 1, last_error = ?, claimed_by = NULL, "
                            "claimed_until = NULL WHERE team = ? AND alert = ? AND month = ? AND claimed_by = ?",
                            [error[:MAX_ERROR_CHARS], *key, owner])
        if sent:
            record(con, who, "alert", updated=len(sent), detail=f"sent {', '.join(sent)}"[:MAX_ERROR_CHARS])


def release(owner: str, alerts: list[dict], *, db=None, timeout_s: float = 10.0) -> None:
    """The claims of run `owner` on `alerts` (not tried) given up: the next run may send them."""
    if not alerts:
        return
    with write_ledger(db, timeout_s) as con, transaction(con):
        for a in alerts:
            con.execute("UPDATE alerts SET claimed_by = NULL, claimed_until = NULL "
                        "WHERE team = ? AND alert = ? AND month = ? AND claimed_by = ?",
                        [a["team"], a["alert"], a["month"], owner])
