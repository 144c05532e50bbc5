"""`python -m lib plan`: the queue, the calendar and the pools from the gate's own decisions, agreeing
with `check` — on a ledger made by submit and finish whose queue holds stale budget deferrals (the
month has reset), stale and live capacity deferrals, a retraining set-aside and an expired request."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from lib.ledger.deciding import check_request
from lib.ledger.plan import check_request_at, plan_ledger
from tests.fixtures_ledger import query, run_cli, write_json
from tests.fixtures_plan import H, queue_request

CAPACITY_CODES = {"capacity", "cluster-capacity", "retraining-protection"}
DAYS = 3


@pytest.fixture(scope="module")
def plan(queue_ledger):
    path, now = queue_ledger
    return plan_ledger(path, as_of=now, days=DAYS)


def recorded_request(path, run_id) -> dict:
    (text,) = query(path, "SELECT request_json FROM decisions WHERE run_id = ? ORDER BY decision_id DESC LIMIT 1",
                    [run_id])[0]
    return json.loads(text)


def test_every_row_agrees_with_check_now(queue_ledger, plan):
    path, now = queue_ledger
    queue = {r["run_id"]: r for r in plan["queue"]}
    assert set(queue) == {"alpha-late-nov-0", "alpha-late-nov-1", "alpha-late-nov-2", "beta-cap", "beta-budget",
                          "alpha-wait-0", "alpha-wait-1", "alpha-wait-2"}
    for run_id, row in queue.items():
        decision = check_request(recorded_request(path, run_id), db=path, now=now)
        codes = list(dict.fromkeys(r["code"] for r in decision["reasons"]))
        assert row["reasons"] == codes, run_id                          # decided again, never the recorded codes
        if decision["state"] == "admit":
            assert row["planned_start"] == now or row["ahead"], run_id
            if row["planned_start"] != now:                             # what is ahead starts before it
                assert all(queue[a]["planned_start"] is not None and queue[a]["planned_start"] < (
                    row["planned_start"] or plan["horizon_end"]) for a in row["ahead"] if a in queue), run_id
        else:
            assert row["planned_start"] != now, run_id
    # the stale ones: November's budget deferrals and beta's capacity deferral fit again
    for run_id in ("alpha-late-nov-0", "alpha-late-nov-1", "alpha-late-nov-2", "beta-cap"):
        assert query(path, "SELECT reason_codes FROM decisions WHERE run_id = ?", [run_id])[0][0]
        assert queue[run_id]["reasons"] == [], run_id
    assert all(queue[f"alpha-late-nov-{i}"]["planned_start"] == now for i in range(3))   # first in the line
    assert queue["beta-budget"]["reasons"] == ["period-budget"] and queue["beta-budget"]["planned_start"] is None
    assert plan["expired"]["count"] == 1 and plan["expired"]["rows"][0]["run_id"] == "beta-old"


def probe(team: str, gpus: int, i: int) -> dict:
    """A short request of `gpus` accelerators, well within budget."""
    return queue_request(f"probe-{team}-{gpus}-{i}", team, gpus, 0.5 * gpus)


def test_each_days_free_count_is_what_check_admits_and_one_more_is_refused(queue_ledger, plan):
    path, now = queue_ledger
    day0 = datetime.combine(now.date(), datetime.min.time())
    checked = 0
    for offset in (0, 2):
        at = now if offset == 0 else day0 + timedelta(days=offset)
        for row in [r for r in plan["calendar"] if r["date"] == at.date()]:
            for gpus, refused in ((row["free_gpus"], False), (row["free_gpus"] + 1, True)):
                if not 1 <= gpus <= (16 if row["team"] == "alpha" else 8):   # none of 0, none above the per-job cap
                    continue
                req = probe(row["team"], gpus, offset)
                decision = (check_request(req, db=path, now=now) if offset == 0
                            else check_request_at(req, at=at, db=path, now=now))
                codes = {r["code"] for r in decision["reasons"]}
                # one more is refused for capacity, or for the line (`queue`: requests ahead take it)
                assert bool(codes & (CAPACITY_CODES | {"queue"})) is refused, (row, gpus, codes)
                checked += 1
    assert checked >= 6
    alpha_today = [r for r in plan["calendar"] if r["team"] == "alpha" and r["date"] == now.date()][0]
    # 16 reserved, 4 set aside for retraining, 8 experiments + 4 retraining held, and the line starts
    # November's three waiting requests (1 each) now: 1 left to experiments
    assert (alpha_today["quota_gpus"], alpha_today["committed_gpus"], alpha_today["free_gpus"],
            alpha_today["retraining_free_gpus"]) == (16, 15, 1, 12)


def test_the_command_prints_the_plan_as_one_json_object(queue_ledger, plan):
    path, now = queue_ledger
    p = run_cli("plan", "--days", str(DAYS), "--as-of", now.isoformat(), db=path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["as_of"] == now.isoformat()
    assert {"run_id", "team", "kind", "gpus", "waiting_since", "planned_start", "ahead", "reasons"} <= set(out["queue"][0])
    assert {"date", "team", "capacity", "quota_gpus", "retraining_reserved_gpus", "committed_gpus",
            "free_gpus"} <= set(out["days"][0])
    assert [r["run_id"] for r in out["queue"]] == [r["run_id"] for r in plan["queue"]]
    assert [r["planned_start"] for r in out["queue"]] == [
        None if r["planned_start"] is None else r["planned_start"].isoformat() for r in plan["queue"]]
    assert len(out["days"]) == DAYS * 2 and out["expired"]["count"] == 1
    assert "plan:" in p.stderr and "nothing written" in p.stderr


def test_check_as_of_a_later_time_decides_on_the_plans_state(queue_ledger, plan, tmp_path):
    path, now = queue_ledger
    req = probe("alpha", 4, 9)
    # 4 are free on the ledger alone, but November's three requests, first in the line, take 3 of them
    assert check_request(probe("alpha", 1, 9), db=path, now=now)["state"] == "admit"
    now_d = check_request(req, db=path, now=now)
    assert now_d["state"] == "defer" and [r["code"] for r in now_d["reasons"]] == ["queue"]
    # at 14:00 alpha-run still holds its 8 beside them: still no room for 4
    d = check_request_at(req, at=now + 2 * H, db=path, now=now)
    assert d["state"] == "defer" and {r["code"] for r in d["reasons"]} & (CAPACITY_CODES | {"queue"})
    # one fit time: at the planned start the deferral names, the same request is admitted
    start = datetime.fromisoformat(d["planned_start"])
    assert start > now + 2 * H and check_request_at(req, at=start, db=path, now=now)["state"] == "admit"
    # the command line: the same answer, exit 1
    p = run_cli("check", write_json(tmp_path / "r.json", req), "--now", now.isoformat(),
                "--as-of", (now + 2 * H).isoformat(), db=path)
    assert p.returncode == 1, p.stderr
    assert json.loads(p.stdout)["reasons"] == d["reasons"]
    # a waiting request asked about itself keeps its place in the line (first: it fits now)
    own = recorded_request(path, "alpha-late-nov-0")
    assert check_request_at(own, at=now, db=path, now=now)["state"] == "admit"


@pytest.mark.parametrize("args, message", [
    (["plan", "--as-of", "yesterday"], "not an ISO-8601 time"),
    (["plan", "--as-of", "2001-01-01T00:00"], "before the ledger's first run"),
    (["plan", "--days", "0"], "must be from 1"),
    (["check", "-", "--now", "2026-12-15T12:00", "--as-of", "2026-12-15T11:00"], "before the plan's start"),
])
def test_bad_input_exits_2_with_a_message(queue_ledger, args, message):
    path, _ = queue_ledger
    p = run_cli(*args, db=path, stdin=json.dumps(probe("alpha", 1, 0)))
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert message in p.stderr and p.stdout == ""
