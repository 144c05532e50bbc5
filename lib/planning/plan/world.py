"""The forward plan's world (lib.planning.plan.forward) at the plan's current time, as time moves forward:
the reservations held per team and per pool (the ledger's, and those the plan started; lib.planning.holdings),
the spend per team and month, and the state `lib.gate.admission.decide` takes for a request then.
Units: GPU-hours (`_gpu_hours`), accelerators (`gpus`); times are naive UTC datetimes.
"""
from __future__ import annotations

import heapq
from collections import Counter
from datetime import datetime

from lib.gate.capacity import holdings_timeline, pool_counted, span_end
from lib.gate.contracts import Decision, Reservation, State
from lib.gate.terms import month_start
from lib.planning.holdings import Holdings
from lib.planning.plan.data import PlanHolding, PlanInputs, WaitingRequest


class PlanWorld:
    """The plan's world at its current time, built from the inputs: the reservations held per team and
    per pool (those of the ledger, and those the plan started), the spend per team and month, and
    everything fixed at as_of. Time only moves forward (`advance`)."""

    def __init__(self, inputs: PlanInputs):
        self.inputs = inputs
        self.now = inputs["as_of"]
        self.pool_sizes = dict(inputs["pools"])
        self.team_holdings, self.pool_holdings = Holdings(), Holdings()
        # the ledger's alone: what check sees
        self.ledger_team_holdings, self.ledger_pool_holdings = Holdings(), Holdings()
        self.releases: list = []
        self.spent: Counter = Counter(inputs["spent"])
        self.started: dict[str, PlanHolding] = {}
        self.started_in: dict = {}   # team, or ("pool", name) -> the holdings the plan started there
        self._snapshots: dict = {}
        self._timelines: dict = {}   # (pool, team for retraining) -> (time, holders added, the counted timeline then)
        self._started_held: dict = {}
        for r in inputs["held"]:
            self._hold(r, ledger=True)

    def _hold(self, r: Reservation, *, ledger: bool) -> None:
        release, pool = r["reserved_until"], r.get("capacity")
        for teams, pools in ((self.team_holdings, self.pool_holdings),
                             (self.ledger_team_holdings, self.ledger_pool_holdings))[:2 if ledger else 1]:
            teams.hold(r["team"], release, r)
            if pool in self.pool_sizes:
                pools.hold(pool, release, r)
        if release is not None:
            heapq.heappush(self.releases, (release, len(self.releases), r["team"], r["reserved_gpu_hours"]))

    def advance(self, t: datetime) -> None:
        """Move to time t: every reservation whose end is at or before t has released and spent."""
        while self.releases and self.releases[0][0] <= t:
            end, _, team, hours = heapq.heappop(self.releases)
            self.spent[(team, month_start(end))] += hours or 0.0
        self.now = max(self.now, t)

    def state(self, team: str | None, kind: str | None, t: datetime, *, ledger_only: bool = False) -> State:
        """The state `decide` takes for a `kind` request of `team` at t (>= the last advance)."""
        teams, pools = ((self.ledger_team_holdings, self.ledger_pool_holdings) if ledger_only
                        else (self.team_holdings, self.pool_holdings))
        snaps = self._snapshots.get(team)
        if snaps is None:
            snaps = self._snapshots[team] = (self.inputs["snapshots"].get(None, set())
                                             | self.inputs["snapshots"].get(team, set()))
        return {"now": t, "reservations": teams.held(team, t),
                "period_spent_gpu_hours": float(self.spent[(team, month_start(t))]),
                "snapshots": snaps, "calibration_history": [],
                "calibration": self.inputs["calibrations"].get((team, kind)),
                "interruption_rate": self.inputs["interruption_rates"].get(team),
                "pools": {name: self._pool(pools, name, gpus, t, ledger_only, team, kind)
                          for name, gpus in self.pool_sizes.items()}}

    def _pool(self, pools: Holdings, name: str, gpus: int, t: datetime, ledger_only: bool, team, kind) -> dict:
        held = pools.held(name, t)
        pool = {"name": name, "gpus": gpus, "reservations": held, "windows": self.inputs["windows"]}
        if not ledger_only:   # one timeline for every request decided at t, until the plan starts another
            key = (name, team if kind == "retraining" else None)   # retraining leaves out its team's experiments
            cached = self._timelines.get(key)
            if cached is None or cached[:2] != (t, pools.added.get(name, 0)):
                cached = self._timelines[key] = (t, pools.added.get(name, 0),
                                                 holdings_timeline(t, pool_counted(pool, team, kind)))
            pool["timeline"] = cached[2]
        return pool

    def start(self, w: WaitingRequest, decision: Decision, t: datetime) -> PlanHolding:
        """The admitted request holds from t for the decision's wall hours (as an admit is booked)."""
        req = w["request"]
        wall = (decision["estimate"] or {}).get("wall_hours")
        end = span_end(t, wall if wall is not None else float(req["max_runtime_hours"]))
        r: Reservation = {"run_id": w["run_id"], "team": req["team"], "kind": req["kind"], "gpus": int(req["gpus"]),
                          "reserved_gpu_hours": float(decision["reserved_gpu_hours"]), "reserved_from": t,
                          "reserved_until": end, "capacity": req["capacity"]}
        self._hold(r, ledger=False)
        held: PlanHolding = {"run_id": w["run_id"], "team": req["team"], "kind": req["kind"],
                             "capacity": req["capacity"], "gpus": r["gpus"], "start": t, "end": end,
                             "gpu_hours": r["reserved_gpu_hours"], "planned": True}
        self.started[w["run_id"]] = held
        for key in (req["team"], ("pool", req["capacity"])):
            self.started_in.setdefault(key, []).append(held)
        return held

    def started_held(self, key, t: datetime) -> list[str]:
        """The run IDs the plan started under `key` (a team, or ("pool", name)) that still hold at t
        (reckoned once per key, time and start)."""
        started = self.started_in.get(key, ())
        cached = self._started_held.get(key)
        if cached is None or cached[:2] != (t, len(started)):
            cached = self._started_held[key] = (t, len(started), [h["run_id"] for h in started if h["end"] > t])
        return cached[2]
