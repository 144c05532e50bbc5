"""The forward plan: the waiting requests decided again from now on, in the order the gate serves them,
by the same `lib.gate.admission.decide`, each placed in the gate's line (lib.planning.plan.line.Line:
conservative backfill) at the earliest time it fits beside everything placed before it. Pure over
plain data (lib.ledger.plan reads it from the ledger).

The rules:
1. Every waiting request is placed in serve order (`SERVE_ORDER`: retraining first, then the longest
   wait, then run ID). A request waiting past its team's `queue_max_age_days` has expired and is not
   planned. A request placed later never moves one placed earlier, so what a request is promised
   holds whatever arrives after it (a request that fits in a gap ending before a later planned start
   still starts at once: backfill).
2. A request's start is the earliest time t >= as_of at which it fits for its whole estimated wall
   clock beside the line (its team's quota, the retraining set-aside, its pool and the scheduler's
   windows: `Line.fit`) and `decide`, on the state the line gives at t, admits it. A period budget
   defers it to the month's reset; a reason that waiting cannot cure (budget, caps, snapshot, ...)
   blocks it for good, and so does a reject.
3. A request that would start only after its expiry leaves the queue then; one not started within the
   horizon is "not within N days", with the codes of its last try.

`reasons` are the codes `python -m lib check` gives each request at as_of: the ledger's state alone,
and `queue` when that admits it but the line does not start it then (requests ahead of it take the
room). The calendar is read at as_of for today and at each later day's start, on the line (what holds
then, the plan's placed requests included), which is the state `python -m lib check --as-of T`
decides on.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from lib.gate.admission import decide
from lib.gate.capacity import MONTH_CURES, WAIT_CURES, pool_room, span_end
from lib.gate.contracts import Decision
from lib.gate.terms import CAPACITIES, next_month_start
from lib.planning.plan.data import (SERVE_ORDER, DayRow, Plan, PlanHolding, PlanInputs, PoolDay, QueueRow,
                                    WaitingRequest)
from lib.planning.plan.line import Line

AHEAD_SHOWN = 20        # run IDs listed in a queue row's `ahead` (all are counted)


def serve_key(w: WaitingRequest) -> tuple:
    """The order the gate serves waiting requests in (SERVE_ORDER)."""
    return (0 if w["kind"] == "retraining" else 1, w["waiting_since"], w["run_id"])


class Placed:
    """One request's course through the line: the codes `check` gives it at as_of (`reasons`), those
    of its last decision (`codes`), its planned start and end (None: none), why (`note`), the run IDs
    placed before it that hold what it waited for (`ahead`), and its estimated wall hours."""
    __slots__ = ("w", "policy", "reasons", "codes", "note", "ahead", "start", "end", "wall", "decisions")

    def __init__(self, w: WaitingRequest, policy):
        self.w, self.policy = w, policy
        self.reasons: list[str] = []
        self.codes: list[str] = []
        self.note = ""
        self.ahead: list[str] = []
        self.start = self.end = None
        self.wall = 0.0
        self.decisions = 0


def _codes(decision: Decision) -> list[str]:
    """The decision's reason codes, each once, in its order."""
    return list(dict.fromkeys(r["code"] for r in decision["reasons"]))


def _never(line: Line, q: Placed) -> str:
    """Why a request can never fit the line by waiting."""
    w, policy = q.w, q.policy
    gpus, kind = int(w["gpus"]), w["kind"]
    quota = policy["reserved_gpus"] - (0 if kind == "retraining" else policy["retraining_reserved_gpus"])
    if gpus > quota:
        return f"needs {gpus} GPUs, above the {max(0, quota)} the team's quota leaves it"
    size = line.pool_sizes.get(w["capacity"])
    if size is not None and gpus > size:
        return f"needs {gpus} GPUs, above the {size} of the {w['capacity']} pool"
    return "only fits after a reservation with no end time releases"


def place(line: Line, q: Placed, start: datetime, end: datetime, *, hold: bool = True) -> Placed:
    """Place q in the line at the earliest time >= `start` (before `end`, the horizon) it fits and
    `decide` admits it (see the module docstring); set its start, end, codes and note. With `hold`
    False the line is left as it was (a request only asked about: where it would go)."""
    w, req, policy = q.w, q.w["request"], q.policy
    team, kind = w["team"], w["kind"]
    as_of = line.as_of
    first = decide(req, policy, line.state(team, kind, start, ledger_only=start == as_of), explain=False)
    q.decisions += 1
    q.reasons = q.codes = _codes(first)
    if first["state"] == "reject" or policy is None:
        q.note = "not a request the gate can admit: " + "; ".join(
            f"{r.get('field', '?')}: {r['message']}" for r in first["reasons"])[:300]
        return q
    blocking = sorted(set(q.codes) - WAIT_CURES - MONTH_CURES)
    if blocking:
        q.note = "waiting will not help: change the request (" + ", ".join(blocking) + ")"
        return q
    wall = (first["estimate"] or {}).get("wall_hours")
    q.wall = wall if wall is not None else float(req.get("max_runtime_hours") or 0.0)
    t, why = start, "fits now"
    while True:
        at = line.fit(team, kind, w["capacity"], int(w["gpus"]), t, q.wall, policy)
        if at is None:
            q.note = _never(line, q)
            break
        if at > t:
            t, why = at, "when reservations end"
        if t >= w["expires_at"]:
            q.note = f"expires {w['expires_at'].isoformat(timespec='minutes')} before it could start ({why})"
            break
        if t >= end:
            q.note = f"not within the plan's horizon: next try {t.isoformat(timespec='minutes')} ({why})"
            break
        decision = decide(req, policy, line.state(team, kind, t), explain=False)
        q.decisions += 1
        if decision["state"] == "admit":
            q.start, q.end, q.codes, q.note = t, span_end(t, q.wall), [], why
            if hold:
                line.place(w, decision, t, q.wall)
            break
        q.codes = _codes(decision)
        if set(q.codes) - WAIT_CURES - MONTH_CURES:
            q.note = "waiting will not help: change the request (" + ", ".join(
                sorted(set(q.codes) - WAIT_CURES - MONTH_CURES)) + ")"
            break
        if "period-budget" in q.codes:
            t, why = next_month_start(t), "monthly budget resets"
        else:   # the line and the decision disagree on the room at t: try where the holdings next change
            nxt = line.change_after(team, w["capacity"], t)
            if nxt is None:
                q.note = _never(line, q)
                break
            t = nxt
    if q.start is None or q.start > as_of:   # what was placed before it in its team and pool
        until = q.start if q.start is not None else end
        q.ahead = sorted(set(line.planned_in(team, as_of, until))
                         | set(line.planned_in(("pool", w["capacity"]), as_of, until)) - {w["run_id"]},
                         key=lambda rid: (line.placed[rid]["start"], rid))
    if q.reasons == [] and (q.start is None or q.start > start):
        q.reasons = ["queue"]   # check admits it on the ledger alone, but requests ahead take the room
    return q


def waiting_in_order(inputs: PlanInputs) -> list[WaitingRequest]:
    """The requests waiting at as_of and not expired, in serve order."""
    return sorted((w for w in inputs["waiting"] if w["expires_at"] > inputs["as_of"]), key=serve_key)


def lay_out(inputs: PlanInputs, end: datetime, before: tuple | None = None) -> tuple[Line, list[Placed]]:
    """The line with every waiting request placed, in serve order, up to the horizon `end`; with
    `before` (a serve key), only those served before it."""
    line = Line(inputs)
    placed = []
    for w in waiting_in_order(inputs):
        if before is not None and serve_key(w) >= before:
            break
        policy = inputs["policies"].get(w["team"]) if w["team"] is not None else None
        placed.append(place(line, Placed(w, policy), inputs["as_of"], end))
    return line, placed


def world_at(inputs: PlanInputs, at: datetime) -> Line:
    """The line as it stands at `at` (>= as_of): the ledger's holdings and the requests placed to start
    by then; its `state(team, kind, at)` is what a decision at `at` sees."""
    return lay_out(inputs, at + timedelta(microseconds=1))[0]


def forward_plan(inputs: PlanInputs, days: int = 14) -> Plan:
    """The plan for `days` days from as_of: every waiting request's planned start (or why none within
    the horizon) and what is ahead of it, the calendar of free accelerators per team (and pool) and
    day, and every holding (the ledger's and the plan's) for the budget burn-down."""
    as_of = inputs["as_of"]
    end = as_of + timedelta(days=days)
    line, placed = lay_out(inputs, end)
    day0 = datetime.combine(as_of.date(), datetime.min.time())
    marks = [as_of] + [day0 + timedelta(days=i) for i in range(1, days)]
    calendar: list[DayRow] = []
    pool_days: list[PoolDay] = []
    for t in marks:
        calendar.extend(day_rows(line, t))
        pool_days.extend(pool_rows(line, t))
    rows: list[QueueRow] = []
    for q in sorted(placed, key=lambda q: (q.start is None, q.start or end, serve_key(q.w))):
        w = q.w
        rows.append({"run_id": w["run_id"], "team": w["team"], "kind": w["kind"], "gpus": w["gpus"],
                     "capacity": w["capacity"], "waiting_since": w["waiting_since"], "expires_at": w["expires_at"],
                     "planned_start": q.start, "planned_end": q.end, "ahead": q.ahead[:AHEAD_SHOWN],
                     "ahead_count": len(q.ahead), "reasons": q.reasons, "blocking": q.codes, "note": q.note})
    return {"as_of": as_of, "days": days, "horizon_end": end, "serve_order": SERVE_ORDER, "queue": rows,
            "calendar": calendar, "pools": pool_days, "holdings": _holdings(line),
            "decisions": sum(q.decisions for q in placed)}


def free_gpus(line: Line, team: str, kind: str, capacity: str | None, t: datetime) -> int:
    """The most accelerators a `kind` request of `team` on `capacity` would be admitted with at t
    (a run short enough to end before any of the scheduler's windows begins): room under the team's
    quota (and, for experiments, its retraining set-aside) and in the pool, never below 0."""
    policy = line.inputs["policies"][team]
    held = line.held(team, t)
    in_use = sum(r["gpus"] for r in held)
    in_use_retraining = sum(r["gpus"] for r in held if r["kind"] == "retraining")
    reserved, set_aside = policy["reserved_gpus"], policy["retraining_reserved_gpus"]
    if kind == "retraining":
        free = reserved - in_use_retraining
    else:
        free = reserved - in_use
        if set_aside:
            free = min(free, reserved - set_aside - (in_use - in_use_retraining))
    pool = line.state(team, kind, t)["pools"].get(capacity) if capacity in line.pool_sizes else None
    if pool is not None:
        free = min(free, pool_room(pool, team, kind, t, 0.0)[0])
    return max(0, free)


def day_rows(line: Line, t: datetime) -> list[DayRow]:
    """The calendar's rows at t: each team with a policy, on each capacity type (one row, capacity
    None, when no pool is configured)."""
    rows: list[DayRow] = []
    capacities = list(CAPACITIES) if line.pool_sizes else [None]
    for team, policy in sorted(line.inputs["policies"].items()):
        committed = sum(r["gpus"] for r in line.held(team, t))
        for capacity in capacities:
            pool = line.pool_sizes.get(capacity)
            windows = None
            if pool is not None:
                windows = sum(w["gpus"] for w in line.inputs["windows"] if w["start"] <= t < w["end"]
                              and w["pool"] in (None, capacity) and team not in w["accounts"])
            rows.append({"date": t.date(), "team": team, "capacity": capacity,
                         "quota_gpus": policy["reserved_gpus"],
                         "retraining_reserved_gpus": policy["retraining_reserved_gpus"],
                         "committed_gpus": committed,
                         "free_gpus": free_gpus(line, team, "production", capacity, t),
                         "retraining_free_gpus": free_gpus(line, team, "retraining", capacity, t),
                         "pool_gpus": pool,
                         "pool_held_gpus": (sum(r["gpus"] for r in line.held(("pool", capacity), t))
                                            if pool is not None else None),
                         "window_gpus": windows})
    return rows


def pool_rows(line: Line, t: datetime) -> list[PoolDay]:
    quotas = sum(p["reserved_gpus"] for p in line.inputs["policies"].values())
    rows: list[PoolDay] = []
    for name, gpus in sorted(line.pool_sizes.items()):
        held = sum(r["gpus"] for r in line.held(("pool", name), t))
        windows = sum(w["gpus"] for w in line.inputs["windows"] if w["start"] <= t < w["end"]
                      and w["pool"] in (None, name))
        rows.append({"date": t.date(), "pool": name, "gpus": gpus, "quotas_gpus": quotas, "held_gpus": held,
                     "window_gpus": windows, "free_gpus": max(0, gpus - held - windows)})
    return rows


def plan_holdings(inputs: PlanInputs, until: datetime) -> list[PlanHolding]:
    """Every reservation of the plan up to `until`: those the ledger holds at as_of and those the plan
    starts before `until` (for the budget burn-down's committed spend)."""
    line, _ = lay_out(inputs, until)
    return _holdings(line)


def _holdings(line: Line) -> list[PlanHolding]:
    ledger = [h for h in line.holdings if not h["planned"]]
    return ledger + sorted(line.placed.values(), key=lambda h: (h["start"], h["run_id"]))
