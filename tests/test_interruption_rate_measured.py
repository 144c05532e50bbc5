"""The preemptible interruption rate counts the interruption events the ledger recorded for a run
(the gate's `recover`, the attempts of a requeued job from sacct) instead of the run's bare
interruption count; runs without events keep their counts. The gate's estimate, policy replay's
copy of the rule and the Recovery planner's rates read the same numbers."""
from __future__ import annotations

import datetime as dt

import pytest

from lib.dashboard.filters import Filters
from lib.dashboard.labels import ALL_TEAMS
from lib.dashboard.recovery_view import recovery_inputs
from lib.ledger.connection import open_ledger
from lib.ledger.imports import import_runs
from lib.ledger.replay import read_world
from lib.ledger.state import interruption_rate
from tests.test_import_sacct import sacct
from tests.test_import_sacct_attempts import attempt

NOW = dt.datetime(2024, 6, 1)
# finished preemptible runs with bare counts: 5 interruptions in 20 GPU-hours
COUNTS_CSV = (b"run_id,team,kind,gpus,capacity,started_at,ended_at,actual_gpu_hours,interruptions\n"
              b"c-1,vision,exploratory,2,preemptible,2024-05-01T00:00:00Z,2024-05-01T05:00:00Z,10,3\n"
              b"c-2,vision,exploratory,2,preemptible,2024-05-02T00:00:00Z,2024-05-02T05:00:00Z,10,2\n")
# a requeued job on 'spot': two interrupted attempts, then done (1 + 1 + 2 hours on 2 GPUs = 8 GPU-h)
REQUEUED = sacct(
    attempt("2024-05-03T00:00:00", "2024-05-03T01:00:00", "01:00:00", "PREEMPTED", jobid="900", run="run_id=s-1"),
    attempt("2024-05-03T01:10:00", "2024-05-03T02:10:00", "01:00:00", "NODE_FAIL", jobid="900", run="run_id=s-1"),
    attempt("2024-05-03T02:20:00", "2024-05-03T04:20:00", "02:00:00", "COMPLETED", jobid="900", run="run_id=s-1"))


def rate(db) -> dict:
    with open_ledger(db, read_only=True) as con:
        return interruption_rate(con, "vision", NOW)


def planner_rates(db) -> dict:
    rates = recovery_inputs(Filters(dt.date(2024, 5, 1), dt.date(2024, 5, 31)), db)["rates"]
    (row,) = rates[(rates["team"] == ALL_TEAMS) & (rates["capacity"] == "preemptible")].to_dict("records")
    return row


def test_runs_with_recorded_events_count_them_and_the_others_keep_their_counts(import_ledger):
    assert import_runs(COUNTS_CSV, db=import_ledger).written
    assert rate(import_ledger) == {"per_gpu_hour": pytest.approx(5 / 20), "scope": "all", "runs": 2,
                                   "gpu_hours": 20.0, "interruptions": 5, "source": "counts"}
    assert import_runs(REQUEUED, fmt="sacct", db=import_ledger).written
    # a later export says the job was never interrupted: the recorded events still count, not the 0
    assert import_runs(b"run_id,team,kind,gpus,interruptions\ns-1,vision,exploratory,2,0\n",
                       db=import_ledger).written
    with open_ledger(import_ledger, read_only=True) as con:
        assert con.execute("SELECT interruptions FROM runs WHERE run_id = 's-1'").fetchone() == (0,)
    mixed = rate(import_ledger)
    assert mixed["source"] == "mixed" and (mixed["runs"], mixed["interruptions"]) == (3, 5 + 2)
    assert mixed["per_gpu_hour"] == pytest.approx((5 + 2) / (20 + 8))
    planner = planner_rates(import_ledger)
    assert (planner["runs"], planner["measured_runs"], planner["interruptions"]) == (3, 1, 7)
    assert planner["mtbf_h"] == pytest.approx((5 + 5 + 4) / 7)   # run hours per interruption


def test_a_ledger_of_recorded_events_only_is_measured(import_ledger):
    assert import_runs(REQUEUED, fmt="sacct", db=import_ledger).written
    assert rate(import_ledger) == {"per_gpu_hour": pytest.approx(2 / 8), "scope": "all", "runs": 1,
                                   "gpu_hours": 8.0, "interruptions": 2, "source": "measured"}
    assert planner_rates(import_ledger)["measured_runs"] == 1


def test_policy_replay_sums_the_same_interruptions_as_the_gate(import_ledger):
    for data, fmt in ((COUNTS_CSV, "csv"), (REQUEUED, "sacct"),
                      (b"run_id,team,kind,gpus,interruptions\ns-1,vision,exploratory,2,0\n", "csv")):
        assert import_runs(data, fmt=fmt, db=import_ledger).written
    gate = rate(import_ledger)
    with open_ledger(import_ledger) as con:   # a replay after the runs ended: they stay in the rate's window
        _, world = read_world(con, dt.datetime(2024, 5, 20), NOW)
    assert world["rate_base"]["vision"] == (gate["runs"], pytest.approx(gate["gpu_hours"]), gate["interruptions"])
