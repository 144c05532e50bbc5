"""The warm gate server keeps the same line as the ledger (Hypothesis, arrivals and finishes in any
order): each of its decisions, taken from the line it keeps in memory (and the line it laid out for
the newcomers before), equals what `check` on the ledger gives at the same moment, planned start and
place included, while other writers finish runs between its decisions."""
from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings, strategies as st

from lib.gate.terms import utcnow
from lib.ledger.deciding import check_request
from lib.ledger.finishing import finish_run
from lib.slurm.live import LiveGate
from tests.fixtures_ledger import teams_ledger
from tests.test_queue_no_jumping import TEAMS, req as request

arrive = st.tuples(st.just("submit"), st.sampled_from([4, 8, 16]), st.sampled_from([1.0, 3.0, 39.0]))
end = st.tuples(st.just("finish"), st.integers(0, 30), st.just(0.0))
steps = st.lists(st.one_of(arrive, arrive, end), min_size=3, max_size=14)


def shape(d: dict) -> tuple:
    return d["state"], [r["code"] for r in d["reasons"]], d.get("planned_start"), d.get("queue_place")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(steps)
def test_every_server_decision_is_the_ledgers_own(tmp_path_factory, plan):
    path = teams_ledger(tmp_path_factory.mktemp("line"), TEAMS, "quad")
    gate = LiveGate(path, flusher=False)
    now = utcnow().replace(microsecond=0)
    admitted: list[str] = []
    try:
        for i, (what, a, b) in enumerate(plan):
            now += timedelta(seconds=1)
            if what == "finish":
                if admitted:
                    run_id = admitted.pop(a % len(admitted))
                    finish_run(run_id, actual_gpu_hours=1, stop_reason="completed", ended_at=now, db=path)
                continue
            req = request(f"r{i}", a, b)
            expected = check_request(req, db=path, now=now)
            got, seq = gate.decide(req, now=now, origin="cli", write=True)
            gate.settle(seq, answered=True)
            gate.flush()
            assert shape(got) == shape(expected), (i, plan)
            if got["state"] == "admit":
                admitted.append(got["run_id"])
    finally:
        gate.close()
