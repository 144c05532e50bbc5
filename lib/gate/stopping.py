"""Stop rules, declared before a run starts and frozen once it is admitted (docs/rules.md, Stop rules).

A stop policy names a max wall clock (hours), a spend limit (GPU-hours), a max failed-step count and
an early-stop rule on a *development* metric (Keras EarlyStopping semantics: mode, patience,
min_delta). A rule that reads the final holdout is refused. `evaluate(policy, progress)` says whether
the run continues or stops, and why; a stop for budget or wall clock leaves the artifact incomplete
and unpromotable, naming the last valid checkpoint.
"""
from __future__ import annotations

import hashlib
import json

from lib.gate.contracts import StopPolicy
from lib.gate.request import validate_stop_policy
from lib.gate.terms import COMPLETE_STOPS, INCOMPLETE_STOPS


def fingerprint(obj) -> str | None:
    """A short stable hash of a JSON-able object (the frozen stop policy), or None."""
    if obj is None:
        return None
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def artifact_status_for(stop_reason: str) -> str:
    """complete | incomplete | none: what a stop leaves (failures and preemptions leave none)."""
    if stop_reason in COMPLETE_STOPS:
        return "complete"
    return "incomplete" if stop_reason in INCOMPLETE_STOPS else "none"


class FrozenPolicyError(ValueError):
    """The stop policy changed after admission."""


def freeze(policy: StopPolicy) -> dict:
    """Validate a stop policy and return it with its fingerprint (raises ValueError when invalid)."""
    problems = validate_stop_policy(policy)
    if problems:
        raise ValueError("; ".join(p["message"] for p in problems))
    return {"policy": policy, "fingerprint": fingerprint(policy)}


def check_unchanged(frozen: dict, policy: StopPolicy) -> None:
    """Raise FrozenPolicyError if `policy` differs from the one frozen at admission."""
    if fingerprint(policy) != frozen["fingerprint"]:
        raise FrozenPolicyError(
            "the stop policy was fixed at admission (fingerprint "
            f"{frozen['fingerprint']}) and cannot change after results are seen")


def _early_stop(rule: dict, history: list[float]) -> str | None:
    """Keras semantics: stop once `patience` evaluations in a row failed to improve by min_delta."""
    patience = int(rule.get("patience", 0))
    min_delta = abs(rule.get("min_delta", 0.0))
    better = (lambda new, best: new < best - min_delta) if rule["mode"] == "min" \
        else (lambda new, best: new > best + min_delta)
    best, waited = None, 0
    for value in history:
        if best is None or better(value, best):
            best, waited = value, 0
        else:
            waited += 1
            if waited >= patience:
                return (f"{rule['metric']} did not improve by {min_delta:g} for {waited} evaluations "
                        f"(patience {patience}); best {best:g}")
    return None


def evaluate(policy: StopPolicy, progress: dict) -> dict:
    """Continue or stop, given the run's progress so far.

    progress: wall_clock_hours, spent_gpu_hours, failed_steps, metrics {name: [values in order]},
    last_valid_checkpoint (str or None). Checks in order: spend limit, wall clock, failed steps,
    early stop. Returns {"action": "continue"|"stop", "stop_reason", "message",
    "artifact_status", "promotable", "last_valid_checkpoint"}.
    """
    checkpoint = progress.get("last_valid_checkpoint")
    limit = policy.get("spend_limit_gpu_hours")
    if limit is not None and progress.get("spent_gpu_hours", 0.0) >= limit:
        return _stop("budget", f"spent {progress['spent_gpu_hours']:g} of {limit:g} GPU-h", checkpoint)
    limit = policy.get("max_wall_clock_hours")
    if limit is not None and progress.get("wall_clock_hours", 0.0) >= limit:
        return _stop("wall-clock", f"ran {progress['wall_clock_hours']:g} of {limit:g} h", checkpoint)
    limit = policy.get("max_failed_steps")
    if limit is not None and progress.get("failed_steps", 0) > limit:
        return _stop("failed-steps", f"{progress['failed_steps']} failed steps > {limit}", checkpoint)
    rule = policy.get("early_stop")
    if rule:
        why = _early_stop(rule, list(progress.get("metrics", {}).get(rule["metric"], [])))
        if why:
            return _stop("early-stop", why, checkpoint)
    return {"action": "continue", "stop_reason": None, "message": "within every stop rule",
            "artifact_status": None, "promotable": None, "last_valid_checkpoint": checkpoint}


def _stop(stop_reason: str, message: str, checkpoint) -> dict:
    status = artifact_status_for(stop_reason)
    if status == "incomplete":
        kept = f"; last valid checkpoint kept: {checkpoint}" if checkpoint else "; no valid checkpoint"
        message = f"stopped for {stop_reason}, not a failed evaluation: artifact incomplete and unpromotable ({message}{kept})"
    return {"action": "stop", "stop_reason": stop_reason, "message": message,
            "artifact_status": status, "promotable": False if status == "incomplete" else None,
            "last_valid_checkpoint": checkpoint}
