"""Policy replay: the recorded requests of a past window decided again, in time order, by the same
`lib.gate.admission.decide` under proposed team policies, each with the state it would have seen.

Pure over plain data (the ledger side, lib.ledger.replay, reads it). The replay world is the
recorded world with the replayed requests' outcomes swapped in:

- **holders**: background reservations (runs the window's requests do not control: admitted before
  the window, or imported) hold their team's accelerators from their reservation start until their
  run ended or their window passed, as recorded. A request the replay admits holds its `gpus` from its
  decision time until its recorded run's end, shifted to the replay's admission time (the run's
  actual duration since admission), or until its reserved window ends (decision time + the replayed
  estimate's wall hours, as `lib.ledger.recording.record_decision` books it) when that comes first or
  the run never ended. A request the replay defers holds and spends nothing, even if it ran in reality.
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
recorded), since the replay cannot say what else would have happened. Units: GPU-hours (`_gpu_hours`), hours (`_hours`), accelerators (`gpus`).
"""
from __future__ import annotations

import bisect
import heapq
import json
import operator
import statistics
from collections import Counter, deque
from datetime import datetime, timedelta
from typing import Iterable, Literal, NotRequired, TypedDict

from lib.gate.admission import decide, reject
from lib.gate.calibration import DEFAULT_LEVEL, DEFAULT_MAX_RUNS, DEFAULT_WINDOW_DAYS, calibrate_scopes
from lib.gate.capacity import fit_for_reasons
from lib.gate.contracts import Calibration, Policy, Reservation
from lib.gate.reasons import reason
from lib.gate.terms import KINDS, month_start

Refresh = Literal["exact", "daily"]
EXCLUDED_LISTED = 1000      # excluded requests listed one by one (all are counted)
CHANGED_LISTED = 500        # changed decisions listed one by one (all are counted)
AUTO_EXACT_UP_TO = 20_000   # refresh="auto": exact calibration up to this many requests, daily above
_RUN_ID = operator.itemgetter(0)


class RecordedRequest(TypedDict):
    """One row of the ledger's decisions table, as replay reads it."""
    decision_id: int
    decided_at: datetime
    run_id: str | None
    team: str | None
    kind: str | None
    request_json: str | None
    state: str
    reason_codes: list[str]
    reserved_gpu_hours: float | None


class RunRecord(TypedDict):
    """A run named by a replayed request, as recorded. `controlled`: its outcome is the replay's
    (admitted inside the window, or never admitted); otherwise it is background, booked from
    `booked_at`. `calibration`: (estimated_gpu_hours, censored) when it counts in calibration."""
    run_id: str
    team: str
    kind: str
    gpus: int
    reserved_until: datetime | None
    reserved_gpu_hours: float | None
    started_at: datetime | None
    ended_at: datetime | None
    actual_gpu_hours: float | None
    admitted_at: datetime | None
    controlled: bool
    booked_at: datetime | None
    calibration: tuple[float, bool] | None
    interruptions: NotRequired[int | None]   # when it counts in the preemptible interruption rate


class Hold(TypedDict):
    """A background reservation: holds `reservation` over [start, release) (release None: never)."""
    start: datetime
    release: datetime | None
    reservation: Reservation


# A background run's end: (ended_at, team, kind, actual GPU-hours or None, (estimated, censored)
# when it counts in calibration else None, its interruptions when it counts in the preemptible
# interruption rate else None). Given in time order.
End = tuple


class World(TypedDict):
    """Everything the replay needs besides the requests and the policies."""
    holds: list[Hold]
    ends: list[End]
    runs: dict[str, RunRecord]
    snapshots: dict[str | None, set[str]]   # team (None: every team) -> snapshot names
    rate_base: NotRequired[dict[str, tuple[int, float, int]]]  # team -> (runs, GPU-hours, interruptions)
    min_rate_runs: NotRequired[int]         # runs a team needs before its own rate is used


class TeamResult(TypedDict):
    """One team's replay, proposed vs recorded (same keys under each)."""
    team: str
    recorded: dict
    proposed: dict


class ReplayResult(TypedDict):
    """What `replay` returns (the command line prints it as JSON)."""
    window: dict
    requests: int
    replayable: int
    recorded: dict
    proposed: dict
    agreement: float | None
    reason_agreement: float | None
    changed: dict
    changed_requests: list[dict]
    excluded: dict
    teams: list[TeamResult]
    calibration_level: dict
    calibration_refresh: str
    calibrations_computed: int


# ------------------------------------------------------------------------------ calibration

class _Scopes:
    """The calibration rows of runs finished so far, per scope (team × kind, team, everyone): each
    the `max_runs` most recent in end order (older ones can never be among the most recent again),
    with a version that changes whenever a row enters or leaves."""

    def __init__(self, max_runs: int, window_days: int):
        self.max_runs, self.window = max_runs, timedelta(days=window_days)
        self.rows: dict = {}
        self.version: Counter = Counter()

    def _dq(self, key) -> deque:
        dq = self.rows.get(key)
        if dq is None:
            dq = self.rows[key] = deque(maxlen=self.max_runs)
        return dq

    def add(self, ended_at: datetime, team: str, kind: str, estimated: float, actual: float,
            censored: bool) -> None:
        row = (ended_at, {"estimated_gpu_hours": estimated, "actual_gpu_hours": actual, "censored": censored,
                          "ended_at": ended_at})
        for key in ((team, kind), (team,), ()):
            self._dq(key).append(row)
            self.version[key] += 1

    def prune(self, key, now: datetime) -> None:
        """Drop the rows of scope `key` that ended at or before now - window (SQL: ended_at > since)."""
        dq = self.rows.get(key)
        since = now - self.window
        while dq and dq[0][0] <= since:
            dq.popleft()
            self.version[key] += 1

    def scoped(self, team: str, kind: str, now: datetime, read: list):
        """(scope name, rows) in fallback order, lazily; appends each scope key read to `read`."""
        for name, key in (("team×kind", (team, kind)), ("team", (team,)), ("all", ())):
            self.prune(key, now)
            read.append(key)
            yield name, [r for _, r in self.rows.get(key, ())]


class _Rates:
    """Interruptions per GPU-hour on preemptible capacity over the runs finished in the window before
    now (lib.ledger.state.interruption_rate's rule): the team's with enough runs, else everyone's."""

    def __init__(self, base: dict, min_runs: int, window_days: int):
        self.min_runs, self.window = min_runs, timedelta(days=window_days)
        self.rows: deque = deque()
        self.sums: dict = {t: list(v) for t, v in base.items()}   # team -> [runs, GPU-hours, interruptions]
        self.total = [sum(v[i] for v in base.values()) for i in range(3)]

    def _apply(self, team: str, hours: float, n: int, sign: int) -> None:
        t = self.sums.setdefault(team, [0, 0.0, 0])
        for acc in (t, self.total):
            acc[0] += sign
            acc[1] += sign * hours
            acc[2] += sign * n

    def add(self, ended_at: datetime, team: str, hours: float, n: int) -> None:
        self.rows.append((ended_at, team, hours, n))
        self._apply(team, hours, n, 1)

    def rate(self, team: str, now: datetime) -> dict | None:
        since = now - self.window
        while self.rows and self.rows[0][0] <= since:
            _, t, hours, n = self.rows.popleft()
            self._apply(t, hours, n, -1)
        own = self.sums.get(team, [0, 0.0, 0])
        for scope, (runs, hours, n) in (("team", own), ("all", self.total)):
            if runs > 0 and (scope == "all" or runs >= self.min_runs):   # runs have actual > 0
                return {"per_gpu_hour": float(n) / float(hours), "scope": scope, "runs": int(runs),
                        "gpu_hours": float(hours), "interruptions": int(n)}
        return None


class _Calibrations:
    """Calibration per request, recomputed only when needed (see the module docstring)."""

    def __init__(self, scopes: _Scopes, refresh: Refresh):
        self.scopes, self.refresh = scopes, refresh
        self.cache: dict = {}
        self.computed = 0

    def get(self, team: str, kind: str, level: float, now: datetime) -> Calibration:
        key = (team, kind, level)
        hit = self.cache.get(key)
        if hit is not None:
            stamp, cal = hit
            if self.refresh == "daily":
                if stamp == now.date():
                    return cal
            else:
                for scope, version in stamp:
                    self.scopes.prune(scope, now)
                    if self.scopes.version[scope] != version:
                        break
                else:
                    return cal
        read: list = []
        cal = calibrate_scopes(self.scopes.scoped(team, kind, now, read), level=level)
        self.computed += 1
        stamp = now.date() if self.refresh == "daily" else tuple((k, self.scopes.version[k]) for k in read)
        self.cache[key] = (stamp, cal)
        return cal


# ------------------------------------------------------------------------------ tallies

def _tally() -> dict:
    return {"admit": 0, "defer": 0, "reject": 0, "deferrals_by_reason": Counter(),
            "reserved_gpu_hours": 0.0, "used_gpu_hours": 0.0, "idle_gpu_hours": 0.0,
            "budget_breaches": 0, "waits_hours": [], "never_fits_by_waiting": 0}


def _team_tally(tallies: dict, team) -> dict:
    key = team if isinstance(team, str) else str(team)
    t = tallies.get(key)
    if t is None:
        t = tallies[key] = _tally()
    return t


def _count(t: dict, state: str, codes: list[str], reserved: float | None, actual: float | None) -> None:
    """Add one decision to a tally: its state, its deferral reasons, and for an admit the GPU-hours
    reserved, used (the run's actual; 0 if it never ran), left idle (reserved - used, at least 0),
    and whether the run's actual exceeded the reservation (a budget breach)."""
    t[state] += 1
    if state == "defer":
        t["deferrals_by_reason"].update(codes)
    elif state == "admit" and reserved is not None:
        used = actual or 0.0
        t["reserved_gpu_hours"] += reserved
        t["used_gpu_hours"] += used
        t["idle_gpu_hours"] += max(0.0, reserved - used)
        t["budget_breaches"] += actual is not None and actual > reserved * (1 + 1e-9)


def _summary(t: dict) -> dict:
    """A tally as reported: counts, reasons sorted, idle share, median wait (hours) to the earliest
    fit of the deferred requests that waiting would cure."""
    waits = t["waits_hours"]
    return {
        "admit": t["admit"], "defer": t["defer"], "reject": t["reject"],
        "deferrals_by_reason": dict(sorted(t["deferrals_by_reason"].items())),
        "reserved_gpu_hours": round(t["reserved_gpu_hours"], 3),
        "used_gpu_hours": round(t["used_gpu_hours"], 3),
        "idle_share": (round(t["idle_gpu_hours"] / t["reserved_gpu_hours"], 4)
                       if t["reserved_gpu_hours"] > 0 else None),
        "budget_breaches": t["budget_breaches"],
        "median_wait_hours": round(statistics.median(waits), 3) if waits else None,
        "deferred_with_fit": len(waits),
        "never_fits_by_waiting": t["never_fits_by_waiting"],
    }


# ------------------------------------------------------------------------------ the replay

def _parse(request_json: str | None):
    if not request_json:
        return None
    try:
        obj = json.loads(request_json)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _hold(active: dict, team: str, release: datetime | None, reservation: Reservation) -> None:
    """Add a holder of `team`'s accelerators until `release` (None: never), kept in run-ID order."""
    bisect.insort(active.setdefault(team, []), (reservation.get("run_id") or "", release, reservation),
                  key=_RUN_ID)


def _held(active: dict, team: str, now: datetime) -> list[Reservation]:
    """The team's holders at `now` (dropping released ones), ordered by run ID as the ledger gives them."""
    live = [h for h in active.get(team, ()) if h[1] is None or h[1] > now]
    active[team] = live
    return [h[2] for h in live]


def _fit_wait(decision_codes, now, kind, policy, holders, gpus, tally) -> None:
    """Record the wait (hours) until a deferred request's earliest fit (lib.gate.capacity.fit_for_reasons)."""
    at, _ = fit_for_reasons(now, decision_codes, kind, policy["reserved_gpus"],
                            policy["retraining_reserved_gpus"], holders, gpus)
    if at is None:
        tally["never_fits_by_waiting"] += 1
    else:
        tally["waits_hours"].append((at - now).total_seconds() / 3600.0)


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


def replay(requests: Iterable[RecordedRequest], policies: dict[str, Policy], world: World, *,
           levels: dict[str, float] | None = None, refresh: Refresh | Literal["auto"] = "auto",
           window: dict | None = None, max_runs: int = DEFAULT_MAX_RUNS,
           window_days: int = DEFAULT_WINDOW_DAYS, progress=None) -> ReplayResult:
    """Decide `requests` (recorded decisions, in time order) again under `policies` (team -> Policy,
    the proposed ones with the ledger's for every other team) in the replay world of `world`.

    levels: team -> calibration level (default lib.gate.calibration.DEFAULT_LEVEL). refresh: how
    often calibration is recomputed ("auto": exact up to AUTO_EXACT_UP_TO requests, else daily).
    progress(fraction, message) is called now and then. Returns the counts, agreement, exclusions
    and per-team results (see ReplayResult).
    """
    requests = list(requests)
    levels = levels or {}
    if refresh == "auto":
        refresh = "exact" if len(requests) <= AUTO_EXACT_UP_TO else "daily"
    say = progress or (lambda fraction, message: None)
    proposed = _run(requests, policies, world, levels, refresh, max_runs, window_days, say, mode="proposed")
    skip = {o[0]["decision_id"] for o in proposed["outcomes"] if o[1] is None}
    recorded = _run(requests, policies, world, levels, refresh, max_runs, window_days, say, mode="recorded",
                    skip=skip)
    say(1.0, "replay done")
    return _result(requests, proposed, recorded, policies, levels, refresh, window)


def _run(requests, policies, world, levels, refresh, max_runs, window_days, say, *, mode: str,
         skip: set = frozenset()) -> dict:
    """One pass over the replay world: mode "proposed" decides every request with `decide`; mode
    "recorded" takes each recorded decision as it was (to measure the recorded waits), leaving out
    the decision IDs in `skip` (those the proposed pass excluded)."""
    runs, snapshots = world["runs"], world["snapshots"]
    scopes = _Scopes(max_runs, window_days)
    rates = _Rates(world.get("rate_base", {}), world.get("min_rate_runs", 20), window_days)
    cals = _Calibrations(scopes, refresh)
    spent: Counter = Counter()        # (team, month start) -> GPU-hours ended in that month
    active: dict[str, list] = {}      # team -> [(release, Reservation)]
    booked: dict[str, datetime] = {}  # run ID -> when it became booked (replay world)
    for run in runs.values():
        if not run["controlled"] and run["booked_at"] is not None:
            booked[run["run_id"]] = run["booked_at"]
    dynamic: list = []                # heap of (time, seq, End) for replay-admitted runs
    seq = 0
    holds, ends = world["holds"], world["ends"]
    hi = ei = 0
    tallies: dict[str, dict] = {}
    outcomes: list = []
    proposed = mode == "proposed"
    n = len(requests)

    def end_run(e) -> None:
        ended_at, team, kind, actual, cal, interruptions = e
        if actual is not None:
            spent[(team, month_start(ended_at))] += actual
        if proposed and actual is not None:
            if cal is not None:
                scopes.add(ended_at, team, kind, cal[0], actual, cal[1])
            if interruptions is not None:
                rates.add(ended_at, team, actual, interruptions)

    for i, req in enumerate(requests):
        now = req["decided_at"]
        if i % 2000 == 0:
            say((0.05 if proposed else 0.75) + (0.7 if proposed else 0.2) * i / max(n, 1),
                f"{'replaying' if proposed else 'recorded waits'}: {i:,} of {n:,} requests")
        # everything that happened by now, in time order: ends (background and replayed), then holds
        while True:
            t_static = ends[ei][0] if ei < len(ends) else None
            t_dyn = dynamic[0][0] if dynamic else None
            if t_static is not None and t_static <= now and (t_dyn is None or t_static <= t_dyn):
                end_run(ends[ei])
                ei += 1
            elif t_dyn is not None and t_dyn <= now:
                end_run(heapq.heappop(dynamic)[2])
            else:
                break
        while hi < len(holds) and holds[hi]["start"] <= now:
            h = holds[hi]
            _hold(active, h["reservation"]["team"], h["release"], h["reservation"])
            hi += 1

        if not proposed:
            _recorded_step(req, now, policies, runs, active, booked, dynamic, seq, tallies, outcomes, skip)
            seq += 1
            continue
        request = _parse(req["request_json"])
        why = _exclusion(req, request, policies)
        if why is not None:
            _keep_recorded(req, runs.get(req["run_id"]), active, booked, dynamic, seq)
            seq += 1
            outcomes.append((req, None, why, None))
            continue
        team = request.get("team")
        policy = policies.get(team) if isinstance(team, str) else None
        run_id = request.get("run_id")
        kind = request.get("kind")
        run = runs.get(run_id) if isinstance(run_id, str) else None
        holders = _held(active, team, now) if policy is not None else []

        if isinstance(run_id, str) and run_id in booked and booked[run_id] <= now and policy is not None:
            decision = reject(request, [reason(
                "invalid-request", f"run_id {run_id!r} already holds a reservation or has run",
                fix="choose a new run_id (one run ID per submission)", field="run_id")], now=now)
            state, codes, reserved = "reject", ["invalid-request"], None
        else:
            cal = (cals.get(team, kind, levels.get(team, DEFAULT_LEVEL), now)
                   if policy is not None and kind in KINDS else None)
            snaps = snapshots.get(None, set()) | snapshots.get(team, set()) if isinstance(team, str) else set()
            state_in = {"now": now, "reservations": holders,
                        "period_spent_gpu_hours": float(spent[(team, month_start(now))]),
                        "snapshots": snaps, "calibration_history": [], "calibration": cal,
                        "interruption_rate": rates.rate(team, now) if policy is not None else None}
            decision = decide(request, policy, state_in)
            state, codes = decision["state"], [r["code"] for r in decision["reasons"]]
            reserved = decision["reserved_gpu_hours"]
            if state == "reject" and req["state"] != "reject":
                _keep_recorded(req, runs.get(req["run_id"]), active, booked, dynamic, seq)
                seq += 1
                outcomes.append((req, None, "the recorded request is not a complete request: "
                                 + "; ".join(f"{r.get('field', '?')}: {r['message']}" for r in decision["reasons"])[:300],
                                 None))
                continue

        actual = None
        if state == "admit":
            actual = _admit(request, run, decision, now, active, booked, dynamic, seq)
            seq += 1
        elif state == "defer" and policy is not None and isinstance(request.get("gpus"), int) and kind in KINDS:
            _fit_wait(codes, now, kind, policy, holders, request["gpus"], _team_tally(tallies, team))
        _count(_team_tally(tallies, team), state, codes, reserved, actual)
        outcomes.append((req, state, codes, reserved))
    return {"outcomes": outcomes, "tallies": tallies, "calibrations_computed": cals.computed}


def _recorded_step(req, now, policies, runs, active, booked, dynamic, seq, tallies, outcomes, skip) -> None:
    """One request of the recorded pass: its recorded decision takes effect (an admit holds as its run
    did); a deferral's wait until its earliest fit is measured. Only deferrals read the request JSON."""
    if req["decision_id"] in skip:
        _keep_recorded(req, runs.get(req["run_id"]), active, booked, dynamic, seq)
        outcomes.append((req, None, "excluded", None))
        return
    state, codes, reserved = req["state"], list(req["reason_codes"] or []), req["reserved_gpu_hours"]
    team = req["team"]
    tally = _team_tally(tallies, team)
    run = runs.get(req["run_id"])
    actual = None
    if state == "admit" and run is not None:
        _keep_recorded(req, run, active, booked, dynamic, seq)
        actual = run["actual_gpu_hours"] if run["ended_at"] is not None else None
    elif state == "defer" and team in policies:
        request = _parse(req["request_json"]) or {}
        if isinstance(request.get("gpus"), int) and request.get("kind") in KINDS:
            _fit_wait(codes, now, request["kind"], policies[team], _held(active, team, now), request["gpus"], tally)
    _count(tally, state, codes, reserved, actual)
    outcomes.append((req, state, codes, reserved))


def _keep_recorded(req, run, active, booked, dynamic, seq) -> None:
    """An excluded request keeps its recorded effect on the replay world: an admit whose run the
    ledger knows holds its accelerators and spends as recorded (the replay cannot decide it again)."""
    if req["state"] != "admit" or run is None or not run["controlled"]:
        return
    holder: Reservation = {"run_id": run["run_id"], "team": run["team"], "kind": run["kind"],
                           "gpus": int(run["gpus"]), "reserved_gpu_hours": float(run["reserved_gpu_hours"] or 0.0),
                           "reserved_from": req["decided_at"].replace(microsecond=0),
                           "reserved_until": run["reserved_until"]}
    end, until = run["ended_at"], run["reserved_until"]
    if end is not None:
        heapq.heappush(dynamic, (end, seq, (end, run["team"], run["kind"], run["actual_gpu_hours"],
                                            run["calibration"], run.get("interruptions"))))
    release = min(end, until) if end is not None and until is not None else (end or until)
    _hold(active, run["team"], release, holder)
    booked.setdefault(run["run_id"], req["decided_at"])


def _admit(request, run, decision, now, active, booked, dynamic, seq) -> float | None:
    """Book a request the replay admits: it holds its accelerators from `now` until its recorded run's
    end shifted to this admission, or its reserved window's end (now + the decision's wall hours) when
    that comes first or the run never ended; the run spends its actual at that shifted end. Returns
    the run's actual GPU-hours (None: it never ran, or has not ended)."""
    team, run_id = request["team"], request.get("run_id")
    until = now + timedelta(hours=decision["estimate"]["wall_hours"])
    release = until
    if run is not None and run["ended_at"] is not None:
        end = now + (run["ended_at"] - (run["admitted_at"] or now))
        heapq.heappush(dynamic, (end, seq, (end, team, run["kind"], run["actual_gpu_hours"], run["calibration"],
                                         run.get("interruptions"))))
        release = min(end, until)
    holder: Reservation = {"run_id": run_id, "team": team, "kind": request["kind"], "gpus": int(request["gpus"]),
                           "reserved_gpu_hours": float(decision["reserved_gpu_hours"]),
                           "reserved_from": now.replace(microsecond=0), "reserved_until": until}
    _hold(active, team, release, holder)
    if isinstance(run_id, str):
        booked.setdefault(run_id, now)
    return run["actual_gpu_hours"] if run is not None and run["ended_at"] is not None else None


def _share(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def _result(requests, proposed, recorded, policies, levels, refresh, window) -> ReplayResult:
    excluded_by: Counter = Counter()
    excluded_list = []
    same_state = same_codes = replayable = 0
    totals = {"recorded": Counter(), "proposed": Counter()}
    changed: Counter = Counter()
    changed_list = []
    for (req, state, codes, reserved), (_, rec_state, _, _) in zip(proposed["outcomes"], recorded["outcomes"]):
        if state is None:
            why = codes
            excluded_by[why.split(":")[0] if why.startswith("the recorded request is not") else why] += 1
            if len(excluded_list) < EXCLUDED_LISTED:
                excluded_list.append({"decision_id": req["decision_id"], "run_id": req["run_id"],
                                      "team": req["team"], "decided_at": req["decided_at"], "why": why})
            continue
        replayable += 1
        totals["recorded"][req["state"]] += 1
        totals["proposed"][state] += 1
        rec_codes = list(req["reason_codes"] or [])
        same_state += state == req["state"]
        same_codes += state == req["state"] and codes == rec_codes
        if state != req["state"] or codes != rec_codes:
            changed[f"{req['state']}->{state}"] += 1
            if len(changed_list) < CHANGED_LISTED:
                changed_list.append({"decision_id": req["decision_id"], "run_id": req["run_id"],
                                     "team": req["team"], "decided_at": req["decided_at"],
                                     "recorded_state": req["state"], "recorded_reasons": rec_codes,
                                     "proposed_state": state, "proposed_reasons": codes})
    teams = sorted(set(proposed["tallies"]) | set(recorded["tallies"]))
    return {
        "window": dict(window or {}),
        "requests": len(requests),
        "replayable": replayable,
        "recorded": {s: totals["recorded"][s] for s in ("admit", "defer", "reject")},
        "proposed": {s: totals["proposed"][s] for s in ("admit", "defer", "reject")},
        "agreement": _share(same_state, replayable),
        "reason_agreement": _share(same_codes, replayable),
        "changed": dict(sorted(changed.items())),
        "changed_requests": changed_list,
        "excluded": {"count": sum(excluded_by.values()), "by_reason": dict(excluded_by.most_common()),
                     "requests": excluded_list},
        "teams": [{"team": t,
                   "policy_version": (policies.get(t) or {}).get("policy_version"),
                   "recorded": _summary(recorded["tallies"].get(t, _tally())),
                   "proposed": _summary(proposed["tallies"].get(t, _tally()))} for t in teams],
        "calibration_level": {t: levels.get(t, DEFAULT_LEVEL) for t in sorted(policies)},
        "calibration_refresh": refresh,
        "calibrations_computed": proposed["calibrations_computed"],
    }


MEASURES = {  # per-team result key -> how the table names it
    "admit": "admitted", "defer": "deferred", "reject": "rejected",
    "reserved_gpu_hours": "reserved GPU-hours (admitted)", "used_gpu_hours": "used GPU-hours (admitted)",
    "idle_share": "idle share of reserved (0-1)", "budget_breaches": "budget breaches (actual > reserved)",
    "median_wait_hours": "median wait to earliest fit (hours)",
    "never_fits_by_waiting": "deferred, waiting never fits",
}


def team_table(result: ReplayResult) -> list[dict]:
    """The per-team results as rows (team, measure, recorded, proposed) for a table."""
    rows = []
    for t in result["teams"]:
        rec, pro = t["recorded"], t["proposed"]
        for key, label in MEASURES.items():
            rows.append({"team": t["team"], "measure": label, "recorded": rec[key], "proposed": pro[key]})
        for code in sorted(set(rec["deferrals_by_reason"]) | set(pro["deferrals_by_reason"])):
            rows.append({"team": t["team"], "measure": f"deferred for {code}",
                         "recorded": rec["deferrals_by_reason"].get(code, 0),
                         "proposed": pro["deferrals_by_reason"].get(code, 0)})
    return rows

