"""`python -m lib alerts` delivers each alert once, as far as a receiver that drops repeated keys can
tell, against a real receiver process: two runs at once never send the same alert (each claims what
it sends in the ledger first); a hung receiver holds a run of 39 alerts up for about one timeout, not
39 (POSTs go out 8 at once, and the first that times out stops the run from starting more); what it
did not take is sent by a later run with the same key, in the Idempotency-Key header and the body."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter

from lib.dashboard.alerts import POOL, WEBHOOK_TIMEOUT_S
from lib.gate.terms import utcnow
from lib.ledger.alert_log import claim, raise_new
from lib.ledger.connection import open_ledger
from lib.ledger.audit import Who
from tests.fixtures_ledger import REPO, query, run_cli
from tests.fixtures_webhook import WebhookProcess
from tests.fixtures_alerts import free_port

MORE = 39


def plant(db, n: int = MORE) -> set[str]:
    """`n` alerts of this month raised in the ledger (beside the fixture's own crossings); their ids."""
    now, month = utcnow(), utcnow().strftime("%Y-%m")
    alerts = [{"id": f"t{i:02d}/budget-90/{month}", "team": f"t{i:02d}", "alert": "budget-90", "month": month,
               "raised_at": now.isoformat(), "percent_used": 91.0} for i in range(n)]
    raise_new(alerts, db=db, who=Who(actor="test", origin="cli", file_name=None))
    return {a["id"] for a in alerts}


def run_alerts(db, teams, url):
    return run_cli("alerts", "--teams-file", teams, db=db, env={"GATE_ALERT_WEBHOOK": url}, timeout=300)


def all_ids(db) -> set[str]:
    return {r[0] for r in query(db, "SELECT json_extract_string(payload_json, '$.id') FROM alerts")}


def test_two_runs_at_once_send_each_alert_once(request, tmp_path):
    db, teams = request.getfixturevalue("spent_ledger")
    plant(db)
    rx = WebhookProcess(free_port(), tmp_path / "rx.log", delay_s=0.3)
    try:
        env = {"GATE_ALERT_WEBHOOK": rx.url, "PYTHONPATH": str(REPO)}
        runs = [subprocess.Popen([sys.executable, "-m", "lib", "alerts", "--teams-file", str(teams)], cwd=REPO,
                                 env={**os.environ, "GATE_DB": str(db), **env}, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=300) for p in runs]
        assert [p.returncode for p in runs] == [0, 0], outs
        got = rx.received()
    finally:
        rx.stop()
    keys = Counter(r["header"] for r in got)
    assert set(keys) == all_ids(db) and len(keys) >= MORE + 1
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]
    assert all(r["header"] == r["body"] == r["id"] for r in got)
    assert query(db, "SELECT count(*) FROM alerts WHERE sent_at IS NULL OR claimed_by IS NOT NULL") == [(0,)]


def test_a_hung_receiver_costs_one_timeout_and_a_later_run_sends_the_rest_with_the_same_keys(
        request, tmp_path):
    db, teams = request.getfixturevalue("spent_ledger")
    ids = plant(db)
    port = free_port()
    slow = WebhookProcess(port, tmp_path / "slow.log", delay_s=30)
    try:
        t0 = time.monotonic()
        first = run_alerts(db, teams, slow.url)
        took = time.monotonic() - t0
        tried = slow.received()
    finally:
        slow.stop()
    assert first.returncode == 3 and "kept for the next run" in first.stderr, first.stderr
    # about one timeout (plus the command's start), never one per alert
    assert took < 3 * WEBHOOK_TIMEOUT_S + 10, took
    assert 1 <= len(tried) <= POOL
    assert query(db, "SELECT count(*) FROM alerts WHERE claimed_by IS NOT NULL OR sent_at IS NOT NULL") == [(0,)]
    fast = WebhookProcess(port, tmp_path / "fast.log")
    try:
        second = run_alerts(db, teams, fast.url)
        again = run_alerts(db, teams, fast.url)
        got = fast.received()
    finally:
        fast.stop()
    assert second.returncode == 0 and again.returncode == 0, second.stderr + again.stderr
    keys = Counter(r["header"] for r in got)
    assert ids <= set(keys) and set(keys) == all_ids(db) and max(keys.values()) == 1
    # what the hung receiver may have taken comes again with the same key: a receiver drops it by that
    assert {r["header"] for r in tried} <= set(keys)


def test_a_receiver_that_is_down_loses_nothing_and_a_killed_runs_claims_wait_for_their_lease(
        request, tmp_path):
    db, teams = request.getfixturevalue("spent_ledger")
    plant(db)
    port = free_port()
    down = run_alerts(db, teams, f"http://127.0.0.1:{port}/hook")
    assert down.returncode == 3
    assert query(db, "SELECT count(*) FROM alerts WHERE claimed_by IS NOT NULL OR sent_at IS NOT NULL") == [(0,)]
    # a run killed while it sent leaves its claims: they hold until their lease ends
    held = claim("killed-run", utcnow(), db=db)
    assert len(held) == len(all_ids(db))
    rx = WebhookProcess(port, tmp_path / "rx.log")
    try:
        assert run_alerts(db, teams, rx.url).returncode == 0 and rx.received() == []
        with open_ledger(db) as con:   # the lease ends
            con.execute("UPDATE alerts SET claimed_until = ? WHERE claimed_by = 'killed-run'", [utcnow()])
        assert run_alerts(db, teams, rx.url).returncode == 0
        got = rx.received()
    finally:
        rx.stop()
    keys = Counter(r["header"] for r in got)
    assert set(keys) == all_ids(db) and max(keys.values()) == 1
