"""The gate over the ledger: the policy and state it decides on (lib.ledger.state, calibration_rows),
and what submit (lib.ledger.deciding) and finish (lib.ledger.finishing) write."""
from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest

from lib.ledger.connection import open_ledger
from lib.ledger.calibration_rows import calibration
from lib.ledger.deciding import check_request, submit_request
from lib.ledger.finishing import UnknownRun, finish_run
from lib.ledger.state import team_policy, team_state
from tests.fixtures_gate import NOW, PILOT
from tests.fixtures_ledger import counts, demo_request, query, tiny_request

POLICY_KEYS = {"team", "reserved_gpus", "retraining_reserved_gpus", "max_gpus_per_job",
               "max_gpu_mem_gb", "max_runtime_hours", "monthly_budget_gpu_hours",
               "pilot_required_above_gpu_hours", "budget_basis_production",
               "budget_basis_exploratory", "budget_basis_retraining", "preemptible_partitions",
               "policy_version", "scaling_efficiency", "enforce_spend_limit", "set_time_limit", "queue_max_age_days"}


def _insert_run(con, run_id, **cols):
    row = {"run_id": run_id, "team": "tiny", "kind": "exploratory", "gpus": 2, "source": "test",
           "updated_at": NOW, **cols}
    con.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
                list(row.values()))


def test_team_policy_is_the_contract_shape(demo_ledger):
    with open_ledger(demo_ledger, read_only=True) as con:
        p = team_policy(con, "vision")
        assert set(p) == POLICY_KEYS
        assert p["preemptible_partitions"] == ["spot"]
        assert team_policy(con, "no-such-team") is None
        assert team_policy(con, None) is None


def test_team_state_counts_only_active_reservations_this_month_and_usable_snapshots(tiny_ledger):
    with open_ledger(tiny_ledger) as con:
        con.execute("INSERT INTO snapshots VALUES ('shared-v1', NULL, NULL), ('other-v1', 'other', NULL)")
        _insert_run(con, "active", reserved_gpu_hours=8.0, reserved_from=NOW - timedelta(hours=1),
                    reserved_until=NOW + timedelta(hours=3))
        _insert_run(con, "open-ended", reserved_gpu_hours=4.0, reserved_from=NOW)
        _insert_run(con, "expired", reserved_gpu_hours=8.0, reserved_until=NOW - timedelta(hours=1))
        _insert_run(con, "ended", reserved_gpu_hours=8.0, reserved_until=NOW + timedelta(hours=1),
                    ended_at=NOW - timedelta(minutes=5), actual_gpu_hours=3.0, stop_reason="completed",
                    estimated_gpu_hours=2.0, estimate_source="stated")
        _insert_run(con, "last-month", ended_at=datetime(NOW.year, NOW.month, 1) - timedelta(seconds=1),
                    actual_gpu_hours=100.0, stop_reason="budget", estimated_gpu_hours=50.0,
                    estimate_source="pilot")
        _insert_run(con, "requested", ended_at=NOW - timedelta(days=2), actual_gpu_hours=7.0,
                    stop_reason="completed", estimated_gpu_hours=9.0, estimate_source="requested")
        _insert_run(con, "failed", ended_at=NOW - timedelta(days=2), actual_gpu_hours=1.0,
                    stop_reason="failed", estimated_gpu_hours=9.0, estimate_source="stated")
        _insert_run(con, "too-old", ended_at=NOW - timedelta(days=400), actual_gpu_hours=1.0,
                    stop_reason="completed", estimated_gpu_hours=1.0, estimate_source="stated")
        _insert_run(con, "other-team", team="other", ended_at=NOW - timedelta(days=3),
                    actual_gpu_hours=5.0, stop_reason="wall-clock", estimated_gpu_hours=4.0,
                    estimate_source="stated", kind="production")
        state = team_state(con, "tiny", NOW, kind="exploratory")
        other = calibration(con, "other", "production", NOW)
    assert set(state) == {"now", "reservations", "period_spent_gpu_hours", "snapshots",
                          "calibration_history", "calibration", "interruption_rate"}
    assert state["interruption_rate"] is None   # no preemptible run with an interruption count
    assert state["now"] == NOW
    assert [r["run_id"] for r in state["reservations"]] == ["active", "open-ended"]
    assert state["reservations"][0] == {"run_id": "active", "team": "tiny", "kind": "exploratory",
                                        "gpus": 2, "reserved_gpu_hours": 8.0,
                                        "reserved_from": NOW - timedelta(hours=1),
                                        "reserved_until": NOW + timedelta(hours=3), "capacity": "stable"}
    # every run of the team that ended this month (3 + 7 + 1), not 'last-month'
    assert state["period_spent_gpu_hours"] == 11.0
    assert state["snapshots"] == {"tiny-data-v1", "shared-v1"}
    # calibration reads only runs in the window, not 'requested', and only completed / early-stop /
    # budget / wall-clock: 'ended' and 'last-month' (censored) for tiny; no bound from 2 runs
    cal = state["calibration"]
    assert (cal["scope"], cal["n"], cal["n_censored"], cal["upper_factor"]) == ("team×kind", 2, 1, None)
    # the median falls on the censored run: the median of the stop values (1.5 and 2.0) bounds it
    assert cal["factor"] == pytest.approx(math.sqrt(1.5 * 2.0))
    assert (other["scope"], other["n"], other["n_censored"]) == ("team×kind", 1, 1)


def test_check_writes_nothing(demo_ledger):
    before = counts(demo_ledger)
    d = check_request(demo_request(), db=demo_ledger, now=NOW)
    assert d["state"] == "admit"
    assert counts(demo_ledger) == before


def test_submit_admit_records_decision_and_reservation(demo_ledger):
    before = counts(demo_ledger)
    d = submit_request(demo_request(note="resnet sweep"), db=demo_ledger, now=NOW, origin="test")
    assert d["state"] == "admit"
    after = counts(demo_ledger)
    assert after["decisions"] == before["decisions"] + 1 and after["runs"] == before["runs"] + 1
    (row,) = query(demo_ledger, "SELECT state, reason_codes, judged_gpu_hours, reserved_gpu_hours, origin, "
                           "policy_version FROM decisions WHERE run_id = 'vision-test-0001'")
    assert row[:2] == ("admit", []) and row[4] == "test"
    assert row[2] == pytest.approx(d["estimate"]["judged_gpu_hours"])
    assert row[3] == pytest.approx(d["reserved_gpu_hours"])
    assert row[5] == d["policy_version"]
    (run,) = query(demo_ledger, "SELECT reserved_from, reserved_until, reserved_gpu_hours, estimated_gpu_hours, "
                           "estimate_source, budget_gpu_hours, source, ended_at, est_compute_gpu_hours, "
                           "job_name FROM runs WHERE run_id = 'vision-test-0001'")
    assert run[0] == NOW
    assert (run[1] - NOW).total_seconds() / 3600 == pytest.approx(d["estimate"]["wall_hours"], abs=1e-5)
    assert run[2] == pytest.approx(d["reserved_gpu_hours"])
    assert run[3:7] == (10.0, "stated", 40.0, "submit")
    assert run[7] is None and run[8] is None  # a stated estimate has no items
    assert run[9] == "resnet sweep"
    # the reservation now counts in the team's state
    with open_ledger(demo_ledger, read_only=True) as con:
        held = [r["run_id"] for r in team_state(con, "vision", NOW)["reservations"]]
    assert "vision-test-0001" in held


def test_submit_with_pilot_records_pilot_and_estimate_items(demo_ledger):
    req = demo_request(estimated_gpu_hours=..., pilot=dict(PILOT), run_id="vision-pilot-1",
                  budget_gpu_hours=500, max_runtime_hours=48)
    d = submit_request(req, db=demo_ledger, now=NOW)
    assert d["state"] == "admit", d["reasons"]
    (run,) = query(demo_ledger, "SELECT estimated_gpu_hours, estimate_source, est_compute_gpu_hours, "
                           "est_checkpoint_gpu_hours, est_eval_gpu_hours, est_data_loading_gpu_hours, "
                           "est_restart_gpu_hours FROM runs WHERE run_id = 'vision-pilot-1'")
    assert run[1] == "pilot"
    assert sum(run[2:]) == pytest.approx(run[0])
    assert run[0] == pytest.approx(d["estimate"]["raw_gpu_hours"])
    (pilot,) = query(demo_ledger, "SELECT steps_per_second, planned_steps, pilot_json FROM pilots "
                             "WHERE run_id = 'vision-pilot-1'")
    assert pilot[:2] == (PILOT["steps_per_second"], PILOT["planned_steps"]) and '"peak_mem_gb": 60.0' in pilot[2]


def test_submit_defer_records_the_decision_but_no_run(demo_ledger):
    before = counts(demo_ledger)
    d = submit_request(demo_request(budget_gpu_hours=1), db=demo_ledger, now=NOW)
    assert d["state"] == "defer"
    assert [r["code"] for r in d["reasons"]] == ["budget"]
    after = counts(demo_ledger)
    assert after["decisions"] == before["decisions"] + 1 and after["runs"] == before["runs"]
    (row,) = query(demo_ledger, "SELECT state, reason_codes, reserved_gpu_hours FROM decisions "
                           "WHERE origin = 'cli'")
    assert row == ("defer", ["budget"], None)


def test_unknown_team_is_a_reject_naming_the_field(demo_ledger):
    d = submit_request(demo_request(team="marketing"), db=demo_ledger, now=NOW)
    assert d["state"] == "reject"
    (r,) = d["reasons"]
    assert r["code"] == "invalid-request" and r["field"] == "team" and "vision" in r["fix"]
    assert query(demo_ledger, "SELECT state, reason_codes FROM decisions WHERE origin = 'cli'") == [
        ("reject", ["invalid-request"])]


def test_invalid_request_lists_every_problem(demo_ledger):
    d = check_request({"team": "vision", "gpus": -1}, db=demo_ledger, now=NOW)
    assert d["state"] == "reject"
    fields = {r.get("field") for r in d["reasons"]}
    assert {"run_id", "gpus", "kind"} <= fields


def test_a_run_id_that_is_already_booked_is_refused_to_a_different_request(demo_ledger):
    assert submit_request(demo_request(), db=demo_ledger, now=NOW)["state"] == "admit"
    for other in (demo_request(gpus=4), demo_request(note="another run")):
        d = submit_request(other, db=demo_ledger, now=NOW + timedelta(minutes=1))
        assert d["state"] == "reject" and d["reasons"][0]["field"] == "run_id"
        assert "already holds a reservation" in d["reasons"][0]["message"]
        assert "replayed" not in d
    assert query(demo_ledger, "SELECT count(*) FROM runs WHERE run_id = 'vision-test-0001'") == [(1,)]
    assert query(demo_ledger, "SELECT state FROM decisions WHERE origin = 'cli' ORDER BY decision_id") == [
        ("admit",), ("reject",), ("reject",)]


def _ledger_dump(db) -> dict:
    return {t: query(db, f"SELECT * FROM {t} ORDER BY ALL") for t in ("runs", "decisions", "pilots")}


def test_resubmitting_the_admitted_request_answers_the_recorded_decision_and_writes_nothing(demo_ledger):
    first = submit_request(demo_request(pilot=dict(PILOT), estimated_gpu_hours=..., budget_gpu_hours=500,
                                   max_runtime_hours=48), db=demo_ledger, now=NOW, origin="test")
    assert first["state"] == "admit", first["reasons"]
    before = _ledger_dump(demo_ledger)
    again = dict(reversed(list(demo_request(pilot=dict(reversed(list(PILOT.items()))), estimated_gpu_hours=...,
                                       budget_gpu_hours=500, max_runtime_hours=48).items())))
    assert list(again) != list(demo_request())  # the same object, keys in another order
    later = NOW + timedelta(minutes=3)
    for answer in (submit_request(again, db=demo_ledger, now=later),
                   check_request(again, db=demo_ledger, now=later)):
        assert answer["replayed"] is True and answer["recorded_at"] == NOW.isoformat()
        assert {k: v for k, v in answer.items() if k not in ("replayed", "recorded_at")} == first
        assert answer["decided_at"] == NOW.isoformat(timespec="seconds")
    assert _ledger_dump(demo_ledger) == before


def test_a_replay_needs_the_reservation_to_still_wait_for_its_run(tiny_ledger):
    d = submit_request(tiny_request(1), db=tiny_ledger, now=NOW)
    until = NOW + timedelta(hours=d["estimate"]["wall_hours"])
    assert submit_request(tiny_request(1), db=tiny_ledger, now=until - timedelta(seconds=1))["replayed"]
    expired = submit_request(tiny_request(1), db=tiny_ledger, now=until + timedelta(seconds=1))
    assert expired["state"] == "reject" and "replayed" not in expired
    submit_request(tiny_request(2), db=tiny_ledger, now=NOW)
    finish_run("tiny-002", actual_gpu_hours=1, stop_reason="completed", ended_at=NOW + timedelta(hours=1),
               db=tiny_ledger)
    ended = submit_request(tiny_request(2), db=tiny_ledger, now=NOW + timedelta(minutes=1))
    assert ended["state"] == "reject" and "replayed" not in ended
    assert query(tiny_ledger, "SELECT state, count(*) FROM decisions GROUP BY ALL ORDER BY ALL") == [
        ("admit", 2), ("reject", 2)]


def test_a_deferred_request_is_decided_again_when_resubmitted(tiny_ledger):
    for i in range(4):
        assert submit_request(tiny_request(i), db=tiny_ledger, now=NOW)["state"] == "admit"
    assert submit_request(tiny_request(9), db=tiny_ledger, now=NOW)["state"] == "defer"
    finish_run("tiny-000", actual_gpu_hours=1, stop_reason="completed", ended_at=NOW, db=tiny_ledger)
    d = submit_request(tiny_request(9), db=tiny_ledger, now=NOW + timedelta(minutes=1))
    assert d["state"] == "admit" and "replayed" not in d  # capacity freed: decided anew, not replayed
    assert query(tiny_ledger, "SELECT state FROM decisions WHERE run_id = 'tiny-009' "
                              "ORDER BY decision_id") == [("defer",), ("admit",)]


def test_submit_books_a_run_that_so_far_holds_only_an_imported_row(tiny_ledger):
    with open_ledger(tiny_ledger) as con:
        _insert_run(con, "tiny-001", job_name="from a csv", source="csv")
    d = submit_request(tiny_request(1), db=tiny_ledger, now=NOW)
    assert d["state"] == "admit"
    rows = query(tiny_ledger, "SELECT count(*), any_value(reserved_gpu_hours), any_value(source) "
                              "FROM runs WHERE run_id = 'tiny-001'")
    assert rows[0][0] == 1 and rows[0][1] == pytest.approx(d["reserved_gpu_hours"])
    assert rows[0][2] == "submit"


def test_capacity_is_never_double_booked(tiny_ledger):
    states = [submit_request(tiny_request(i), db=tiny_ledger, now=NOW)["state"] for i in range(6)]
    assert states == ["admit"] * 4 + ["defer"] * 2  # 8 GPUs reserved, 2 per request
    d = check_request(tiny_request(99), db=tiny_ledger, now=NOW)
    assert [r["code"] for r in d["reasons"]] == ["capacity"]
    assert query(tiny_ledger, "SELECT sum(gpus) FROM runs WHERE ended_at IS NULL") == [(8,)]


def test_finish_releases_the_reservation_and_counts_the_spend(tiny_ledger):
    submit_request(tiny_request(1), db=tiny_ledger, now=NOW)
    row = finish_run("tiny-001", actual_gpu_hours=12.5, stop_reason="budget",
                     ended_at=NOW + timedelta(hours=2), last_valid_checkpoint="s3://ck/step-900",
                     interruptions=2, restarts=1, act_lost_work_gpu_hours=1.5,
                     act_retry_gpu_hours=0.5, db=tiny_ledger)
    assert row["artifact_status"] == "incomplete"  # derived from the budget stop
    assert row["started_at"] == NOW  # from the reservation
    assert row["last_valid_checkpoint"] == "s3://ck/step-900"
    assert (row["interruptions"], row["restarts"]) == (2, 1)
    with open_ledger(tiny_ledger, read_only=True) as con:
        state = team_state(con, "tiny", NOW + timedelta(hours=3), kind="exploratory")
    assert state["reservations"] == []
    assert state["period_spent_gpu_hours"] == 12.5
    assert state["calibration"]["n_censored"] >= 1  # the budget stop calibrates as censored


@pytest.mark.parametrize("stop, status", [("completed", "complete"), ("early-stop", "complete"),
                                          ("wall-clock", "incomplete"), ("failed-steps", "incomplete"),
                                          ("cancelled", "none")])
def test_finish_derives_the_artifact_status(tiny_ledger, stop, status):
    submit_request(tiny_request(1), db=tiny_ledger, now=NOW)
    row = finish_run("tiny-001", actual_gpu_hours=3, stop_reason=stop,
                     ended_at=NOW + timedelta(hours=1), db=tiny_ledger)
    assert row["artifact_status"] == status


def test_finish_refuses_unknown_runs_and_bad_values_and_writes_nothing(tiny_ledger):
    submit_request(tiny_request(1), db=tiny_ledger, now=NOW)
    before = query(tiny_ledger, "SELECT * FROM runs")
    with pytest.raises(UnknownRun, match="nope"):
        finish_run("nope", actual_gpu_hours=1, stop_reason="completed", db=tiny_ledger)
    for bad in ({"actual_gpu_hours": math.nan}, {"actual_gpu_hours": -1}, {"stop_reason": "exploded"},
                {"act_eval_gpu_hours": 5.0},  # items more than the total
                {"ended_at": NOW - timedelta(hours=1)},  # before the start
                {"stop_reason": "budget", "artifact_status": "complete"}):
        kwargs = {"actual_gpu_hours": 2.0, "stop_reason": "completed", **bad}
        with pytest.raises(ValueError):
            finish_run("tiny-001", db=tiny_ledger, **kwargs)
    assert query(tiny_ledger, "SELECT * FROM runs") == before
