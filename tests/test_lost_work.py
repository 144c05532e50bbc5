"""Work lost to interruptions, measured per team and capacity type from the ledger's interruptions
(the gate's `recover` with `checkpoint` records, and the attempts of requeued jobs an sacct import
brings), beside the closed form's expected loss for the same attempts."""
from __future__ import annotations

import datetime as dt
import math

import pytest

from lib.dashboard.filters import Filters
from lib.dashboard.lost_work_queries import lost_work, run_model
from lib.dashboard.recovery_figures import lost_work_bars
from lib.ledger.imports import import_runs
from lib.ledger.recovering import checkpoint_run, recover_run
from tests.test_import_sacct import sacct
from tests.test_import_sacct_attempts import THREE_ATTEMPTS, attempt

DAY = Filters(dt.date(2024, 5, 1), dt.date(2024, 5, 1))
RUNS_CSV = (b"run_id,team,kind,gpus,capacity,started_at,estimated_gpu_hours,budget_gpu_hours\n"
            b"vis-1,vision,production,2,preemptible,2024-05-01T10:00:00Z,10,100\n"
            b"nlp-1,nlp,exploratory,4,stable,2024-05-01T10:00:00Z,10,100\n"
            b"nlp-2,nlp,exploratory,1,stable,2024-05-01T10:00:00Z,10,100\n")


def group(groups, team, capacity) -> dict:
    (row,) = groups[(groups["team"] == team) & (groups["capacity"] == capacity)].to_dict("records")
    return row


@pytest.fixture
def recorded(import_ledger):
    """vis-1 (2 GPUs, preemptible): a checkpoint at 10:30, preempted at 11:00 (half an hour lost),
    preempted again at 12:00 with no checkpoint since (the whole hour lost); nlp-1 (4 GPUs, stable):
    a node failure at 10:15 (all lost); nlp-2: a budget breach, which is no interruption."""
    assert import_runs(RUNS_CSV, db=import_ledger).inserted == 3
    checkpoint_run("vis-1", "ckpt/a", at="2024-05-01T10:30:00Z", db=import_ledger)
    recover_run("vis-1", event="preempted", at="2024-05-01T11:00:00Z", db=import_ledger)
    recover_run("vis-1", event="preempted", at="2024-05-01T12:00:00Z", db=import_ledger)
    recover_run("nlp-1", event="node-fail", at="2024-05-01T10:15:00Z", db=import_ledger)
    recover_run("nlp-2", event="budget", at="2024-05-01T11:00:00Z", db=import_ledger)
    return import_ledger


def test_lost_work_per_team_and_capacity_from_recover_and_checkpoint_records(recorded):
    groups = lost_work(DAY, recorded)["groups"]
    assert sorted(zip(groups["team"], groups["capacity"])) == [("nlp", "stable"), ("vision", "preemptible")]
    vision = group(groups, "vision", "preemptible")
    assert (vision["runs"], vision["attempts"], vision["with_checkpoint"], vision["from_sacct"]) == (1, 2, 1, 0)
    assert vision["attempts_gpu_hours"] == pytest.approx(2 * 1 + 2 * 1)
    assert vision["lost_gpu_hours"] == pytest.approx(2 * 0.5 + 2 * 1)
    nlp = group(groups, "nlp", "stable")   # the budget breach of nlp-2 is not an interruption
    assert (nlp["runs"], nlp["attempts"], nlp["with_checkpoint"]) == (1, 1, 0)
    assert nlp["lost_gpu_hours"] == pytest.approx(4 * 0.25)
    for g in (vision, nlp):   # the model's expectation for the same attempts, beside the measurement
        assert g["modelled_attempts"] == g["attempts"]
        assert 0 < g["expected_lost_gpu_hours"] < math.inf


def test_the_filters_select_teams_capacity_and_the_period(recorded):
    assert list(lost_work(Filters(DAY.date_from, DAY.date_to, teams=("nlp",)), recorded)["groups"]["team"]) == ["nlp"]
    only = lost_work(Filters(DAY.date_from, DAY.date_to, capacity="preemptible"), recorded)["groups"]
    assert list(only["team"]) == ["vision"]
    later = Filters(dt.date(2024, 5, 2), dt.date(2024, 5, 9))
    assert lost_work(later, recorded)["groups"].empty


def test_lost_work_from_an_sacct_file_with_three_attempts_of_one_job(import_ledger):
    assert import_runs(THREE_ATTEMPTS, fmt="sacct", db=import_ledger).written
    vision = group(lost_work(DAY, import_ledger)["groups"], "vision", "preemptible")
    # no checkpoint record: both interrupted attempts (1 h and 1.5 h on 2 GPUs) are lost whole
    assert (vision["attempts"], vision["from_sacct"], vision["with_checkpoint"]) == (2, 2, 0)
    assert vision["lost_gpu_hours"] == pytest.approx(2.0 + 3.0)


def test_an_attempt_recover_recorded_and_sacct_lists_is_lost_once(import_ledger):
    assert import_runs(RUNS_CSV, db=import_ledger).written
    recover_run("vis-1", event="preempted", at="2024-05-01T11:00:00Z", db=import_ledger)
    assert import_runs(sacct(
        attempt("2024-05-01T10:00:00", "2024-05-01T11:00:30", "01:00:30", "PREEMPTED"),
        attempt("2024-05-01T11:10:00", "2024-05-01T12:00:00", "00:50:00", "COMPLETED")),
        fmt="sacct", db=import_ledger).written
    vision = group(lost_work(DAY, import_ledger)["groups"], "vision", "preemptible")
    assert (vision["attempts"], vision["from_sacct"]) == (1, 0)
    assert vision["lost_gpu_hours"] == pytest.approx(2 * 1.0)   # the gate's record: the whole hour


def test_the_model_loses_half_a_short_segment_and_less_with_more_frequent_checkpoints():
    run = {"gpus": 4, "lost_gpu_hours": 0.0, "est_compute_gpu_hours": 4 * 0.01, "actual_gpu_hours": None,
           "estimated_gpu_hours": None, "est_restart_gpu_hours": None, "est_checkpoint_gpu_hours": None,
           "finished": False, "attempt_gpu_hours": 0.0, "events": 1, "checkpoints": 0, "span_h": None,
           "steps_per_second": None, "checkpoint_interval_steps": None, "checkpoint_write_s": None,
           "restart_minutes": 0.0}
    # no checkpointing, work far shorter than the MTBF: an interruption loses half the work on average
    short = run_model(run, mtbf_h=100.0)
    assert short["interval_source"] == "none"
    assert short["expected_lost_per_interruption_gpu_hours"] == pytest.approx(4 * 0.01 / 2, rel=1e-3)
    # 10 h of work: checkpointing every hour (the pilot's) loses about half an hour, not half the run
    long = {**run, "est_compute_gpu_hours": 4 * 10.0}
    never = run_model(long, mtbf_h=100.0)["expected_lost_per_interruption_gpu_hours"]
    hourly = run_model({**long, "steps_per_second": 1.0, "checkpoint_interval_steps": 3600.0}, mtbf_h=100.0)
    assert hourly["interval_source"] == "pilot" and hourly["interval_h"] == pytest.approx(1.0)
    assert hourly["expected_lost_per_interruption_gpu_hours"] == pytest.approx(4 * 0.5, rel=0.02)
    assert never > 4 * 4.0 > hourly["expected_lost_per_interruption_gpu_hours"]
    # the spacing of the run's checkpoint records when no pilot says it: 3 records over 2 hours
    spaced = run_model({**long, "checkpoints": 3, "span_h": 2.0}, mtbf_h=100.0)
    assert spaced["interval_source"] == "checkpoints" and spaced["interval_h"] == pytest.approx(1.0)


def test_the_bars_show_measured_beside_expected_in_team_colours_with_names_as_typed(recorded):
    groups = lost_work(DAY, recorded)["groups"]
    groups.loc[groups["team"] == "nlp", "team"] = "<b>nlp</b>"
    fig = lost_work_bars(groups, {"vision": "#123456"})
    measured, expected = fig.data
    assert (measured.name, expected.name) == ("measured", "expected (closed form)")
    assert list(measured.y) == pytest.approx(list(groups.sort_values(["team", "capacity"])["lost_gpu_hours"]))
    assert "#123456" in list(measured.marker.color) and "#123456" in list(expected.marker.color)
    assert "&lt;b&gt;nlp&lt;/b&gt; · stable" in list(measured.x)
    assert lost_work_bars(groups.iloc[0:0]).layout.annotations   # nothing to draw: says so
