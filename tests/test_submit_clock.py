"""`submit --now` records a decision at the time given, so it is taken only within
lib.gate.terms.SUBMIT_CLOCK_WINDOW of the present: a decision dated elsewhere would be judged against
another moment's reservations and then hold accelerators now. Refused (exit 2, nothing written)
in-process and before anything is sent to a gate server. `check --now` writes nothing and keeps
taking any time of the gate's calendar. Real processes, real ledgers."""
from __future__ import annotations

import json
import socket
import threading
from datetime import timedelta

import pytest

from lib.gate.terms import SUBMIT_CLOCK_WINDOW, utcnow
from tests.fixtures_ledger import counts, query, run_cli, tiny_request, write_json

MESSAGE = (f"a decision to record must be dated within {int(SUBMIT_CLOCK_WINDOW.total_seconds() // 60)} minutes "
           "of the present")


@pytest.mark.parametrize("offset", [timedelta(days=12), -timedelta(days=400), SUBMIT_CLOCK_WINDOW + timedelta(minutes=2),
                                    -(SUBMIT_CLOCK_WINDOW + timedelta(minutes=2))])
def test_a_submit_dated_away_from_the_present_is_refused_and_writes_nothing(tiny_ledger, tmp_path, offset):
    before = counts(tiny_ledger)
    at = (utcnow() + offset).replace(microsecond=0)
    p = run_cli("submit", write_json(tmp_path / "r.json", tiny_request(1)), "--now", at.isoformat(), db=tiny_ledger)
    assert p.returncode == 2, p.stderr
    assert MESSAGE in p.stderr and at.isoformat() in p.stderr and "use `check`" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and p.stdout == ""
    assert counts(tiny_ledger) == before


def test_a_submit_dated_within_the_window_is_recorded_at_that_time(tiny_ledger, tmp_path):
    at = (utcnow() - timedelta(minutes=1)).replace(microsecond=0)
    p = run_cli("submit", write_json(tmp_path / "r.json", tiny_request(1)), "--now", at.isoformat(), db=tiny_ledger)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["decided_at"] == at.isoformat()
    assert query(tiny_ledger, "SELECT decided_at FROM decisions") == [(at,)]


def test_a_check_may_still_ask_about_any_time(tiny_ledger, tmp_path):
    path = write_json(tmp_path / "r.json", tiny_request(1))
    for at in ("2030-06-01T08:00:00", "2001-01-01T00:00:00"):
        p = run_cli("check", path, "--now", at, db=tiny_ledger)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["decided_at"] == at
    assert counts(tiny_ledger)["decisions"] == 0


class Listener:
    """A Unix socket where a gate server would listen, counting the connections made to it."""

    def __init__(self, path):
        self.connections = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


def test_a_submit_dated_away_from_the_present_is_refused_before_asking_the_gate_server(tiny_ledger, tmp_path):
    sock = tmp_path / "gate.sock"
    listener = Listener(sock)
    try:
        far = (utcnow() + timedelta(days=12)).replace(microsecond=0).isoformat()
        p = run_cli("submit", write_json(tmp_path / "r.json", tiny_request(1)), "--now", far, "--timeout", "2",
                    db=tiny_ledger, env={"TG_GATE_SOCKET": str(sock)}, timeout=60)
    finally:
        listener.close()
    assert p.returncode == 2, p.stderr
    assert MESSAGE in p.stderr and far in p.stderr
    assert listener.connections == 0
    assert counts(tiny_ledger)["decisions"] == 0
