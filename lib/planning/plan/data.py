"""The plain data of the forward plan (lib.planning.plan.forward): what it reads (lib.ledger.plan
builds it from the ledger) and what it returns. Units: GPU-hours (`_gpu_hours`), accelerators
(`gpus`); times are naive UTC datetimes.
"""
from __future__ import annotations

import datetime as dt
from datetime import datetime
from typing import NotRequired, TypedDict

from lib.gate.contracts import Calibration, CapacityWindow, InterruptionRate, Policy, Reservation

MAX_PLAN_DAYS = 366     # the longest horizon of a plan, and how far ahead a what-if may start
SERVE_ORDER = ("scheduled retraining first, then the request waiting longest (its first deferral), "
               "then by run ID")


class WaitingRequest(TypedDict):
    """A request waiting in the queue: its run ID's latest decision is a deferral and it has not been
    booked since (lib.ledger.plan)."""
    run_id: str
    team: str | None
    kind: str | None
    gpus: int | None
    capacity: str
    waiting_since: datetime          # its first deferral in the queue's window
    expires_at: datetime             # waiting_since + its team's queue_max_age_days
    request: dict | None             # the latest deferral's request JSON (None: not a JSON object)


class PlanInputs(TypedDict):
    """Everything the plan reads, as the ledger holds it at `as_of`."""
    as_of: datetime
    policies: dict[str, Policy]
    held: list[Reservation]          # every held reservation (team and capacity set), run-ID order
    waiting: list[WaitingRequest]
    spent: dict[tuple[str, datetime], float]     # (team, month start) -> GPU-hours of runs ended then
    snapshots: dict[str | None, set[str]]        # team (None: every team) -> snapshot names
    calibrations: dict[tuple[str, str], Calibration]   # (team, kind) -> the gate's calibration at as_of
    interruption_rates: dict[str, InterruptionRate | None]
    pools: dict[str, int]            # capacity type -> the cluster's accelerators of that type
    windows: list[CapacityWindow]    # the scheduler's reservations not ended by as_of


class QueueRow(TypedDict):
    """One waiting request as planned. planned_start None: not within the horizon (see note and
    blocking). ahead: run IDs the plan starts before it that hold what it needed (its team's quota
    or budget, or its pool), by planned start, at most AHEAD_SHOWN of `ahead_count`. reasons: the
    codes `python -m lib check` gives it at as_of (each once); blocking: those of its last try."""
    run_id: str
    team: str | None
    kind: str | None
    gpus: int | None
    capacity: str
    waiting_since: datetime
    expires_at: datetime
    planned_start: datetime | None
    planned_end: datetime | None
    ahead: list[str]
    ahead_count: int
    reasons: list[str]
    blocking: list[str]
    note: str


class DayRow(TypedDict):
    """A team's accelerators on one day ahead, for requests on one capacity type (None: no pool is
    configured, so the type makes no difference): at as_of for today, else at the day's start.
    free_gpus: the most a non-retraining request of the team would be admitted with then (quota,
    retraining set-aside and pool); retraining_free_gpus: the same for scheduled retraining."""
    date: dt.date
    team: str
    capacity: str | None
    quota_gpus: int
    retraining_reserved_gpus: int
    committed_gpus: int
    free_gpus: int
    retraining_free_gpus: int
    pool_gpus: int | None
    pool_held_gpus: int | None
    window_gpus: int | None


class PoolDay(TypedDict):
    """A pool on one day ahead (at as_of for today, else at the day's start): its accelerators, the
    quotas that draw on it (every team's), what reservations and the scheduler's windows hold."""
    date: dt.date
    pool: str
    gpus: int
    quotas_gpus: int
    held_gpus: int
    window_gpus: int
    free_gpus: int


class PlanHolding(TypedDict):
    """A holding of the plan: a reservation held in the ledger (planned False) or started by the plan,
    from `start` until `end` (None: no known end)."""
    run_id: str
    team: str
    kind: str
    capacity: str | None
    gpus: int
    start: datetime | None
    end: datetime | None
    gpu_hours: float
    planned: bool


class Plan(TypedDict):
    as_of: datetime
    days: int
    horizon_end: datetime
    serve_order: str
    queue: list[QueueRow]
    calendar: list[DayRow]
    pools: list[PoolDay]
    holdings: list[PlanHolding]
    decisions: int                   # decide calls the plan made
    expired: NotRequired[dict]       # added by the ledger side: requests that waited past their age
