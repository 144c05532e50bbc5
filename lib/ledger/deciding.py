"""The gate over the ledger: `check_request` (the what-if) and `submit_request` (decide and record).

Both call the same `decide_with(request, now, facts)`, which calls the pure
`lib.gate.admission.decide(request, policy, state)` over the policy and state the facts object
reads (`lib.gate.contracts.DecisionFacts`): here `LedgerFacts` over an open connection; the warm
gate server (lib.slurm.live.LiveGate) answers the same questions from the state it holds.

`check_request` opens the ledger read-only and writes nothing. `submit_request` is the one way an
in-process decider (`python -m lib submit`, the Slurm hook without a gate server) decides and
records: the decider lock first (lib.ledger.decider_lock: refused while a gate server decides for
the ledger), then the writer turn and DuckDB's own lock (lib.ledger.writer.write_ledger), then ONE
write transaction that reads policy and state, decides, appends the decision and reserves on admit
(lib.ledger.recording.record_decisions, which the gate server's batches write through too).
Concurrent submitters serialize: each sees every reservation committed before it, and none is
double-booked. Past the timeout `LedgerLocked` is raised (the command line turns it into exit code
3). Submitting the admitted request again, unchanged, answers the recorded decision and writes
nothing (a retry after a lost answer); see `recorded_admit`.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Callable, Protocol

from lib.gate.admission import decide, reject, unknown_team
from lib.gate.capacity import cured_by_waiting
from lib.gate.contracts import Decision, DecisionFacts, Policy, Request, State
from lib.gate.reasons import notes_of, reason
from lib.gate.request import run_id_problem
from lib.gate.terms import KINDS, ceil_to, naive_utc, team_name_problem, utcnow
from lib.ledger.connection import ledger_path, open_ledger, transaction
from lib.ledger.decider_lock import deciding_in_process
from lib.ledger.plan_inputs import anyone_waiting, read_plan_inputs
from lib.ledger.recording import canonical_json, record_decision
from lib.ledger.state import BOOKED, team_policy, team_state
from lib.ledger.writer import write_ledger
from lib.planning.plan.data import PlanInputs
from lib.planning.plan.turn import ahead_of, as_waiting, queue_reason, turn



def booked(con, run_id) -> bool:
    """True when the run ID already holds a reservation or has run (a resubmission would double-book)."""
    if type(run_id) is not str:
        return False
    row = con.execute(f"SELECT {BOOKED} FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return bool(row and row[0])


def recorded_admit(con, request, now: datetime) -> Decision | None:
    """The admit recorded for this very request, while its reservation still waits for the run.

    "This very request": the same JSON object as the one recorded with the admit, compared after
    the same canonical serialisation (keys sorted), so key order does not matter but values and
    their types do. The reservation must not have started, ended or expired at `now`. The answer
    is the recorded decision as recorded, its notes as today's (a plain-string note of an older
    decision becomes {"code": None, "message": it}), plus "replayed": true and "recorded_at" (ISO
    time of the decisions row). None when there is no such admit.
    """
    run_id = request.get("run_id")
    live = con.execute(
        "SELECT count(*) FROM runs WHERE run_id = ? AND reserved_gpu_hours IS NOT NULL "
        "AND started_at IS NULL AND ended_at IS NULL AND (reserved_until IS NULL OR reserved_until > ?)",
        [run_id, now]).fetchone()[0]
    if not live:
        return None
    row = con.execute(
        "SELECT decided_at, request_json, decision_json FROM decisions "
        "WHERE run_id = ? AND state = 'admit' ORDER BY decision_id DESC LIMIT 1", [run_id]).fetchone()
    if row is None or row[1] != canonical_json(request):
        return None
    recorded = json.loads(row[2])
    return {**recorded, "notes": notes_of(recorded), "replayed": True, "recorded_at": row[0].isoformat()}


class LedgerFacts:
    """The `DecisionFacts` of an open ledger connection: what a decision reads, read as `con` sees it."""

    def __init__(self, con):
        self.con = con

    def policy(self, team: str) -> Policy | None:
        return team_policy(self.con, team)

    def known_teams(self) -> list[str]:
        return [r[0] for r in self.con.execute("SELECT team FROM teams ORDER BY team").fetchall()]

    def booked(self, run_id) -> bool:
        return booked(self.con, run_id)

    def recorded_admit(self, request: Request, now: datetime) -> Decision | None:
        return recorded_admit(self.con, request, now)

    def state(self, team: str, now: datetime, kind: str | None, capacity: str | None = None) -> State:
        return team_state(self.con, team, now, kind=kind, rate=capacity in (None, "preemptible"))


class SharedAuthority(Protocol):
    """A decider shared by several clusters' ledgers (lib.authority.facts.Authority, a layer above
    this one, hands itself in). `decide` takes the decision inside one transaction of its own over
    the team's shared facts and `local` (this ledger's), and with `write` commits the admit's hold
    there before returning: the caller records the decision in the ledger after that. `finished`
    releases a run's hold and adds its spend when the run ends."""

    def decide(self, request: Request, now: datetime, local: DecisionFacts, *, write: bool = True,
               prepare: Callable[[Request, Policy | None], Request] | None = None) -> tuple[Request, Decision]:
        """(the request as prepared, the decision)."""

    def finished(self, run_id: str, team: str, ended_at: datetime, gpu_hours: float, why: str,
                 now: datetime) -> None:
        """The run ended (`why`: finish, recover-end): its hold released, its spend recorded."""


def policy_for(request: Request, facts: DecisionFacts) -> Policy | None:
    """The policy of the team the request names; None for an unknown team, and without a look-up for
    a value that is no team name (DuckDB refuses e.g. a lone surrogate; the decision rejects it by name)."""
    team = request.get("team") if isinstance(request, dict) else None
    return facts.policy(team) if team_name_problem(team) is None else None


def decide_with(request: Request, now: datetime, facts: DecisionFacts) -> tuple[Decision, Policy | None]:
    """(decision, policy) for the request against `facts` (a `LedgerFacts`, or the gate server's
    live state).

    A request whose run ID is booked is refused, unless it is the very request that booked it and
    the reservation still waits for the run: then the answer is the recorded admit (see
    `recorded_admit`), so a caller that lost the answer can retry safely.
    """
    policy = policy_for(request, facts)
    if policy is None:
        return unknown_team(request, known_teams=facts.known_teams(), now=now), None
    if run_id_problem(request.get("run_id")) is None and facts.booked(request["run_id"]):
        replayed = facts.recorded_admit(request, now)
        if replayed is not None:
            return replayed, policy
        return reject(request, [reason(
            "invalid-request", f"run_id {request['run_id']!r} already holds a reservation or has run",
            fix="choose a new run_id (one run ID per submission)", field="run_id")], now=now), policy
    kind = request.get("kind")
    state = facts.state(request["team"], now, kind if kind in KINDS else None, request.get("capacity") or "stable")
    return decide(request, policy, state), policy


def decide_in_ledger(con, request: Request, now: datetime) -> tuple[Decision, Policy | None]:
    """(decision, policy) for the request against the ledger as `con` sees it (see `decide_with`)."""
    return decide_with(request, now, LedgerFacts(con))


class NamingStart:
    """Any `DecisionFacts` (LedgerFacts, the gate server's LiveGate) whose state also names the
    request's planned start in the gate's line, so a deferral's fixes give the time the line gives."""

    def __init__(self, facts: DecisionFacts, planned_start: datetime | None):
        self.facts, self.planned_start = facts, planned_start

    def __getattr__(self, name):   # policy, known_teams, booked, recorded_admit: the facts' own
        return getattr(self.facts, name)

    def state(self, team: str, now: datetime, kind: str | None, capacity: str | None = None) -> State:
        return {**self.facts.state(team, now, kind, capacity), "planned_start": self.planned_start}


def planned_iso(t: datetime | None) -> str | None:
    """A planned start as the decision JSON gives it: ISO to the second, rounded up."""
    return None if t is None else ceil_to(t, timedelta(seconds=1)).isoformat(timespec="seconds")


def heard_in_line(inputs_of: Callable[[bool], PlanInputs | None], facts: DecisionFacts, request: Request,
                  decision: Decision, policy: Policy | None, now: datetime, *, turn_of: Callable = turn) -> Decision:
    """The decision once the gate's line is heard (lib.planning.plan.turn): an admit whose turn has not
    come (a request served before it would start later) becomes a deferral with the reason `queue`;
    a deferral that waiting cures names its planned start in the line (`planned_start`, ISO seconds
    rounded up) and its `queue_place` among its team's waiting requests (with requests ahead of it,
    its fixes name that start too). Anything else, and an admit while nobody waits ahead of it, is
    returned as it is. `inputs_of(needed)`: the plan's inputs at `now`; None when not `needed` and
    nobody waits (asked only for an admit, not needed, or a deferral that waiting cures, needed);
    `facts`: what `decision` was decided over (a deferral is decided again over them, naming its
    planned start); `turn_of`: lib.planning.plan.turn.turn, or a caller's own that gives its answers
    (the gate server's reuses the line it laid out)."""
    codes = {r["code"] for r in decision["reasons"]}
    waits = decision["state"] == "defer" and cured_by_waiting(codes)
    if policy is None or decision.get("replayed") or not (decision["state"] == "admit" or waits):
        return decision
    inputs = inputs_of(waits)
    if inputs is None:
        return decision
    w = as_waiting(inputs["waiting"], request, policy, now)
    before = ahead_of(inputs, w)
    if not before and not waits:
        return decision
    q, _ = turn_of(inputs, w, policy, now)
    if decision["state"] == "defer" and before:   # first in the line, its own fixes say when it fits
        decision, _ = decide_with(request, now, NamingStart(facts, q.start))
    return placed_in_line(decision, q, sum(1 for x in before if x["team"] == w["team"]), now)


def placed_in_line(decision: Decision, q, ahead: int, at: datetime) -> Decision:
    """`decision` at `at` given its place in the line (`q`: lib.planning.plan.forward.Placed; `ahead`:
    its team's requests served before it): an admit the line does not place at `at` becomes a `queue`
    deferral, and that and a deferral that waiting cures name `planned_start` and `queue_place`;
    anything else is returned as it is."""
    line = {"planned_start": planned_iso(q.start), "queue_place": ahead + 1}
    if decision["state"] == "admit":
        return decision if q.start == at else {**decision, "state": "defer", "reasons": [queue_reason(q, ahead)],
                                               "reserved_gpu_hours": None, **line}
    waits = decision["state"] == "defer" and cured_by_waiting(r["code"] for r in decision["reasons"])
    return {**decision, **line} if waits else decision


def in_line(con, request: Request, decision: Decision, policy: Policy | None, now: datetime) -> Decision:
    """`heard_in_line` with the line as the ledger `con` holds it: an admit while nobody has been
    deferred within the queue's window costs one read."""
    def inputs_of(needed: bool) -> PlanInputs | None:
        if not needed and not anyone_waiting(con, now):
            return None
        return read_plan_inputs(con, now, also=(request["team"], request["kind"]))[0]
    return heard_in_line(inputs_of, LedgerFacts(con), request, decision, policy, now)


def check_request(request: Request, *, db=None, now=None, timeout_s: float = 10.0,
                  authority: SharedAuthority | None = None) -> Decision:
    """The what-if: the decision submit would give now, from a read-only open. Writes nothing.

    For a request already admitted and still waiting for its run, that is the recorded admit.
    With an `authority`, the team's policy, holds and month spend are the authority's.
    """
    now = naive_utc(now) or utcnow()
    with open_ledger(db, read_only=True, timeout_s=timeout_s) as con:
        if authority is not None:
            return authority.decide(request, now, LedgerFacts(con), write=False)[1]
        decision, policy = decide_in_ledger(con, request, now)
        return in_line(con, request, decision, policy, now)


def submit_request(request: Request, *, db=None, origin: str = "cli", now=None, timeout_s: float = 10.0,
                   actor: str | None = None,
                   prepare: Callable[[Request, Policy | None], Request] | None = None,
                   authority: SharedAuthority | None = None, admit_only: bool = False,
                   guard: Callable[[object], bool] | None = None, extra: dict | None = None) -> Decision | None:
    """Decide and record (with `actor`, who asked, when known), in one write transaction; on admit
    the run becomes a reservation. The one write path of every in-process decider (see the module
    docstring for its locks).

    The queue's admit (lib.ledger.queue) asks for three things more, all inside the same writer's
    turn and transaction: `guard(con)` first (False: nothing is decided or written, and the answer is
    None), `admit_only` (a deferral or rejection is answered but not recorded) and `extra` (keys added
    to the decision before it is recorded, e.g. how long the request waited).

    `prepare(request, policy) -> request`: what the caller completes from the team's policy before
    the decision, inside the same transaction (the Slurm hook: the capacity, from the team's
    preemptible partitions); `policy` is None for an unknown team. The request it returns is the one
    decided and recorded.

    A gate server's left-over journal is the caller's to drain first
    (lib.slurm.journal.drain_left_over_journal: the journal belongs to the Slurm layer), so that this
    decision sees every decision that server answered; the command line and the Slurm hook do.

    With an `authority` (lib.authority.facts.Authority) the decision is taken against it instead:
    its hold is committed there before the decision is recorded here (see SharedAuthority).

    Resubmitting the very request that was admitted (the caller lost the answer) records nothing
    new: the answer is the recorded admit, marked "replayed" (see `recorded_admit`). Waits at most
    `timeout_s` seconds for the ledger, then raises LedgerLocked; raises ServerBusy at once when a
    gate server decides for this ledger.
    """
    now = naive_utc(now) or utcnow()
    # the decider lock's descriptor is closed after the DuckDB connection (the contexts close in
    # reverse order): closing any descriptor of the ledger drops every fcntl lock this process holds
    # on it, DuckDB's own included (see lib.ledger.decider_lock)
    with deciding_in_process(ledger_path(db).resolve()), write_ledger(db, timeout_s) as con:
        with transaction(con):
            if guard is not None and not guard(con):
                return None
            facts = LedgerFacts(con)
            if authority is not None:
                request, decision = authority.decide(request, now, facts, prepare=prepare)
            else:
                if prepare is not None:
                    request = prepare(request, policy_for(request, facts))
                decision, policy = decide_with(request, now, facts)
                decision = in_line(con, request, decision, policy, now)
            if extra and not decision.get("replayed"):
                decision = {**decision, **extra}
            if decision["state"] == "admit" or not admit_only:
                record_decision(con, request, decision, origin, now, actor=actor)
    return decision
