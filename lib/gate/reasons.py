"""The one vocabulary of reason codes the gate speaks, in the fixed order decisions list them.

Every deferral or rejection carries one entry per failing check, each with the numbers behind it
(requested, limit, in use, unit) and a fix: what would make the request fit. Scheduler hooks, the
command line and the dashboard read these codes; they are stable: add new ones, never rename.
"""
from __future__ import annotations

from lib.gate.contracts import Decision, Reason

# code -> one-line meaning. The dict order IS the documented order of reasons in a decision.
CODES: dict[str, str] = {
    "invalid-request": "the request itself is malformed (a field is missing, of the wrong type or out of range)",
    "no-snapshot": "no data snapshot named, or one the snapshot list does not know",
    "no-pilot": "the request is above the team's pilot threshold but brings no pilot measurements",
    "budget": "the judged estimate exceeds the approved budget for this run",
    "period-budget": "the team's monthly GPU-hours (spent + committed + this run) would be exceeded",
    "gpu-cap": "more accelerators than the team's per-job cap",
    "memory-cap": "more accelerator memory than the team's per-job cap",
    "runtime-cap": "a runtime (requested, or estimated wall clock) above the team's per-job cap",
    "memory": "the pilot's peak memory does not fit the requested accelerator memory",
    "no-recovery": "interruptions are expected (or capacity is preemptible) and the job cannot checkpoint",
    "capacity": "the team's concurrent reservations plus this request exceed its reserved accelerators",
    "cluster-capacity": "every team's reservations in the request's pool (less the scheduler's own reservations) "
                        "plus this request exceed the pool's physical accelerators, even within the team's quota",
    "retraining-protection": "the request would take accelerators set aside for scheduled retraining",
}
ORDER: dict[str, int] = {code: i for i, code in enumerate(CODES)}


def reason(code: str, message: str, *, requested=None, limit=None, in_use=None,
           unit: str | None = None, fix: str, field: str | None = None) -> Reason:
    """One failing check, as it appears in a decision's `reasons` list."""
    if code not in ORDER:
        raise KeyError(f"unknown reason code {code!r}")
    r = {"code": code, "message": message, "requested": requested, "limit": limit,
         "in_use": in_use, "unit": unit, "fix": fix}
    if field is not None:
        r["field"] = field
    return r


def in_order(reasons: list[Reason]) -> list[Reason]:
    """The reasons sorted into the documented order (stable within a code)."""
    return sorted(reasons, key=lambda r: ORDER[r["code"]])


def summary(decision: Decision) -> str:
    """One readable line: the state and every reason code with its fix (for sbatch, logs, toasts)."""
    if not decision["reasons"]:
        return f"{decision['state']}: {decision['run_id']}"
    parts = [f"[{r['code']}] {r['message']} -> {r['fix']}" for r in decision["reasons"]]
    return f"{decision['state']} {decision['run_id']}: " + "; ".join(parts)
