"""Budget alerts end to end: this month's burn-down per team (`budget_outlook`, the numbers Overview
and Forecast show) against each team's thresholds (data/teams.toml [alerts]), new crossings kept in
the ledger, and every undelivered one POSTed as JSON to the webhook (`run_alerts`, what
`python -m lib alerts` calls); and the alerts raised this month, for the app."""
from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed

import pandas as pd

from lib.dashboard.filters import Filters
from lib.dashboard.forecasts import budget_outlook
from lib.dashboard.reading import read_frame, reader
from lib.gate.terms import json_text, utcnow
from lib.ledger.alert_log import CLAIM_LEASE_S, claim, raise_new, release, settle, unsent
from lib.ledger.alert_settings import AlertSettings, shown_webhook, thresholds_for
from lib.ledger.audit import Who
from lib.planning.alerts import Alert, crossings

# each phase of a send (connect, write, read, wait for a pooled connection), seconds. A webhook receiver
# should take the POST and answer at once (queueing its work), as Slack's and PagerDuty's do in well
# under a second; 5 s is ample for one across the world, and bounds a run that meets a hung receiver
# at about one such wait: the first send that times out stops the run from starting others (POOL at
# once), and what was not sent is kept for the next run.
WEBHOOK_TIMEOUT_S = 5.0
POOL = 8   # POSTs in flight at once (one connection each)
# httpx retries a failed connect only (ConnectError, ConnectTimeout: the receiver never saw the request),
# at once and then after 0.5 s. A request that may have reached it is not retried here: the alert stays
# unsent and the next run sends it again, with the same Idempotency-Key, so the receiver can drop a repeat.
CONNECT_RETRIES = 2
# a run starts no POST later than this after its claim, before the claims' lease ends (a POST's phases
# and the connect retries all fit in the rest), so a run never sends what another may have claimed since
LAST_START_S = CLAIM_LEASE_S - 10 * WEBHOOK_TIMEOUT_S
_NOT_TRIED = "not tried"


def webhook_client(timeout_s: float = WEBHOOK_TIMEOUT_S):
    """An httpx client for POOL concurrent POSTs (no redirect followed: the body goes to the URL
    configured, nowhere else)."""
    import httpx  # here: ~0.1 s, paid by a send, not by every command and page that imports this module
    return httpx.Client(transport=httpx.HTTPTransport(retries=CONNECT_RETRIES,
                                                      limits=httpx.Limits(max_connections=POOL)),
                        timeout=httpx.Timeout(timeout_s), follow_redirects=False)


def post_json(client, url: str, body: dict) -> tuple[str | None, bool]:
    """POST `body` as JSON to `url` with `client` (`webhook_client`); (None, False) when it answered
    2xx, else (why not, whether the receiver is unreachable or too slow). The URL's path and query are
    never in the message: they often hold a token. `body["id"]`, when there, is sent as the
    Idempotency-Key header and the body's `idempotency_key` too."""
    import httpx  # here: see webhook_client
    headers = {"Content-Type": "application/json", "User-Agent": "training-gate"}
    if body.get("id") is not None:
        headers["Idempotency-Key"] = str(body["id"])
        body = {**body, "idempotency_key": str(body["id"])}
    try:
        resp = client.post(url, content=json_text(body, sort_keys=True).encode("utf-8"), headers=headers)
    except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError) as exc:
        return f"{shown_webhook(url)} unreachable: {type(exc).__name__}", True
    if 200 <= resp.status_code < 300:
        return None, False
    return f"{shown_webhook(url)} answered HTTP {resp.status_code}", False


def send_claimed(url: str, alerts: list[dict], *, until: float):
    """POST `alerts` to `url`, POOL at once, none started after `until` (time.monotonic()) nor once one
    found the receiver unreachable or too slow. Yields (alert, error or None, tried) as each ends."""
    stop = threading.Event()

    def one(alert):
        if stop.is_set() or time.monotonic() > until:
            return _NOT_TRIED
        error, away = post_json(client, url, alert)
        if away:
            stop.set()
        return error

    with webhook_client() as client, ThreadPoolExecutor(POOL, thread_name_prefix="webhook") as pool:
        futures = {pool.submit(one, alert): alert for alert in alerts}
        for fut in as_completed(futures):
            error = fut.result()
            yield futures[fut], (None if error is _NOT_TRIED else error), error is not _NOT_TRIED


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
    if url is None:
        with reader(db) as con:
            waiting = unsent(con)
        return {"crossed": crossed, "raised": raised, "sent": 0, "failed": 0, "unsent": len(waiting),
                "errors": [], "alerts": waiting}
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    waiting = claim(owner, utcnow(), db=db, timeout_s=timeout_s)
    sent, errors, untried = 0, [], []
    try:
        for alert, error, tried in send_claimed(url, waiting, until=time.monotonic() + LAST_START_S):
            if not tried:
                untried.append(alert)
                continue
            # each outcome kept as it comes: a run killed later sends none of these again
            settle(owner, [(alert, utcnow(), error)], db=db, timeout_s=timeout_s, who=who)
            if error is None:
                sent += 1
            else:
                errors.append(f"{alert['id']}: {error}")
    finally:
        release(owner, untried, db=db, timeout_s=timeout_s)
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
