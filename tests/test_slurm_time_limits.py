"""The time limit the submit hook gives an admitted job (lib.slurm.limits): from the stop policy's spend
limit (enforce_spend_limit, on by default) and from the calibrated upper wall clock (set_time_limit,
off by default), never above what the job asked, said on the accepted job; the same through the
warm gate server. Real ledgers in tmp_path; no cluster."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from lib.ledger.connection import open_ledger
from lib.ledger.demo import build_demo
from lib.ledger.teams_file import TeamsFileError, parse_teams, sync_teams
from lib.slurm import hook as h
from lib.slurm.in_process import judge_in_process
from lib.slurm.limits import (STOP_MARGIN_MIN, admitted_time_limit, calibrated_minutes, remaining_minutes,
                              spend_minutes, timeout_was_spend_limit)
from lib.slurm.wire import EXIT_ACCEPTED
from tests.fixtures_gate import NOW
from tests.fixtures_slurm import REPO, GateServerProcess, comment, job, make_slurm_ledger

TEAMS = (REPO / "data" / "teams.toml").read_text(encoding="utf-8")


def with_vision(*lines: str) -> str:
    """data/teams.toml with `lines` added to team vision's table."""
    return TEAMS.replace("[teams.vision]\n", "[teams.vision]\n" + "".join(f"{ln}\n" for ln in lines))


def ledger_with(tmp_path, teams_text: str, *, demo: bool = False):
    db = tmp_path / "gate.duckdb"
    if demo:
        build_demo(db, runs=300, seed=7, now=NOW)
    else:
        make_slurm_ledger(db)
    f = tmp_path / "teams.toml"
    f.write_text(teams_text, encoding="utf-8")
    with open_ledger(db) as con:
        sync_teams(con, f)
    return db


def config(db) -> dict:
    return {**h.config_from_env({}), "db": str(db)}


def spend_job(run_id: str, spend: float, minutes: int = 120, gpus: int = 2) -> dict:
    return job(time_limit=str(minutes), tres_per_node=f"gres:gpu:{gpus}",
               comment=comment(run_id=run_id, stop_policy={"spend_limit_gpu_hours": spend}))


# --------------------------------------------------------------------------- the rules

@settings(max_examples=300, deadline=None)
@given(spend=st.floats(min_value=0.001, max_value=1e5), gpus=st.integers(min_value=1, max_value=512))
def test_the_spend_limit_buys_whole_minutes_that_stay_within_it_with_a_minute_to_spare(spend, gpus):
    m = spend_minutes(spend, gpus)
    assert m >= 1
    if m > 1:
        # the limit and Slurm's time-limit check after it (≤ a minute) stay within the spend limit
        assert (m + STOP_MARGIN_MIN) * gpus / 60 <= spend * (1 + 1e-9)
    # and no more than the margin plus one minute of rounding is left unused
    assert (m + STOP_MARGIN_MIN + 1) * gpus / 60 > spend


@given(upper=st.floats(min_value=0.01, max_value=1e5), gpus=st.integers(min_value=1, max_value=512))
def test_the_calibrated_limit_is_the_upper_wall_clock_plus_ten_percent_and_at_least_five_minutes(upper, gpus):
    wall = upper * 60 / gpus
    m = calibrated_minutes(upper, gpus)
    assert m >= wall * 1.1 - 1e-6 and m >= wall + 5 - 1e-6
    assert m < max(wall * 1.1, wall + 5) + 1


def test_a_time_out_is_the_spend_limit_only_when_the_spend_limit_set_the_time_limit():
    # 2 GPUs, 1 GPU-h limit: 29 min; after 0.5 GPU-h spent, 14 min
    assert timeout_was_spend_limit(29, 1.0, 0.0, 2) is True
    assert timeout_was_spend_limit(20, 1.0, 0.0, 2) is False   # the job's own, lower limit
    assert timeout_was_spend_limit(14, 1.0, 0.5, 2) is True
    assert timeout_was_spend_limit(60, 1.0, 0.0, 2) is True    # not lowered: the spend limit was exceeded
    assert timeout_was_spend_limit(29, None, 0.0, 2) is False  # not enforced
    assert remaining_minutes(1.0, 0.5, 2) == 14 and remaining_minutes(1.0, 1.0, 2) is None


def test_without_a_spend_limit_or_with_enforcement_off_nothing_is_set():
    decision = {"estimate": {"upper_gpu_hours": 3.0}}
    plain = {"gpus": 2}
    assert admitted_time_limit(plain, decision, None, 120)["minutes"] is None
    limited = {"gpus": 2, "stop_policy": {"spend_limit_gpu_hours": 1.0}}
    assert admitted_time_limit(limited, decision, None, 120)["minutes"] == 29        # on by default
    assert admitted_time_limit(limited, decision, {"enforce_spend_limit": False}, 120)["minutes"] is None
    both = admitted_time_limit(limited, decision, {"set_time_limit": True}, 120)
    assert (both["spend_minutes"], both["calibrated_minutes"], both["minutes"], both["by"]) == \
        (29, 99, 29, "spend-limit")   # the lower of the two
    assert admitted_time_limit(limited, decision, None, 20)["minutes"] is None       # never above the ask


# --------------------------------------------------------------------------- the teams file

def test_the_two_keys_are_booleans_and_leave_a_teams_version_alone_at_their_defaults():
    [plain] = [t for t in parse_teams(TEAMS)[0] if t["team"] == "vision"]
    [same] = [t for t in parse_teams(with_vision("enforce_spend_limit = true", "set_time_limit = false"))[0]
              if t["team"] == "vision"]
    [calibrated] = [t for t in parse_teams(with_vision("set_time_limit = true"))[0] if t["team"] == "vision"]
    [unenforced] = [t for t in parse_teams(with_vision("enforce_spend_limit = false"))[0] if t["team"] == "vision"]
    assert (plain["enforce_spend_limit"], plain["set_time_limit"]) == (True, False)
    assert same["policy_version"] == plain["policy_version"]
    assert len({plain["policy_version"], calibrated["policy_version"], unenforced["policy_version"]}) == 3
    with pytest.raises(TeamsFileError) as exc:
        parse_teams(with_vision('set_time_limit = "yes"', "enforce_spend_limit = 1"))
    assert any("[teams.vision] set_time_limit: must be true or false, got 'yes'" in p for p in exc.value.problems)
    assert any("[teams.vision] enforce_spend_limit: must be true or false, got 1" in p for p in exc.value.problems)


# --------------------------------------------------------------------------- the hook

def test_the_spend_limit_sets_the_time_limit_below_what_the_job_asked_and_the_admit_says_so(tmp_path):
    db = ledger_with(tmp_path, TEAMS)
    out = judge_in_process(spend_job("spend-1", 2.0), config(db))   # 2 GPU-h on 2 GPUs: 60 min, less the margin
    assert out.code == EXIT_ACCEPTED
    assert "TIME 59" in out.lines()
    msg = next(ln for ln in out.lines() if ln.startswith("MSG "))
    assert "time limit set to 59 min from the spend limit 2 GPU-h on 2 GPUs (asked 120 min" in msg
    roomy = judge_in_process(spend_job("spend-2", 10.0), config(db))   # 299 min would be above the 120 asked
    assert roomy.code == EXIT_ACCEPTED and not any(ln.startswith("TIME") for ln in roomy.lines())
    assert "time limit" not in roomy.msg


def test_a_comment_runtime_without_time_is_still_the_limit_unless_the_spend_limit_is_lower(tmp_path):
    db = ledger_with(tmp_path, TEAMS)
    out = judge_in_process(job(time_limit=None, comment=comment(run_id="rt-1", max_runtime_hours=3)), config(db))
    assert "TIME 180" in out.lines()
    out = judge_in_process(job(time_limit=None, comment=comment(run_id="rt-2", max_runtime_hours=3,
                                                      stop_policy={"spend_limit_gpu_hours": 1.0})), config(db))
    assert "TIME 29" in out.lines() and "(asked 180 min" in out.msg


def test_a_team_that_does_not_enforce_its_spend_limit_keeps_the_asked_limit(tmp_path):
    db = ledger_with(tmp_path, with_vision("enforce_spend_limit = false"))
    out = judge_in_process(spend_job("free-1", 2.0), config(db))
    assert out.code == EXIT_ACCEPTED and not any(ln.startswith("TIME") for ln in out.lines())


def test_set_time_limit_lowers_to_the_calibrated_upper_wall_clock_and_says_so(tmp_path):
    db = ledger_with(tmp_path, with_vision("set_time_limit = true"), demo=True)
    fields = job(time_limit=str(72 * 60), tres_per_node="gres:gpu:4",
                 comment=comment(run_id="cal-1", estimated_gpu_hours=20, budget_gpu_hours=100,
                                 data_snapshot="common-crawl-2025-04"))
    out = judge_in_process(fields, config(db))
    upper = out.decision["estimate"]["upper_gpu_hours"]
    assert out.code == EXIT_ACCEPTED and upper is not None
    wall_min = upper * 60 / 4
    expected = math.ceil(wall_min + max(0.1 * wall_min, 5))
    assert f"TIME {expected}" in out.lines()
    assert f"time limit set to {expected} min from the calibrated upper wall clock {wall_min:.0f} min" in out.msg
    # the same request of a team without the key: the asked limit stays
    (tmp_path / "plain").mkdir()
    plain_db = ledger_with(tmp_path / "plain", TEAMS, demo=True)
    out = judge_in_process(fields, config(plain_db))
    assert out.code == EXIT_ACCEPTED and not any(ln.startswith("TIME") for ln in out.lines())


@pytest.mark.slow
def test_the_warm_gate_server_sets_the_same_limit_from_the_teams_policy(tmp_path):
    db = ledger_with(tmp_path, with_vision("set_time_limit = true"))
    server = GateServerProcess(db, tmp_path / "gate.sock")
    try:
        served = server.ask(spend_job("served-1", 1.0))
    finally:
        server.stop()
    assert served.code == EXIT_ACCEPTED
    assert "TIME 29" in served.lines() and any("from the spend limit 1 GPU-h on 2 GPUs" in ln
                                                for ln in served.lines())
