"""Admission: the one function that decides, called by the queue, the command line and the what-if form.

`admit_training` is the four-argument rule of docs/rules.md, Admission (estimate, budget, checkpoint
support, expected interruptions, in that order), refusing NaN and other non-numbers.
`decide(request, policy, state)` is the full decision: pure over plain data (a snapshot, the way
Kueue admits), so it is tested without a database. It reports every failing check at once, in the
order of lib.gate.reasons.CODES, each with the numbers behind it and a fix; a fix that suggests
another accelerator count states the judged estimate and wall clock the request would then have,
decided by `decide` itself, and is never one the runtime cap would refuse. Non-blocking remarks are
`notes`, each with a code of lib.gate.reasons.NOTE_CODES. Units: GPU-hours (`_gpu_hours`), hours (`_hours`), accelerators (`gpus`), gigabytes (`_gb`).
"""
from __future__ import annotations

import math
from datetime import datetime

from lib.gate.calibration import calibrate
from lib.gate.capacity import capacity_fit, pool_room
from lib.gate.contracts import Alternative, Calibration, Decision, Note, Policy, Reason, Request, State
from lib.gate.estimate import estimate_request, throughput_ratio
from lib.gate.reasons import in_order, note, reason
from lib.gate.request import echoed, validate
from lib.gate.stopping import fingerprint
from lib.gate.terms import checked_number, minute_up, next_month_start, team_name_problem, utcnow


def admit_training(estimated_gpu_hours, budget_gpu_hours, checkpoint_supported, expected_interruptions):
    """The four-argument admission rule: budget first, then recovery; else reserve the estimate.

    Raises ValueError naming the argument for negative, NaN, ±inf, bool, str or None numbers, a
    non-bool checkpoint_supported and a non-integral interruption count.
    """
    for name, value in (("estimated_gpu_hours", estimated_gpu_hours), ("budget_gpu_hours", budget_gpu_hours),
                        ("expected_interruptions", expected_interruptions)):
        checked_number(name, value)
    if expected_interruptions != int(expected_interruptions):
        raise ValueError(f"expected_interruptions must be a whole number, got {expected_interruptions!r}")
    if type(checkpoint_supported) is not bool:
        raise ValueError(f"checkpoint_supported must be True or False, got {checkpoint_supported!r}")
    if estimated_gpu_hours > budget_gpu_hours:
        return {"state": "defer", "reason": "budget"}
    if expected_interruptions > 0 and not checkpoint_supported:
        return {"state": "defer", "reason": "no-recovery"}
    return {"state": "admit", "reserved_gpu_hours": estimated_gpu_hours}


_last_stamp: list = [None, ""]


def _stamp(now: datetime) -> str:
    """now as ISO seconds; the queue decides many requests against one snapshot time, so memoise."""
    if _last_stamp[0] != now:
        _last_stamp[:] = [now, now.isoformat(timespec="seconds")]
    return _last_stamp[1]


def _decision(request, state: str, reasons: list[Reason], *, policy: Policy | None = None, estimate=None,
              notes=(), now: datetime, reserved=None, stop_fp=None, extra=None) -> Decision:
    d = {
        "state": state,
        "run_id": echoed(request.get("run_id")) if type(request) is dict else None,
        "team": echoed(request.get("team")) if type(request) is dict else None,
        "kind": echoed(request.get("kind")) if type(request) is dict else None,
        "reasons": reasons,
        "notes": list(notes),
        "estimate": estimate,
        "reserved_gpu_hours": reserved,
        "policy_version": policy["policy_version"] if policy else None,
        "stop_policy_fingerprint": stop_fp,
        "decided_at": _stamp(now),
    }
    if extra:
        d.update(extra)
    return d


def reject(request, problems: list[Reason], *, policy: Policy | None = None,
           now: datetime | None = None) -> Decision:
    """A `reject` decision for an invalid request (problems: invalid-request reasons)."""
    return _decision(request, "reject", in_order(problems), policy=policy, now=now or utcnow())


def unknown_team(request, *, known_teams=(), now: datetime | None = None) -> Decision:
    """A `reject` for a request naming no team with a policy: every other problem of the request
    too, and the teams it could name."""
    _, problems = validate(request)
    team = request.get("team") if type(request) is dict else None
    if type(team) is str and team.strip() and not team_name_problem(team):
        problems.append(reason(
            "invalid-request", f"team {team!r} has no policy in the ledger", field="team",
            fix=(f"use one of: {', '.join(known_teams)}" if known_teams
                 else "load data/teams.toml into the ledger (python -m lib teams), or ask a planner "
                      "to add the team")))
    elif not problems:
        problems.append(reason("invalid-request", "team is required", fix="name the team", field="team"))
    return reject(request if type(request) is dict else {}, problems, now=now)


def _judged(raw: float, cal: Calibration, basis: str, notes: list) -> tuple[float, str, float, float | None]:
    median = raw * cal["factor"]
    upper = raw * cal["upper_factor"] if cal["upper_factor"] is not None else None
    if basis == "upper" and upper is None:
        notes.append(note("calibration-unknown",
                          f"calibration upper bound unknown ({cal['note']}); judged at the median instead"))
        basis = "median"
    value = {"raw": raw, "median": median, "upper": upper}[basis]
    return value, basis, median, upper


Checked = tuple[Request | None, list[Reason]]   # what lib.gate.request.validate returns for a request


def decide(request: Request, policy: Policy | None, state: State, *, checked: Checked | None = None,
           explain: bool = True) -> Decision:
    """Admit, defer or reject `request` for the team `policy` describes, given its current `state`.

    `request` may be anything parsed from JSON (a malformed one is rejected); state.reservations
    are the reservations that count against the team's quota (lib.ledger.state.held_condition).
    `checked`: validate(request) when the caller has it already (a replay decides each recorded
    request once per pass; neither it nor `request` may change after), else it is validated here.
    `explain=False` leaves two things out of a capacity reason's fix: the request decided again on
    fewer accelerators, and the time from which it would fit. The state, the reason codes, the
    estimate and the reservation are the same either way. A replay, which reads only those, passes it.
    """
    return _decide(request, policy, state, checked=checked, explain=explain)


def _decide(request, policy: Policy | None, state: State, *, validated: Request | None = None,
            checked: Checked | None = None, explain: bool = True) -> Decision:
    """decide. A fix suggesting another accelerator count is decided by this function too, given the
    `validated` request with that count (so not validated again); such an alternative's own fixes
    suggest nothing further decided, so it never goes deeper than once."""
    now = state.get("now") or utcnow()
    alternatives = validated is None
    if not alternatives:
        req, problems = validated, []
    else:
        req, problems = checked if checked is not None else validate(request)
    if problems:
        return reject(request, problems, policy=policy, now=now)
    if policy is None or policy["team"] != req["team"]:
        return unknown_team(request, now=now)

    kind, gpus = req["kind"], req["gpus"]
    efficiency = policy.get("scaling_efficiency")
    efficiency = 1.0 if efficiency is None else efficiency   # a policy from before the key: linear
    est = estimate_request(req, state.get("interruption_rate"), efficiency)
    if not math.isfinite(est["raw_gpu_hours"]):
        # each number was finite, but together they overflow (e.g. 1e-300 steps/s): not a request
        # the gate can judge, and never one it may admit with a NaN or infinite reservation
        field = "pilot" if "pilot" in req else "estimated_gpu_hours"
        return reject(request, [reason(
            "invalid-request", f"the {field} numbers give an estimate of {est['raw_gpu_hours']!r} GPU-h",
            fix="check the pilot measurements (steps per second, planned steps) and resubmit",
            field=field)], policy=policy, now=now)
    cal = state.get("calibration")
    if cal is None:
        cal = calibrate(state.get("calibration_history", ()), req["team"], kind, now=now)
    notes: list[Note] = []
    basis = policy[f"budget_basis_{kind}"]
    judged, judged_at, median, upper = _judged(est["raw_gpu_hours"], cal, basis, notes)
    if not math.isfinite(judged):  # a finite raw estimate times a calibration factor can overflow
        return reject(request, [reason(
            "invalid-request", f"the calibrated estimate overflows ({judged!r} GPU-h)",
            fix="check the estimate or pilot measurements and resubmit", field="pilot"
            if "pilot" in req else "estimated_gpu_hours")], policy=policy, now=now)
    wall_h = judged / gpus
    est.update(median_gpu_hours=median, upper_gpu_hours=upper, judged_gpu_hours=judged,
               judged_at=judged_at, wall_hours=wall_h, calibration=cal)
    pilot_gpus = req["pilot"]["gpus"] if "pilot" in req else gpus
    if pilot_gpus != gpus:
        ratio = throughput_ratio(gpus, pilot_gpus, efficiency)
        notes.append(note(
            "gpus-differ-from-pilot",
            f"the pilot ran on {pilot_gpus} accelerators, this request asks for {gpus}: steps/s × {ratio:.3g} "
            + ("(linear below the pilot's count)" if gpus < pilot_gpus
               else f"(each accelerator beyond the pilot's adds scaling_efficiency {efficiency:g} of one)")
            + f", so {judged:.1f} GPU-h judged over a {wall_h:.1f} h wall clock"))
    runtime_cap = policy["max_runtime_hours"]
    decided_on: dict[int, tuple[Alternative, str, bool]] = {}   # several fixes may name one count

    def on_gpus(n: int) -> tuple[Alternative, str, bool] | None:
        """The request on n accelerators, decided (the pilot's count kept): (its numbers, the words a
        fix says, whether the runtime cap lets it run); None in an alternative's own decision, and
        without `explain`."""
        if not alternatives or not explain:
            return None
        if n not in decided_on:
            changed = {**req, "gpus": n}   # validated: the pilot's count is already set
            other = _decide(changed, policy, {**state, "now": now, "calibration": cal}, validated=changed)
            decided_on[n] = _alternative(n, other.get("estimate"), runtime_cap, req["max_runtime_hours"])
        return decided_on[n]

    reasons: list[dict] = []
    add = reasons.append
    snap = req["data_snapshot"]
    if not snap:
        add(reason("no-snapshot", "no data snapshot named", fix="name the data snapshot the run reads",
                   field="data_snapshot"))
    elif snap not in state.get("snapshots", ()):
        add(reason("no-snapshot", f"data snapshot {snap!r} is not in the snapshot list",
                   requested=snap, fix="register the snapshot, or name one the list knows",
                   field="data_snapshot"))

    threshold = policy["pilot_required_above_gpu_hours"]
    if "pilot" not in req and judged > threshold:
        # the judged (calibrated) estimate is what the threshold is compared with, not the stated one
        stated = est["raw_gpu_hours"]
        judged_what = ("the stated estimate itself" if judged_at == "raw"
                       else f"the calibrated {'upper bound' if judged_at == 'upper' else 'median'}")
        add(reason("no-pilot",
                   f"stated estimate {stated:.1f} GPU-h, judged at {judged_what} {judged:.1f} GPU-h, "
                   f"which is above pilot_required_above_gpu_hours {threshold:g} GPU-h, without pilot "
                   "measurements", requested=round(judged, 2), limit=threshold, unit="GPU-h",
                   fix=f"run a pilot and submit its measurements; without one, the judged estimate "
                       f"(stated × calibration {judged / stated if stated else 1.0:.2f}) must be "
                       f"≤ {threshold:g} GPU-h"))

    budget = req["budget_gpu_hours"]
    if judged > budget:
        add(reason("budget", f"{judged_at} estimate {judged:.1f} GPU-h exceeds the budget {budget:g} GPU-h",
                   requested=round(judged, 2), limit=budget, unit="GPU-h",
                   fix=f"fits if budget_gpu_hours ≥ {_tenth_up(judged):.1f}, "
                       f"or with {judged - budget:.1f} GPU-h less work"))

    spent = state.get("period_spent_gpu_hours", 0.0)
    reservations = state.get("reservations", ())
    committed = sum(r["reserved_gpu_hours"] or 0.0 for r in reservations)
    monthly = policy["monthly_budget_gpu_hours"]
    if spent + committed + judged > monthly:
        left = max(0.0, monthly - spent - committed)
        add(reason("period-budget",
                   f"this month: {spent:.1f} spent + {committed:.1f} committed + {judged:.1f} requested "
                   f"> {monthly:g} GPU-h", requested=round(judged, 2), limit=monthly,
                   in_use=round(spent + committed, 2), unit="GPU-h",
                   fix=f"fits if this run needs ≤ {left:.1f} GPU-h, or from {next_month_start(now).date().isoformat()} "
                       "(next period)"))

    cap = policy["max_gpus_per_job"]
    if gpus > cap:
        alt = on_gpus(cap) if cap >= 1 else None
        if cap < 1:
            fix = "the team may run no accelerator job: ask the planners for a per-job cap"
        elif alt is None or alt[2]:
            fix = f"fits with {gpus - cap} fewer accelerators (≤ {cap}" + (f"; {alt[1]})" if alt else ")")
        else:
            fix = (f"fewer accelerators would not help: {alt[1]}; fewer steps, or ask the planners for a larger "
                   "per-job cap")
        add(reason("gpu-cap", f"{gpus} accelerators requested, the per-job cap is {cap}",
                   requested=gpus, limit=cap, unit="GPUs", field="gpus", fix=fix,
                   alternative=alt[0] if alt else None))
    cap = policy["max_gpu_mem_gb"]
    if req["gpu_mem_gb"] > cap:
        add(reason("memory-cap", f"{req['gpu_mem_gb']:g} GB per accelerator requested, the cap is {cap:g} GB",
                   requested=req["gpu_mem_gb"], limit=cap, unit="GB", field="gpu_mem_gb",
                   fix=f"fits with gpu_mem_gb ≤ {cap:g}"))
    cap = runtime_cap
    runtime = max(req["max_runtime_hours"], wall_h)
    if runtime > cap:
        what = "requested runtime" if req["max_runtime_hours"] >= wall_h else "estimated wall clock"
        add(reason("runtime-cap", f"{what} {runtime:.1f} h exceeds the per-job cap {cap:g} h",
                   requested=round(runtime, 2), limit=cap, unit="h", field="max_runtime_hours",
                   fix=f"fits with max_runtime_hours ≤ {cap:g} and an estimated wall clock ≤ {cap:g} h "
                       f"(more accelerators or fewer steps)"))
    if wall_h > req["max_runtime_hours"]:
        notes.append(_walltime_note(wall_h, req["max_runtime_hours"], cap, req["checkpoint_supported"]))

    if "pilot" in req and req["pilot"]["peak_mem_gb"] > req["gpu_mem_gb"]:
        peak = req["pilot"]["peak_mem_gb"]
        add(reason("memory", f"pilot peak memory {peak:g} GB does not fit {req['gpu_mem_gb']:g} GB accelerators",
                   requested=peak, limit=req["gpu_mem_gb"], unit="GB", field="gpu_mem_gb",
                   fix=f"fits with gpu_mem_gb ≥ {peak:g}, or a smaller micro-batch / activation checkpointing"))

    interruptions = req["expected_interruptions"]
    if (interruptions > 0 or req["capacity"] == "preemptible") and not req["checkpoint_supported"]:
        why = "preemptible capacity" if req["capacity"] == "preemptible" else f"{interruptions:g} expected interruptions"
        add(reason("no-recovery", f"{why} and the job cannot checkpoint", requested=interruptions,
                   limit=0, unit="interruptions", field="checkpoint_supported",
                   fix="enable checkpointing, or run on stable capacity with no expected interruptions"))

    extra = None
    reserved_gpus = policy["reserved_gpus"]
    set_aside = policy["retraining_reserved_gpus"]
    in_use = in_use_retraining = 0
    for r in reservations:
        in_use += r["gpus"]
        if r["kind"] == "retraining":
            in_use_retraining += r["gpus"]

    pool = (state.get("pools") or {}).get(req["capacity"])
    fit: list = []

    def fits_at():  # when every capacity check passes (the same rule the dashboard shows), reckoned once
        if not explain:
            return None
        if not fit:   # the gate's line gives it (state["planned_start"]: lib.planning.plan.line) when one waits
            fit.append(state["planned_start"] if "planned_start" in state else
                       capacity_fit(now, kind, reserved_gpus, set_aside, reservations, gpus, pool, req["team"], wall_h))
        return fit[0]
    if kind == "retraining":
        # experiments' holdings never defer scheduled retraining: they are preempted instead
        if in_use_retraining + gpus > reserved_gpus:
            add(_capacity_reason("capacity", gpus, reserved_gpus, in_use_retraining,
                                 "the team's reserved accelerators", fits_at(), on_gpus))
        elif in_use + gpus > reserved_gpus:
            extra = {"preempts_experiment_gpus": in_use + gpus - reserved_gpus}
            notes.append(note("preempts-experiments",
                              f"scheduled retraining takes {in_use + gpus - reserved_gpus} accelerators that "
                              "experiments hold: the scheduler preempts them"))
    else:
        when = None
        if in_use + gpus > reserved_gpus:
            when = fits_at()
            add(_capacity_reason("capacity", gpus, reserved_gpus, in_use,
                                 "the team's reserved accelerators", when, on_gpus))
        in_use_experiments = in_use - in_use_retraining
        if set_aside and in_use_experiments + gpus > reserved_gpus - set_aside:
            add(_capacity_reason("retraining-protection", gpus, reserved_gpus - set_aside,
                                 in_use_experiments,
                                 f"accelerators left to experiments ({set_aside} set aside for retraining)",
                                 when or fits_at(), on_gpus))

    if pool is not None:
        room, _, windows = pool_room(pool, req["team"], kind, now, wall_h)
        if gpus > room:
            add(_pool_reason(pool, gpus, room, windows, fits_at(), on_gpus))
            reasons[:] = in_order(reasons)   # cluster-capacity comes before retraining-protection

    # checks above append in the documented order of lib.gate.reasons.CODES (a test holds them to it)
    reserved = judged if not reasons else None
    return _decision(req, "defer" if reasons else "admit", reasons, policy=policy, estimate=est, notes=notes, now=now,
                     reserved=reserved, stop_fp=fingerprint(req.get("stop_policy")), extra=extra)


def _tenth_up(x: float) -> float:
    """x rounded up to a tenth (a budget that surely fits), without overflowing for huge x."""
    return math.ceil(x * 10) / 10 if x < 1e300 else x


def _pool_reason(pool, gpus: int, room: int, windows, fits_at: datetime | None, on_gpus) -> Reason:
    """cluster-capacity: the pool (every team's reservations, less the scheduler's windows) has no room
    for the whole run, whatever the team's quota leaves it; the numbers and the fix as
    `_capacity_reason`'s, with the pool's `room` for the run as what is free, and the windows named."""
    r = _capacity_reason("cluster-capacity", gpus, pool["gpus"], pool["gpus"] - room,
                         f"accelerators of the {pool['name']} pool (held by every team, or by the scheduler, "
                         "during the run)", fits_at, on_gpus)
    if windows:
        r["message"] += "; the scheduler's reservations then: " + ", ".join(
            f"{w['name']!r} {w['gpus']} from {w['start'].isoformat(timespec='minutes')} to "
            f"{w['end'].isoformat(timespec='minutes')}" for w in windows[:3]) + (
            f" and {len(windows) - 3} more" if len(windows) > 3 else "")
    return r


def _alternative(n: int, est, runtime_cap: float, requested_h: float) -> tuple[Alternative, str, bool]:
    """(numbers, words, fits the runtime cap) of the decided request on n accelerators, whose
    estimate is `est` (None: it could not be judged)."""
    if not est:
        return {"gpus": n, "judged_gpu_hours": None, "wall_hours": None}, \
            f"on {n} accelerators the estimate cannot be judged", False
    judged, wall = est["judged_gpu_hours"], est["wall_hours"]
    numbers = {"gpus": n, "judged_gpu_hours": round(judged, 2), "wall_hours": round(wall, 2)}
    if wall > runtime_cap:
        return numbers, (f"on {n} accelerators the estimated wall clock is {wall:.1f} h, above the per-job "
                         f"runtime cap {runtime_cap:g} h"), False
    words = f"then {judged:.1f} GPU-h judged over a {wall:.1f} h wall clock"
    if wall > requested_h:
        words += f", with max_runtime_hours ≥ {_tenth_up(wall):.1f}"
    return numbers, words, True


def _walltime_note(wall_h: float, requested_h: float, cap_h: float, checkpoint: bool) -> Note:
    """The note for an estimated wall clock above the requested max_runtime_hours, with its fix:
    raise the limit (within the team's cap), or checkpoint and accept resumes."""
    if wall_h <= cap_h:
        raise_it = f"raise max_runtime_hours to ≥ {_tenth_up(wall_h):.1f} (the team's cap is {cap_h:g} h)"
    else:
        raise_it = f"no max_runtime_hours within the team's cap {cap_h:g} h holds it (see runtime-cap)"
    if checkpoint:
        ratio = wall_h / requested_h   # > 1; huge (even inf) for a tiny requested limit
        n = max(1, math.ceil(ratio) - 1) if ratio < 1e9 else None
        resumes = f"about {n} resume{'s' if n != 1 else ''}" if n else "very many resumes"
        resume = (f"or checkpoint and accept a resume: it stops at {requested_h:g} h and resumes from its last "
                  f"checkpoint ({resumes}; the estimate does not price their restarts)")
    else:
        resume = "or enable checkpointing and accept a resume from the last checkpoint after the limit"
    return note("walltime-exceeds-limit",
                f"estimated wall clock {wall_h:.1f} h exceeds the requested max_runtime_hours {requested_h:g}: "
                "the run would stop on wall clock", fix=f"{raise_it}, {resume}")


def _capacity_reason(code, gpus, limit, in_use, what, fits_at: datetime | None, on_gpus) -> Reason:
    """A capacity-type reason with the fix: fewer accelerators (when the runtime cap lets the request
    run on those: `on_gpus(n)`, see decide), or the time `fits_at` from which the request passes
    every capacity check (lib.gate.capacity.capacity_fit; None: never by waiting)."""
    free = max(0, limit - in_use)
    alt = None
    wait = (f"from {minute_up(fits_at)} when running reservations end"
            if fits_at is not None else None)
    if gpus > limit:
        fix = f"{what} ({limit}) can never hold {gpus}: ask the planners for a larger quota or use ≤ {limit}"
        alt = on_gpus(limit) if limit >= 1 else None
        if alt and not alt[2]:
            fix = f"{what} ({limit}) can never hold {gpus}, and {alt[1]}: ask the planners for a larger quota"
        elif alt:
            fix += f" ({alt[1]})"
    elif free < 1:
        fix = f"no accelerator free now; fits {wait}" if wait else "no accelerator free now: ask the planners"
    else:
        alt = on_gpus(free)
        if alt is None or alt[2]:
            fix = f"fits with {gpus - free} fewer accelerators (≤ {free} free now" + (f"; {alt[1]})" if alt else ")")
            if wait:
                fix += f", or {wait}"
        else:
            fix = f"fewer accelerators would not help: {alt[1]}; " + (f"fits {wait}" if wait else
                                                                     "ask the planners for a larger quota")
    return reason(code, f"{in_use} of {limit} {what} in use, {gpus} more requested",
                  requested=gpus, limit=limit, in_use=in_use, unit="GPUs", field="gpus", fix=fix,
                  alternative=alt[0] if alt else None)
