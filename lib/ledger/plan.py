"""The forward plan over the ledger: `plan_ledger` (what `python -m lib plan` prints and the Reservations
page shows), `check_request_at` (the what-if with a start time: `python -m lib check --as-of T`) and
`planned_holdings` (the budget burn-down's committed spend). Each opens the ledger read-only once (or
reads through the caller's), reads the plan's inputs (lib.ledger.plan_inputs: the queue of waiting
requests, the reservations held, each team's spend, policy, calibration and interruption rate, the
snapshots, the pools and the scheduler's windows, all as the gate would read them at `as_of`) and
runs the pure plan (lib.planning.plan.forward, the gate's line). Reads only.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from lib.gate.contracts import Decision, Request, State
from lib.gate.terms import KINDS, InputError, naive_utc, utcnow
from lib.ledger.connection import open_ledger
from lib.ledger.deciding import LedgerFacts, decide_with, placed_in_line
from lib.ledger.plan_inputs import first_run_at, read_plan_inputs
from lib.planning.plan.data import MAX_PLAN_DAYS as MAX_DAYS, Plan, PlanHolding
from lib.planning.plan.forward import forward_plan, plan_holdings
from lib.planning.plan.line import Line
from lib.planning.plan.turn import ahead_of, as_waiting, turn

# ------------------------------------------------------------------------------ the plan over the ledger

class PlannedFacts(LedgerFacts):
    """The `DecisionFacts` of the gate's line at a time: the ledger's policies and booked run IDs, and
    each team's state as the line holds it then (lib.planning.plan.line.Line.state), naming the
    request's `planned_start` in the line."""

    def __init__(self, con, line: Line, planned_start: datetime | None = None):
        super().__init__(con)
        self.line, self.planned_start = line, planned_start

    def state(self, team: str, now: datetime, kind: str | None, capacity: str | None = None) -> State:
        return {**self.line.state(team, kind, now), "planned_start": self.planned_start}


def _checked_as_of(con, as_of: datetime, what: str = "--as-of") -> None:
    first = first_run_at(con)
    if first is not None and as_of < first:
        raise InputError(f"{what} {as_of.isoformat(timespec='minutes')} is before the ledger's first run "
                         f"({first.isoformat(timespec='minutes')}): the gate knows nothing of that time")


def plan_ledger(db=None, *, as_of=None, days: int = 14, timeout_s: float = 10.0) -> Plan:
    """The forward plan of the ledger's waiting requests for `days` days from `as_of` (default now),
    with the expired requests (`expired`: count and rows). InputError for `days` outside
    1 .. MAX_DAYS or an as_of before the ledger's first run."""
    if type(days) is not int or not 1 <= days <= MAX_DAYS:
        raise InputError(f"--days must be a whole number from 1 to {MAX_DAYS}, got {days!r}")
    as_of = naive_utc(as_of) or utcnow()
    with open_ledger(db, read_only=True, timeout_s=timeout_s, create=False) as con:
        _checked_as_of(con, as_of)
        inputs, expired = read_plan_inputs(con, as_of)
    plan = forward_plan(inputs, days)
    plan["expired"] = expired
    return plan


def check_request_at(request: Request, *, at, db=None, now=None, timeout_s: float = 10.0) -> Decision:
    """The what-if with a start time: the decision for `request` submitted at `at`, on the gate's line
    as the plan lays it out from `now` (default the present): what holds at `at`, the plan's placed
    requests included. It is admitted only when the line places it at `at` (its turn: lib.planning.
    plan.turn), else deferred with `queue` or its own reasons, naming its `planned_start`; a run ID
    waiting in the line keeps its place. Writes nothing. InputError for an `at` before `now` or more
    than MAX_DAYS after it."""
    now = naive_utc(now) or utcnow()
    at = naive_utc(at)
    if at < now:
        raise InputError(f"--as-of {at.isoformat(timespec='minutes')} is before the plan's start "
                         f"{now.isoformat(timespec='minutes')}: to decide as of a past time, use --now")
    if at > now + timedelta(days=MAX_DAYS):
        raise InputError(f"--as-of {at.isoformat(timespec='minutes')} is more than {MAX_DAYS} days ahead")
    own = request if isinstance(request, dict) else {}
    team, kind = own.get("team"), own.get("kind")
    with open_ledger(db, read_only=True, timeout_s=timeout_s, create=False) as con:
        _checked_as_of(con, now, "--now")
        inputs, _ = read_plan_inputs(con, now, also=(team, kind) if isinstance(team, str) and kind in KINDS else None)
        policy = inputs["policies"].get(team) if isinstance(team, str) else None
        first, _ = decide_with(request, at, PlannedFacts(con, Line(inputs)))   # is it a request the line can hold?
        if policy is None or first["state"] not in ("admit", "defer"):
            return first
        w = as_waiting(inputs["waiting"], request, policy, at)
        q, line = turn(inputs, w, policy, at)
        decision, _ = decide_with(request, at, PlannedFacts(con, line, q.start))
    return placed_in_line(decision, q, sum(1 for x in ahead_of(inputs, w) if x["team"] == w["team"]), at)


def planned_holdings(con, as_of: datetime, until: datetime) -> list[PlanHolding]:
    """The reservations of the plan up to `until` (lib.planning.plan.forward.plan_holdings), read
    through the caller's open ledger."""
    inputs, _ = read_plan_inputs(con, as_of)
    return plan_holdings(inputs, until)
