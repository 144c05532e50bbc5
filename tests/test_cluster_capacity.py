"""The cluster's physical accelerators: team quotas may add up to more than a pool, so a request within its
quota can still find none (`cluster-capacity`), and the scheduler's own reservations (maintenance,
other accounts) take accelerators out of the pool. The fix time never lands where the run would not
fit; without a pool nothing changes."""
from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings, strategies as st

from lib.gate.admission import decide
from lib.gate.capacity import capacity_fit, pool_fit, pool_room, window_applies
from lib.gate.reasons import ORDER
from lib.ledger.cluster_windows import replace_windows
from lib.ledger.connection import open_ledger
from lib.ledger.deciding import check_request, submit_request
from lib.ledger.state import team_state
from lib.ledger.teams_file import TeamsFileError, parse_teams_file, pool_warnings, sync_teams
from tests.fixtures_gate import NOW, policy, request, state
from tests.fixtures_ledger import TINY_TEAMS, run_cli, tiny_request, write_json

H = timedelta(hours=1)


def other(run_id, gpus, hours_left, team="search", kind="exploratory"):
    return {"run_id": run_id, "team": team, "kind": kind, "gpus": gpus, "reserved_gpu_hours": 1.0,
            "reserved_until": None if hours_left is None else NOW + hours_left * H, "capacity": "stable"}


def pool(gpus, reservations=(), windows=()):
    return {"name": "stable", "gpus": gpus, "reservations": list(reservations), "windows": list(windows)}


def window(start_h, end_h, gpus, accounts=(), pool_name="stable"):
    return {"name": f"maint-{start_h}", "start": NOW + start_h * H, "end": NOW + end_h * H, "gpus": gpus,
            "pool": pool_name, "accounts": list(accounts), "users": []}


def codes(d):
    return [r["code"] for r in d["reasons"]]


def test_a_request_within_its_quota_is_deferred_when_the_pool_is_full_and_told_when_it_fits():
    s = state()
    s["pools"] = {"stable": pool(20, [other("s-1", 10, 3), other("s-2", 8, 6)])}
    d = decide(request(gpus=4), policy(), s)                 # vision holds nothing: 4 of 12 fit its quota
    assert codes(d) == ["cluster-capacity"]
    (r,) = d["reasons"]
    assert (r["requested"], r["limit"], r["in_use"]) == (4, 20, 18)
    assert "fits with 2 fewer accelerators (≤ 2 free" in r["fix"]
    assert f"or from {(NOW + 3 * H).isoformat(timespec='minutes')}" in r["fix"]
    assert decide(request(gpus=2), policy(), s)["state"] == "admit"


def test_every_capacity_reason_comes_in_the_documented_order():
    s = state(reservations=[{"run_id": "v", "team": "vision", "kind": "exploratory", "gpus": 10,
                             "reserved_gpu_hours": 1.0, "reserved_until": NOW + H, "capacity": "stable"}])
    s["pools"] = {"stable": pool(12, [other("v", 10, 1, team="vision")])}
    d = decide(request(gpus=8), policy(), s)
    assert codes(d) == ["capacity", "cluster-capacity", "retraining-protection"]
    assert codes(d) == sorted(codes(d), key=ORDER.__getitem__)


def test_a_window_of_the_scheduler_defers_a_run_that_would_reach_it_and_the_fix_is_after_it():
    maint = window(2, 6, 17)
    s = state()
    s["pools"] = {"stable": pool(20, [other("s-1", 8, 1)], [maint])}
    short = decide(request(gpus=4, estimated_gpu_hours=4.0), policy(), s)    # 1 h: done before 2 h
    assert short["state"] == "admit"
    long = decide(request(gpus=4), policy(), s)                               # 18.5 / 4 = 4.6 h: into it
    assert codes(long) == ["cluster-capacity"]
    assert "maint-2" in long["reasons"][0]["message"]
    assert f"or from {maint['end'].isoformat(timespec='minutes')}" in long["reasons"][0]["fix"]
    # the team's own reservation (its account) takes nothing from it
    s["pools"]["stable"]["windows"] = [window(2, 6, 17, accounts=["vision"])]
    assert decide(request(gpus=4), policy(), s)["state"] == "admit"


def test_retraining_does_not_count_its_own_teams_experiments_in_the_pool():
    s = state(reservations=[{"run_id": "v-exp", "team": "vision", "kind": "exploratory", "gpus": 6,
                             "reserved_gpu_hours": 1.0, "reserved_until": NOW + 5 * H, "capacity": "stable"}])
    s["pools"] = {"stable": pool(16, [other("v-exp", 6, 5, team="vision"), other("s-1", 8, 5)])}
    assert codes(decide(request(gpus=4), policy(), s)) == ["cluster-capacity"]     # 6 + 8 + 4 > 16
    assert decide(request(gpus=4, kind="retraining"), policy(), s)["state"] == "admit"   # preempts its own 6


def test_without_a_pool_for_the_capacity_type_nothing_changes():
    base = state(reservations=[])
    full = dict(base, pools={"preemptible": pool(0)})
    for req in (request(gpus=4), request(gpus=8, kind="retraining"), request(gpus=20)):
        plain, with_other = decide(req, policy(), base), decide(req, policy(), full)
        assert {k: v for k, v in plain.items() if k != "decided_at"} == \
            {k: v for k, v in with_other.items() if k != "decided_at"}


held_strategy = st.lists(st.tuples(st.integers(1, 8), st.one_of(st.none(), st.integers(1, 48))), max_size=6)
window_strategy = st.lists(st.tuples(st.integers(0, 40), st.integers(1, 24), st.integers(1, 20)), max_size=3)


@settings(max_examples=200, deadline=None)
@given(held=held_strategy, windows=window_strategy, need=st.integers(1, 12), hours=st.integers(0, 30),
       size=st.integers(8, 32))
def test_the_pool_fit_is_the_first_time_the_whole_run_has_room(held, windows, need, hours, size):
    p = pool(size, [other(f"h{i}", g, e) for i, (g, e) in enumerate(held)],
             [window(s, s + d, g) for s, d, g in windows])
    at = pool_fit(p, "vision", "exploratory", need, hours, NOW)

    def fits(t):   # held + windows + need <= size at every minute of [t, t + hours)
        for m in range(0, max(1, hours * 60), 20):
            u = t + timedelta(minutes=m)
            used = sum(r["gpus"] for r in p["reservations"] if r["reserved_until"] is None or r["reserved_until"] > u)
            used += sum(w["gpus"] for w in p["windows"] if w["start"] <= u < w["end"])
            if used + need > size:
                return False
        return True
    if at is None:
        assert not fits(NOW + 200 * H)    # after every end: never
    else:
        assert fits(at) and pool_room(p, "vision", "exploratory", at, hours)[0] >= need
        for m in range(0, int((at - NOW).total_seconds() // 60), 20):   # nothing earlier had room
            assert not fits(NOW + timedelta(minutes=m)), m


def test_the_quota_and_the_pool_together_give_the_fix_time():
    holders = [{"run_id": "v", "team": "vision", "kind": "exploratory", "gpus": 8, "reserved_gpu_hours": 1.0,
                "reserved_until": NOW + 2 * H}]
    p = pool(16, [other("s", 12, 5)])
    # the quota frees at 2 h, the pool at 5 h: both are needed
    assert capacity_fit(NOW, "exploratory", 16, 4, holders, 8) == NOW + 2 * H
    assert capacity_fit(NOW, "exploratory", 16, 4, holders, 8, p, "vision", 3.0) == NOW + 5 * H


POOLED_TEAMS = TINY_TEAMS + """
[teams.other]
reserved_gpus = 8
max_gpus_per_job = 8
monthly_budget_gpu_hours = 100000

[[snapshots]]
snapshot = "shared-data"

[pools.stable]
gpus = 10
"""


@pytest.fixture
def pooled_ledger(tmp_path):
    """Teams tiny and other, 8 accelerators each, sharing a stable pool of 10."""
    teams = tmp_path / "pooled.toml"
    teams.write_text(POOLED_TEAMS, encoding="utf-8")
    path = tmp_path / "pooled.duckdb"
    with open_ledger(path) as con:
        counts = sync_teams(con, teams)
    assert any("1.60×" in w for w in counts["warnings"])          # 16 of quotas over 10: overcommitted
    return path


def test_the_ledger_decides_with_its_pool_and_the_command_line_says_cluster_capacity(pooled_ledger, tmp_path):
    first = submit_request(tiny_request(1, gpus=6, estimated_gpu_hours=30, budget_gpu_hours=40),
                           db=pooled_ledger, now=NOW)
    assert first["state"] == "admit"
    with open_ledger(pooled_ledger, read_only=True) as con:
        st_ = team_state(con, "other", NOW, kind="exploratory")
        assert [r["run_id"] for r in st_["pools"]["stable"]["reservations"]] == ["tiny-001"]
        assert st_["reservations"] == []
    req = tiny_request(2, team="other", data_snapshot="shared-data", gpus=6)
    d = check_request(req, db=pooled_ledger, now=NOW)
    assert codes(d) == ["cluster-capacity"]          # within other's quota of 8: 6 + 6 > 10
    p = run_cli("check", write_json(tmp_path / "r.json", req), "--now", NOW.isoformat(), db=pooled_ledger)
    assert p.returncode == 1 and "[cluster-capacity]" in p.stderr
    # a maintenance window over the whole pool: a small request that fits now is deferred past it
    with open_ledger(pooled_ledger) as con:
        assert replace_windows(con, [window(1, 30, 10)], source="test")
    small = dict(req, gpus=2)
    d = check_request(small, db=pooled_ledger, now=NOW)
    assert codes(d) == ["cluster-capacity"] and "maint-1" in d["reasons"][0]["message"]


def test_a_malformed_pools_table_lists_every_problem_with_its_line():
    text = TINY_TEAMS + "\n[pools.stable]\ngpus = -1\nnodes = 3\n\n[pools.gpu]\ngpus = 4\n\n[pools.preemptible]\n"
    with pytest.raises(TeamsFileError) as err:
        parse_teams_file(text)
    problems = err.value.problems
    lines = text.splitlines()
    assert len(problems) == 4, problems
    for needle, key in (("gpus: must be", "gpus = -1"), ("nodes: unknown key", "nodes = 3"),
                        ("unknown capacity type 'gpu'", "[pools.gpu]"), ("gpus: required", "[pools.preemptible]")):
        (p,) = [p for p in problems if needle in p]
        assert p.startswith(f"line {lines.index(key) + 1}: "), p


def test_a_pool_smaller_than_a_quota_is_allowed_but_flagged_and_reloading_without_pools_removes_them(tmp_path):
    parsed = parse_teams_file(TINY_TEAMS + "\n[pools.stable]\ngpus = 4\n")
    assert parsed["pools"] == {"stable": 4}
    assert any("smaller than the quota of tiny" in w for w in pool_warnings(parsed["teams"], parsed["pools"]))
    with_pool, without = tmp_path / "a.toml", tmp_path / "b.toml"
    with_pool.write_text(TINY_TEAMS + "\n[pools.stable]\ngpus = 4\n", encoding="utf-8")
    without.write_text(TINY_TEAMS, encoding="utf-8")
    db = tmp_path / "p.duckdb"
    with open_ledger(db) as con:
        sync_teams(con, with_pool)
        con.execute("INSERT INTO pools VALUES ('preemptible', 7, 'sinfo')")   # another source's pool stays
        assert con.execute("SELECT pool, gpus FROM pools ORDER BY 1").fetchall() == [("preemptible", 7), ("stable", 4)]
        sync_teams(con, without)
        assert con.execute("SELECT pool, gpus FROM pools ORDER BY 1").fetchall() == [("preemptible", 7)]


@pytest.mark.parametrize("accounts, users, takes_from_vision", [
    ([], [], True),                       # maintenance: everyone
    (["vision"], [], False),              # vision's own reservation
    (["search"], [], True),               # another account's
    (["-search"], [], False),             # every account but search may run inside
    (["-vision"], [], True),
    ([], ["alice"], True),                # some users only: the gate decides per team, so it takes
    ([], ["-bob"], False),                # every user but bob
])
def test_a_window_takes_from_a_team_unless_the_team_may_run_inside_it(accounts, users, takes_from_vision):
    w = {**window(0, 10, 16), "accounts": accounts, "users": users}
    assert window_applies(w, "stable", "vision") is takes_from_vision
    assert window_applies(w, "preemptible", "vision") is False          # another pool's window
    assert window_applies({**w, "pool": None}, "preemptible", "vision") is takes_from_vision


@settings(max_examples=200, deadline=None)
@given(held=st.lists(st.tuples(st.integers(1, 8), st.one_of(st.none(), st.integers(-5, 48)),
                               st.sampled_from(["vision", "search"]), st.sampled_from(["exploratory", "retraining"])),
                     max_size=8),
       kind=st.sampled_from(["exploratory", "retraining"]), hours=st.integers(0, 30), size=st.integers(0, 32))
def test_without_windows_the_room_is_what_the_start_leaves_as_the_timeline_reckons_it(held, kind, hours, size):
    """A pool without the scheduler's windows takes the short way (the start alone): the same room and
    holdings as the timeline's way, which a pool with windows takes."""
    from lib.gate.capacity import holdings_timeline, pool_counted
    p = pool(size, [other(f"h{i}", g, e, team, k) for i, (g, e, team, k) in enumerate(held)])
    timeline = holdings_timeline(NOW, pool_counted(p, "vision", kind))
    room, counted, windows = pool_room(p, "vision", kind, NOW, hours)
    assert (room, counted, windows) == pool_room(p, "vision", kind, NOW, hours, timeline)
    assert windows == [] and room == max(0, size - counted)
