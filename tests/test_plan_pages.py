"""The forward plan on the pages, under AppTest: Reservations shows the queue as a schedule (planned start
first), the expired requests, the calendar's free accelerators net of the retraining set-aside, and the
pools with their overcommit; What-if takes a start time and decides on the state the plan reaches then."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from lib.gate.terms import utcnow
from lib.ledger.connection import open_ledger, transaction
from lib.ledger.deciding import check_request
from lib.ledger.plan import check_request_at
from tests.fixtures_app import insert_teams, open_app
from tests.test_app_pages import fill_what_if
from tests.test_queue import book, defer

H = dt.timedelta(hours=1)


@pytest.fixture
def plan_ledger(tmp_path, monkeypatch, fresh_caches):
    """The page-test teams (vision: 96, 8 set aside for retraining; safety: 16, all held for 5 h; speech:
    the 24 of its 32 left to experiments held for 5 h) with a stable pool of 200 (their quotas add up to
    272), a queue of three, one request expired, and one recent deferral for the pool alone. (path, now)."""
    path, now = tmp_path / "gate.duckdb", utcnow()
    with open_ledger(path) as con, transaction(con):
        insert_teams(con)
        con.execute("INSERT INTO pools VALUES ('stable', 200, 'teams-file')")
        book(con, "safety-all", "safety", 16, now - H, now + 5 * H, started_at=now - H)
        book(con, "vision-run", "vision", 40, now - H, now + 30 * H, started_at=now - H)
        book(con, "speech-run", "speech", 24, now - H, now + 5 * H, started_at=now - H)
        defer(con, "safety-next", now - 2 * H, gpus=4)
        defer(con, "vision-fits", now - 3 * H, team="vision", gpus=8, data_snapshot="imagenet-21k-2024")
        defer(con, "safety-long-ago", now - 20 * 24 * H, gpus=2)
        con.execute("""INSERT INTO decisions (decided_at, run_id, team, kind, state, reason_codes, origin,
                       request_json, decision_json) VALUES (?, 'pool-only', 'vision', 'exploratory', 'defer',
                       ['cluster-capacity'], 'test', '{}', '{}')""", [now - 4 * H])
    monkeypatch.setenv("GATE_DB", str(path))
    monkeypatch.setenv("GATE_DEMO", "0")
    return path, now


def frame_with(at, column):
    (df,) = [d.value for d in at.dataframe if column in d.value.columns]
    return df


def pinned(at, column) -> list[str]:
    """The pinned columns of the table showing `column` (they stay in view however wide it is)."""
    (grid,) = [d for d in at.dataframe if column in d.value.columns]
    return [name for name, c in json.loads(grid.proto.columns).items() if c.get("pinned")]


def test_reservations_shows_the_plan_the_calendar_net_of_the_set_aside_and_the_pools(plan_ledger):
    at = open_app("reservations")
    assert not at.exception, [e.value for e in at.exception]
    queue = frame_with(at, "planned_start").set_index("run_id")
    assert list(frame_with(at, "planned_start").columns[:2]) == ["planned_start", "run_id"]
    assert pinned(at, "planned_start") == ["planned_start"]           # the key column stays in view
    assert set(queue.index) == {"safety-next", "vision-fits", "pool-only"}   # safety-long-ago expired
    assert queue.loc["pool-only", "reasons"] == "invalid-request"   # recorded without a request: never planned
    assert queue.loc["safety-next", "planned_start"].to_pydatetime() > utcnow() + 4 * H   # when safety-all ends
    assert "1 expired request" in " ".join(e.label for e in at.expander)
    calendar = frame_with(at, "retraining_free_gpus")
    assert "(all teams)" not in set(calendar["team"])
    vision_today = calendar[(calendar["team"] == "vision") & (calendar["capacity"] == "stable")].iloc[0]
    # today is the line's now: 96 less the 8 set aside less the 40 held for experiments less the 8 of
    # vision-fits, which the line starts now; retraining would preempt experiments, so its 96 are free to it
    assert queue.loc["vision-fits", "planned_start"].to_pydatetime() <= utcnow()
    assert vision_today["free_gpus"] == 96 - 8 - 40 - 8 and vision_today["retraining_free_gpus"] == 96
    pools = frame_with(at, "overcommit_ratio")
    assert pools.iloc[0]["pool"] == "stable" and pools.iloc[0]["overcommit_ratio"] == pytest.approx(272 / 200)
    assert any("1 deferral(s) were for the pool alone" in c.value for c in at.caption)
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("The queue as the gate would serve it" in spec for spec in titles)


def test_what_if_with_a_start_time_decides_on_the_plans_state_then(plan_ledger):
    path, now = plan_ledger
    at = open_app("what_if")
    start = (now + 6 * H).replace(second=0, microsecond=0)      # speech-run has ended by then
    fill_what_if(at, team="speech", gpus=4, run_id="speech-whatif", start=start)
    assert not at.exception, [e.value for e in at.exception]
    assert any(f"as if submitted at {start:%Y-%m-%d %H:%M} UTC" in c.value for c in at.caption)
    request = {**at.session_state["whatif_result"]["request"]}
    shown = at.session_state["whatif_result"]["decision"]
    assert shown["state"] == check_request_at(request, at=start, db=path)["state"] == "admit"
    assert check_request(request, db=path)["state"] == "defer"     # now, speech's experiments' share is held


def test_the_burn_downs_run_out_date_comes_right_after_the_team_and_stays_in_view(plan_ledger):
    at = open_app("forecast")
    assert not at.exception, [e.value for e in at.exception]
    burn = frame_with(at, "exhausts_p50")
    assert list(burn.columns[:3]) == ["team", "exhausts_p50", "exhausts_p90"]
    assert pinned(at, "exhausts_p50") == ["exhausts_p50"]
