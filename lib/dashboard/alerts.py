"""Budget alerts end to end: this month's burn-down per team (`budget_outlook`, the numbers Overview
and Forecast show) against each team's thresholds (data/teams.toml [alerts]), new crossings kept in
the ledger, and every undelivered one POSTed as JSON to the webhook (`run_alerts`, what
`python -m lib alerts` calls); and the alerts raised this month, for the app."""
from __future__ import annotations

import datetime as dt

import pandas as pd

from lib.dashboard.filters import Filters
from lib.dashboard.forecasts import budget_outlook
from lib.dashboard.reading import read_frame, reader
from lib.gate.terms import json_text, utcnow
from lib.ledger.alert_log import delivered, raise_new, unsent
from lib.ledger.alert_settings import AlertSettings, shown_webhook, thresholds_for
from lib.ledger.audit import Who
from lib.planning.alerts import Alert, crossings

# each phase of a send (connect, write, read, wait for a pooled connection), seconds: the 5 s urllib
# gave every socket operation before; a receiver slower than that gets the alert again next run
WEBHOOK_TIMEOUT_S = 5.0
# httpx retries a failed connect only (ConnectError, ConnectTimeout: the receiver never saw the request),
# at once and then after 0.5 s. A request that may have reached it is not retried here: the alert stays
# unsent and the next run sends it again, with the same Idempotency-Key, so the receiver can drop a repeat.
CONNECT_RETRIES = 2


def post_json(url: str, body: dict, timeout_s: float = WEBHOOK_TIMEOUT_S) -> str | None:
    """POST `body` as JSON to `url` (no redirect followed: the body goes to the URL configured, nowhere
    else); None when it answered 2xx, else why not (the URL's path and query are never in the message:
    they often hold a token). `body["id"]`, when there, is sent as the Idempotency-Key header too."""
    import httpx  # here: ~0.1 s, paid by a send, not by every command and page that imports this module
    headers = {"Content-Type": "application/json", "User-Agent": "training-gate"}
    if body.get("id") is not None:
        headers["Idempotency-Key"] = str(body["id"])
    timeout = httpx.Timeout(connect=timeout_s, read=timeout_s, write=timeout_s, pool=timeout_s)
    try:
        with httpx.Client(transport=httpx.HTTPTransport(retries=CONNECT_RETRIES), timeout=timeout,
                          follow_redirects=False) as client:
            resp = client.post(url, content=json_text(body, sort_keys=True).encode("utf-8"), headers=headers)
    except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError) as exc:
        return f"{shown_webhook(url)} unreachable: {type(exc).__name__}"
    if 200 <= resp.status_code < 300:
        return None
    return f"{shown_webhook(url)} answered HTTP {resp.status_code}"


def alerts_due(settings: AlertSettings, db=None, now: dt.datetime | None = None) -> list[Alert]:
    """Every threshold crossed this month, per team with a policy, at `now`."""
    now = now or utcnow()
    f = Filters(date_from=now.date(), date_to=now.date())
    burn = budget_outlook(f, db, now)["burn"]
    out: list[Alert] = []
    for row in burn.to_dict("records"):
        row = {k: (None if (not isinstance(v, (list, dict)) and pd.isna(v)) else v) for k, v in row.items()}
        out += crossings(row["team"], row, thresholds_for(settings, row["team"]), now)
    return out


def run_alerts(settings: AlertSettings, url: str | None, *, db=None, now: dt.datetime | None = None,
               who: Who, timeout_s: float = 10.0, dry_run: bool = False) -> dict:
    """Evaluate, keep the new crossings, and send every undelivered alert to `url` (None: keep them
    unsent). Returns {"crossed", "raised", "sent", "failed", "unsent", "errors", "alerts"}; `dry_run`
    evaluates only (writes and sends nothing)."""
    crossed = alerts_due(settings, db, now)
    if dry_run:
        return {"crossed": crossed, "raised": 0, "sent": 0, "failed": 0, "unsent": None, "errors": [],
                "alerts": crossed}
    raised = raise_new(crossed, db=db, timeout_s=timeout_s, who=who)
    with reader(db) as con:
        waiting = unsent(con)
    sent, errors = 0, []
    if url is not None:
        for alert in waiting:
            error = post_json(url, alert)
            delivered(alert, utcnow(), error, db=db, timeout_s=timeout_s, who=who)
            if error is None:
                sent += 1
            else:
                errors.append(f"{alert['id']}: {error}")
    return {"crossed": crossed, "raised": raised, "sent": sent, "failed": len(errors),
            "unsent": len(waiting) - sent, "errors": errors, "alerts": waiting}


ALERT_COLUMNS = ["raised_at", "team", "alert", "percent_used", "exhausts_p50", "exhausts_p90", "sent_at",
                 "attempts", "last_error"]


def alerts_this_month(f: Filters, db=None, now: dt.datetime | None = None) -> pd.DataFrame:
    """The alerts raised in `now`'s month (UTC) for the filtered teams, newest first, with their
    delivery (a page query: the period filter does not apply, the month is now's)."""
    now = now or utcnow()
    month = f"{now.year:04d}-{now.month:02d}"
    teams = list(f.teams) or None
    with reader(db) as con:
        df = read_frame(con, """SELECT raised_at, team, alert,
                             TRY_CAST(payload_json->>'percent_used' AS DOUBLE) AS percent_used,
                             TRY_CAST(payload_json->>'exhausts_p50' AS DATE) AS exhausts_p50,
                             TRY_CAST(payload_json->>'exhausts_p90' AS DATE) AS exhausts_p90,
                             sent_at, attempts, last_error
                           FROM alerts WHERE month = $month AND ($teams IS NULL OR list_contains($teams, team))
                           ORDER BY raised_at DESC, team, alert""",
                   {"month": month, "teams": teams})
    return df[ALERT_COLUMNS]
