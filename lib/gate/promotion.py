"""Promotion, kept apart from admission: admitting a run never makes its artifact releasable.

Only a production candidate with a complete artifact, the full evaluation (release evidence), a stop
reason of `completed` or `early-stop` (on a development metric), and holdout reads within its
declared allowance is promotable. Every refusal lists what the run lacks.
"""
from __future__ import annotations

from lib.gate.terms import CENSORED_STOPS, COMPLETE_STOPS

PROMOTABLE_STOPS = COMPLETE_STOPS


def promotion_status(run: dict) -> dict:
    """{"promotable": bool, "missing": [reasons]} for a run row (dict with the ledger's run columns)."""
    missing: list[str] = []
    kind = run.get("kind")
    if kind != "production":
        missing.append(f"a {kind} run is not a production candidate; rerun it as one with full evaluation")
    if not run.get("full_evaluation"):
        missing.append("no full evaluation recorded (release evidence incomplete)")
    stop = run.get("stop_reason")
    if stop is None:
        missing.append("the run has not finished")
    elif stop not in PROMOTABLE_STOPS:
        if stop in CENSORED_STOPS:
            missing.append(f"stopped for {stop}: the artifact is incomplete and never promotable")
        else:
            missing.append(f"stop reason {stop!r} is not completed or a dev-metric early stop")
    if run.get("artifact_status") != "complete" and (stop is None or stop in PROMOTABLE_STOPS):
        missing.append(f"artifact status is {run.get('artifact_status') or 'unknown'}, not complete")
    reads = run.get("holdout_reads") or 0
    allowance = run.get("holdout_allowance") or 0
    if reads > allowance:
        missing.append(f"the holdout was read {reads} times, beyond its allowance of {allowance}")
    return {"promotable": not missing, "missing": missing}
