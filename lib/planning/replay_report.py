"""A policy replay's report (lib.planning.replay): per-team tallies of the decisions as the replay goes,
then the result it returns (counts recorded vs proposed, agreement, changed and excluded requests,
per-team measures) and those measures as table rows.
"""
from __future__ import annotations

import statistics
from collections import Counter

from lib.gate.calibration import DEFAULT_LEVEL
from lib.planning.replay_world import ReplayResult

EXCLUDED_LISTED = 1000      # excluded requests listed one by one (all are counted)
CHANGED_LISTED = 500        # changed decisions listed one by one (all are counted)


def empty_tally() -> dict:
    return {"admit": 0, "defer": 0, "reject": 0, "deferrals_by_reason": Counter(),
            "reserved_gpu_hours": 0.0, "used_gpu_hours": 0.0, "idle_gpu_hours": 0.0,
            "budget_breaches": 0, "waits_hours": [], "never_fits_by_waiting": 0}


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


def tally_summary(t: dict) -> dict:
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

def _share(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def replay_result(requests, proposed, recorded, policies, levels, refresh, window) -> ReplayResult:
    """What `lib.planning.replay.replay` returns, from its two passes over the same requests
    (`proposed` and `recorded`: each its outcomes in request order and its per-team tallies)."""
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
                   "recorded": tally_summary(recorded["tallies"].get(t, empty_tally())),
                   "proposed": tally_summary(proposed["tallies"].get(t, empty_tally()))} for t in teams],
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
