"""One request's turn in the gate's line: where a request submitted (or checked) at a time would be
placed (lib.planning.plan.forward.place), beside the requests served before it, and the `queue`
reason an admit becomes when its turn has not come. The deciders (lib.ledger.deciding's check and
submit, `python -m lib check --as-of` through lib.ledger.plan) ask it, so every one of them gives the
planned start the plan gives. Pure over the plan's inputs.

A request keeps its place: its run ID waiting in the line keeps its first deferral's `waiting_since`;
a newcomer waits from the time it is decided, behind everyone waiting then (scheduled retraining is
served first: it waits only behind earlier retraining, and its arrival may move the others). It is
admitted at t only when the line places it at t: it fits for its whole run beside what is placed
before it, so admitting it moves no earlier request's planned start (conservative backfill; a short
run in a gap before the next planned start still goes at once).
Times are naive UTC datetimes.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from lib.gate.contracts import Policy, Reason
from lib.gate.reasons import reason
from lib.gate.request import normalized
from lib.gate.terms import minute_up
from lib.planning.plan.data import PlanInputs, WaitingRequest
from lib.planning.plan.forward import Placed, lay_out, place, serve_key
from lib.planning.plan.line import Line

TURN_DAYS = 14    # how far ahead a request's place is looked for (the plan's default horizon)
DEFAULT_MAX_AGE_DAYS = 14


def as_waiting(waiting: list[WaitingRequest], request: dict, policy: Policy, at: datetime) -> WaitingRequest:
    """`request` (valid: admitted or deferred by decide) as a request in the line at `at`: in its own
    place when its run ID is among `waiting`, else a newcomer waiting from `at`."""
    req = normalized(request)
    own = next((w for w in waiting if w["run_id"] == req.get("run_id")), None)
    since = own["waiting_since"] if own is not None else at
    max_age = policy.get("queue_max_age_days") or DEFAULT_MAX_AGE_DAYS
    return {"run_id": req.get("run_id") or "", "team": req["team"], "kind": req["kind"], "gpus": int(req["gpus"]),
            "capacity": req["capacity"], "waiting_since": since,
            "expires_at": own["expires_at"] if own is not None else since + timedelta(days=max_age),
            "request": {**request, "capacity": req["capacity"]}}   # as decide judges it (its defaults its own)


def ahead_of(inputs: PlanInputs, w: WaitingRequest) -> list[WaitingRequest]:
    """The requests waiting at as_of that the gate serves before `w` (its own run ID aside), in the
    inputs' order (its callers count them: no sort per decision)."""
    key = serve_key(w)
    return [x for x in inputs["waiting"] if x["run_id"] != w["run_id"] and serve_key(x) < key]


def turn(inputs: PlanInputs, w: WaitingRequest, policy: Policy, at: datetime,
         days: int = TURN_DAYS) -> tuple[Placed, Line]:
    """`w` placed in the line of the requests served before it, from `at` (>= as_of) on, within
    `days` days: its planned start (`start`, None: not within them) and why (`note`), and the line
    (without it)."""
    end = max(at, inputs["as_of"]) + timedelta(days=days)
    others = {**inputs, "waiting": [x for x in inputs["waiting"] if x["run_id"] != w["run_id"]]}
    line, _ = lay_out(others, end, before=serve_key(w))
    return place(line, Placed(w, policy), at, end, hold=False), line


def queue_reason(q: Placed, ahead: int) -> Reason:
    """The `queue` reason of a request the decision would admit at its time but whose turn has not
    come: how many wait ahead of it and its planned start (rounded up to the minute)."""
    team = q.w["team"]
    when = f"planned start {minute_up(q.start)} UTC" if q.start is not None else q.note
    return reason("queue", f"{ahead} request(s) wait ahead of it in the gate's line (team {team}'s and every "
                  f"team's in its pool); starting it now would move a planned start later; {when}",
                  in_use=ahead, unit="requests",
                  fix=("it waits its turn and starts by itself at its planned start (no need to resubmit)"
                       if q.start is not None else "wait, or ask for fewer accelerators or a shorter run")
                  + ": a run that ends before the next planned start fits now")
