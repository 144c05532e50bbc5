"""The shapes of the plain, JSON-able dicts the gate takes and returns, as TypedDicts.

They type the signatures only: at run time every value is an ordinary dict (parsed JSON, a ledger
row, a decision), never a class instance. Units: GPU-hours (`*_gpu_hours`), hours (`*_hours`,
`*_h`), accelerators (`gpus`), gigabytes (`*_gb`); times are naive UTC datetimes.

One Protocol, `DecisionFacts`, names what a decision reads from whoever holds the facts (the
ledger, or the warm gate server's live state).
"""
from __future__ import annotations

from datetime import datetime
from typing import Literal, NotRequired, Protocol, TypedDict, runtime_checkable

Kind = Literal["exploratory", "production", "retraining"]
Capacity = Literal["stable", "preemptible"]
BudgetBasis = Literal["raw", "median", "upper"]
DecisionState = Literal["admit", "defer", "reject"]


class EarlyStop(TypedDict):
    """Keras EarlyStopping semantics on a development metric."""
    metric: str
    mode: Literal["min", "max"]
    patience: NotRequired[int]
    min_delta: NotRequired[float]


class StopPolicy(TypedDict, total=False):
    """A request's stop rules, frozen at admission (docs/rules.md, Stop rules)."""
    max_wall_clock_hours: float
    spend_limit_gpu_hours: float
    max_failed_steps: int
    early_stop: EarlyStop


class Pilot(TypedDict):
    """Pilot measurements; the optional keys get lib.gate.request.PILOT_DEFAULTS on validation, and
    `gpus` (the accelerators the pilot ran on) the request's gpus."""
    steps_per_second: float
    planned_steps: int
    peak_mem_gb: float
    worst_case_steps_per_second: NotRequired[float]
    worst_case_share: NotRequired[float]
    checkpoint_write_s: NotRequired[float]
    checkpoint_interval_steps: NotRequired[int]
    eval_gpu_hours: NotRequired[float]
    data_loading_fraction: NotRequired[float]
    restart_minutes: NotRequired[float]
    gpus: NotRequired[int]


class Request(TypedDict):
    """A training request (docs/request-format.md); exactly one of estimated_gpu_hours / pilot.

    After lib.gate.request.validate, data_snapshot, skip_full_evaluation, holdout_allowance and
    submitted_at (then a datetime or None) are always present.
    """
    run_id: str
    team: str
    kind: Kind
    gpus: int
    gpu_mem_gb: float
    max_runtime_hours: float
    budget_gpu_hours: float
    checkpoint_supported: bool
    expected_interruptions: float
    capacity: Capacity
    data_snapshot: NotRequired[str | None]
    estimated_gpu_hours: NotRequired[float]
    pilot: NotRequired[Pilot]
    stop_policy: NotRequired[StopPolicy]
    skip_full_evaluation: NotRequired[bool]
    holdout_allowance: NotRequired[int]
    submitted_at: NotRequired[str | datetime | None]
    note: NotRequired[str]


class Policy(TypedDict):
    """A team's policy row (data/teams.toml, synced into the ledger's teams table); a policy without
    scaling_efficiency scales linearly (1.0); without the Slurm keys, enforce_spend_limit is true and
    set_time_limit false."""
    team: str
    reserved_gpus: int
    retraining_reserved_gpus: int
    max_gpus_per_job: int
    max_gpu_mem_gb: float
    max_runtime_hours: float
    monthly_budget_gpu_hours: float
    pilot_required_above_gpu_hours: float
    budget_basis_production: BudgetBasis
    budget_basis_exploratory: BudgetBasis
    budget_basis_retraining: BudgetBasis
    preemptible_partitions: list[str]
    policy_version: str
    scaling_efficiency: NotRequired[float]
    enforce_spend_limit: NotRequired[bool]
    set_time_limit: NotRequired[bool]
    queue_max_age_days: NotRequired[int]   # days a deferred request waits in the queue before it expires


class Reservation(TypedDict):
    """An admitted, unfinished reservation holding `gpus` of its team's quota until reserved_until
    (None: no known end). A started run past its planned end holds until its expected end
    (lib.ledger.state.overrun_end): `overrun` True, `planned_until` the planned end it had,
    `past_limit` True once it is a grace past its time limit with no end recorded."""
    kind: Kind
    gpus: int
    reserved_gpu_hours: float
    reserved_until: datetime | None
    run_id: NotRequired[str]
    team: NotRequired[str]
    reserved_from: NotRequired[datetime | None]
    capacity: NotRequired[Capacity]   # the pool it holds accelerators in (lib.gate.capacity, pools)
    overrun: NotRequired[bool]
    planned_until: NotRequired[datetime | None]
    past_limit: NotRequired[bool]


class PoolState(TypedDict):
    """One pool of the cluster's physical accelerators (a capacity type, `[pools.<type>]` in
    data/teams.toml): its `gpus`, every team's reservations held on it (as quotas count them), and
    the scheduler's windows that may take accelerators out of it. `timeline`, when a caller deciding
    many requests has it: lib.gate.capacity.holdings_timeline, from a time at or before the decision's,
    of the reservations the decided request counts (lib.gate.capacity.pool_counted: for retraining,
    not its own team's experiments)."""
    name: str
    gpus: int
    reservations: list[Reservation]
    windows: list[CapacityWindow]
    timeline: NotRequired[list[TimelineStep]]


class TimelineStep(TypedDict):
    """One step of lib.gate.capacity.holdings_timeline: from `at` (naive UTC) until the next step,
    `gpus` accelerators are held."""
    at: datetime
    gpus: int


class CapacityWindow(TypedDict):
    """A span in which the cluster holds `gpus` accelerators back from the gate's requests: a Slurm
    reservation (maintenance, or one for other users or accounts), from `start` to `end` (naive UTC).
    `pool`: the capacity type it holds them in ("stable" | "preemptible"), None for every pool.
    `accounts`, `users`: who may still run inside it, as Slurm lists them (a name starting with "-"
    is excluded rather than allowed; [] when it names none)."""
    name: str
    start: datetime
    end: datetime
    gpus: int
    pool: Capacity | None
    accounts: list[str]
    users: list[str]


class CalibrationRow(TypedDict):
    """One finished run as calibration reads it; team, kind and ended_at for lib.gate.calibration.calibrate;
    admitted_at (when it was reserved or started) orders the runs for the change search when present."""
    estimated_gpu_hours: float
    actual_gpu_hours: float
    censored: bool
    team: NotRequired[str]
    kind: NotRequired[Kind]
    ended_at: NotRequired[datetime | None]
    admitted_at: NotRequired[datetime | None]


class Calibration(TypedDict):
    """The correction of a raw estimate: median = raw × factor, upper = raw × upper_factor (None: unknown).
    adapted_since: ISO time of the first run after a change in the scope's cost ratio the bound
    followed (None: no change); runs_before_change: runs of the window it set aside for it."""
    scope: str | None
    method: Literal["conformal", "tobit", "shifted", "none"]
    n: int
    n_censored: int
    level: float
    factor: float
    upper_factor: float | None
    runs_needed: int
    note: str
    adapted_since: NotRequired[str | None]
    runs_before_change: NotRequired[int]


class InterruptionRate(TypedDict):
    """Interruptions observed on preemptible capacity (lib.ledger.state.interruption_rate): per
    GPU-hour run there, from the team's runs when it has enough (scope "team"), else everyone's ("all");
    source: whether the runs' interruptions were counted from recorded events ("measured"), from
    their bare counts ("counts"), or both ("mixed")."""
    per_gpu_hour: float
    scope: Literal["team", "all"]
    runs: int
    gpu_hours: float
    interruptions: int
    source: NotRequired[Literal["measured", "counts", "mixed"]]


class ExpectedInterruptions(TypedDict):
    """What a preemptible request's estimate expects: the stated number, the ledger's (observed rate ×
    the run's GPU-hours before restarts; None without a rate) and the larger, which the items price."""
    stated: float
    from_ledger: float | None
    used: float
    rate: InterruptionRate | None


class State(TypedDict, total=False):
    """A team's state at decision time; a missing key means: now = the current time, no
    reservations, nothing spent, no snapshots, calibration from calibration_history (default none),
    no pool (only the team's quota limits it)."""
    now: datetime
    reservations: list[Reservation]
    period_spent_gpu_hours: float
    snapshots: set[str] | frozenset[str]
    calibration: Calibration | None
    calibration_history: list[CalibrationRow]
    interruption_rate: InterruptionRate | None
    pools: dict[str, PoolState]   # capacity type -> its pool; absent or without the type: no pool check
    # when the request would start in the gate's line (lib.planning.plan.line; None: not within the
    # plan): the time its capacity reasons' fixes name, instead of the time the holdings alone give
    planned_start: datetime | None


class Alternative(TypedDict):
    """What a fix that suggests another accelerator count leads to: the decision on the request with
    `gpus` accelerators (the pilot's own count kept), same policy and state; its judged GPU-hours and
    estimated wall clock (hours); None when that request's estimate cannot be judged."""
    gpus: int
    judged_gpu_hours: float | None
    wall_hours: float | None


class Reason(TypedDict):
    """One failing check of a decision (codes: lib.gate.reasons.CODES); `alternative` when its fix
    suggests another accelerator count."""
    code: str
    message: str
    requested: float | str | None
    limit: float | None
    in_use: float | None
    unit: str | None
    fix: str
    field: NotRequired[str]
    alternative: NotRequired[Alternative]


class Note(TypedDict):
    """A non-blocking remark of a decision (codes: lib.gate.reasons.NOTE_CODES) and, where one helps,
    its fix. A decision recorded before notes had codes holds plain strings: lib.gate.reasons.as_note
    reads one as {"code": None, "message": it}."""
    code: str | None
    message: str
    fix: NotRequired[str]


class Estimate(TypedDict):
    """A raw estimate (lib.gate.estimate); decide adds the calibrated keys."""
    source: Literal["pilot", "stated"]
    items_gpu_hours: dict[str, float]
    raw_gpu_hours: float
    wall_hours: float
    median_gpu_hours: NotRequired[float]
    upper_gpu_hours: NotRequired[float | None]
    judged_gpu_hours: NotRequired[float]
    judged_at: NotRequired[BudgetBasis]
    calibration: NotRequired[Calibration]
    interruptions: NotRequired[ExpectedInterruptions]


class Decision(TypedDict):
    """What lib.gate.admission.decide returns (docs/request-format.md, The decision); decided_at is ISO seconds."""
    state: DecisionState
    run_id: str | None
    team: str | None
    kind: str | None
    reasons: list[Reason]
    notes: list[Note]
    estimate: Estimate | None
    reserved_gpu_hours: float | None
    policy_version: str | None
    stop_policy_fingerprint: str | None
    decided_at: str
    preempts_experiment_gpus: NotRequired[int]
    replayed: NotRequired[bool]
    recorded_at: NotRequired[str]


@runtime_checkable
class DecisionFacts(Protocol):
    """Everything `lib.ledger.deciding.decide_with(request, now, facts)` reads besides the request:
    `lib.ledger.deciding.LedgerFacts` reads it from an open ledger, the warm gate server's
    `lib.slurm.live.LiveGate` from the state it holds. Both must answer alike, so the server's
    decision is the one `python -m lib submit` would give (tests/test_decision_facts.py holds both to
    this list)."""

    def policy(self, team: str) -> Policy | None:
        """The team's policy; None for a team the ledger does not know."""

    def known_teams(self) -> list[str]:
        """Every team with a policy, sorted (named in an unknown team's reject)."""

    def booked(self, run_id: str) -> bool:
        """True when the run ID already holds a reservation or has run."""

    def recorded_admit(self, request: Request, now: datetime) -> Decision | None:
        """The admit recorded for this very request while its reservation still waits for its run,
        marked "replayed" with its "recorded_at"; None otherwise."""

    def state(self, team: str, now: datetime, kind: str | None, capacity: str | None = None) -> State:
        """The team's state at `now` as `lib.gate.admission.decide` takes it (its calibration for
        `kind`; none when kind is None). `capacity`: the request's capacity type; the interruption
        rate prices only a preemptible request, so for another type it may be left out (None)."""


class RecoverySituation(TypedDict):
    """A run after a preemption or a budget breach (lib.planning.recovery, Situation keys)."""
    event: Literal["preemption", "budget-breach"]
    budget_gpu_hours: float
    spent_gpu_hours: float
    gpus: int
    total_work_gpu_hours: NotRequired[float]
    remaining_work_gpu_hours: NotRequired[float]
    progress_fraction: NotRequired[float]
    last_valid_checkpoint: NotRequired[str | None]
    checkpoint_progress_fraction: NotRequired[float]
    restart_h: NotRequired[float]
    downtime_h: NotRequired[float]
    mtbf_h: NotRequired[float | None]
    checkpoint_interval_h: NotRequired[float | None]
    checkpoint_h: NotRequired[float]
    restarts_so_far: NotRequired[int]
    max_restarts: NotRequired[int | None]
    failed_steps: NotRequired[int]
    max_failed_steps: NotRequired[int | None]
    approved_budget_increase_gpu_hours: NotRequired[float]
    lifetimes_h: NotRequired[list[float]]
    wall_limit_h: NotRequired[float | None]
    run_id: NotRequired[str]


class RecoveryDecision(TypedDict):
    """What lib.planning.recovery.decide_recovery returns (see its docstring)."""
    action: Literal["resume", "restart", "end"]
    code: str
    message: str
    blocking: list[dict]
    stop_reason: str | None
    artifact_status: str
    event: Literal["preemption", "budget-breach"]
    last_valid_checkpoint: str | None
    resume_from: str | None
    budget_gpu_hours: float
    approved_budget_increase_gpu_hours: float
    spent_gpu_hours: float
    remaining_budget_gpu_hours: float
    remaining_work_gpu_hours: float
    total_work_gpu_hours: float
    lost_work_now_gpu_hours: float | None
    restarts_after: int
    options: dict[str, dict]
