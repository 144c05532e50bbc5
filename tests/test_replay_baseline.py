"""Policy replay against a baseline and with other pool sizes (lib.ledger.replay, `python -m lib replay`):
the current policy replayed by the same engine beside the proposal, so proposed - baseline is the
proposal's effect alone; and the capacity what-if, the pool check run the way `decide` runs it.

Ledgers are made by real `submit` and `finish` calls (tests/fixtures_replay.py).
"""
from __future__ import annotations

import json
import math
from datetime import timedelta

import pytest

from lib.ledger.replay import replay_ledger
from lib.ledger.teams_file import parse_teams
from lib.planning.replay.passes import NOT_SENT
from lib.planning.replay.report import wait_measures
from tests.fixtures_ledger import query, run_cli
from tests.fixtures_replay import POOLED_STABLE_GPUS, POOLED_TEAMS, REPLAY_TEAMS

PASS_KEYS = ("recorded", "baseline", "proposed")


def window(first, last) -> dict:
    return {"start": first - timedelta(hours=1), "end": last + timedelta(hours=1)}


def teams(text: str = REPLAY_TEAMS) -> dict:
    return {t["team"]: t for t in parse_teams(text)[0]}


def test_a_proposal_equal_to_the_current_policy_is_replayed_once_and_equals_the_baseline(submitted_ledger):
    db, first, last = submitted_ledger
    result = replay_ledger(db, list(teams().values()), **window(first, last))
    assert result["baseline_is_proposed"] is True
    assert result["proposed"] == result["baseline"] and result["overall"]["proposed"] == result["overall"]["baseline"]
    assert result["proposed_vs_baseline_changed"] == 0
    for team in result["teams"]:
        assert set(PASS_KEYS) <= set(team) and team["proposed"] == team["baseline"]
        assert set(team["baseline"]) == set(team["proposed"]) == set(team["recorded"])


def test_a_change_no_request_meets_gives_the_baseline_again_from_a_separate_pass(submitted_ledger):
    """A new team that makes no request: the proposal differs, so both passes run, and every number agrees."""
    db, first, last = submitted_ledger
    extra = parse_teams(REPLAY_TEAMS.replace("[teams.gamma]", "[teams.delta]\nreserved_gpus = 64\nmax_gpus_per_job = 8\n"
                                             "monthly_budget_gpu_hours = 9\n\n[teams.gamma]"))[0]
    delta = next(t for t in extra if t["team"] == "delta")
    result = replay_ledger(db, [delta], **window(first, last))
    assert result["baseline_is_proposed"] is False
    assert result["proposed"] == result["baseline"] and result["overall"]["proposed"] == result["overall"]["baseline"]
    assert {t["team"]: t["proposed"] for t in result["teams"]} == {t["team"]: t["baseline"] for t in result["teams"]}


def test_the_baseline_reproduces_the_record_and_the_proposal_differs_from_it_alone(submitted_ledger):
    db, first, last = submitted_ledger
    alpha = {**teams()["alpha"], "reserved_gpus": 2}
    result = replay_ledger(db, [alpha], **window(first, last))
    assert result["baseline_agreement"] == 1.0 and result["baseline"] == result["recorded"]
    assert result["proposed_vs_baseline_changed"] > 0
    by = {t["team"]: t for t in result["teams"]}
    a = by["alpha"]
    assert a["proposed"]["admit"] < a["baseline"]["admit"]
    assert a["proposed"]["deferrals_by_reason"].get("capacity", 0) > a["baseline"]["deferrals_by_reason"].get("capacity", 0)
    assert a["proposed"]["deferral_share"] > a["baseline"]["deferral_share"]
    # requests above the smaller quota can never start by waiting: they leave the mean, not the P90
    assert a["proposed"]["never_fits_by_waiting"] > a["baseline"]["never_fits_by_waiting"]
    assert a["proposed"]["p90_wait_hours"] is None


def test_a_retry_of_a_run_the_proposal_admitted_earlier_is_not_sent(submitted_ledger):
    """Deferred requests were retried under the same run ID. A larger quota admits some of them at
    their first try: their later retries are left out as not sent, never counted as rejected
    duplicates (which would lower the deferral share), and no run is admitted twice."""
    db, first, last = submitted_ledger
    result = replay_ledger(db, [{**teams()["alpha"], "reserved_gpus": 64}], **window(first, last))
    retries = {(r["run_id"], r["decision_id"]) for r in result["excluded"]["requests"] if r["why"] == NOT_SENT}
    assert retries and result["excluded"]["by_reason"][NOT_SENT] == len(retries)
    assert result["proposed"]["reject"] == result["baseline"]["reject"] == result["recorded"]["reject"]
    admitted = [d for d in result["changed_requests"] if d["proposed_state"] == "admit"]
    assert {run for run, _ in retries} <= {d["run_id"] for d in admitted}
    assert result["baseline"] == result["recorded"]   # the current policy admits nothing earlier: nothing left out
    assert NOT_SENT not in replay_ledger(db, **window(first, last))["excluded"]["by_reason"]


def test_the_pool_check_in_the_replay_is_the_gates_own(pooled_submitted_ledger):
    """The ledger's decisions were made by the gate with a 12-accelerator stable pool, cluster-capacity
    deferrals among them: the baseline (the ledger's pools) decides every request as recorded."""
    db, first, last = pooled_submitted_ledger
    codes = {c for (c,) in query(db, "SELECT DISTINCT code FROM decisions, unnest(reason_codes) AS u(code)")}
    assert "cluster-capacity" in codes
    result = replay_ledger(db, **window(first, last))
    assert result["pools"]["baseline"] == {"stable": POOLED_STABLE_GPUS}
    assert result["baseline_agreement"] == 1.0 and result["baseline_reason_agreement"] == 1.0
    assert result["overall"]["baseline"]["deferrals_by_reason"]["cluster-capacity"] > 0


def test_a_pool_as_large_as_every_quota_never_defers_for_the_cluster_and_a_small_one_does(pooled_submitted_ledger):
    db, first, last = pooled_submitted_ledger
    quotas = sum(t["reserved_gpus"] for t in teams(POOLED_TEAMS).values())
    big = replay_ledger(db, pools={"stable": quotas}, **window(first, last))
    small = replay_ledger(db, pools={"stable": 4}, **window(first, last))
    assert big["pools"]["proposed"] == {"stable": quotas} and big["baseline_is_proposed"] is False
    assert "cluster-capacity" not in big["overall"]["proposed"]["deferrals_by_reason"]
    assert big["proposed"]["admit"] >= big["baseline"]["admit"]
    assert small["overall"]["proposed"]["deferrals_by_reason"]["cluster-capacity"] > \
        small["overall"]["baseline"]["deferrals_by_reason"]["cluster-capacity"]
    assert small["proposed"]["admit"] < small["baseline"]["admit"]
    # the baseline is the same whatever the proposal
    assert big["overall"]["baseline"] == small["overall"]["baseline"]


def test_a_pool_on_a_ledger_without_pools_adds_the_check_only_to_the_proposal(submitted_ledger):
    db, first, last = submitted_ledger
    result = replay_ledger(db, pools={"stable": 3}, **window(first, last))
    assert result["pools"] == {"proposed": {"stable": 3}, "baseline": {}}
    assert result["baseline"] == result["recorded"]
    assert result["overall"]["proposed"]["deferrals_by_reason"].get("cluster-capacity", 0) > 0
    assert "cluster-capacity" not in result["overall"]["baseline"]["deferrals_by_reason"]


@pytest.mark.parametrize("admits, waits, never, mean, p90", [
    (9, [5.0], 0, 0.5, 0.0),                       # the 9th of 10 is an admit
    (8, [1.0, 7.0], 0, 0.8, 1.0),
    (0, [3.0, 1.0, 2.0], 0, 2.0, 3.0),
    (1, [2.0], 8, 1.0, None),                      # P90 falls on a request that never fits
    (0, [], 0, None, None),
])
def test_waits_count_admits_at_zero_and_never_fitting_requests_as_endless(admits, waits, never, mean, p90):
    got_mean, got_p90 = wait_measures(admits, waits, never)
    assert (got_mean is None) == (mean is None) and (mean is None or math.isclose(got_mean, mean))
    assert got_p90 == p90


def test_the_command_line_replays_a_pool_what_if_without_a_policy_file(pooled_submitted_ledger, tmp_path):
    db, first, last = pooled_submitted_ledger
    out = run_cli("replay", "--pool", "stable=18", "--pool", "preemptible=40", "--from", first.isoformat(),
                  "--to", (last + timedelta(hours=1)).isoformat(), db=db)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["pools"] == {"proposed": {"preemptible": 40, "stable": 18}, "baseline": {"stable": 12}}
    assert set(result) >= set(PASS_KEYS) and result["baseline_agreement"] == 1.0
    assert "nothing written" in out.stderr


@pytest.mark.parametrize("pool, says", [
    ("stable", "expected TYPE=N"), ("gold=4", "unknown capacity type 'gold'"), ("stable=four", "whole number"),
    ("stable=-1", "from 0 to"), ("stable=99999999999", "from 0 to"), ("=4", "unknown capacity type ''"),
])
def test_a_bad_pool_is_refused_with_what_is_wrong(submitted_ledger, pool, says):
    db, _, _ = submitted_ledger
    out = run_cli("replay", "--pool", pool, db=db)
    assert out.returncode == 2 and out.stdout == ""
    assert says in out.stderr and "--pool" in out.stderr


def test_a_pool_given_twice_is_refused(submitted_ledger):
    db, _, _ = submitted_ledger
    out = run_cli("replay", "--pool", "stable=4", "--pool", "stable=8", db=db)
    assert out.returncode == 2 and out.stdout == "" and "--pool stable given twice" in out.stderr


def test_the_p90_held_is_the_hourly_samples_90th_percentile(submitted_ledger):
    from lib.ledger.replay import held_p90
    db, first, last = submitted_ledger
    start = first.replace(minute=0, second=0, microsecond=0)
    end = start + timedelta(days=10)
    got = held_p90(db, start=start, end=end)
    # a reservation holds from its start until its run ends (an overrun too), as the gate holds it
    spans = query(db, "SELECT team, gpus, reserved_from, ended_at FROM runs WHERE reserved_gpu_hours IS NOT NULL")
    hours = [start + timedelta(hours=h) for h in range(int((end - start).total_seconds() // 3600))]
    for team in ("alpha", "beta", "gamma"):
        samples = sorted(sum(g for t, g, s, e in spans if t == team and s <= h and (e is None or e > h))
                         for h in hours)
        assert got[team] == samples[math.ceil(0.9 * len(samples)) - 1]
    assert any(v > 0 for v in got.values())


def test_each_quota_cut_is_proved_by_the_replay_of_that_cut_alone(submitted_ledger):
    from lib.dashboard.replay_view import sizing_tables
    from lib.ledger.replay import held_p90, read_window
    from lib.planning.replay.rightsizing import right_sizing
    db, first, last = submitted_ledger
    w = window(first, last)
    data = read_window(db, **w)
    held = held_p90(db, **w)
    sizing = sizing_tables(right_sizing(data, held))
    rows = sizing["rows"].set_index("team")
    policies = data.policies
    for team, p in policies.items():
        keep = max(held[team], p["retraining_reserved_gpus"])
        assert rows.loc[team, "give_back_gpus"] == max(0, p["reserved_gpus"] - keep)
    cut = [t for t in policies if rows.loc[t, "give_back_gpus"] > 0]
    assert cut and set(sizing["edits"]) == set(cut)
    for team in cut:   # the same numbers as the full replay (baseline beside it) of that team's cut
        proposal = {**teams()[team], "reserved_gpus": int(rows.loc[team, "proposed_quota_gpus"])}
        full = {t["team"]: t for t in replay_ledger(db, [proposal], **w)["teams"]}
        assert rows.loc[team, "admitted"] == full[team]["baseline"]["admit"]
        assert rows.loc[team, "admitted_with_cut"] == full[team]["proposed"]["admit"]
        assert rows.loc[team, "others_admitted_with_cut"] == sum(
            v["proposed"]["admit"] for t, v in full.items() if t != team)
        proof = sizing["proof"][(sizing["proof"]["team_cut"] == team) & (sizing["proof"]["measure"] == "deferred")]
        assert dict(zip(proof["team"], proof["with_cut"])) == {t: v["proposed"]["defer"] for t, v in full.items()}
