"""The plain data of a policy replay (lib.planning.replay.passes): the recorded requests and the replay world
it reads (lib.ledger.replay builds them from the ledger), the window read once (`ReplayWindow`), and the
result it returns. Units: GPU-hours (`_gpu_hours`), hours (`_hours`), accelerators (`gpus`); times are
naive UTC datetimes.
"""
from __future__ import annotations

from datetime import datetime
from typing import Literal, NamedTuple, NotRequired, TypedDict

from lib.gate.contracts import CapacityWindow, Policy, Reservation

Refresh = Literal["exact", "daily"]   # how often calibration is recomputed (lib.planning.replay.passes)


class RecordedRequest(TypedDict):
    """One row of the ledger's decisions table, as replay reads it."""
    decision_id: int
    decided_at: datetime
    run_id: str | None
    team: str | None
    kind: str | None
    request_json: str | None
    state: str
    reason_codes: list[str]
    reserved_gpu_hours: float | None


class RunRecord(TypedDict):
    """A run named by a replayed request, as recorded. `controlled`: its outcome is the replay's
    (admitted inside the window, or never admitted); otherwise it is background, booked from
    `booked_at`. `calibration`: (estimated_gpu_hours, censored) when it counts in calibration."""
    run_id: str
    team: str
    kind: str
    gpus: int
    reserved_until: datetime | None
    reserved_gpu_hours: float | None
    started_at: datetime | None
    ended_at: datetime | None
    actual_gpu_hours: float | None
    admitted_at: datetime | None
    controlled: bool
    booked_at: datetime | None
    calibration: tuple[float, bool] | None
    interruptions: NotRequired[int | None]   # when it counts in the preemptible interruption rate
    capacity: NotRequired[str]               # the capacity type (pool) it holds in; default stable


class BackgroundHolding(TypedDict):
    """A background reservation (one the window's requests do not control): holds `reservation` over
    [start, release) (release None: never)."""
    start: datetime
    release: datetime | None
    reservation: Reservation


# A background run's end: (ended_at, team, kind, actual GPU-hours or None, (estimated, censored)
# when it counts in calibration else None, its interruptions when it counts in the preemptible
# interruption rate else None). Given in time order.
End = tuple


class RecordedWorld(TypedDict):
    """The recorded world: everything the replay needs besides the requests and the policies, as
    recorded (lib.planning.replay.world.ReplayWorld moves through it, the replayed outcomes swapped in)."""
    holdings: list[BackgroundHolding]   # in start order
    ends: list[End]
    runs: dict[str, RunRecord]
    snapshots: dict[str | None, set[str]]   # team (None: every team) -> snapshot names
    rate_base: NotRequired[dict[str, tuple[int, float, int]]]  # team -> (runs, GPU-hours, interruptions)
    min_rate_runs: NotRequired[int]         # runs a team needs before its own rate is used
    pools: NotRequired[dict[str, int]]      # capacity type -> the cluster's accelerators (the ledger's [pools])
    windows: NotRequired[list[CapacityWindow]]   # the scheduler's windows not ended by the window's start


class ReplayWindow(NamedTuple):
    """A replay's window read once (lib.ledger.replay.read_window), for the replays made over it: the
    proposals, and each pool size or quota cut of a search (lib.planning.replay.search, .rightsizing)."""
    requests: list[RecordedRequest]   # the window's recorded decisions, in time order
    world: RecordedWorld              # what they were decided in
    policies: dict[str, Policy]       # team -> its policy in the ledger (the baseline)
    span: dict                        # {"from": start, "to": end}: the window is [start, end)


class TeamResult(TypedDict):
    """One team's replay: recorded, baseline (the current policy replayed) and proposed, same keys under
    each (lib.planning.replay.report.tally_summary)."""
    team: str
    policy_version: str | None
    recorded: dict
    baseline: dict
    proposed: dict


class ReplayResult(TypedDict):
    """What `replay` returns (the command line prints it as JSON)."""
    window: dict
    requests: int
    replayable: int
    recorded: dict                  # state -> count: as recorded
    baseline: dict                  # state -> count: the current policy replayed by the same engine
    proposed: dict                  # state -> count: the proposal replayed
    overall: dict                   # recorded/baseline/proposed -> every team's tally_summary together
    agreement: float | None         # share of replayed requests the proposal decides as recorded
    reason_agreement: float | None
    baseline_agreement: float | None   # share the baseline decides as recorded (the replay's own fidelity)
    baseline_reason_agreement: float | None
    proposed_vs_baseline_changed: int  # requests whose state the proposal changes from the baseline
    baseline_is_proposed: bool      # the proposal is the current policy: one pass served both
    pools: dict                     # proposed/baseline -> capacity type -> accelerators
    changed: dict
    changed_requests: list[dict]
    excluded: dict
    teams: list[TeamResult]
    calibration_level: dict
    calibration_refresh: str
    calibrations_computed: int
