"""The forward plan's rules (lib.planning.plan.forward), on plain data: waiting requests served in order
(retraining first, then the longest wait) through `decide`, each seeing what the plan started before
it; a deferred request tried again when its reasons can be cured, never two in the same free
accelerators; budgets reset with the month; expiry; and a calendar whose free count is what the gate
would admit then."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from lib.gate.admission import decide
from lib.gate.capacity import pool_room
from lib.gate.terms import next_month_start
from lib.planning.plan.forward import forward_plan, world_at
from tests.fixtures_gate import NOW, policy
from tests.fixtures_plan import H, held, plan_inputs, waiting

CAPACITY_CODES = {"capacity", "cluster-capacity", "retraining-protection"}


def rows(plan) -> dict:
    return {r["run_id"]: r for r in plan["queue"]}


def experiments_held(plan, t) -> int:
    """Accelerators that experiments hold at t in the plan (the ledger's and the plan's reservations)."""
    return sum(h["gpus"] for h in plan["holdings"] if h["kind"] != "retraining"
               and (h["start"] is None or h["planned"] is False or h["start"] <= t)
               and (h["end"] is None or h["end"] > t))


def test_requests_for_the_same_free_accelerators_are_planned_one_after_another():
    # 12 accelerators for experiments (16 less 4 set aside); 8 held until NOW + 2 h: room for one request of 4
    inputs = plan_inputs([held("running", 8, 2)],
                         [waiting(f"wait-{i}", gpus=4, waited_hours=10 - i) for i in range(5)])
    plan = forward_plan(inputs, days=2)
    starts = {rid: r["planned_start"] for rid, r in rows(plan).items()}
    assert all(starts.values())
    assert starts["wait-0"] == NOW                                     # fits now
    assert starts["wait-1"] == starts["wait-2"] == NOW + 2 * H          # when "running" ends
    first_end = rows(plan)["wait-0"]["planned_end"]
    assert starts["wait-3"] == first_end                               # when wait-0 ends, not at NOW + 2 h
    assert starts["wait-4"] == min(rows(plan)["wait-1"]["planned_end"], rows(plan)["wait-2"]["planned_end"])
    # never more than the experiments' share held at any start
    for t in set(starts.values()):
        assert experiments_held(plan, t) <= 12, t
    # served by waiting time: the longest waiting never starts after a later one
    order = [r["run_id"] for r in plan["queue"]]
    assert order == [f"wait-{i}" for i in range(5)]
    assert rows(plan)["wait-0"]["ahead"] == [] and rows(plan)["wait-0"]["reasons"] == []
    assert "wait-0" in rows(plan)["wait-1"]["ahead"]                   # it took wait-1's room at NOW
    # the ledger alone would admit it now, but wait-0, ahead of it in the line, takes the room: `queue`
    assert rows(plan)["wait-1"]["reasons"] == ["queue"]


def test_scheduled_retraining_is_served_first():
    # 16 reserved, 12 held by experiments until NOW + 1 h: one retraining and one experiment wait
    inputs = plan_inputs([held("exp", 12, 1)],
                         [waiting("old-exp", gpus=4, waited_hours=9),
                          waiting("new-retraining", gpus=4, kind="retraining", waited_hours=1)])
    plan = forward_plan(inputs, days=1)
    assert [r["run_id"] for r in plan["queue"]] == ["new-retraining", "old-exp"]
    assert rows(plan)["new-retraining"]["planned_start"] == NOW        # experiments are preempted
    assert rows(plan)["old-exp"]["planned_start"] == NOW + H
    # alone (what check sees) it only lacks the set-aside; behind the retraining, the quota too
    assert rows(plan)["old-exp"]["reasons"] == ["retraining-protection"]
    assert rows(plan)["old-exp"]["ahead"] == ["new-retraining"]


def test_a_budget_deferral_waits_for_the_month_to_reset_the_budget():
    inputs = plan_inputs([], [waiting("over-budget", gpus=2, expires_in_days=30)], spent=4990.0)
    plan = forward_plan(inputs, days=30)
    row = rows(plan)["over-budget"]
    assert row["reasons"] == ["period-budget"]
    assert row["planned_start"] == next_month_start(NOW) == datetime(2027, 1, 1)
    short = forward_plan(inputs, days=7)                               # the reset lies past the horizon
    assert rows(short)["over-budget"]["planned_start"] is None
    assert rows(short)["over-budget"]["blocking"] == ["period-budget"]
    assert "not within" in rows(short)["over-budget"]["note"]


def test_committed_hours_of_planned_runs_count_against_the_month():
    # 5000 GPU-h a month, 4920 spent: the first request (45 GPU-h) fits; what it commits leaves the
    # second over budget until the month resets
    inputs = plan_inputs([], [waiting(f"b-{i}", gpus=1, waited_hours=5 - i, estimated_gpu_hours=45,
                                      budget_gpu_hours=50, expires_in_days=30) for i in range(2)], spent=4920.0)
    plan = forward_plan(inputs, days=30)
    assert rows(plan)["b-0"]["planned_start"] == NOW
    assert rows(plan)["b-1"]["reasons"] == ["queue"]                   # alone it would fit now: b-0 is ahead
    assert rows(plan)["b-1"]["ahead"] == ["b-0"]
    assert rows(plan)["b-1"]["planned_start"] == datetime(2027, 1, 1)


def test_what_waiting_cannot_cure_is_never_planned_and_says_why():
    plan = forward_plan(plan_inputs([], [waiting("too-dear", budget_gpu_hours=1.0),
                                         waiting("too-big", gpus=20)]), days=14)
    for rid, code in (("too-dear", "budget"), ("too-big", "gpu-cap")):
        row = rows(plan)[rid]
        assert row["planned_start"] is None
        assert code in row["reasons"] and code in row["blocking"]
        assert "waiting will not help" in row["note"]


def test_a_request_leaves_the_queue_when_it_expires_before_it_fits():
    inputs = plan_inputs([held("running", 12, 5)], [waiting("soon-expired", gpus=4, expires_in_days=0.1)])
    row = rows(forward_plan(inputs, days=2))["soon-expired"]
    assert row["planned_start"] is None and row["note"].startswith("expires")
    expired = plan_inputs([], [waiting("gone", gpus=1, expires_in_days=-1)])
    assert forward_plan(expired, days=2)["queue"] == []                # expired by as_of: not planned


def test_a_malformed_or_unknown_team_request_is_not_planned():
    bad = waiting("bad", gpus=2)
    bad["request"] = None
    stranger = waiting("stranger", team="nobody")
    plan = forward_plan(plan_inputs([], [bad, stranger]), days=2)
    for rid in ("bad", "stranger"):
        assert rows(plan)[rid]["planned_start"] is None
        assert rows(plan)[rid]["reasons"] == ["invalid-request"]


@pytest.mark.parametrize("pools", [None, {"stable": 20}])
def test_each_days_free_count_is_what_decide_admits_then_and_one_more_is_refused(pools):
    inputs = plan_inputs([held("exp-a", 6, 20), held("ret", 2, 40, kind="retraining"),
                          held("other-team", 10, 30, team="search")],
                         [waiting(f"w-{i}", gpus=2 + i % 3, waited_hours=i) for i in range(6)],
                         policies={"vision": policy(max_gpus_per_job=16),
                                   "search": policy(team="search", reserved_gpus=12, retraining_reserved_gpus=0)},
                         pools=pools)
    plan = forward_plan(inputs, days=3)
    assert {r["date"] for r in plan["calendar"]} == {(NOW + timedelta(days=i)).date() for i in range(3)}
    checked = 0
    for row in plan["calendar"]:
        if row["team"] != "vision" or row["capacity"] not in (None, "stable"):
            continue
        t = NOW if row["date"] == NOW.date() else datetime.combine(row["date"], datetime.min.time())
        world = world_at(inputs, t)
        for kind, free in (("exploratory", row["free_gpus"]), ("retraining", row["retraining_free_gpus"])):
            for gpus, refused in ((free, False), (free + 1, True)):
                if gpus < 1 or gpus > 16:   # no request of 0, none above the per-job cap
                    continue
                req = waiting("probe", gpus=gpus, kind=kind, estimated_gpu_hours=1.0)["request"]
                d = decide(req, inputs["policies"]["vision"], world.state("vision", kind, t))
                codes = {r["code"] for r in d["reasons"]}
                assert bool(codes & CAPACITY_CODES) is refused, (row, kind, gpus, codes)
                checked += 1
    assert checked >= 10
    today = [r for r in plan["calendar"] if r["team"] == "vision" and r["date"] == NOW.date()][0]
    # today's count is the line's now: the ledger's holdings (6 + 2) and the waiting requests it starts now
    starting = sum(r["gpus"] for r in plan["queue"] if r["team"] == "vision" and r["planned_start"] == NOW)
    assert starting > 0 and today["committed_gpus"] == 6 + 2 + starting
    assert today["free_gpus"] == max(0, min(12 - 6 - starting, 16 - 8 - starting,
                                            *([20 - 18 - starting] if pools else [])))


def test_the_plan_holds_a_request_until_its_estimated_end_and_check_at_a_later_time_sees_it():
    inputs = plan_inputs([held("running", 8, 2)], [waiting("next", gpus=4, waited_hours=3)])
    start = rows(forward_plan(inputs, days=1))["next"]
    assert start["planned_start"] == NOW
    assert start["planned_end"] == NOW + timedelta(hours=18.5 / 4)
    world = world_at(inputs, NOW + 3 * H)                             # "running" ended, "next" still runs
    assert [r["run_id"] for r in world.state("vision", "exploratory", NOW + 3 * H)["reservations"]] == ["next"]
    later = world_at(inputs, NOW + 6 * H)                             # both ended, and spent what they reserved
    state = later.state("vision", "exploratory", NOW + 6 * H)
    assert state["reservations"] == [] and state["period_spent_gpu_hours"] == pytest.approx(8 * 2 + 18.5)


def test_a_pool_window_delays_the_plan_past_the_window_never_into_it():
    window = {"name": "maint", "start": NOW + H, "end": NOW + 5 * H, "gpus": 30, "pool": "stable",
              "accounts": [], "users": []}
    inputs = plan_inputs([], [waiting("long", gpus=4, waited_hours=2), waiting("own", gpus=4, waited_hours=1,
                                                                              team="vision")],
                         pools={"stable": 32}, windows=[window])
    plan = forward_plan(inputs, days=1)
    long = rows(plan)["long"]
    assert long["reasons"] == ["cluster-capacity"]                     # 4.6 h from now runs into the window
    assert long["planned_start"] == window["end"]
    assert pool_room({"name": "stable", "gpus": 32, "reservations": [], "windows": [window]}, "vision",
                     "exploratory", long["planned_start"], 18.5 / 4)[0] >= 4
    # the same window reserved for the team's own account takes nothing from it
    own = dict(window, accounts=["vision"])
    assert rows(forward_plan(plan_inputs([], [waiting("long", gpus=4)], pools={"stable": 32}, windows=[own]),
                             days=1))["long"]["planned_start"] == NOW
