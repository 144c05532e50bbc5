"""The demo's decisions carry the full request, as a real submit records it; its deferrals are the
gate's own decisions (lib.gate.admission.decide over the team's policy and lib.ledger.demo.demo_state)."""
from __future__ import annotations

import json

from lib.gate.admission import decide
from lib.gate.request import validate
from lib.ledger.connection import open_ledger
from lib.ledger.demo import demo_state
from lib.ledger.state import team_policy
from lib.ledger.teams_file import load_teams


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


def test_every_demo_deferral_is_what_the_gate_decides_again(demo_ledger):
    rows, policies = _decisions(demo_ledger)
    _, snapshots = load_teams()
    deferred = [r for r in rows if r[0] == "defer"]
    assert deferred
    for state, team, _, codes, request_json, decision_json in deferred:
        request, recorded = json.loads(request_json), json.loads(decision_json)
        policy = policies[team]
        again = decide(request, policy, demo_state(policy, snapshots, request, codes))
        assert again["state"] == state == recorded["state"]
        assert [r["code"] for r in again["reasons"]] == list(codes) == [r["code"] for r in recorded["reasons"]]
        assert again["reasons"] == recorded["reasons"]
        assert recorded["policy_version"] == policy["policy_version"]


def test_deferred_rows_name_the_requested_gpus_in_their_reasons(demo_ledger):
    """The symptom: a deferral read 'unknown team or GPU count' because its request held only run ID,
    team and kind."""
    rows, _ = _decisions(demo_ledger)
    for state, *_, request_json, decision_json in rows:
        if state == "defer":
            assert "gpus" in json.loads(request_json)
            assert "unknown team" not in decision_json
