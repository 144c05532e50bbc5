"""The forward plan: the waiting requests decided again from now on, in the order the gate serves them,
by the same `lib.gate.admission.decide`, each with the state it would see then — the policy replay's
engine (lib.planning.holdings) run forward instead of over the past. Pure over plain data
(lib.ledger.plan reads it from the ledger).

The world it moves through (lib.planning.plan.world.PlanWorld):
- **held**: every reservation the ledger holds at as_of holds its team's quota (and its pool) until
  its reserved end, as the gate counts it; a request the plan starts at t holds its `gpus` from t for
  its estimated wall clock (t + the decision's wall hours, as lib.ledger.recording books an admit).
- **spend**: a reservation is taken to spend what it reserved, at its end (so a release moves its
  GPU-hours from committed to spent within the month); a month's spend starts from what the ledger
  had ended in it. The month rolling over resets budgets.
- **calibration, interruption rate, snapshots**: the gate's at as_of (no run is known to finish
  before the plan says so).
- **pools and the scheduler's windows**: as lib.gate.capacity counts them.

The rules:
1. Every waiting request is decided at as_of, in serve order (`SERVE_ORDER`: retraining first, then
   the longest wait, then run ID); each sees what the plan started before it. A request waiting
   past its team's `queue_max_age_days` has expired and is not planned.
2. A deferred request is tried again at the earliest time its reasons could be cured
   (lib.gate.capacity.fit_for_reasons: when reservations end, when its pool has room for the whole
   run, when the month resets the budget); what the plan starts meanwhile only delays it, so no
   earlier try could succeed. Requests tried at the same moment go in serve order. A reason that
   waiting cannot cure (budget, caps, snapshot, ...) blocks it for good, and so does a reject.
3. A request still waiting at its expiry leaves the queue then; one not started within the horizon
   is "not within N days", with the codes of its last try.

`reasons` are the codes `python -m lib check` gives each request at as_of (the ledger's state, without
what the plan starts before it). The calendar is read at as_of for today and at each later day's
start, on the state the plan has reached by then (what it started before that moment), which is the
state `python -m lib check --as-of T` decides on (`world_at`).
"""
from __future__ import annotations

import heapq
from datetime import datetime, timedelta

from lib.gate.admission import decide
from lib.gate.capacity import WAIT_CURES, fit_for_reasons, pool_room
from lib.gate.contracts import Decision, State
from lib.gate.terms import CAPACITIES, next_month_start
from lib.planning.plan.data import (SERVE_ORDER, DayRow, Plan, PlanHolding, PlanInputs, PoolDay, QueueRow,
                                    WaitingRequest)
from lib.planning.plan.world import PlanWorld

AHEAD_SHOWN = 20        # run IDs listed in a queue row's `ahead` (all are counted)
TEAM_HELD = {"capacity", "retraining-protection", "period-budget"}   # cured by the team's own releases


def serve_key(w: WaitingRequest) -> tuple:
    """The order the gate serves waiting requests in (SERVE_ORDER)."""
    return (0 if w["kind"] == "retraining" else 1, w["waiting_since"], w["run_id"])


class _Waiting:
    """One request's course through the plan: the codes of its last decision, its estimated wall hours
    and the month start its budget waits for, once decided."""
    __slots__ = ("w", "rank", "policy", "reasons", "codes", "note", "ahead", "start", "end", "wall", "month")

    def __init__(self, w: WaitingRequest, rank: int, policy):
        self.w, self.rank, self.policy = w, rank, policy
        self.reasons: list[str] | None = None
        self.codes: list[str] = []
        self.note = ""
        self.ahead: set[str] = set()
        self.start = self.end = self.month = None
        self.wall = 0.0


def _codes(decision: Decision) -> list[str]:
    """The decision's reason codes, each once, in its order."""
    return list(dict.fromkeys(r["code"] for r in decision["reasons"]))


def _step(world: PlanWorld, q: _Waiting, t: datetime, tries: list) -> int:
    """Try `q` at t: start it, or schedule its next try, or settle it. Returns the decisions it took.

    A retry first asks whether its last deferral's reasons can be cured at t (fit_for_reasons on the
    world now, its month's budget reset when t has reached that month): when not, what the plan
    started since took the room again, and it waits for the next time without a decision."""
    w, req = q.w, q.w["request"]
    team, kind = w["team"], w["kind"]
    st = world.state(team, kind, t)
    if q.reasons is not None:
        codes = set(q.codes) - ({"period-budget"} if q.month is not None and t >= q.month else set())
        if codes & WAIT_CURES and not _wait(world, q, t, codes, st, tries, retry=True):
            return 0
    decision = decide(req, q.policy, st, explain=False)   # codes and the estimate only
    codes = _codes(decision)
    decided = 1
    if q.reasons is None:   # the first try, at as_of: what check gives it, without what the plan started
        capacity = req.get("capacity") if isinstance(req, dict) else None
        if world.started_in.get(team) or world.started_in.get(("pool", capacity)):
            alone = world.state(team, kind, t, ledger_only=True)
            q.reasons = _codes(decide(req, q.policy, alone, explain=False))
            decided += 1
        else:
            q.reasons = codes
    q.codes = codes
    if decision["state"] == "admit":
        held = world.start(w, decision, t)
        q.start, q.end, q.codes = t, held["end"], []
        q.note = q.note or "fits now"
        return decided
    if decision["state"] == "reject" or q.policy is None:
        q.note = "not a request the gate can admit: " + "; ".join(
            f"{r.get('field', '?')}: {r['message']}" for r in decision["reasons"])[:300]
        return decided
    q.wall = decision["estimate"]["wall_hours"]
    q.month = next_month_start(t) if "period-budget" in codes else None
    _wait(world, q, t, set(codes), st, tries)
    return decided


def _wait(world: PlanWorld, q: _Waiting, t: datetime, codes: set, st: State, tries: list, *,
          retry: bool = False) -> bool:
    """Schedule q's next try for when `codes` can be cured; for a `retry`, True instead when that is
    now (then decide it)."""
    w, req, policy = q.w, q.w["request"], q.policy
    at, why = fit_for_reasons(t, codes, w["kind"], policy["reserved_gpus"], policy["retraining_reserved_gpus"],
                              st["reservations"], int(req["gpus"]), st["pools"].get(req["capacity"]), w["team"],
                              q.wall)
    if retry and at is not None and at <= t:
        return True
    # it waits: what the plan started and still holds in its team (quota, budget) or pool is ahead of it
    if codes & TEAM_HELD:
        q.ahead.update(world.started_held(w["team"], t))
    if "cluster-capacity" in codes:
        q.ahead.update(world.started_held(("pool", req["capacity"]), t))
    if at is None or at <= t:
        q.note = why if at is None else "no later time cures its reasons"
    elif at >= w["expires_at"]:
        q.note = f"expires {w['expires_at'].isoformat(timespec='minutes')} before it could start ({why})"
    else:
        q.note = why
        heapq.heappush(tries, (at, q.rank, q))
    return False


def _run(inputs: PlanInputs, end: datetime, marks: list[datetime], on_mark) -> tuple[PlanWorld, list[_Waiting], int]:
    """Move the plan from as_of to `end` (tries at times < end); at each of `marks` (sorted, < end),
    before the tries of that moment, call on_mark(world, mark). Returns (world at end, requests, decisions)."""
    world = PlanWorld(inputs)
    as_of = inputs["as_of"]
    waiting = sorted((w for w in inputs["waiting"] if w["expires_at"] > as_of), key=serve_key)
    queue = [_Waiting(w, i, inputs["policies"].get(w["team"]) if w["team"] is not None else None)
             for i, w in enumerate(waiting)]
    tries = [(as_of, q.rank, q) for q in queue]   # already in heap order
    marks = list(marks)
    decisions = 0
    while tries and tries[0][0] < end:
        t = tries[0][0]
        while marks and marks[0] <= t:
            world.advance(marks[0])
            on_mark(world, marks.pop(0))
        world.advance(t)
        while tries and tries[0][0] == t:
            _, _, q = heapq.heappop(tries)
            decisions += _step(world, q, t, tries)
    for mark in marks:
        world.advance(mark)
        on_mark(world, mark)
    for t, _, q in tries:   # still waiting past the horizon
        q.note = f"not within the plan's horizon: next try {t.isoformat(timespec='minutes')} ({q.note})"
    world.advance(end)
    return world, queue, decisions


def world_at(inputs: PlanInputs, at: datetime) -> PlanWorld:
    """The world the plan has reached at `at` (>= as_of): what ended by then, and what the plan
    started before then. `python -m lib check --as-of` decides on its state."""
    return _run(inputs, at, [], lambda world, mark: None)[0]


def forward_plan(inputs: PlanInputs, days: int = 14) -> Plan:
    """The plan for `days` days from as_of: every waiting request's planned start (or why none within
    the horizon) and what is ahead of it, the calendar of free accelerators per team (and pool) and
    day, and every holding (the ledger's and the plan's) for the budget burn-down."""
    as_of = inputs["as_of"]
    end = as_of + timedelta(days=days)
    day0 = datetime.combine(as_of.date(), datetime.min.time())
    marks = [as_of] + [day0 + timedelta(days=i) for i in range(1, days)]
    calendar: list[DayRow] = []
    pool_days: list[PoolDay] = []

    def on_mark(world: PlanWorld, t: datetime) -> None:
        calendar.extend(day_rows(world, t))
        pool_days.extend(pool_rows(world, t))
    world, queue, decisions = _run(inputs, end, marks, on_mark)
    rows: list[QueueRow] = []
    for q in sorted(queue, key=lambda q: (q.start is None, q.start or end, q.rank)):
        w = q.w
        ahead = sorted(q.ahead - {w["run_id"]}, key=lambda rid: (world.started[rid]["start"], rid))
        rows.append({"run_id": w["run_id"], "team": w["team"], "kind": w["kind"], "gpus": w["gpus"],
                     "capacity": w["capacity"], "waiting_since": w["waiting_since"], "expires_at": w["expires_at"],
                     "planned_start": q.start, "planned_end": q.end, "ahead": ahead[:AHEAD_SHOWN],
                     "ahead_count": len(ahead), "reasons": q.reasons or [], "blocking": q.codes, "note": q.note})
    return {"as_of": as_of, "days": days, "horizon_end": end, "serve_order": SERVE_ORDER, "queue": rows,
            "calendar": calendar, "pools": pool_days, "holdings": _holdings(inputs, world), "decisions": decisions}


def free_gpus(world: PlanWorld, team: str, kind: str, capacity: str | None, t: datetime) -> int:
    """The most accelerators a `kind` request of `team` on `capacity` would be admitted with at t
    (a run short enough to end before any of the scheduler's windows begins): room under the team's
    quota (and, for experiments, its retraining set-aside) and in the pool, never below 0."""
    policy = world.inputs["policies"][team]
    held = world.team_holdings.held(team, t)
    in_use = sum(r["gpus"] for r in held)
    in_use_retraining = sum(r["gpus"] for r in held if r["kind"] == "retraining")
    reserved, set_aside = policy["reserved_gpus"], policy["retraining_reserved_gpus"]
    if kind == "retraining":
        free = reserved - in_use_retraining
    else:
        free = reserved - in_use
        if set_aside:
            free = min(free, reserved - set_aside - (in_use - in_use_retraining))
    pool = world.state(team, kind, t)["pools"].get(capacity) if capacity in world.pool_sizes else None
    if pool is not None:
        free = min(free, pool_room(pool, team, kind, t, 0.0)[0])
    return max(0, free)


def day_rows(world: PlanWorld, t: datetime) -> list[DayRow]:
    """The calendar's rows at t: each team with a policy, on each capacity type (one row, capacity
    None, when no pool is configured)."""
    rows: list[DayRow] = []
    capacities = list(CAPACITIES) if world.pool_sizes else [None]
    for team, policy in sorted(world.inputs["policies"].items()):
        committed = sum(r["gpus"] for r in world.team_holdings.held(team, t))
        for capacity in capacities:
            pool = world.pool_sizes.get(capacity)
            windows = None
            if pool is not None:
                windows = sum(w["gpus"] for w in world.inputs["windows"] if w["start"] <= t < w["end"]
                              and w["pool"] in (None, capacity) and team not in w["accounts"])
            rows.append({"date": t.date(), "team": team, "capacity": capacity,
                         "quota_gpus": policy["reserved_gpus"],
                         "retraining_reserved_gpus": policy["retraining_reserved_gpus"],
                         "committed_gpus": committed,
                         "free_gpus": free_gpus(world, team, "production", capacity, t),
                         "retraining_free_gpus": free_gpus(world, team, "retraining", capacity, t),
                         "pool_gpus": pool,
                         "pool_held_gpus": (sum(r["gpus"] for r in world.pool_holdings.held(capacity, t))
                                            if pool is not None else None),
                         "window_gpus": windows})
    return rows


def pool_rows(world: PlanWorld, t: datetime) -> list[PoolDay]:
    quotas = sum(p["reserved_gpus"] for p in world.inputs["policies"].values())
    rows: list[PoolDay] = []
    for name, gpus in sorted(world.pool_sizes.items()):
        held = sum(r["gpus"] for r in world.pool_holdings.held(name, t))
        windows = sum(w["gpus"] for w in world.inputs["windows"] if w["start"] <= t < w["end"]
                      and w["pool"] in (None, name))
        rows.append({"date": t.date(), "pool": name, "gpus": gpus, "quotas_gpus": quotas, "held_gpus": held,
                     "window_gpus": windows, "free_gpus": max(0, gpus - held - windows)})
    return rows


def plan_holdings(inputs: PlanInputs, until: datetime) -> list[PlanHolding]:
    """Every reservation of the plan up to `until`: those the ledger holds at as_of and those the plan
    starts before `until` (for the budget burn-down's committed spend)."""
    return _holdings(inputs, world_at(inputs, until))


def _holdings(inputs: PlanInputs, world: PlanWorld) -> list[PlanHolding]:
    held: list[PlanHolding] = [
        {"run_id": r.get("run_id") or "", "team": r["team"], "kind": r["kind"], "capacity": r.get("capacity"),
         "gpus": r["gpus"], "start": r.get("reserved_from"), "end": r["reserved_until"],
         "gpu_hours": r["reserved_gpu_hours"], "planned": False} for r in inputs["held"]]
    return held + sorted(world.started.values(), key=lambda h: (h["start"], h["run_id"]))
