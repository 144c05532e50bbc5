"""How the dashboard's tables name and show their columns: human headers with units, rounding, and
which text may run long (shown wrapped, whole). Plain data, no Streamlit: ui.table turns a
`ColumnSpec` into a Streamlit column config.

Query results keep their machine names (`reserved_gpu_hours`): the CSV downloads use them, so a
script reading a download does not break when a header is reworded. Only the screen shows labels.

Also the glossary: the terms of art the pages use, each explained once in plain words.
"""
from __future__ import annotations

from typing import Literal, TypedDict

ALL_TEAMS = "(all teams)"     # the team label of rows pooled over every shown team (calendar, recovery)
REQUESTED_LABEL = "requested, not measured"   # the estimate source of a run whose estimate is only its time limit

ColumnKind = Literal["text", "number", "integer", "share", "ratio", "datetime", "date", "bool"]


class ColumnSpec(TypedDict):
    label: str                  # the header shown (unit in brackets)
    kind: ColumnKind                  # how values are shown
    digits: int                 # decimals for numbers and ratios; shares are shown as % with this many
    help: str | None            # tooltip on the header
    long: bool                  # text that may run long: the table wraps it rather than cut it off
    key: bool                   # what the table is for: pinned, so it stays in view however wide the table


def _spec(label: str, kind: ColumnKind = "text", digits: int = 1, help: str | None = None,
          long: bool = False, key: bool = False) -> ColumnSpec:
    return {"label": label, "kind": kind, "digits": digits, "help": help, "long": long, "key": key}


GLOSSARY: dict[str, str] = {
    "calibrated estimate": "the raw estimate (from a pilot or stated) multiplied by a factor learned from how "
                           "the team's past runs of the same kind compared with their estimates",
    "conformal bound": "the calibrated upper bound: a factor chosen so that, on the team's recent history, "
                       "about 90% of runs used no more than it (split-conformal prediction; no assumption "
                       "about the shape of the errors)",
    "Tobit": "a fit that also learns from censored runs, used when too many runs were stopped early for "
             "the plain conformal bound to be trusted",
    "censored run": "a run stopped at a limit (budget or wall clock) before it finished: its true cost is "
                    "known only to be at least what it used",
    "idle reserved capacity": "GPU-hours reserved but not used: a late start, an early end, or a "
                              "reservation never used; charged to the team that held it",
    "committed": "GPU-hours or accelerators held by admitted reservations that have not finished, "
                 "including those that start later",
    "earliest fit": "the first time a deferred request passes every capacity check, assuming each held "
                    "reservation releases at its reserved end: the same rule as the gate's fix",
    "planned start": "when the forward plan starts a waiting request: every waiting request decided again "
                     "by the gate, retraining first, then the longest waiting, each seeing what the plan "
                     "started before it; reservations release at their reserved end, and budgets reset "
                     "with the month",
    "queue age": "a deferred request waits in the queue for its team's queue_max_age_days (default 14) "
                 "after its first deferral, then expires: resubmit it to wait again",
    "pool": "the accelerators the cluster has of a capacity type; the teams' quotas may add up to more "
            "(overcommit), so a request within its quota can still find none (cluster-capacity)",
    "drift alarm": "a team × kind whose recent runs exceeded the calibrated upper bound far more often than "
                   "its level allows (at a 90% bound, about 2 of 20 are expected): its costs have probably "
                   "changed, and until the bound has caught up its requests are under-reserved",
    "adapted bound": "after a change in a team's cost ratio, the bound rests on the runs since the change "
                     "only: their median plus the spread the team showed before (shifted), then, with "
                     "enough of them, the conformal bound of those runs alone",
    "requested, not measured": "an estimate that is only the time limit × GPUs a job asked for (e.g. from "
                               "Slurm); shown, but left out of estimate-error statistics",
}

# the items of a pilot estimate (lib.gate.estimate.ITEMS, and "stated" for a stated estimate), as a
# planner reads them in the What-if's table and chart
ESTIMATE_ITEMS: dict[str, str] = {
    "compute_typical": "compute at the typical rate", "compute_worst_case": "compute at the worst-case rate",
    "data_loading": "data-loading stalls", "checkpoint": "checkpoint writes", "evaluation": "evaluation",
    "restarts_and_lost_work": "restarts and lost work", "stated": "stated estimate",
}


def estimate_item(key: str) -> str:
    """An estimate item's name in words (ESTIMATE_ITEMS; an unlisted one with spaces for underscores)."""
    return ESTIMATE_ITEMS.get(key) or str(key).replace("_", " ")


_H = "hours"
COLUMN_SPECS: dict[str, ColumnSpec] = {
    # who and what
    "run_id": _spec("Run ID"), "team": _spec("Team"), "kind": _spec("Kind"),
    "capacity": _spec("Capacity type"), "reason": _spec("Reason code"), "reason_codes": _spec("Reasons", long=True),
    "code": _spec("Reason code"), "message": _spec("Problem", long=True), "fix": _spec("What would make it fit", long=True),
    "field": _spec("Request field"), "unit": _spec("Unit"), "item": _spec("Item"),
    "stop_reason": _spec("Stop reason"), "artifact_status": _spec("Artifact"),
    "last_valid_checkpoint": _spec("Last valid checkpoint"), "estimate_source": _spec("Estimate from"),
    "source": _spec("Error source"), "method": _spec("Method", help=GLOSSARY["conformal bound"]),
    "scope": _spec("Calibrated on"), "note": _spec("Note", long=True), "fit_note": _spec("Why then", long=True),
    "missing": _spec("Missing for promotion", long=True), "restart_source": _spec("Restart time from"),
    "status": _spec("Status", long=True), "column": _spec("Column"), "value": _spec("Value", long=True),
    "line": _spec("Line", "integer"),
    "recent_exceeded": _spec("Recent runs over the bound", long=True, help=GLOSSARY["drift alarm"]),
    "what_to_do": _spec("What to do", long=True),
    # counts
    "runs": _spec("Runs", "integer"), "requests": _spec("Requests", "integer"),
    "previous_requests": _spec("Requests, previous period", "integer"),
    "gpus": _spec("GPUs", "integer"), "quota_gpus": _spec("Quota (GPUs)", "integer"),
    "retraining_reserved_gpus": _spec("Set aside for retraining (GPUs)", "integer"),
    "committed_gpus": _spec("Committed (GPUs)", "integer", help=GLOSSARY["committed"]),
    "free_gpus": _spec("Free (GPUs)", "integer", help="the most accelerators the gate would admit a request "
                       "(not retraining) of the team with, then: quota, retraining set-aside and pool"),
    "retraining_free_gpus": _spec("Free for retraining (GPUs)", "integer"),
    "over_committed_gpus": _spec("Over-committed (GPUs)", "integer"),
    "pool": _spec("Pool", help=GLOSSARY["pool"]), "pool_gpus": _spec("Pool (GPUs)", "integer", help=GLOSSARY["pool"]),
    "pool_held_gpus": _spec("Held in the pool (GPUs)", "integer"), "held_gpus": _spec("Held (GPUs)", "integer"),
    "window_gpus": _spec("Scheduler's reservations (GPUs)", "integer"),
    "quotas_gpus": _spec("Quotas of all teams (GPUs)", "integer"),
    "overcommit_ratio": _spec("Quotas ÷ pool", "ratio", 2, help=GLOSSARY["pool"]),
    "teams_above_pool": _spec("Teams whose quota exceeds the pool", long=True),
    "ahead": _spec("Ahead of it", long=True, help="the requests the plan starts before it that hold what it "
                   "needs (its team's quota or budget, or its pool)"),
    "reasons": _spec("Reasons now", long=True, help="what `python -m lib check` gives the request now"),
    "blocking": _spec("Reasons at its last try", long=True),
    "holdout_reads": _spec("Holdout reads", "integer"), "holdout_allowance": _spec("Holdout reads allowed", "integer"),
    "censored_runs": _spec("Censored runs", "integer", help=GLOSSARY["censored run"]),
    "backtest_checked": _spec("Backtest runs", "integer"), "interruptions": _spec("Interruptions", "integer"),
    "interrupted_runs": _spec("Interrupted runs", "integer"), "restart_runs": _spec("Runs with restarts", "integer"),
    "lifetime_samples": _spec("Lifetime samples", "integer"),
    "censored_lifetimes": _spec("Lifetimes without interruption", "integer",
                                help="lifetimes ended by the run's end, not by an interruption: Kaplan-Meier "
                                     "counts them as at least that long"),
    "requested": _spec("Requested", "number"), "limit": _spec("Limit", "number"), "in_use": _spec("In use", "number"),
    # GPU-hours
    "reserved_gpu_hours": _spec("Reserved (GPU-h)", "number"), "actual_gpu_hours": _spec("Used (GPU-h)", "number"),
    "used_gpu_hours": _spec("Used (GPU-h)", "number"), "estimated_gpu_hours": _spec("Estimated (GPU-h)", "number"),
    "budget_gpu_hours": _spec("Budget (GPU-h)", "number"), "gpu_hours": _spec("GPU-hours", "number"),
    "monthly_budget_gpu_hours": _spec("Monthly budget (GPU-h)", "number"),
    "consumed_gpu_hours": _spec("Consumed (GPU-h)", "number"),
    "committed_gpu_hours": _spec("Committed (GPU-h)", "number", help=GLOSSARY["committed"]),
    "remaining_gpu_hours": _spec("Remaining (GPU-h)", "number"),
    "closed_window_gpu_hours": _spec("Closed reservation windows (GPU-h)", "number"),
    "overrun_gpu_hours": _spec("Beyond reservation (GPU-h)", "number"),
    "idle_gpu_hours": _spec("Idle (GPU-h)", "number", help=GLOSSARY["idle reserved capacity"]),
    "late_start_gpu_hours": _spec("Idle: late start (GPU-h)", "number"),
    "early_end_gpu_hours": _spec("Idle: early end (GPU-h)", "number"),
    "never_used_gpu_hours": _spec("Idle: never used (GPU-h)", "number"),
    "error_gpu_hours": _spec("Actual − estimated (GPU-h)", "number"),
    # hours, GPUs on average
    "run_hours": _spec("Run time (h)", "number"), "mtbf_h": _spec("Mean time between interruptions (h)", "number"),
    "restart_h": _spec("Restart time (h)", "number", 3), "lifetime_h": _spec("Lifetime (h)", "number", 2),
    "median_gpus": _spec("Median GPUs", "number", 0), "reserved_gpus": _spec("Reserved GPUs (daily average)", "number"),
    "waited_hours": _spec("Waited (h)", "number"),
    "late_hours": _spec("Admitted after the planned start (h)", "number",
                        help="Admit time less the start its last deferral planned; negative: earlier."),
    "unended_past_limit": _spec("Runs with no end past their limit", "integer",
                                help="Still holding accelerators a grace past their time limit: check the job."),
    # shares and ratios
    "idle_share": _spec("Idle share", "share"), "error_share_of_estimate": _spec("Error share of estimate", "share"),
    "backtest_coverage": _spec("Backtest coverage", "share", 0), "level": _spec("Target coverage", "share", 0),
    "median_ratio": _spec("Median actual ÷ estimated", "ratio", 2),
    "factor": _spec("Median factor (×)", "ratio", 2, help=GLOSSARY["calibrated estimate"]),
    "upper_factor": _spec("Upper-bound factor (×)", "ratio", 2, help=GLOSSARY["conformal bound"]),
    # times (UTC)
    "day": _spec("Day (UTC)", "date"), "week": _spec("Week of (UTC)", "date"),
    "reserved_from": _spec("Reserved from (UTC)", "datetime"), "reserved_until": _spec("Reserved until (UTC)", "datetime"),
    "expected_end": _spec("Expected end (UTC)", "datetime"), "hold_status": _spec("Holding"),
    "admitted_at": _spec("Admitted (UTC)", "datetime"),
    "started_at": _spec("Started (UTC)", "datetime"), "ended_at": _spec("Ended (UTC)", "datetime"),
    "decided_at": _spec("Decided (UTC)", "datetime"), "first_deferred_at": _spec("First deferred (UTC)", "datetime"),
    "adapted_since": _spec("Bound adapted since (UTC)", "datetime", help=GLOSSARY["adapted bound"]),
    "drift_since": _spec("Exceeding since (UTC)", "datetime"),
    "earliest_fit": _spec("Earliest fit (UTC)", "datetime", help=GLOSSARY["earliest fit"], key=True),
    "planned_start": _spec("Planned start (UTC)", "datetime", help=GLOSSARY["planned start"], key=True),
    "planned_end": _spec("Planned end (UTC)", "datetime"), "waiting_since": _spec("Waiting since (UTC)", "datetime"),
    "expires_at": _spec("Expires (UTC)", "datetime", help=GLOSSARY["queue age"]),
    # money (the currency is said beside the table)
    "price_per_gpu_hour": _spec("Price per GPU-hour", "number", 2), "reserved_cost": _spec("Reserved cost", "number", 2),
    "used_cost": _spec("Used cost", "number", 2), "idle_cost": _spec("Idle cost", "number", 2),
    "stable_idle_cost": _spec("Idle cost, stable", "number", 2),
    "preemptible_idle_cost": _spec("Idle cost, preemptible", "number", 2),
    # forecast
    "week_start": _spec("Week starting (UTC)", "date"), "horizon": _spec("Weeks ahead", "integer"),
    "p50_gpu_hours": _spec("P50 (GPU-h)", "number"), "p90_gpu_hours": _spec("P90 (GPU-h)", "number"),
    "quota_gpu_hours_per_week": _spec("Quota gives (GPU-h per week)", "number", 0),
    "quota_for_p90_gpus": _spec("Quota for P90 (GPUs)", "integer"), "days_left": _spec("Days left", "integer"),
    "p50_month_end_gpu_hours": _spec("Month end, P50 (GPU-h)", "number"),
    "p90_month_end_gpu_hours": _spec("Month end, P90 (GPU-h)", "number"),
    "exhausts_p50": _spec("Budget used up, P50", "date", key=True), "exhausts_p90": _spec("Budget used up, P90", "date"),
    # Overview's team board
    "runs_out_p90": _spec("Runs out, P90", "date", help="the first day the burn-down's P90 projection reaches the "
                          "month's budget; empty: not this month"),
    "runs_out_p50": _spec("Runs out, P50", "date", help="the same at P50"),
    "budget_left_gpu_hours": _spec("Budget left now (GPU-h)", "number", 0, help="the month's budget less what "
                                   "ended this month and what admitted reservations hold: what the gate would "
                                   "still admit"),
    "left_p50_month_end_gpu_hours": _spec("Left at month end, P50 (GPU-h)", "number", 0,
                                          help="the budget less the burn-down's projected month-end spend; "
                                               "below 0: projected over"),
    "left_p90_month_end_gpu_hours": _spec("Left at month end, P90 (GPU-h)", "number", 0),
    "free_gpus_now": _spec("Free now (GPUs)", "integer", help="the capacity calendar's free accelerators now "
                           "(the most over the team's capacity types)"),
    "fewest_free_7d_gpus": _spec("Fewest free, next 7 days (GPUs)", "integer"),
    "queued_requests": _spec("Waiting requests", "integer"), "oldest_wait_hours": _spec("Oldest wait (h)", "number"),
    "drift": _spec("Drift alarm", help=GLOSSARY["drift alarm"]),
    # budget alerts
    "raised_at": _spec("Raised (UTC)", "datetime"), "alert": _spec("Alert"),
    "percent_used": _spec("Budget used (%)", "number", 0), "sent_at": _spec("Sent (UTC)", "datetime"),
    "attempts": _spec("Delivery attempts", "integer"), "last_error": _spec("Last delivery error", long=True),
    # recovery planner
    "quantity": _spec("Quantity"), "stable": _spec("Stable", "number", 3), "preemptible": _spec("Preemptible", "number", 3),
    "option": _spec("Choice"), "available": _spec("Available", "bool"), "fits_budget": _spec("Fits the budget", "bool"),
    "expected_extra_gpu_hours": _spec("Expected extra (GPU-h)", "number"),
    "expected_total_gpu_hours": _spec("Expected total (GPU-h)", "number"),
    "simulated_extra_gpu_hours_mean": _spec("Simulated extra, mean (GPU-h)", "number"),
    "completion_mean_h": _spec("Completion, mean (h)", "number", 2), "completion_p50_h": _spec("Completion, P50 (h)", "number", 2),
    "completion_p90_h": _spec("Completion, P90 (h)", "number", 2), "completion_p99_h": _spec("Completion, P99 (h)", "number", 2),
    "p_budget_breach": _spec("Chance of breaching the budget", "share"),
    # yes / no
    "promotable": _spec("Promotable", "bool"), "full_evaluation": _spec("Full evaluation", "bool"),
    "enough_lifetimes": _spec("Enough lifetimes", "bool"), "censored": _spec("Censored", "bool"),
}

_UNIT_SUFFIXES: tuple[tuple[str, str, ColumnKind], ...] = (
    ("_gpu_hours", "GPU-h", "number"), ("_gpus", "GPUs", "number"), ("_hours", "h", "number"),
    ("_h", "h", "number"), ("_share", "", "share"), ("_ratio", "", "ratio"), ("_at", "UTC", "datetime"),
)


def column_spec(name: str) -> ColumnSpec:
    """How to show column `name`: from COLUMNS, else derived from the name (snake_case words,
    a unit read from a known suffix such as `_gpu_hours`)."""
    if name in COLUMN_SPECS:
        return COLUMN_SPECS[name]
    for suffix, unit, kind in _UNIT_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            words = name[: -len(suffix)].replace("_", " ")
            label = words[:1].upper() + words[1:] + (f" ({unit})" if unit else "")
            return _spec(label, kind, 2 if kind == "ratio" else 1)
    words = str(name).replace("_", " ")
    return _spec(words[:1].upper() + words[1:])
