"""Budget alerts: `python -m lib alerts` sends each threshold crossing once, to a real HTTP receiver on
loopback; a receiver that is down or failing gets it on a later run, never lost, never twice."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from streamlit.testing.v1 import AppTest

from lib.dashboard.alerts import alerts_this_month
from lib.dashboard.filters import Filters
from lib.dashboard.forecasts import budget_outlook
from lib.gate.terms import utcnow
from tests.fixtures_app import ROOT, page_script
from tests.fixtures_alerts import ALERT_TEAMS as TEAMS, free_port
from tests.fixtures_ledger import query, run_cli

SECRET = "s3cr3t-token-XYZ"


class Receiver:
    """A webhook receiver on loopback: records every JSON body, answers `status`."""

    def __init__(self, port: int = 0, status: int = 200):
        self.bodies: list[dict] = []
        self.status = status
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if outer.status < 300:
                    outer.bodies.append({"path": self.path, "key": self.headers["Idempotency-Key"],
                                         **json.loads(body)})
                self.send_response(outer.status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/{SECRET}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _alerts(db, teams, url):
    return run_cli("alerts", "--teams-file", teams, db=db, env={"GATE_ALERT_WEBHOOK": url})


def test_each_crossing_is_sent_once_with_its_numbers(spent_ledger):
    db, teams = spent_ledger
    rx = Receiver()
    try:
        p = _alerts(db, teams, rx.url())
        assert p.returncode == 0, p.stderr
        got = {b["alert"]: b for b in rx.bodies}
        assert "budget-80" in got and "budget-100" not in got
        assert {b["team"] for b in rx.bodies} == {"tiny"}
        b = got["budget-80"]
        month = utcnow().strftime("%Y-%m")
        assert (b["month"], b["consumed_gpu_hours"], b["budget_gpu_hours"]) == (month, 85.0, 100.0)
        assert b["id"] == f"tiny/budget-80/{month}" and b["path"] == f"/hooks/{SECRET}"
        assert all(b["key"] == b["id"] for b in rx.bodies)   # a receiver can drop a repeat by its key
        # the P50 run-out alert follows the burn-down the dashboard shows
        burn = budget_outlook(Filters(date_from=utcnow().date(), date_to=utcnow().date()), db)["burn"]
        runs_out = burn.set_index("team").loc["tiny", "exhausts_p50"]
        assert ("runout-p50" in got) == (runs_out is not None and runs_out == runs_out)
        first = len(rx.bodies)
        again = _alerts(db, teams, rx.url())
        assert again.returncode == 0 and len(rx.bodies) == first       # never twice
        assert "0 new, 0 sent" in again.stderr
        assert query(db, "SELECT count(*) FROM audit WHERE action = 'alert'") == [(1 + first,)]
        assert SECRET not in p.stderr + p.stdout + again.stderr
    finally:
        rx.close()


def test_a_receiver_that_is_down_gets_the_alert_on_the_next_run(spent_ledger):
    db, teams = spent_ledger
    port = free_port()
    url = f"http://127.0.0.1:{port}/hooks/{SECRET}"
    p = _alerts(db, teams, url)
    assert p.returncode == 3 and "kept for the next run" in p.stderr and SECRET not in p.stderr
    assert query(db, "SELECT count(*), min(attempts) FROM alerts WHERE sent_at IS NULL")[0][0] >= 1
    rx = Receiver(port)
    try:
        p = _alerts(db, teams, url)
        assert p.returncode == 0, p.stderr
        sent = len(rx.bodies)
        assert sent >= 1 and len({b["id"] for b in rx.bodies}) == sent
        assert query(db, "SELECT count(*) FROM alerts WHERE sent_at IS NULL") == [(0,)]
        assert _alerts(db, teams, url).returncode == 0 and len(rx.bodies) == sent
    finally:
        rx.close()


def test_a_failing_receiver_is_retried_and_the_error_kept(spent_ledger):
    db, teams = spent_ledger
    rx = Receiver(status=500)
    try:
        assert _alerts(db, teams, rx.url()).returncode == 3
        assert query(db, "SELECT DISTINCT last_error FROM alerts") == [(f"http://127.0.0.1:{rx.port}/… answered HTTP 500",)]
        rx.status = 200
        assert _alerts(db, teams, rx.url()).returncode == 0
        assert rx.bodies and query(db, "SELECT count(*) FROM alerts WHERE sent_at IS NULL") == [(0,)]
    finally:
        rx.close()


def test_without_a_webhook_alerts_are_kept_and_the_app_lists_them(spent_ledger):
    db, teams = spent_ledger
    p = run_cli("alerts", "--teams-file", teams, db=db)
    assert p.returncode == 0 and "no webhook configured" in p.stderr
    shown = alerts_this_month(Filters(date_from=utcnow().date(), date_to=utcnow().date()), db)
    assert "budget-80" in set(shown["alert"]) and shown["sent_at"].isna().all()
    only_calm = alerts_this_month(Filters(date_from=utcnow().date(), date_to=utcnow().date(), teams=("calm",)), db)
    assert only_calm.empty


@pytest.mark.parametrize("table, needle", [
    ('[alerts]\nwebhook = "ftp://x"', "[alerts] webhook: must be an http:// or https:// URL"),
    ("[alerts]\nbudget_percent = [80, -5]", "[alerts] budget_percent"),
    ('[alerts]\nrunout = ["p75"]', "[alerts] runout"),
    ("[alerts.teams.nobody]\nrunout = []", "[alerts.teams.nobody]: 'nobody' is not a team"),
])
def test_a_malformed_alerts_table_is_refused_with_every_problem(spent_ledger, tmp_path, table, needle):
    db, teams = spent_ledger
    bad = tmp_path / "bad.toml"
    bad.write_text(TEAMS + "\n" + table + "\n", encoding="utf-8")
    p = run_cli("alerts", "--teams-file", bad, db=db)
    assert p.returncode == 2 and needle in p.stderr
    assert query(db, "SELECT count(*) FROM alerts") == [(0,)]


def test_a_redirect_is_not_followed(spent_ledger):
    rx = Receiver()

    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(307)
            self.send_header("Location", rx.url())
            self.end_headers()

        def log_message(self, *args):
            pass

    away = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=away.serve_forever, daemon=True).start()
    db, teams = spent_ledger
    try:
        p = _alerts(db, teams, f"http://127.0.0.1:{away.server_address[1]}/hooks/{SECRET}")
        assert p.returncode == 3 and rx.bodies == []
        assert query(db, "SELECT DISTINCT last_error FROM alerts") == [
            (f"http://127.0.0.1:{away.server_address[1]}/… answered HTTP 307",)]
    finally:
        away.shutdown()
        away.server_close()
        rx.close()


PASSWORD = "pa55-LEAK-9q"


@pytest.mark.parametrize("userinfo", [f"hook:{PASSWORD}@", f"{PASSWORD}@", f":{PASSWORD}@"])
def test_a_webhook_with_a_password_before_the_host_is_refused_without_showing_it(spent_ledger, tmp_path, userinfo):
    db, teams = spent_ledger
    url = f"https://{userinfo}hooks.example.org/T0/{SECRET}"
    in_file = tmp_path / "with-userinfo.toml"
    in_file.write_text(TEAMS + f'\n[alerts]\nwebhook = "{url}"\n', encoding="utf-8")
    for p in (run_cli("alerts", "--teams-file", in_file, db=db), _alerts(db, teams, url)):
        assert p.returncode == 2, p.stderr
        assert "must not carry a user name or password before the host" in p.stderr
        assert PASSWORD not in p.stderr + p.stdout and SECRET not in p.stderr + p.stdout
    assert "$GATE_ALERT_WEBHOOK" in _alerts(db, teams, url).stderr
    assert query(db, "SELECT count(*) FROM alerts") == [(0,)]


@pytest.mark.usefixtures("fresh_caches")
def test_overview_lists_this_months_alerts_as_data(spent_ledger, monkeypatch):
    db, teams = spent_ledger
    assert run_cli("alerts", "--teams-file", teams, db=db).returncode == 0
    monkeypatch.setenv("GATE_DB", str(db))
    monkeypatch.setenv("GATE_DEMO", "0")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    at.switch_page(page_script("overview")).run()
    assert not at.exception, [e.value for e in at.exception]
    box = next(e for e in at.expander if e.label.startswith("Budget alerts this month"))
    shown = box.dataframe[0].value
    assert "budget-80" in set(shown["alert"]) and set(shown["team"]) == {"tiny"}
