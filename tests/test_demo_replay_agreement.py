"""The demo history's decisions are the gate's own: replaying a demo ledger under the policy it was
built with (`python -m lib replay --policy data/teams.toml`, a real process) decides at least 99 %
of its recorded requests as they were recorded, deferrals of several reasons among them."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest

from lib.ledger.demo import build_demo
from tests.fixtures_gate import NOW
from tests.fixtures_ledger import REPO, run_cli

RUNS, DAYS = 3000, 120   # about 25 runs a day: some 1,100 requests in the replay's four weeks


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    path = tmp_path_factory.mktemp("agreement") / "demo.duckdb"
    build_demo(path, runs=RUNS, seed=11, now=NOW, days=DAYS)
    return path


def _replay(db, start, end) -> dict:
    p = run_cli("replay", "--policy", REPO / "data" / "teams.toml", "--from", start.isoformat(),
                "--to", end.isoformat(), db=db, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_replaying_the_demo_under_its_own_policy_agrees_on_at_least_99_percent(demo):
    result = _replay(demo, NOW - timedelta(weeks=4), NOW)
    assert result["requests"] >= 300 and result["excluded"]["count"] == 0
    assert result["agreement"] >= 0.99, result["changed_requests"][:10]
    recorded = result["recorded"]
    assert recorded["admit"] > 0 and recorded["defer"] >= 10
    reasons = {code for team in result["teams"] for code in team["recorded"]["deferrals_by_reason"]}
    assert len(reasons) >= 3, reasons
