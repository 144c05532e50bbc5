"""The line's promise as properties over any arrivals and holdings (Hypothesis): a request the line
admits now moves no waiting request's planned start later (unless it is scheduled retraining, which is
served first), and a request's place never depends on those served after it."""
from __future__ import annotations

from datetime import datetime

from hypothesis import HealthCheck, given, settings, strategies as st

from lib.planning.plan.forward import forward_plan, serve_key
from lib.planning.plan.turn import turn
from tests.fixtures_plan import H, NOW, held, plan_inputs, waiting

FAR = datetime(9999, 1, 1)

holdings = st.lists(st.tuples(st.integers(1, 8), st.one_of(st.none(), st.floats(0.5, 60)),
                              st.sampled_from(["exploratory", "production", "retraining"])), max_size=4)
requests = st.lists(st.tuples(st.integers(1, 8), st.floats(0.5, 40), st.floats(0.1, 48),   # waited before now
                              st.sampled_from(["exploratory", "production", "retraining"])), max_size=6)
pools = st.one_of(st.none(), st.integers(8, 24))   # the stable pool's accelerators (None: no pool)
newcomer = st.tuples(st.integers(1, 8), st.floats(0.5, 40), st.sampled_from(["exploratory", "production"]))


def build(hs, ws, pool=None):
    return plan_inputs([held(f"h{i}", g, left, kind=k) for i, (g, left, k) in enumerate(hs)],
                       [waiting(f"w{i}", gpus=g, estimated_gpu_hours=g * hours, waited_hours=since, kind=k)
                        for i, (g, hours, since, k) in enumerate(ws)],
                       pools={"stable": pool} if pool else None)


def starts(inputs, days=10) -> dict:
    return {r["run_id"]: r["planned_start"] or FAR for r in forward_plan(inputs, days=days)["queue"]}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(holdings, requests, newcomer, pools)
def test_an_admit_now_moves_no_waiting_request_later(hs, ws, new, pool):
    inputs = build(hs, ws, pool)
    gpus, hours, kind = new
    w = waiting("new", gpus=gpus, estimated_gpu_hours=gpus * hours, waited_hours=0, kind=kind)
    q, _ = turn(inputs, w, inputs["policies"]["vision"], NOW, days=10)
    if q.start != NOW:
        return
    before = starts(inputs)
    booked = held("new", gpus, (q.end - NOW) / H, kind=kind)
    after = starts({**inputs, "held": sorted([*inputs["held"], booked], key=lambda r: r["run_id"])})
    for run_id, was in before.items():
        assert after[run_id] <= was, (run_id, was, after[run_id])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(holdings, requests, pools)
def test_a_requests_place_does_not_depend_on_those_served_after_it(hs, ws, pool):
    inputs = build(hs, ws, pool)
    full = starts(inputs)
    order = sorted(inputs["waiting"], key=serve_key)
    for i, w in enumerate(order):
        alone = starts({**inputs, "waiting": order[:i + 1]})
        assert alone[w["run_id"]] == full[w["run_id"]], w["run_id"]
