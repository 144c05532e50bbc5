"""The demo's decisions carry the full request and the gate's decision, as a real submit records them
(that replaying them decides them again: tests/test_demo_replay_agreement.py)."""
from __future__ import annotations

import json

from lib.gate.request import validate
from lib.ledger.connection import open_ledger
from lib.ledger.state import team_policy


def _decisions(db):
    with open_ledger(db, read_only=True) as con:
        rows = con.execute("SELECT state, team, kind, reason_codes, request_json, decision_json "
                           "FROM decisions WHERE origin = 'demo' ORDER BY decision_id").fetchall()
        policies = {t: team_policy(con, t) for t in {r[1] for r in rows}}
    return rows, policies


def test_every_demo_request_validates_and_names_team_and_gpus(demo_ledger):
    rows, _ = _decisions(demo_ledger)
    assert rows and any(r[0] == "defer" for r in rows)
    for state, team, kind, _, request_json, _ in rows:
        request = json.loads(request_json)
        normalized, problems = validate(request)
        assert problems == [], (request, problems)
        assert request["team"] == team and request["kind"] == kind
        assert type(request["gpus"]) is int and request["gpus"] >= 1


def test_every_demo_decision_records_the_gates_reasons_and_policy_version(demo_ledger):
    rows, policies = _decisions(demo_ledger)
    assert {r[0] for r in rows} == {"admit", "defer"}
    for state, team, _, codes, _, decision_json in rows:
        recorded = json.loads(decision_json)
        assert recorded["state"] == state
        assert [r["code"] for r in recorded["reasons"]] == list(codes)
        assert recorded["policy_version"] == policies[team]["policy_version"]
        assert (recorded["reserved_gpu_hours"] is not None) == (state == "admit")


def test_deferred_rows_name_the_requested_gpus_in_their_reasons(demo_ledger):
    """The symptom: a deferral read 'unknown team or GPU count' because its request held only run ID,
    team and kind."""
    rows, _ = _decisions(demo_ledger)
    for state, *_, request_json, decision_json in rows:
        if state == "defer":
            assert "gpus" in json.loads(request_json)
            assert "unknown team" not in decision_json
