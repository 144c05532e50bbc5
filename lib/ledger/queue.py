"""The gate's own line of waiting requests, over the ledger: `queue_line` (what `python -m lib queue`
prints), `admit_turns` (`python -m lib queue admit`: the requests whose turn has come admitted, those
that waited too long expired) and `cancel_waiting` (`python -m lib cancel`).

The line is the forward plan's queue (lib.ledger.plan.plan_ledger: one plan, the one `python -m lib
plan` prints), listed in the order the gate serves it (lib.planning.plan.forward.serve_key: scheduled
retraining first, then the longest waiting, then run ID).

Admitting: a request's turn has come when the plan at `now` starts it at or before `now`. Those are
decided again in serve order, each through the one write path of in-process deciders
(lib.ledger.deciding.submit_request) with `admit_only` and a guard, so each sees what the earlier
admits booked, only an admit is recorded (a request that does not fit now leaves no row), and a
request that left the line meanwhile (admitted by another `queue admit`, cancelled, deferred anew with
another request) is not decided at all. The admit's actor is QUEUE_ACTOR, its decision JSON holds the
request's `waiting_since`.

Leaving the line: a request waiting past its team's `queue_max_age_days` expires, and `cancel` takes
one out; each is recorded once, as a `reject` decision with the code `queue-expired` or `cancelled`
(lib.gate.reasons.QUEUE_LEFT_CODES) and the request's `waiting_since`, under the writer's turn with the
same check that the request still waits. A later deferral of the same run ID waits anew. Times are
naive UTC.
"""
from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta

from lib.gate.admission import reject
from lib.gate.contracts import Decision
from lib.gate.reasons import reason
from lib.gate.terms import InputError, ceil_to, naive_utc, utcnow
from lib.ledger.audit import Who, record
from lib.ledger.connection import open_ledger, transaction
from lib.ledger.deciding import SharedAuthority, submit_request
from lib.ledger.state import BOOKED
from lib.ledger.finishing import UnknownRun
from lib.ledger.plan import plan_ledger
from lib.ledger.plan_inputs import read_queue
from lib.ledger.recording import canonical_json, record_decision
from lib.ledger.writer import write_ledger
from lib.planning.plan.data import WaitingRequest
from lib.planning.plan.forward import serve_key

QUEUE_ACTOR = "gate-queue"    # the actor of the queue's own decisions (admits and expiries)
ORIGIN = "cli"


def _iso(t: datetime | None, step: timedelta = timedelta(seconds=1)) -> str | None:
    return None if t is None else ceil_to(t, step).isoformat(timespec="seconds")


def _latest(con, run_ids: list[str]) -> dict[str, tuple[str, list[str], str]]:
    """run ID -> (state, reason codes, request JSON) of its latest decision."""
    if not run_ids:
        return {}
    key = "(decided_at, decision_id)"
    rows = con.execute(f"SELECT run_id, max_by(state, {key}), max_by(reason_codes, {key}), max_by(request_json, {key}) "
                       "FROM decisions WHERE list_contains(?, run_id) GROUP BY run_id", [run_ids]).fetchall()
    return {r[0]: (r[1], list(r[2]), r[3]) for r in rows}


def still_waiting(con, run_id: str, request_json: str) -> bool:
    """True while the run ID's latest decision is the deferral of this very request (the guard of every
    write that takes a request out of the line)."""
    state, _, text = _latest(con, [run_id]).get(run_id, (None, [], None))
    return state == "defer" and text == request_json


# ------------------------------------------------------------------------------ the line

def queue_line(db=None, *, now=None, days: int = 14, team: str | None = None, timeout_s: float = 10.0) -> dict:
    """The line at `now` (default the present) as the forward plan of `days` days serves it: per
    waiting request its place (1-based, in serve order: `place` overall, `team_place` in its team),
    run ID, team, kind, gpus, capacity, planned start (ISO seconds, rounded up; None: not within the
    horizon, see `note`), waiting since, expiry, `reasons` (the codes of its latest deferral) and
    `reasons_now` (those `check` gives it now). `team`: only that team's rows (places stay the line's)."""
    plan = plan_ledger(db, as_of=now, days=days, timeout_s=timeout_s)
    line = sorted(plan["queue"], key=serve_key)
    with open_ledger(db, read_only=True, timeout_s=timeout_s, create=False) as con:
        latest = _latest(con, [r["run_id"] for r in line])
    per_team: Counter = Counter()
    rows = []
    for place, q in enumerate(line, 1):
        per_team[q["team"]] += 1
        if team is not None and q["team"] != team:
            continue
        state, codes, _ = latest.get(q["run_id"], (None, [], None))
        rows.append({"place": place, "team_place": per_team[q["team"]], "run_id": q["run_id"], "team": q["team"],
                     "kind": q["kind"], "gpus": q["gpus"], "capacity": q["capacity"],
                     "planned_start": _iso(q["planned_start"]), "planned_end": _iso(q["planned_end"]),
                     "waiting_since": q["waiting_since"].isoformat(timespec="seconds"),
                     "expires_at": q["expires_at"].isoformat(timespec="seconds"),
                     "reasons": codes if state == "defer" else [], "reasons_now": q["reasons"], "note": q["note"]})
    return {"as_of": plan["as_of"].isoformat(timespec="seconds"), "horizon_end": _iso(plan["horizon_end"]),
            "serve_order": plan["serve_order"], "team": team, "waiting": len(line), "queue": rows,
            "expired": plan["expired"]["count"]}


# ------------------------------------------------------------------------------ admitting and expiring

def _left(request: dict, code: str, message: str, fix: str, waiting_since: datetime, now: datetime) -> Decision:
    """The queue's `reject` that ends a request's wait."""
    decision = reject(request, [reason(code, message, fix=fix)], now=now)
    return {**decision, "waiting_since": waiting_since.isoformat()}


def expire_waiting(db, now: datetime, timeout_s: float) -> list[dict]:
    """Record the expiry of every request that waited past its team's queue age and whose expiry is
    not recorded yet; the rows recorded."""
    with open_ledger(db, read_only=True, timeout_s=timeout_s, create=False) as con:
        _, expired = read_queue(con, now, unrecorded=True)
    if not expired["unrecorded"]:
        return []
    done = []
    with write_ledger(db, timeout_s) as con, transaction(con):
        for w in expired["unrecorded"]:
            request = w["request"]
            if not isinstance(request, dict) or not still_waiting(con, w["run_id"], canonical_json(request)):
                continue
            since = w["waiting_since"]
            decision = _left(request, "queue-expired",
                             f"waited since {since.isoformat(timespec='minutes')}, past its team's queue age "
                             f"(expired {w['expires_at'].isoformat(timespec='minutes')})",
                             "submit it again if it is still wanted (it waits anew), or ask a planner for a "
                             "longer queue_max_age_days", since, now)
            record_decision(con, request, decision, ORIGIN, now, actor=QUEUE_ACTOR)
            done.append({"run_id": w["run_id"], "team": w["team"], "waiting_since": since.isoformat(timespec="seconds"),
                         "expires_at": w["expires_at"].isoformat(timespec="seconds")})
    return done


def admit_turns(db=None, *, now=None, timeout_s: float = 10.0, authority: SharedAuthority | None = None) -> dict:
    """Expire what waited too long, then admit every waiting request whose turn has come at `now`
    (default the present), in serve order (see the module docstring). Returns {as_of, admitted,
    not_admitted (due by the plan, deferred by the ledger now: nothing written), expired (recorded now)}."""
    now = naive_utc(now) or utcnow()
    expired = expire_waiting(db, now, timeout_s)
    admitted, not_admitted = [], []
    for q, text in due_turns(db, now, timeout_s):
        since = q["waiting_since"]
        decision = submit_request(json.loads(text), db=db, origin=ORIGIN, now=now, timeout_s=timeout_s,
                                  actor=QUEUE_ACTOR, authority=authority, admit_only=True,
                                  guard=lambda con, run_id=q["run_id"], text=text: still_waiting(con, run_id, text),
                                  extra={"waiting_since": since.isoformat()})
        if decision is None:   # it left the line since the plan was read (another admit, a cancel)
            continue
        row = {"run_id": q["run_id"], "team": q["team"], "kind": q["kind"], "gpus": q["gpus"],
               "waiting_since": since.isoformat(timespec="seconds"), "state": decision["state"],
               "reasons": [r["code"] for r in decision["reasons"]]}
        if decision["state"] == "admit":
            admitted.append({**row, "reserved_gpu_hours": decision["reserved_gpu_hours"]})
        else:
            not_admitted.append(row)
    return {"as_of": now.isoformat(timespec="seconds"), "admitted": admitted, "not_admitted": not_admitted,
            "expired": expired}


def due_turns(db, now: datetime, timeout_s: float) -> list[tuple[dict, str]]:
    """(the plan's queue row, the request JSON of its deferral) of every request whose turn has come
    at `now`, in serve order: the ones `admit_turns` decides again (the gate server's queue keeper
    too, through its own decider)."""
    plan = plan_ledger(db, as_of=now, days=1, timeout_s=timeout_s)
    due = [q for q in sorted(plan["queue"], key=serve_key) if q["planned_start"] is not None and q["planned_start"] <= now]
    with open_ledger(db, read_only=True, timeout_s=timeout_s, create=False) as con:
        latest = _latest(con, [q["run_id"] for q in due])
    out = []
    for q in due:
        state, _, text = latest.get(q["run_id"], (None, [], None))
        if state == "defer":
            out.append((q, text))
    return out


def left_line(db, run_ids: list[str], *, timeout_s: float = 10.0) -> dict[str, str]:
    """run ID -> why, for those of `run_ids` whose latest decision took them out of the line (a
    `reject`: expired, cancelled, ...): the reasons' messages."""
    if not run_ids:
        return {}
    key = "(decided_at, decision_id)"
    with open_ledger(db, read_only=True, timeout_s=timeout_s, create=False) as con:
        rows = con.execute(f"SELECT run_id, max_by(state, {key}), max_by(reason_codes, {key}), "
                           f"max_by(decision_json, {key}) FROM decisions WHERE list_contains(?, run_id) "
                           "GROUP BY run_id", [run_ids]).fetchall()
    out = {}
    for run_id, state, codes, text in rows:   # one read: its latest decision's state, codes and reasons
        if state == "reject":
            reasons = json.loads(text).get("reasons") or []
            out[run_id] = "; ".join(f"[{r.get('code')}] {r.get('message')}" for r in reasons) or ", ".join(codes)
    return out


# ------------------------------------------------------------------------------ cancelling

def _waiting_now(con, run_id: str, now: datetime) -> WaitingRequest:
    """The run's waiting request at `now`; UnknownRun for a run ID the ledger does not know, InputError
    for one that does not wait (booked, decided otherwise, or expired)."""
    waiting, expired = read_queue(con, now, unrecorded=True)
    for w in waiting:
        if w["run_id"] == run_id:
            return w
    for w in expired["unrecorded"]:
        if w["run_id"] == run_id:
            raise InputError(f"run {run_id!r} does not wait in the queue: it expired "
                             f"{w['expires_at'].isoformat(timespec='minutes')} (queue admit records that)")
    state = _latest(con, [run_id]).get(run_id, (None,))[0]
    booked = con.execute(f"SELECT {BOOKED} FROM runs WHERE run_id = ?", [run_id]).fetchone()
    if state is None and booked is None:
        raise UnknownRun(f"unknown run {run_id!r}: the ledger has no decision and no run with that ID")
    why = ("it holds a reservation or has run" if booked and booked[0]
           else f"its latest decision is {'an' if state == 'admit' else 'a'} {state}")
    raise InputError(f"run {run_id!r} does not wait in the queue: {why}")


def waiting_team(db, run_id: str, *, now=None, timeout_s: float = 10.0) -> str | None:
    """The team of the run's waiting request (to check who may cancel it); UnknownRun or InputError as
    `_waiting_now` says."""
    now = naive_utc(now) or utcnow()
    with open_ledger(db, read_only=True, timeout_s=timeout_s, create=False) as con:
        return _waiting_now(con, run_id, now)["team"]


def cancel_waiting(run_id: str, who: Who, *, db=None, now=None, timeout_s: float = 10.0) -> dict:
    """Take the run's waiting request out of the line: a `reject` with the code `cancelled`, its actor
    `who`, and an audit row, in one write under the writer's turn (the request checked to wait there).
    Returns {run_id, team, kind, gpus, waiting_since, cancelled_at}."""
    now = naive_utc(now) or utcnow()
    with write_ledger(db, timeout_s) as con, transaction(con):
        return _cancel(con, _waiting_now(con, run_id, now), who, now)


def cancel_all_waiting(run_ids: list[str], who: Who, *, db=None, now=None, timeout_s: float = 10.0) -> list[dict]:
    """`cancel_waiting` for many run IDs in one write (the line read once): those still waiting are
    taken out, the others skipped. The gate server's queue keeper, for held jobs cancelled in Slurm."""
    now = naive_utc(now) or utcnow()
    wanted = set(run_ids)
    if not wanted:
        return []
    with write_ledger(db, timeout_s) as con, transaction(con):
        waiting, _ = read_queue(con, now)
        return [_cancel(con, w, who, now) for w in waiting if w["run_id"] in wanted]


def _cancel(con, w: WaitingRequest, who: Who, now: datetime) -> dict:
    run_id, since = w["run_id"], w["waiting_since"]
    request = w["request"] if isinstance(w["request"], dict) else {"run_id": run_id, "team": w["team"],
                                                                    "kind": w["kind"]}
    decision = _left(request, "cancelled", f"taken out of the queue by {who['actor']}",
                     "submit it again to wait anew (at the back of the line)", since, now)
    record_decision(con, request, decision, who["origin"], now, actor=who["actor"])
    record(con, who, "cancel", detail=f"cancelled {run_id} of team {w['team']}, waiting since "
                                      f"{since.isoformat(timespec='seconds')}")
    return {"run_id": run_id, "team": w["team"], "kind": w["kind"], "gpus": w["gpus"],
            "waiting_since": since.isoformat(timespec="seconds"), "cancelled_at": now.isoformat(timespec="seconds")}


def record_refused_cancel(db, run_id: str, who: Who, why: str, *, timeout_s: float = 10.0) -> None:
    """Audit a cancel the access file refused (nothing else is written)."""
    with write_ledger(db, timeout_s) as con, transaction(con):
        record(con, who, "cancel", detail=f"refused to cancel {run_id}: {why}"[:1000])
