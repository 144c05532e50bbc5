"""Policy replay: the recorded requests of a past window decided again, in time order, by the same
`lib.gate.admission.decide` under proposed team policies, each with the state it would have seen.

Pure over plain data (the ledger side, lib.ledger.replay, reads it). The replay world is the
recorded world with the replayed requests' outcomes swapped in:

- **holders**: background reservations (runs the window's requests do not control: admitted before
  the window, or imported) hold their team's accelerators from their reservation start until their
  run ended or their window passed, as recorded. A request the replay admits holds its `gpus` from its
  decision time until its recorded run's end, shifted to the replay's admission time (the run's
  actual duration since admission), as the gate holds a run until it ends; a run that never ran holds
  its reserved window (decision time + the replayed estimate's wall hours, as
  `lib.ledger.recording.record_decision` books it). A request the replay defers holds and spends
  nothing, even if it ran in reality.
- **period spend**: actual GPU-hours of the team's runs that ended in the decision's calendar month
  by then, in the replay world (background runs as recorded, replay-admitted runs at their shifted end).
- **calibration**: `lib.gate.calibration.calibrate_scopes` over the calibration rows
  (lib.ledger.calibration_rows.CALIBRATION_ROWS_SQL's rule) of runs finished by then in the replay world, in
  the 365-day window, at most the 1,000 most recent per scope, at the team's proposed level.
  With ``refresh="exact"`` it is recomputed whenever a scope it read changed; with ``"daily"`` once
  per (team, kind, level, UTC day), at the first request of that day (fast for 100,000 requests).
- **interruption rate** on preemptible capacity (what a preemptible pilot estimate expects at least):
  from the runs finished by then in the replay world, in the same window, by the ledger's rule.
- **snapshots** and **booked run IDs** as the ledger knew them.

A request the replay cannot decide as it was decided (no request JSON, one that is not a complete
request although it was not rejected, a team without a policy) is *excluded* with its reason, and
left out of `agreement`; an excluded admit keeps its recorded effect (its run holds and spends as
recorded), since the replay cannot say what else would have happened.

The gate's line: a recorded deferral with the reason `queue` (its turn had not come) stays a deferral
for `queue` while another request of its team, or of its pool, waits in the pass (deferred for what
waiting cures, within its team's `queue_max_age_days`, and not admitted since); with nobody waiting,
the line had no one to keep it behind, and the request is decided. The replay lays out no line of
its own: a request it decides is admitted whenever it fits, and a request the record never deferred
for `queue` is never deferred for it.

A recorded retry of a run that the replay already admitted at an earlier request is *not sent*. The
record retried that run only because the earlier request was deferred, and the replay admitted it
instead. Such a retry is excluded with that reason (`NOT_SENT`) and has no effect. Counting it as a
rejected duplicate would take deferrals out of the deferral share whenever a proposal admits a run
earlier. A smaller pool does that for the runs it leaves room for. A recorded duplicate that the
record itself rejected stays a rejection.

The other way round, a request the record admitted and the replay defers has no later retry in the
record, although its submitter would have retried. Without one the run would vanish from the replay,
and its accelerators and budget would go to the others. So the replay sends a retry at the request's
earliest fit (`_fit_wait`'s time, at least RETRY_AFTER later), as long as that is no later than the
window's last recorded request. The retry is decided like any request at that time. If it is deferred
again, another retry goes at its new earliest fit, up to MAX_RETRIES a run. A retry's decision counts
in the tallies, not among the outcomes of the recorded requests. Units: GPU-hours (`_gpu_hours`), hours (`_hours`), accelerators (`gpus`).

Beside this module in lib.planning.replay: `data` (the plain data the replay reads and returns),
`world` (the replay world as time moves forward, and the state each request is decided under; the
demo history drives it too), `history` (what it learns from the runs finished so far: calibration
rows, interruption rates, calibration), `report` (its per-team tallies, the result and the result's
table rows), `kept` (the passes that do not depend on the proposal, kept by content beside the
ledger), `resume` (a pass resumed part-way, for the pool search).
"""
from __future__ import annotations

import heapq
import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterable, Literal

from lib.gate.admission import Checked, decide, reject
from lib.gate.calibration import DEFAULT_LEVEL, DEFAULT_MAX_RUNS, DEFAULT_WINDOW_DAYS
from lib.gate.capacity import MONTH_CURES, WAIT_CURES, fit_for_reasons, pool_room
from lib.gate.contracts import Policy
from lib.gate.reasons import reason
from lib.gate.request import normalized, validate
from lib.gate.terms import KINDS
from lib.planning.plan.turn import DEFAULT_MAX_AGE_DAYS
from lib.planning.replay.collector import collector_paused
from lib.planning.replay.data import RecordedRequest, RecordedWorld, Refresh, ReplayResult
from lib.planning.replay.kept import KeptPasses
from lib.planning.replay.report import count_decision, merged_tally, replay_result, tally_summary, team_tally
from lib.planning.replay.resume import Mark, PassMarks, copy_tallies
from lib.planning.replay.world import ReplayWorld, Setting

AUTO_EXACT_UP_TO = 20_000   # refresh="auto": exact calibration up to this many requests, daily above
NOT_SENT = "a retry of a run the replay admitted at an earlier request (not sent)"
LINE_CODES = ["queue"]   # the reasons of a deferral by the gate's line (see the module docstring)
RETRY_AFTER = timedelta(minutes=1)   # a retry is due at its earliest fit, and never sooner than this
MAX_RETRIES = 100                    # retries of one run a pass sends at most


def _parse(request_json: str | None):
    if not request_json:
        return None
    try:
        obj = json.loads(request_json)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _parsed(requests: list[RecordedRequest], shared: dict | None) -> tuple[list, list]:
    """Each request's parsed JSON (`_parse`) and its validation (lib.gate.request.validate's result)
    by position, filled as passes read them: kept in `shared`, so the passes over one window parse and
    validate each request once (lists of them, None for one not parsed or validated yet)."""
    if shared is None:
        return [None] * len(requests), [None] * len(requests)
    kept = shared.get(("parsed requests", id(requests)))
    if kept is None or kept[0] is not requests:   # the very list: IDs of dead lists are reused
        kept = shared[("parsed requests", id(requests))] = (requests, [None] * len(requests), [None] * len(requests))
    return kept[1], kept[2]


def _request(parsed: list, requests: list[RecordedRequest], i: int):
    """The i-th request's JSON parsed (`_parse`), once per window (`parsed`: see `_parsed`). Its field
    names, and its nested objects', are interned: a window's many parsed requests share one copy of each."""
    request = parsed[i]
    if request is None and (request := _parse(requests[i]["request_json"])) is not None:
        request = parsed[i] = {sys.intern(k): {sys.intern(n): x for n, x in v.items()} if type(v) is dict else v
                               for k, v in request.items()}
    return request


def _checked(checks: list, request: dict, i: int, kept: KeptPasses | None) -> Checked:
    """validate(request) of the i-th request, once per window (`checks`: see `_parsed`); the passes only
    read it, and `decide` never changes it. A request `kept` knows to be valid (the same request of the
    same window, validated by the same code) is only normalized (lib.gate.request.normalized)."""
    done = checks[i]
    if done is None:
        if kept is not None and kept.is_valid(i):
            done = checks[i] = (normalized(request), [])
        else:
            done = checks[i] = validate(request)
            if kept is not None and not done[1]:
                kept.valid(i)
    return done


def _fit_wait(decision_codes, now, kind, policy, holders, gpus, tally, pool=None, team=None,
              hours: float = 0.0) -> datetime | None:
    """Record the wait (hours) until a deferred request's earliest fit (lib.gate.capacity.fit_for_reasons,
    in its pool too when the replay has one); return that time (None: waiting never fits)."""
    at, _ = fit_for_reasons(now, decision_codes, kind, policy["reserved_gpus"],
                            policy["retraining_reserved_gpus"], holders, gpus, pool, team, hours)
    if at is None:
        tally["never_fits_by_waiting"] += 1
        tally["needs_change"] += bool(set(decision_codes) - WAIT_CURES - MONTH_CURES)
    else:
        tally["waits_hours"].append((at - now).total_seconds() / 3600.0)
    return at


def _exclusion(req: RecordedRequest, request, policies: dict) -> str | None:
    """Why this recorded request cannot be replayed as it was decided, or None."""
    if req["request_json"] is None or req["request_json"] == "":
        return "no request JSON recorded"
    if request is None:
        return "the recorded request JSON is not a JSON object"
    team = request.get("team")
    if req["state"] != "reject" and (not isinstance(team, str) or team not in policies):
        return f"team {team!r} has no policy (neither proposed nor in the ledger)"
    return None


@collector_paused()
def replay(requests: Iterable[RecordedRequest], policies: dict[str, Policy], world: RecordedWorld, *,
           levels: dict[str, float] | None = None, refresh: Refresh | Literal["auto"] = "auto",
           window: dict | None = None, max_runs: int = DEFAULT_MAX_RUNS,
           window_days: int = DEFAULT_WINDOW_DAYS, progress=None, baseline: dict[str, Policy] | None = None,
           pools: dict[str, int] | None = None, kept: Path | None = None) -> ReplayResult:
    """Decide `requests` (recorded decisions, in time order) again under `policies` (team -> Policy,
    the proposed ones with the ledger's for every other team) in the replay world of `world`, and
    again under the `baseline` policies (the ledger's own; default `policies`) with the world's own
    pools, by the same engine, so that proposed - baseline is the proposal's effect alone.

    levels: team -> calibration level of the proposal (default lib.gate.calibration.DEFAULT_LEVEL;
    the baseline's are the default). pools: capacity type -> accelerators the proposal has instead
    of the world's `pools` (a capacity what-if). refresh: how often calibration is recomputed
    ("auto": exact up to AUTO_EXACT_UP_TO requests, else daily). When the proposal equals the
    baseline, one pass serves both. progress(fraction, message) is called now and then. kept: a file
    (beside the ledger) that keeps the passes that do not depend on the proposal and the calibrations
    fitted, by content (lib.planning.replay.kept), so a window replayed before runs only the proposal's
    pass; the result is the same with it or without. Returns the counts, agreement, exclusions and
    per-team results (see ReplayResult).
    """
    requests = list(requests)
    levels = levels or {}
    if refresh == "auto":
        refresh = "exact" if len(requests) <= AUTO_EXACT_UP_TO else "daily"
    say = progress or (lambda fraction, message: None)
    world_pools, windows = world.get("pools", {}), world.get("windows", [])
    proposal = Setting(policies, levels, {**world_pools, **(pools or {})}, windows)
    current = Setting(policies if baseline is None else baseline, {}, world_pools, windows)
    shared = proposal.key() == current.key()
    common = (requests, world, refresh, max_runs, window_days, say)
    fitted: dict = {}
    store = KeptPasses(kept, requests, world) if kept is not None else None
    proposed = _run(*common, proposal, mode="proposed", span=(0.05, 0.7 if shared else 0.45), shared=fitted,
                    kept=store)
    base = proposed if shared else _kept_run(store, common, current, "baseline", (0.5, 0.25), fitted)
    # the recorded pass leaves out what the proposal cannot replay; a retry it did not send was sent in reality
    skip = {o[0]["decision_id"] for o in proposed["outcomes"] if o[1] is None and o[2] != NOT_SENT}
    recorded = _kept_run(store, common, Setting(current.policies, {}, world_pools, windows), "recorded",
                         (0.75, 0.2), fitted, skip=skip)
    if store is not None:
        store.save()
    say(1.0, "replay done")
    return replay_result(requests, proposed, recorded, policies, levels, refresh, window, baseline=base,
                         shared=shared, pools=(proposal.pools, current.pools))


def _kept_run(store: KeptPasses | None, common: tuple, setting: Setting, mode: str, span: tuple[float, float],
              fitted: dict, *, skip: set = frozenset()) -> dict:
    """`_run` of a pass that does not depend on the proposal (mode "baseline" or "recorded"), read back
    from `store` when it keeps it, else run (and kept there)."""
    if store is None:
        return _run(*common, setting, mode=mode, span=span, skip=skip, shared=fitted)
    refresh, max_runs, window_days = common[2:5]
    key = store.key(mode, setting.policies, setting.key()[1], setting.pools, refresh, max_runs, window_days, skip)
    done = store.get(key)
    if done is None:
        done = _run(*common, setting, mode=mode, span=span, skip=skip, shared=fitted, kept=store)
        store.put(key, done, outcomes=mode != "recorded")   # the result reads no recorded outcome
    return done


def _run(requests, world, refresh, max_runs, window_days, say, setting: Setting, *, mode: str,
         span: tuple[float, float], skip: set = frozenset(), shared: dict | None = None,
         kept: KeptPasses | None = None, need: PoolNeed | None = None, start: Mark | None = None) -> dict:
    """One pass over the replay world under `setting`: modes "proposed" and "baseline" decide every
    request with `decide`; mode "recorded" takes each recorded decision as it was (to measure the
    recorded waits), leaving out the decision IDs in `skip` (those the proposed pass excluded).
    `shared`: calibrations already fitted over this window, by the rows they were fitted on; `kept`:
    those fitted in earlier processes. `need`: the pool need it measures (PoolNeed, and its marks).
    `start`: a mark to go on from, with the setting's pools (lib.planning.replay.resume)."""
    policies, levels = setting.policies, setting.levels
    runs = world["runs"]
    proposed = mode != "recorded"
    n = len(requests)
    parsed, checks = _parsed(requests, shared)
    if start is None:
        first, tallies, outcomes = 0, {}, []
        ws = ReplayWorld(world, refresh=refresh, learn=proposed, max_runs=max_runs, window_days=window_days,
                        setting=setting, shared=shared, kept=kept)
        retries = _Retries(requests[-1]["decided_at"] if requests else None, need)
    else:
        first, tallies, outcomes = start.step, copy_tallies(start.tallies), list(start.outcomes)
        ws, retries = start.world.copy(setting.pools), start.retries.copy(need)
        need.most = start.most
    marks = need.marks if need is not None else None
    for i in range(first, n):
        req = requests[i]
        if need is not None:
            need.step = i
            if marks is not None and marks.due(i):
                marks.take(i, ws, tallies, outcomes, retries, need.most)
        now = req["decided_at"]
        if i % 2000 == 0:
            say(span[0] + span[1] * i / max(n, 1), f"{mode}: {i:,} of {n:,} requests")
        if i == 0:
            ws.begin(now)
        else:
            retries.send(now, ws, policies, levels, tallies)
            ws.advance(now)
        if not proposed:
            _recorded_step(req, now, policies, runs, ws, tallies, outcomes, skip, _request(parsed, requests, i)
                           if req["state"] == "defer" else None)
            continue
        request = _request(parsed, requests, i)
        why = _exclusion(req, request, policies)
        if why is not None:
            ws.keep_recorded(req["state"], req["decided_at"], runs.get(req["run_id"]))
            outcomes.append((req, None, why, None))
            continue
        team = request.get("team")
        policy = policies.get(team) if isinstance(team, str) else None
        if "queue" in (req["reason_codes"] or ()) and ws.someone_waits(
                request, now, (policy or {}).get("queue_max_age_days") or DEFAULT_MAX_AGE_DAYS):
            ws.defer(request, LINE_CODES, now)   # the line keeps it: see the module docstring
            count_decision(team_tally(tallies, team), "defer", LINE_CODES, None, None)
            outcomes.append((req, "defer", LINE_CODES, None))
            continue
        run_id = request.get("run_id")
        kind = request.get("kind")
        run = runs.get(run_id) if isinstance(run_id, str) else None
        holders = ws.held(team, now) if policy is not None else []
        pools = None

        if ws.is_booked(run_id, now) and policy is not None:
            if run_id in ws.admitted and req["state"] != "reject":
                outcomes.append((req, None, NOT_SENT, None))
                continue
            decision = reject(request, [reason(
                "invalid-request", f"run_id {run_id!r} already holds a reservation or has run",
                fix="choose a new run_id (one run ID per submission)", field="run_id")], now=now)
            state, codes, reserved = "reject", ["invalid-request"], None
        else:
            state_in = ws.state(team, kind, policy, levels.get(team, DEFAULT_LEVEL), now, holders)
            pools = state_in.get("pools")
            checked = _checked(checks, request, i, kept)
            decision = decide(request, policy, state_in, checked=checked, explain=False)
            state, codes = decision["state"], [r["code"] for r in decision["reasons"]]
            reserved = decision["reserved_gpu_hours"]
            if state == "reject" and req["state"] != "reject":
                ws.keep_recorded(req["state"], req["decided_at"], runs.get(req["run_id"]))
                outcomes.append((req, None, "the recorded request is not a complete request: "
                                 + "; ".join(f"{r.get('field', '?')}: {r['message']}" for r in decision["reasons"])[:300],
                                 None))
                continue

        actual = None
        if need is not None and state in ("admit", "defer"):
            need.saw(checked[0], pools, now, decision["estimate"]["wall_hours"], codes)
        if state == "admit":
            actual = ws.admit(request, run, decision, now)
        elif state == "defer" and policy is not None and isinstance(request.get("gpus"), int) and kind in KINDS:
            ws.defer(request, codes, now)
            at = _fit_wait(codes, now, kind, policy, holders, request["gpus"], team_tally(tallies, team),
                           (pools or {}).get(request.get("capacity")), team, decision["estimate"]["wall_hours"])
            if req["state"] == "admit":   # the record has no later retry of this run: its submitter's
                retries.after(at, now, (request, checked, run))
        count_decision(team_tally(tallies, team), state, codes, reserved, actual)
        outcomes.append((req, state, codes, reserved))
    return {"outcomes": outcomes, "tallies": tallies, "calibrations_computed": ws.cals.computed}


class _Retries:
    """The retries a pass sends for requests the record admitted and the pass deferred, in time order.
    Each is due at its request's earliest fit (at least RETRY_AFTER later), up to the window's last
    recorded request (`until`), at most MAX_RETRIES times a run."""

    def __init__(self, until, need: PoolNeed | None):
        self.until, self.need, self.due, self.seq = until, need, [], 0

    def copy(self, need: PoolNeed | None) -> _Retries:
        """The same retries due, to go on on their own, measuring `need`."""
        out = _Retries(self.until, need)
        out.due, out.seq = list(self.due), self.seq
        return out

    def after(self, at, now, item, tries: int = 0) -> None:
        if at is None or tries >= MAX_RETRIES:
            return
        at = max(at, now + RETRY_AFTER)
        if at <= self.until:
            heapq.heappush(self.due, (at, self.seq, item, tries + 1))
            self.seq += 1

    def send(self, now, ws: ReplayWorld, policies, levels, tallies) -> None:
        """Decide every retry due by `now`, each at its own time and in the world as it stands then."""
        while self.due and self.due[0][0] <= now:
            at, _, (request, checked, run), tries = heapq.heappop(self.due)
            ws.advance(at)
            team, kind, run_id = request["team"], request["kind"], request.get("run_id")
            if ws.is_booked(run_id, at):
                continue
            policy = policies[team]
            holders = ws.held(team, at)
            state_in = ws.state(team, kind, policy, levels.get(team, DEFAULT_LEVEL), at, holders)
            decision = decide(request, policy, state_in, checked=checked, explain=False)
            codes = [r["code"] for r in decision["reasons"]]
            tally, actual = team_tally(tallies, team), None
            if self.need is not None and decision["state"] in ("admit", "defer"):
                self.need.saw(checked[0], state_in.get("pools"), at, decision["estimate"]["wall_hours"], codes)
            if decision["state"] == "admit":
                actual = ws.admit(request, run, decision, at)
            elif decision["state"] == "defer":
                pool = (state_in.get("pools") or {}).get(request.get("capacity"))
                fit = _fit_wait(codes, at, kind, policy, holders, request["gpus"], tally, pool, team,
                                decision["estimate"]["wall_hours"])
                self.after(fit, at, (request, checked, run), tries)
            count_decision(tally, decision["state"], codes, decision["reserved_gpu_hours"], actual)


def _recorded_step(req, now, policies, runs, ws: ReplayWorld, tallies, outcomes, skip, request) -> None:
    """One request of the recorded pass: its recorded decision takes effect (an admit holds as its run
    did); a deferral's wait until its earliest fit is measured (not the line's: a pass that decides
    measures none for the deferrals it keeps for the line either). Only deferrals read the request JSON
    (`request`, parsed; None for the others)."""
    if req["decision_id"] in skip:
        ws.keep_recorded(req["state"], req["decided_at"], runs.get(req["run_id"]))
        outcomes.append((req, None, "excluded", None))
        return
    state, codes, reserved = req["state"], list(req["reason_codes"] or []), req["reserved_gpu_hours"]
    team = req["team"]
    tally = team_tally(tallies, team)
    run = runs.get(req["run_id"])
    actual = None
    if state == "admit" and run is not None:
        ws.keep_recorded(state, req["decided_at"], run)
        actual = run["actual_gpu_hours"] if run["ended_at"] is not None else None
    elif state == "defer" and team in policies and not set(codes) & set(LINE_CODES):
        request = request or {}
        if isinstance(request.get("gpus"), int) and request.get("kind") in KINDS:
            pool = (ws.pool_states(now) or {}).get(request.get("capacity", "stable"))
            _fit_wait(codes, now, request["kind"], policies[team], ws.held(team, now), request["gpus"], tally,
                      pool, team)
    count_decision(tally, state, codes, reserved, actual)
    outcomes.append((req, state, codes, reserved))


class PoolNeed:
    """The most accelerators of the pool `name` that any request of a pass needed at once: its own, plus
    what the pool held during its run, as decide's pool check reckons them (`pool_room`). `bound`
    becomes True once the pool lacked room for a request (cluster-capacity). A pass whose pool never
    lacked room decides the same with any pool of at least `most`, waits included when the scheduler
    has no windows for it. Only the pool check depends on the pool's size, and it gives the same
    answer at every such size; with room at the start, and the holdings only falling after it, the
    earliest fit never waits for the pool either."""

    def __init__(self, name: str, marks: PassMarks | None = None):
        self.name, self.most, self.bound = name, 0, False
        self.step, self.marks = 0, marks   # the request the pass is at; where it notes each rise

    def saw(self, req: dict, pools: dict | None, now, hours: float, codes: list[str]) -> None:
        """A decision (admit or defer) of the validated request `req`, estimated at `hours` of wall clock."""
        if self.bound or req["capacity"] != self.name or not pools or self.name not in pools:
            return
        if "cluster-capacity" in codes:
            self.bound = True
            return
        pool = pools[self.name]
        room, _, _ = pool_room(pool, req["team"], req["kind"], now, hours)
        need = req["gpus"] + pool["gpus"] - room   # room > 0 here: exactly its need
        if need > self.most:
            self.most = need
            if self.marks is not None:
                self.marks.rose(self.step, need)


@collector_paused()
def replay_proposal(requests: list[RecordedRequest], policies: dict[str, Policy], world: RecordedWorld, *,
                    pools: dict[str, int] | None = None, levels: dict[str, float] | None = None,
                    refresh: Refresh | Literal["auto"] = "auto", max_runs: int = DEFAULT_MAX_RUNS,
                    window_days: int = DEFAULT_WINDOW_DAYS, progress=None, fitted: dict | None = None,
                    need_of: str | None = None, kept: KeptPasses | None = None, marks: PassMarks | None = None,
                    start: Mark | None = None) -> dict:
    """The proposal's pass alone (no baseline, no record), as `replay` makes it: {"overall": every
    team's measures together, "teams": team -> measures} (lib.planning.replay.report.tally_summary),
    for a search that replays many pool sizes over one window. `fitted`: a dict the search keeps
    across its passes of this window (calibrations by the rows they were fitted on). `need_of`: a pool
    whose need the pass measures (PoolNeed). The result's "pool_need" is then the most accelerators
    of it any request needed, or None when the pool lacked room for one. `kept`: calibrations fitted
    by earlier processes over this window, and where this pass keeps its own (lib.planning.replay.kept;
    the caller saves it). `marks` (with `need_of`): where the pass marks its way, for later passes of
    the search to `start` from (lib.planning.replay.resume; only for a pass whose pool never ran short,
    and a later one with the same policies and a smaller pool)."""
    if refresh == "auto":
        refresh = "exact" if len(requests) <= AUTO_EXACT_UP_TO else "daily"
    say = progress or (lambda fraction, message: None)
    setting = Setting(policies, levels or {}, {**world.get("pools", {}), **(pools or {})}, world.get("windows", []))
    need = PoolNeed(need_of, marks) if need_of is not None else None
    done = _run(requests, world, refresh, max_runs, window_days, say, setting, mode="proposed", span=(0.0, 1.0),
                shared=fitted, need=need, kept=kept, start=start)
    out = {"overall": tally_summary(merged_tally(done["tallies"])),
           "teams": {t: tally_summary(v) for t, v in sorted(done["tallies"].items())}}
    if need is not None:
        out["pool_need"] = None if need.bound else need.most
    return out
