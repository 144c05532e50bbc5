"""The one vocabulary of reason codes the gate speaks, in the fixed order decisions list them, and
of the codes of its notes.

Every deferral or rejection carries one entry per failing check, each with the numbers behind it
(requested, limit, in use, unit) and a fix: what would make the request fit. A decision's notes are
non-blocking remarks, each with a code of NOTE_CODES (and a fix where one helps). Scheduler hooks,
the command line and the dashboard read these codes; they are stable: add new ones, never rename.
"""
from __future__ import annotations

from lib.gate.contracts import Decision, Note, Reason

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
    "queue": "the request fits now, but starting it would move a request waiting ahead of it in the gate's "
             "line to a later planned start: it waits its turn (conservative backfill)",
    # the queue's own rejections (lib.ledger.queue), never a check of decide(): a waiting request leaves the line
    "queue-expired": "the request waited in the queue longer than its team's queue_max_age_days",
    "cancelled": "the request was taken out of the queue (`python -m lib cancel`)",
}
QUEUE_LEFT_CODES = ("queue-expired", "cancelled")   # a deferred request's wait ends with one of these
ORDER: dict[str, int] = {code: i for i, code in enumerate(CODES)}

# note code -> one-line meaning (a note never blocks: the decision stands as its reasons say)
NOTE_CODES: dict[str, str] = {
    "calibration-unknown": "the calibrated upper bound is unknown: the estimate is judged at the median instead",
    "walltime-exceeds-limit": "the estimated wall clock is above the requested max_runtime_hours: the run "
                              "would stop on wall clock before it finishes",
    "gpus-differ-from-pilot": "the request asks for another number of accelerators than the pilot ran on: "
                              "its steps/s are scaled (docs/rules.md, Pilot estimates)",
    "preempts-experiments": "scheduled retraining takes accelerators experiments hold: the scheduler preempts them",
}
# notes a person should act on before the run starts: shown as warnings, not as captions
WARNING_NOTES = frozenset({"walltime-exceeds-limit"})


def reason(code: str, message: str, *, requested=None, limit=None, in_use=None,
           unit: str | None = None, fix: str, field: str | None = None, alternative=None) -> Reason:
    """One failing check, as it appears in a decision's `reasons` list (`alternative`: what the
    accelerator count its fix suggests leads to, contracts.Alternative)."""
    if code not in ORDER:
        raise KeyError(f"unknown reason code {code!r}")
    r = {"code": code, "message": message, "requested": requested, "limit": limit,
         "in_use": in_use, "unit": unit, "fix": fix}
    if field is not None:
        r["field"] = field
    if alternative is not None:
        r["alternative"] = alternative
    return r


def note(code: str, message: str, *, fix: str | None = None) -> Note:
    """One non-blocking remark, as it appears in a decision's `notes` list."""
    if code not in NOTE_CODES:
        raise KeyError(f"unknown note code {code!r}")
    n = {"code": code, "message": message}
    if fix is not None:
        n["fix"] = fix
    return n


def as_note(entry) -> Note:
    """A decision's note as read back: a plain string (a decision recorded before notes had codes)
    is {"code": None, "message": it}; anything else that is no note is shown as text."""
    if type(entry) is dict and type(entry.get("message")) is str:
        return entry
    return {"code": None, "message": entry if type(entry) is str else repr(entry)}


def notes_of(decision: dict) -> list[Note]:
    """A decision's notes, each as a Note (as_note), old and new decisions alike."""
    return [as_note(n) for n in decision.get("notes") or []]


def note_text(n: Note) -> str:
    """One readable line for a note: [code] message -> fix: fix (code and fix where it has them)."""
    text = (f"[{n['code']}] " if n.get("code") else "") + n["message"]
    return text + (f" -> fix: {n['fix']}" if n.get("fix") else "")


def in_order(reasons: list[Reason]) -> list[Reason]:
    """The reasons sorted into the documented order (stable within a code)."""
    return sorted(reasons, key=lambda r: ORDER[r["code"]])


def summary(decision: Decision) -> str:
    """One readable line: the state and every reason code with its fix (for sbatch, logs, toasts)."""
    if not decision["reasons"]:
        return f"{decision['state']}: {decision['run_id']}"
    parts = [f"[{r['code']}] {r['message']} -> {r['fix']}" for r in decision["reasons"]]
    return f"{decision['state']} {decision['run_id']}: " + "; ".join(parts)
