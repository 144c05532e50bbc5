"""The warm gate server's live state (lib.slurm.live): the same decisions as the ledger, its state equal
to the ledger's after every batch, and other writers' changes seen before the next decision."""
from __future__ import annotations

from datetime import timedelta

import pytest

from lib.gate.terms import utcnow
from lib.ledger.connection import open_ledger
from lib.ledger.deciding import check_request, submit_request
from lib.ledger.finishing import finish_run
from lib.ledger.state import held_reservations, team_state
from lib.ledger.decider_lock import ServerBusy
from lib.slurm.live import LiveGate
from tests.fixtures_slurm import COMMENT_REQUEST, decisions, make_slurm_ledger

REQUEST = {**COMMENT_REQUEST, "team": "vision", "gpus": 2, "max_runtime_hours": 1.0, "capacity": "stable"}


def _req(run_id, **changes):
    return {**REQUEST, "run_id": run_id, **changes}


@pytest.fixture
def live(slurm_ledger):
    g = LiveGate(slurm_ledger, flusher=False)
    yield g
    g.close()


def _submit(g, request, now, origin="slurm"):
    decision, seq = g.decide(request, now=now, origin=origin, write=True, caller=(0, 1))
    g.settle(seq, answered=True)
    return decision


def _agrees_with_ledger(g, now):
    with open_ledger(g.db, read_only=True) as con:
        teams = [r[0] for r in con.execute("SELECT team FROM teams").fetchall()]
        for team in teams:
            for kind in ("exploratory", "production"):
                assert g.state(team, now, kind) == team_state(con, team, now, kind=kind), (team, kind)


def test_decisions_match_the_ledgers_and_state_agrees_after_every_batch(live):
    now = utcnow().replace(microsecond=0)
    answered = []
    for batch in range(3):
        for i in range(4):
            request = _req(f"b{batch}-{i}", gpus=(8, 16, 24, 32)[i], estimated_gpu_hours=0.5 + i)
            expected = check_request(request, db=live.db, now=now) if batch == 0 and i == 0 else None
            d = _submit(live, request, now)
            if expected is not None:
                assert d == expected  # the same decision the ledger itself gives
            answered.append((d["run_id"], d["state"]))
        assert live.flush() == 4
        _agrees_with_ledger(live, now)
    rows = decisions(live.db)
    assert [(r["run_id"], r["state"]) for r in rows] == answered
    assert {"admit", "defer"} <= {s for _, s in answered}  # the burst filled the quota: later runs deferred


def test_an_admit_is_held_at_once_and_a_retry_of_the_same_request_replays_it(live):
    now = utcnow().replace(microsecond=0)
    first = _submit(live, _req("r1"), now)
    assert first["state"] == "admit"
    again, seq = live.decide(_req("r1"), now=now, origin="slurm", write=True)
    assert seq is None and again["replayed"] is True
    other = _submit(live, _req("r1", note="changed"), now)  # same run ID, another request: refused
    assert other["state"] == "reject"
    assert live.flush() == 2
    assert [r["state"] for r in decisions(live.db, "r1")] == ["admit", "reject"]


def test_an_unanswered_decision_is_undone_and_never_recorded(live):
    now = utcnow().replace(microsecond=0)
    d, seq = live.decide(_req("lost"), now=now, origin="slurm", write=True)
    assert d["state"] == "admit"
    live.settle(seq, answered=False)
    assert not live.booked("lost")
    assert _submit(live, _req("lost"), now)["state"] == "admit"  # the run ID is free again
    live.flush()
    assert [r["state"] for r in decisions(live.db, "lost")] == ["admit"]


def test_other_writers_changes_are_seen_before_the_next_decision(live):
    now = utcnow().replace(microsecond=0)

    def same_as_ledger(run_id, **changes):
        at = utcnow()  # after the other writer's change (finish stamps its time)
        expected = check_request(_req(run_id, **changes), db=live.db, now=at)
        got = _submit(live, _req(run_id, **changes), at)
        assert got == expected
        return got

    # another writer (an import of reservations) books the whole quota: the next decision sees it
    _import_reservations(live.db, [f"cli-{i}" for i in range(3)], gpus=32, now=now)
    assert same_as_ledger("after-cli", gpus=32)["state"] == "defer"
    held = {r["run_id"] for r in live.state("vision", now, "exploratory")["reservations"]}
    assert {"cli-0", "cli-1"} <= held
    # finish frees it
    for i in range(2):
        finish_run(f"cli-{i}", actual_gpu_hours=0.2, stop_reason="completed", db=live.db)
    assert same_as_ledger("after-finish", gpus=8)["state"] == "admit"
    assert same_as_ledger("cli-0", gpus=2)["state"] == "reject"  # booked by the other writer: it has run
    # a policy change (as `python -m lib teams` writes it) applies to the next decision
    with open_ledger(live.db) as con:
        con.execute("UPDATE teams SET max_gpus_per_job = 1 WHERE team = 'vision'")
    assert same_as_ledger("after-teams", gpus=2)["state"] != "admit"
    live.flush()
    _agrees_with_ledger(live, utcnow())


def _import_reservations(db, run_ids, *, gpus, now, team="vision"):
    """Reservations booked by another writer: `python -m lib import`'s own code, in this process."""
    from lib.ledger.imports import import_runs
    lines = ["run_id,team,kind,gpus,reserved_from,reserved_until,reserved_gpu_hours"]
    lines += [f"{r},{team},exploratory,{gpus},{now.isoformat()},{(now + timedelta(hours=10)).isoformat()},5"
              for r in run_ids]
    report = import_runs("\n".join(lines).encode() + b"\n", db=db)
    assert report.written and not report.errors, report.errors


def test_an_in_process_submit_is_refused_while_a_server_decides_for_the_ledger(live, tmp_path):
    """Through its own name or a hard link to the same file: the lock follows the file, not its name."""
    link = tmp_path / "link.duckdb"
    link.hardlink_to(live.db)
    for name in (live.db, link):
        with pytest.raises(ServerBusy, match=r"served by a gate server \(pid "):
            submit_request(_req("in-process"), db=name)
        with pytest.raises(ServerBusy, match="already served"):
            LiveGate(name, flusher=False)
    assert decisions(live.db, "in-process") == []


def test_a_demo_rebuild_replacing_the_file_is_picked_up(live, tmp_path):
    now = utcnow().replace(microsecond=0)
    assert _submit(live, _req("before"), now)["state"] == "admit"
    live.flush()
    fresh = make_slurm_ledger(tmp_path / "fresh.duckdb")
    fresh.replace(live.db)  # a new file under the same name: the old reservation is gone
    assert _submit(live, _req("after"), now)["state"] == "admit"
    assert [r["run_id"] for r in live.state("vision", now, "exploratory")["reservations"]] == ["after"]
    assert not live.booked("before")


def test_a_reservation_past_its_planned_end_counts_until_its_run_is_finished(live):
    """As the ledger's readers count it (lib.ledger.state.held_reservations), before and after the
    server moved the decision into the ledger: the planned end does not release it, its end does."""
    now = utcnow().replace(microsecond=0)
    _submit(live, _req("short", max_runtime_hours=0.5), now)
    later = now + timedelta(hours=2)
    assert [r["run_id"] for r in live.state("vision", now, "exploratory")["reservations"]] == ["short"]
    (held,) = live.state("vision", later, "exploratory")["reservations"]
    assert held["overrun"] is True and held["reserved_until"] is None   # past its time limit: no known end
    live.flush()
    with open_ledger(live.db, read_only=True) as con:
        assert held_reservations(con, later, "vision") == [held]
    _agrees_with_ledger(live, later)
    finish_run("short", actual_gpu_hours=1.0, stop_reason="completed", ended_at=now + timedelta(hours=1),
               db=live.db)
    _submit(live, _req("next"), later)   # a decision reads the ledger's change
    assert [r["run_id"] for r in live.state("vision", later, "exploratory")["reservations"]] == ["next"]


def test_a_second_live_gate_on_one_ledger_is_refused_naming_the_holder(live):
    import os
    with pytest.raises(ServerBusy, match=f"pid {os.getpid()}"):
        LiveGate(live.db, flusher=False)


def test_an_import_that_ends_a_held_run_frees_its_gpus_for_the_next_decision(live, tmp_path):
    from lib.ledger.imports import import_runs
    at = utcnow().replace(microsecond=0)
    assert _submit(live, _req("big-a", gpus=32), at)["state"] == "admit"
    assert _submit(live, _req("big-b", gpus=32), at)["state"] == "admit"
    assert _submit(live, _req("big-c", gpus=32), at)["state"] == "defer"
    live.flush()
    ended = (at + timedelta(seconds=1)).isoformat() + "Z"
    csv = tmp_path / "runs.csv"
    csv.write_text("run_id,team,kind,gpus,started_at,ended_at,actual_gpu_hours,stop_reason\n"
                   f"big-a,vision,exploratory,32,{at.isoformat()}Z,{ended},0.4,completed\n")
    report = import_runs(csv, db=live.db)
    assert report.written, report.errors
    now = utcnow() + timedelta(seconds=2)
    # big-c waits first in the line: the freed accelerators are its, and a newcomer waits behind it
    expected = check_request(_req("big-d", gpus=32), db=live.db, now=now)
    got = _submit(live, _req("big-d", gpus=32), now)
    assert got == expected and got["state"] == "defer" and [r["code"] for r in got["reasons"]] == ["queue"]
    expected = check_request(_req("big-c", gpus=32), db=live.db, now=now)
    got = _submit(live, _req("big-c", gpus=32), now)
    assert got == expected and got["state"] == "admit"
