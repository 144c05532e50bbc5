"""The gate's line as the warm gate server keeps it (lib.slurm.live.LiveGate), so the server hears the line
as in-process `submit` and `check` do (lib.ledger.deciding.heard_in_line) without reading the ledger for
each decision.

`ServerLine` holds the requests waiting in the queue: read from the ledger at each of the server's
reloads (lib.ledger.plan_inputs.read_queue, as of that moment; a request's expiry is checked at each
use), and kept current as the server decides: a deferral that waiting cures joins the line from its
decision (a run ID already waiting keeps its place), an admit leaves it. A decision whose answer never
went out is undone here too (`settled`). `inputs` builds the plan's inputs at a time from the server's
own facts (its held reservations, each team's month spend, snapshots, calibration and interruption
rate, its pools and windows), the ledger's reads' equals; for an admit, None while nobody but the
request itself waits, which costs one pass over the waiting requests.

`turn` answers lib.planning.plan.turn.turn for a newcomer (a run ID not waiting, not scheduled
retraining: it is served after everyone waiting) from the line laid out once: laying out N waiting
requests costs about N placements, so a burst of newcomers behind a long line would otherwise cost
N placements each. The laid-out line is kept while only the server's own decisions change it, each
added to it as the line would place it (a newcomer admitted now holds from now; a newcomer deferred
is placed at the end of the line, where it waits), for at most LAID_OUT_S seconds, and only while no
waiting request's turn has come (it would start later when laid out later); anything else
(a reload, an unanswered decision undone, a waiting request admitted at its turn) lays it out again.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from lib.gate.capacity import cured_by_waiting
from lib.gate.contracts import CapacityWindow, Decision, Policy, Request, Reservation
from lib.gate.terms import KINDS, month_start
from lib.planning.plan.data import PlanInputs, WaitingRequest
from lib.planning.plan.forward import Placed, lay_out, place
from lib.planning.plan.line import Line
from lib.planning.plan.turn import TURN_DAYS, as_waiting, turn

LAID_OUT_S = 5.0   # seconds a laid-out line is reused (see the module docstring)


class ServedFacts(Protocol):
    """What the line reads from the gate server (lib.slurm.live.LiveGate)."""
    policies: dict[str, Policy]

    def team_facts(self, team: str, kind: str | None, now: datetime) -> dict:
        """The team's month spend, snapshots, calibration, interruption rate and pools at `now`."""

    def held_at(self, now: datetime, team: str | None = None) -> list[Reservation]:
        """The reservations held at `now` (of `team`; None: every team's), in run-ID order."""

    def capacity_windows(self, now: datetime) -> list[CapacityWindow]:
        """The cluster's windows not yet ended at `now`."""


class ServerLine:
    """See the module docstring."""

    def __init__(self, waiting: list[WaitingRequest]):
        self.waiting: dict[str, WaitingRequest] = {w["run_id"]: w for w in waiting}
        self._undo: dict[int, tuple[str, WaitingRequest | None]] = {}  # journal seq -> (run ID, its entry before)
        self._laid: tuple[datetime, Line] | None = None   # (laid out at, the line): see `turn`

    def _newcomer(self, w: WaitingRequest) -> bool:
        return w["run_id"] not in self.waiting and w["kind"] != "retraining"

    def _kept_line(self, at: datetime) -> Line | None:
        """The laid-out line, when it may still be used at `at`."""
        if self._laid is None or not self._laid[0] <= at <= self._laid[0] + timedelta(seconds=LAID_OUT_S):
            return None
        return self._laid[1]

    def turn(self, inputs: PlanInputs, w: WaitingRequest, policy: Policy, at: datetime):
        """lib.planning.plan.turn.turn, from the kept line for a newcomer (see the module docstring)."""
        if not self._newcomer(w) or any(x["waiting_since"] > at for x in inputs["waiting"]):
            return turn(inputs, w, policy, at)
        line = self._kept_line(at)
        if line is None:
            line, placed = lay_out(inputs, at + timedelta(days=TURN_DAYS))
            # a request placed at `at` (its turn has come) would be placed later at a later time: kept
            # only while none is
            self._laid = None if any(q.start == at for q in placed) else (at, line)
        else:   # the facts of a team the line had no request of when it was laid out
            for key in ("spent", "snapshots", "calibrations", "interruption_rates"):
                for k, v in inputs[key].items():
                    line.inputs[key].setdefault(k, v)
        return place(line, Placed(w, policy), at, at + timedelta(days=TURN_DAYS), hold=False), line

    def decided(self, request: Request, decision: Decision, policy: Policy | None, at: datetime,
                seq: int) -> None:
        """The server journaled `decision` (entry `seq`) at `at`."""
        run_id = request.get("run_id")
        state = decision["state"]
        waits = state == "defer" and cured_by_waiting(r["code"] for r in decision["reasons"])
        if state != "admit" and not waits:
            return   # holds nothing, waits nowhere: the line is as it was
        if not isinstance(run_id, str) or policy is None:
            self._laid = None
            return
        w = as_waiting([], request, policy, at)
        line = self._kept_line(at) if self._newcomer(w) else None
        if line is not None and state == "admit":
            line.place(w, decision, at, float(decision["estimate"]["wall_hours"]))
        elif line is not None:
            place(line, Placed(w, policy), at, at + timedelta(days=TURN_DAYS))
        else:
            self._laid = None
        before = self.waiting.get(run_id)
        if state == "admit" and before is not None:
            del self.waiting[run_id]
        elif waits and before is None:
            self.waiting[run_id] = w
        else:
            return
        self._undo[seq] = (run_id, before)

    def settled(self, seq: int, answered: bool) -> None:
        """Journal entry `seq`'s answer went out (or not: its change to the line is undone)."""
        if not answered:
            self._laid = None
        run_id, before = self._undo.pop(seq, (None, None))
        if run_id is None or answered:
            return
        if before is None:
            self.waiting.pop(run_id, None)
        else:
            self.waiting[run_id] = before

    def inputs(self, gate: ServedFacts, request: Request, now: datetime, needed: bool = True) -> PlanInputs | None:
        """The plan's inputs at `now` from the server's facts; None when not `needed` and no request
        but `request`'s own run ID waits (then the line has nothing to say to an admit)."""
        waiting = [w for w in self.waiting.values() if w["expires_at"] > now]   # the line sorts them itself
        if not needed and not any(w["run_id"] != request.get("run_id") for w in waiting):
            return None
        pairs = {(t, k) for t, k in {(w["team"], w["kind"]) for w in waiting} if t in gate.policies and k in KINDS}
        if request.get("team") in gate.policies and request.get("kind") in KINDS:
            pairs.add((request["team"], request["kind"]))
        facts = {pair: gate.team_facts(*pair, now) for pair in sorted(pairs)}
        per_team = {team: f for (team, _), f in facts.items()}
        pools = next((f["pools"] for f in facts.values() if f.get("pools")), {})
        month = month_start(now)
        return {"as_of": now, "policies": gate.policies, "held": gate.held_at(now), "waiting": waiting,
                "spent": {(team, month): float(f["period_spent_gpu_hours"]) for team, f in per_team.items()},
                "snapshots": {team: set(f["snapshots"]) for team, f in per_team.items()},
                "calibrations": {pair: f.get("calibration") for pair, f in facts.items()},
                "interruption_rates": {team: f.get("interruption_rate") for team, f in per_team.items()},
                "pools": {name: int(p["gpus"]) for name, p in pools.items()},
                "windows": gate.capacity_windows(now)}
