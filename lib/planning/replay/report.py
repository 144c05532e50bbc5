"""A policy replay's report (lib.planning.replay.passes): per-team tallies of the decisions as the replay goes,
then the result it returns (counts recorded vs proposed, agreement, changed and excluded requests,
per-team measures) and those measures as table rows.
"""
from __future__ import annotations

import math
import statistics
from collections import Counter

from lib.gate.calibration import DEFAULT_LEVEL
from lib.planning.replay.data import ReplayResult

EXCLUDED_LISTED = 1000      # excluded requests listed one by one (all are counted)
CHANGED_LISTED = 500        # changed decisions listed one by one (all are counted)


def empty_tally() -> dict:
    return {"admit": 0, "defer": 0, "reject": 0, "deferrals_by_reason": Counter(),
            "reserved_gpu_hours": 0.0, "used_gpu_hours": 0.0, "idle_gpu_hours": 0.0,
            "budget_breaches": 0, "waits_hours": [], "never_fits_by_waiting": 0, "needs_change": 0}


def team_tally(tallies: dict, team) -> dict:
    key = team if isinstance(team, str) else str(team)
    t = tallies.get(key)
    if t is None:
        t = tallies[key] = empty_tally()
    return t


def count_decision(t: dict, state: str, codes: list[str], reserved: float | None, actual: float | None) -> None:
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


def wait_measures(admits: int, waits: list[float], never: int) -> tuple[float | None, float | None]:
    """(mean, P90) of the hours a request waits before it could start: 0 when admitted, to its earliest
    fit when deferred and waiting cures it (`waits`), for ever when waiting never fits (`never`).
    The mean is over the requests that start (admits and `waits`); P90 is the nearest-rank 90th
    percentile over all of them, None when it falls on one that never fits (or there are none)."""
    started = admits + len(waits)
    mean = sum(waits) / started if started else None
    n = started + never
    if not n:
        return mean, None
    k = math.ceil(0.9 * n) - 1
    if k < admits:
        return mean, 0.0
    if k < started:
        return mean, sorted(waits)[k - admits]
    return mean, None


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


def tally_summary(t: dict) -> dict:
    """A tally as reported: counts, reasons sorted, idle share, the deferral share (deferred / decided),
    and the waits (hours): median to the earliest fit of the deferred requests that waiting would
    cure, and mean and P90 (`wait_measures`) over the admitted and deferred requests but those that
    need a changed request (`needs_change`: a reason only a change cures, such as budget or a cap),
    which never wait for anything. never_fits_by_waiting counts those too."""
    waits = t["waits_hours"]
    decided = t["admit"] + t["defer"] + t["reject"]
    mean, p90 = wait_measures(t["admit"], waits, t["never_fits_by_waiting"] - t["needs_change"])
    return {
        "admit": t["admit"], "defer": t["defer"], "reject": t["reject"],
        "deferrals_by_reason": dict(sorted(t["deferrals_by_reason"].items())),
        "deferral_share": _share(t["defer"], decided),
        "reserved_gpu_hours": round(t["reserved_gpu_hours"], 3),
        "used_gpu_hours": round(t["used_gpu_hours"], 3),
        "idle_share": (round(t["idle_gpu_hours"] / t["reserved_gpu_hours"], 4)
                       if t["reserved_gpu_hours"] > 0 else None),
        "budget_breaches": t["budget_breaches"],
        "median_wait_hours": round(statistics.median(waits), 3) if waits else None,
        "mean_wait_hours": _round(mean),
        "p90_wait_hours": _round(p90),
        "deferred_with_fit": len(waits),
        "never_fits_by_waiting": t["never_fits_by_waiting"],
        "needs_change": t["needs_change"],
    }


def merged_tally(tallies: dict) -> dict:
    """Every team's tally added up (for the whole cluster's measures)."""
    out = empty_tally()
    for t in tallies.values():
        for key in ("admit", "defer", "reject", "reserved_gpu_hours", "used_gpu_hours", "idle_gpu_hours",
                    "budget_breaches", "never_fits_by_waiting", "needs_change"):
            out[key] += t[key]
        out["deferrals_by_reason"].update(t["deferrals_by_reason"])
        out["waits_hours"].extend(t["waits_hours"])
    return out


def _share(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def _agreement(outcomes, against) -> tuple[int, int, int]:
    """(replayed, same state, same state and reasons) of one pass's outcomes against another's (the
    recorded decisions when `against` is None), over the requests the first pass replayed."""
    n = same_state = same_codes = 0
    for i, (req, state, codes, _) in enumerate(outcomes):
        if state is None:
            continue
        if against is None:
            other_state, other_codes = req["state"], list(req["reason_codes"] or [])
        else:
            _, other_state, other_codes, _ = against[i]
        n += 1
        same_state += state == other_state
        same_codes += state == other_state and codes == other_codes
    return n, same_state, same_codes


def replay_result(requests, proposed, recorded, policies, levels, refresh, window, *, baseline=None,
                  shared: bool = True, pools=({}, {})) -> ReplayResult:
    """What `lib.planning.replay.passes.replay` returns, from its passes over the same requests (`proposed`,
    `baseline` and `recorded`: each its outcomes in request order and its per-team tallies; `shared`:
    the baseline is the proposed pass itself, the proposal being the current policy)."""
    baseline = baseline or proposed
    excluded_by: Counter = Counter()
    excluded_list = []
    totals = {"recorded": Counter(), "proposed": Counter(), "baseline": Counter()}
    changed: Counter = Counter()
    changed_list = []
    for (req, state, codes, reserved), (_, base_state, _, _) in zip(proposed["outcomes"], baseline["outcomes"]):
        if state is None:
            why = codes
            excluded_by[why.split(":")[0] if why.startswith("the recorded request is not") else why] += 1
            if len(excluded_list) < EXCLUDED_LISTED:
                excluded_list.append({"decision_id": req["decision_id"], "run_id": req["run_id"],
                                      "team": req["team"], "decided_at": req["decided_at"], "why": why})
            continue
        totals["recorded"][req["state"]] += 1
        totals["proposed"][state] += 1
        totals["baseline"][base_state] += 1
        rec_codes = list(req["reason_codes"] or [])
        if state != req["state"] or codes != rec_codes:
            changed[f"{req['state']}->{state}"] += 1
            if len(changed_list) < CHANGED_LISTED:
                changed_list.append({"decision_id": req["decision_id"], "run_id": req["run_id"],
                                     "team": req["team"], "decided_at": req["decided_at"],
                                     "recorded_state": req["state"], "recorded_reasons": rec_codes,
                                     "proposed_state": state, "proposed_reasons": codes})
    replayable, same_state, same_codes = _agreement(proposed["outcomes"], None)
    base_n, base_state, base_codes = _agreement(baseline["outcomes"], None)
    vs_n, vs_state, _ = _agreement(proposed["outcomes"], baseline["outcomes"])
    by_team = {"recorded": recorded["tallies"], "proposed": proposed["tallies"], "baseline": baseline["tallies"]}
    teams = sorted(set().union(*by_team.values()))
    return {
        "window": dict(window or {}),
        "requests": len(requests),
        "replayable": replayable,
        "recorded": {s: totals["recorded"][s] for s in ("admit", "defer", "reject")},
        "baseline": {s: totals["baseline"][s] for s in ("admit", "defer", "reject")},
        "proposed": {s: totals["proposed"][s] for s in ("admit", "defer", "reject")},
        "overall": {k: tally_summary(merged_tally(v)) for k, v in by_team.items()},
        "agreement": _share(same_state, replayable),
        "reason_agreement": _share(same_codes, replayable),
        "baseline_agreement": _share(base_state, base_n),
        "baseline_reason_agreement": _share(base_codes, base_n),
        "proposed_vs_baseline_changed": vs_n - vs_state,
        "baseline_is_proposed": shared,
        "pools": {"proposed": dict(sorted(pools[0].items())), "baseline": dict(sorted(pools[1].items()))},
        "changed": dict(sorted(changed.items())),
        "changed_requests": changed_list,
        "excluded": {"count": sum(excluded_by.values()), "by_reason": dict(excluded_by.most_common()),
                     "requests": excluded_list},
        "teams": [{"team": t,
                   "policy_version": (policies.get(t) or {}).get("policy_version"),
                   **{k: tally_summary(v.get(t, empty_tally())) for k, v in by_team.items()}} for t in teams],
        "calibration_level": {t: levels.get(t, DEFAULT_LEVEL) for t in sorted(policies)},
        "calibration_refresh": refresh,
        "calibrations_computed": proposed["calibrations_computed"],
    }


MEASURES = {  # per-team result key -> how the table names it
    "admit": "admitted", "defer": "deferred", "reject": "rejected",
    "reserved_gpu_hours": "reserved GPU-hours (admitted)", "used_gpu_hours": "used GPU-hours (admitted)",
    "idle_share": "idle share of reserved (0-1)", "budget_breaches": "budget breaches (actual > reserved)",
    "median_wait_hours": "median wait to earliest fit (hours)",
    "mean_wait_hours": "mean wait, admitted at 0 (hours)", "p90_wait_hours": "P90 wait, admitted at 0 (hours)",
    "never_fits_by_waiting": "deferred, waiting never fits",
}


def team_table(result: ReplayResult) -> list[dict]:
    """The per-team results as rows (team, measure, recorded, baseline, proposed) for a table."""
    rows = []
    passes = ("recorded", "baseline", "proposed")
    for t in result["teams"]:
        for key, label in MEASURES.items():
            rows.append({"team": t["team"], "measure": label, **{p: t[p][key] for p in passes}})
        codes = set().union(*(t[p]["deferrals_by_reason"] for p in passes))
        for code in sorted(codes):
            rows.append({"team": t["team"], "measure": f"deferred for {code}",
                         **{p: t[p]["deferrals_by_reason"].get(code, 0) for p in passes}})
    return rows
