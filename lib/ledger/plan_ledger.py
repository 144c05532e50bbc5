"""The forward plan over the ledger: `plan_ledger` (what `python -m lib plan` prints and the Reservations
page shows), `check_request_at` (the what-if with a start time: `python -m lib check --as-of T`) and
`planned_holdings` (the budget burn-down's committed spend). Each opens the ledger read-only once,
reads the plan's inputs (lib.ledger.plan_inputs) and runs the pure plan (lib.planning.plan.forward).
"""
from __future__ import annotations

from datetime import datetime, timedelta

from lib.gate.contracts import Decision, Request, State
from lib.gate.terms import InputError, KINDS, naive_utc, utcnow
from lib.ledger.connection import open_ledger
from lib.ledger.deciding import LedgerFacts, decide_with
from lib.ledger.plan_inputs import first_run_at, read_plan_inputs
from lib.planning.plan.data import MAX_PLAN_DAYS as MAX_DAYS, Holding, Plan
from lib.planning.plan.forward import forward_plan, plan_holdings, world_at
from lib.planning.plan.world import PlanWorld


class PlannedFacts(LedgerFacts):
    """The `DecisionFacts` of the plan's world at a time: the ledger's policies and booked run IDs, and
    each team's state as the plan has reached it (lib.planning.plan.world.PlanWorld.state)."""

    def __init__(self, con, world: PlanWorld):
        super().__init__(con)
        self.world = world

    def state(self, team: str, now: datetime, kind: str | None, capacity: str | None = None) -> State:
        return self.world.state(team, kind, now)


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
    """The what-if with a start time: the decision for `request` submitted at `at`, on the state the plan
    (from `now`, default the present) reaches by then — what has ended by `at`, and what the plan starts
    before it. The request's own run ID is left out of the queue. Writes nothing. InputError for an
    `at` before `now` or more than MAX_DAYS after it."""
    now = naive_utc(now) or utcnow()
    at = naive_utc(at)
    if at < now:
        raise InputError(f"--as-of {at.isoformat(timespec='minutes')} is before the plan's start "
                         f"{now.isoformat(timespec='minutes')}: to decide as of a past time, use --now")
    if at > now + timedelta(days=MAX_DAYS):
        raise InputError(f"--as-of {at.isoformat(timespec='minutes')} is more than {MAX_DAYS} days ahead")
    own = request if isinstance(request, dict) else {}
    run_id = own.get("run_id") if isinstance(own.get("run_id"), str) else None
    team, kind = own.get("team"), own.get("kind")
    with open_ledger(db, read_only=True, timeout_s=timeout_s, create=False) as con:
        _checked_as_of(con, now, "--now")
        inputs, _ = read_plan_inputs(con, now, exclude=run_id,
                                     also=(team, kind) if isinstance(team, str) and kind in KINDS else None)
        world = world_at(inputs, at)
        decision, _ = decide_with(request, at, PlannedFacts(con, world))
    return decision


def planned_holdings(con, as_of: datetime, until: datetime) -> list[Holding]:
    """The reservations of the plan up to `until` (lib.planning.plan.forward.plan_holdings), read
    through the caller's open ledger."""
    inputs, _ = read_plan_inputs(con, as_of)
    return plan_holdings(inputs, until)
