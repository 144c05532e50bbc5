"""The gate's "fits from" and the dashboard's planned start are one rule over one set of reservations."""
from __future__ import annotations

import datetime as dt
import re

import pandas as pd

from lib.dashboard import reservation_queries
from lib.dashboard.filters import Filters
from lib.gate.capacity import capacity_fit
from lib.ledger.connection import open_ledger, transaction
from lib.ledger.deciding import submit_request
from tests.fixtures_gate import NOW
from tests.fixtures_ledger import tiny_request

H = dt.timedelta(hours=1)


def _fits_from(decision) -> dt.datetime:
    (fix,) = [r["fix"] for r in decision["reasons"] if r["code"] == "capacity"]
    return dt.datetime.fromisoformat(re.search(r"or from (\S+) when", fix).group(1))


def test_the_decision_and_the_dashboard_agree_on_the_earliest_fit_with_a_future_reservation(tiny_ledger):
    # tiny holds 8 GPUs: 4 admitted now for 10 h, and 2 booked from NOW + 1 h until NOW + 3 h
    first = submit_request(tiny_request(1, gpus=4, estimated_gpu_hours=40, budget_gpu_hours=40),
                           db=tiny_ledger, now=NOW)
    assert first["state"] == "admit"
    with open_ledger(tiny_ledger) as con, transaction(con):
        con.execute("""INSERT INTO runs (run_id, team, kind, gpus, reserved_from, reserved_until,
                       reserved_gpu_hours, source, updated_at)
                       VALUES ('tiny-later', 'tiny', 'exploratory', 2, ?, ?, 4.0, 'test', ?)""",
                    [NOW + H, NOW + 3 * H, NOW])
    deferred = submit_request(tiny_request(2, gpus=4), db=tiny_ledger, now=NOW)
    assert [r["code"] for r in deferred["reasons"]] == ["capacity"]
    # the booking that starts later counts from now and releases first: 4 + 4 fit at NOW + 3 h
    assert _fits_from(deferred) == NOW + 3 * H

    out = reservation_queries.reservations(Filters(NOW.date() - dt.timedelta(days=1), NOW.date()), tiny_ledger, NOW)
    waiting = out["waiting"].set_index("run_id")
    shown = waiting.loc["tiny-002", "planned_start"]     # nothing else waits: the plan starts it at the fix
    assert shown.floor("min") == pd.Timestamp(_fits_from(deferred))
    assert "tiny-later" in set(out["upcoming"]["run_id"])
    budget = out["budget"].set_index("team").loc["tiny"]
    assert budget["committed_gpu_hours"] == 40 + 4.0


def test_capacity_fit_waits_for_both_the_quota_and_the_retraining_set_aside():
    held = [{"kind": "retraining", "gpus": 4, "reserved_gpu_hours": 1.0, "reserved_until": NOW + 5 * H},
            {"kind": "exploratory", "gpus": 4, "reserved_gpu_hours": 1.0, "reserved_until": NOW + 2 * H}]
    # 10 reserved, 4 set aside: an experiment of 4 needs the experiment to end (4 + 4 > 6) -> NOW + 2 h
    assert capacity_fit(NOW, "exploratory", 10, 4, held, 4) == NOW + 2 * H
    # releasing the experiment at NOW + 2 h leaves 4 + 3 <= 10 and 0 + 3 <= 6
    assert capacity_fit(NOW, "exploratory", 10, 4, held, 3) == NOW + 2 * H
    assert capacity_fit(NOW, "exploratory", 8, 2, held, 4) == NOW + 2 * H
    assert capacity_fit(NOW, "exploratory", 8, 0, held, 6) == NOW + 5 * H
    # retraining counts only retraining holdings (experiments are preempted)
    assert capacity_fit(NOW, "retraining", 8, 4, held, 4) == NOW
    assert capacity_fit(NOW, "retraining", 8, 4, held, 6) == NOW + 5 * H
    assert capacity_fit(NOW, "exploratory", 8, 8, held, 1) is None
