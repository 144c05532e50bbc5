"""The replay world as time moves forward (lib.planning.replay.passes's rules): which reservations hold a
team's accelerators, what each team spent in a month, which run IDs are booked, and what calibration
and interruption rate the runs finished so far give. `ReplayWorld.state` is the state `decide` sees
at a time; `admit` books a request the gate admitted. Driven one request at a time in time order:
by the policy replay over recorded requests, and by the demo history as it generates them, so both
decide under the same state. Units: GPU-hours (`_gpu_hours`), hours (`_hours`), accelerators (`gpus`).
"""
from __future__ import annotations

import heapq
from collections import Counter
from datetime import datetime, timedelta

from lib.gate.calibration import DEFAULT_LEVEL, DEFAULT_MAX_RUNS, DEFAULT_WINDOW_DAYS
from lib.gate.capacity import cured_by_waiting
from lib.gate.contracts import Decision, Policy, PoolState, Reservation, State
from lib.gate.terms import KINDS, month_start
from lib.planning.holdings import Holdings, expected_end
from lib.planning.replay.data import RecordedWorld, Refresh, RunRecord
from lib.planning.replay.history import CalibrationScopes, Calibrations, InterruptionRates


class Setting:
    """What one pass decides under: team -> Policy, team -> calibration level, pool -> accelerators
    (and the scheduler's windows), and the pools' reservations as the pass moves."""
    __slots__ = ("policies", "levels", "pools", "windows", "pool_holdings")

    def __init__(self, policies: dict[str, Policy], levels: dict[str, float], pools: dict[str, int], windows):
        self.policies, self.levels, self.pools, self.windows = policies, levels, dict(pools), windows
        self.pool_holdings = Holdings()   # pool name -> its holders (every team's), as the plan's world keeps them

    def copy(self, pools: dict[str, int]) -> Setting:
        """Another with these `pools` and the same reservations held in them, to go on on its own."""
        out = Setting(self.policies, self.levels, pools, self.windows)
        out.pool_holdings = self.pool_holdings.copy()
        return out

    def key(self) -> tuple:
        return (self.policies, {t: self.levels.get(t, DEFAULT_LEVEL) for t in self.policies}, self.pools)

    def hold(self, release, holder: Reservation) -> None:
        if holder.get("capacity") in self.pools:
            self.pool_holdings.hold(holder["capacity"], release, holder)

    def pool_states(self, now) -> dict[str, PoolState] | None:
        """The `pools` of the state decide takes at now (lib.gate.contracts.PoolState), None without pools."""
        if not self.pools:
            return None
        return {name: {"name": name, "gpus": gpus, "reservations": self.pool_holdings.held(name, now),
                       "windows": self.windows} for name, gpus in self.pools.items()}


class ReplayWorld:
    """The replay world as one pass moves through it, built from the recorded world. `learn`: runs that
    end feed calibration and the interruption rate (a pass that decides); without it they only spend (a
    pass that takes recorded decisions). `cals` (the calibration per request,
    lib.planning.replay.history.Calibrations) may be wrapped by a driver that recomputes it less often.
    `setting`: the pools the pass decides with (None: none); `shared`: calibrations already fitted over
    this window, by the rows they were fitted on; `kept`: those fitted in earlier processes
    (lib.planning.replay.kept.KeptPasses)."""

    def __init__(self, world: RecordedWorld, *, refresh: Refresh = "exact", learn: bool = True,
                 max_runs: int = DEFAULT_MAX_RUNS, window_days: int = DEFAULT_WINDOW_DAYS,
                 setting: Setting | None = None, shared: dict | None = None, kept=None):
        self.runs, self.snapshots, self.learn = world["runs"], world["snapshots"], learn
        self.scopes = CalibrationScopes(max_runs, window_days)
        self.rates = InterruptionRates(world.get("rate_base", {}), world.get("min_rate_runs", 20), window_days)
        self.cals = Calibrations(self.scopes, refresh, shared, kept)
        self.shared, self.max_runs, self.window_days = shared, max_runs, window_days
        self._snaps: dict = {}                # team -> the snapshots its requests see
        self.setting = setting
        self.spent: Counter = Counter()       # (team, month start) -> GPU-hours ended in that month
        self.team_holdings = Holdings()       # team -> its holders
        self.booked: dict[str, datetime] = {}  # run ID -> when it became booked
        self.admitted: set[str] = set()       # run IDs this pass's own decisions admitted
        # run ID -> (team, capacity type, since): deferred by this pass for what waiting cures, and not
        # admitted since (the line as the pass knows it: see `someone_waits`)
        self.waiting: dict[str, tuple[str, str, datetime]] = {}
        for run in self.runs.values():
            if not run["controlled"] and run["booked_at"] is not None:
                self.booked[run["run_id"]] = run["booked_at"]
        self.dynamic: list = []               # heap of (time, seq, End) for runs booked by this pass
        self.seq = 0                          # pushes so far: equal times end in booking order
        self.background, self.ends = world["holdings"], world["ends"]
        self.hi = self.ei = 0

    def copy(self, pools: dict[str, int] | None = None) -> ReplayWorld:
        """Another at the same point of the pass, to go on on its own (`pools`: with these pool sizes
        instead). What never changes during a pass (the world, the rows, the reservations) is shared."""
        out = object.__new__(ReplayWorld)
        out.__dict__.update(self.__dict__)
        out.scopes, out.rates = self.scopes.copy(), self.rates.copy()
        out.cals = self.cals.copy(out.scopes)
        out._snaps, out.spent, out.team_holdings = dict(self._snaps), self.spent.copy(), self.team_holdings.copy()
        out.booked, out.admitted, out.dynamic = dict(self.booked), set(self.admitted), list(self.dynamic)
        out.waiting = dict(self.waiting)
        if self.setting is not None:
            out.setting = self.setting.copy(self.setting.pools if pools is None else pools)
        return out

    def _end(self, e) -> None:
        ended_at, team, kind, actual, cal, interruptions = e
        if actual is None:
            return
        self.spent[(team, month_start(ended_at))] += actual
        if self.learn:
            if cal is not None:
                self.scopes.add(ended_at, team, kind, cal[0], actual, cal[1])
            if interruptions is not None:
                self.rates.add(ended_at, team, actual, interruptions)

    def advance(self, now: datetime) -> None:
        """Everything that happened by `now`, in time order: run ends (background and booked), then the
        background holdings that started."""
        ends, dynamic = self.ends, self.dynamic
        while True:
            t_static = ends[self.ei][0] if self.ei < len(ends) else None
            t_dyn = dynamic[0][0] if dynamic else None
            if t_static is not None and t_static <= now and (t_dyn is None or t_static <= t_dyn):
                self._end(ends[self.ei])
                self.ei += 1
            elif t_dyn is not None and t_dyn <= now:
                self._end(heapq.heappop(dynamic)[2])
            else:
                break
        background = self.background
        while self.hi < len(background) and background[self.hi]["start"] <= now:
            h = background[self.hi]
            self._hold(h["reservation"]["team"], h["release"], h["reservation"])
            self.hi += 1

    def begin(self, now: datetime) -> None:
        """`advance(now)` for the pass's first request. The run ends up to then are the same in every
        pass over the window (no pass has booked a run yet), so the first pass keeps what they leave
        (spend, calibration rows, interruption rates) in `shared` and the others start from a copy."""
        if self.shared is None or self.dynamic or self.ei:
            self.advance(now)
            return
        key = ("ends before", now, self.learn, self.max_runs, self.window_days, id(self.ends), len(self.ends))
        kept = self.shared.get(key)
        if kept is None:
            ends = self.ends
            while self.ei < len(ends) and ends[self.ei][0] <= now:
                self._end(ends[self.ei])
                self.ei += 1
            kept = self.shared[key] = (self.ei, self.spent.copy(), self.scopes.copy(), self.rates.copy())
        self.ei, spent, scopes, rates = kept
        self.spent, self.scopes, self.rates = spent.copy(), scopes.copy(), rates.copy()
        self.cals.scopes = self.scopes
        self.advance(now)

    def _hold(self, team: str, release: datetime | None, reservation: Reservation) -> None:
        """Add a holder of `team`'s accelerators (and of its pool's) until `release` (None: never)."""
        self.team_holdings.hold(team, release, reservation)
        if self.setting is not None:
            self.setting.hold(release, reservation)

    def held(self, team: str, now: datetime) -> list[Reservation]:
        """The team's holders at `now`, ordered by run ID as the ledger gives them (read, never change)."""
        return self.team_holdings.held(team, now)

    def is_booked(self, run_id, now: datetime) -> bool:
        """Whether `run_id` already holds a reservation or has run at `now`."""
        return isinstance(run_id, str) and run_id in self.booked and self.booked[run_id] <= now

    def state(self, team: str, kind, policy: Policy | None, level: float, now: datetime,
              holders: list[Reservation]) -> State:
        """The state `decide` sees for a `kind` request of `team` at `now`, `holders` holding its quota."""
        cal = self.cals.get(team, kind, level, now) if policy is not None and kind in KINDS else None
        snaps = self._snaps.get(team) if isinstance(team, str) else set()
        if snaps is None:   # the snapshots never change during a pass: one set per team
            snaps = self._snaps[team] = self.snapshots.get(None, set()) | self.snapshots.get(team, set())
        out: State = {"now": now, "reservations": holders,
                      "period_spent_gpu_hours": float(self.spent[(team, month_start(now))]),
                      "snapshots": snaps, "calibration_history": [], "calibration": cal,
                      "interruption_rate": self.rates.rate(team, now) if policy is not None else None}
        pools = self.pool_states(now)
        if pools is not None:
            out["pools"] = pools
        return out

    def pool_states(self, now: datetime) -> dict[str, PoolState] | None:
        """The pools' states at `now` (None: the pass has no pools)."""
        return None if self.setting is None else self.setting.pool_states(now)

    def _push_end(self, end: datetime, team: str, run: RunRecord) -> None:
        heapq.heappush(self.dynamic, (end, self.seq, (end, team, run["kind"], run["actual_gpu_hours"],
                                                      run["calibration"], run.get("interruptions"))))
        self.seq += 1

    def admit(self, request: dict, run: RunRecord | None, decision: Decision, now: datetime) -> float | None:
        """Book a request admitted at `now`: a run holds its accelerators from `now` until it ends (as
        the gate holds one: lib.ledger.state.held_condition), its recorded end shifted to this
        admission (`run`'s actual duration since its admitted_at), and spends its actual then; a run
        with no recorded end holds for good. A request with no run in the world holds its reserved
        window (now + the decision's wall hours). Returns the run's actual GPU-hours (None: it never
        ran, or has not ended)."""
        team, run_id = request["team"], request.get("run_id")
        until = now + timedelta(hours=decision["estimate"]["wall_hours"])
        release = until if run is None else None
        if run is not None and run["ended_at"] is not None:
            release = now + (run["ended_at"] - (run["admitted_at"] or now))
            self._push_end(release, team, run)
        holder: Reservation = {"run_id": run_id, "team": team, "kind": request["kind"], "gpus": int(request["gpus"]),
                               "reserved_gpu_hours": float(decision["reserved_gpu_hours"]),
                               "reserved_from": now.replace(microsecond=0), "reserved_until": expected_end(until, release),
                               "capacity": request.get("capacity", "stable")}
        self._hold(team, release, holder)
        if isinstance(run_id, str):
            self.booked.setdefault(run_id, now)
            self.admitted.add(run_id)
            self.waiting.pop(run_id, None)
        return run["actual_gpu_hours"] if run is not None and run["ended_at"] is not None else None

    def defer(self, request: dict, codes, now: datetime) -> None:
        """A deferral at `now`: a request that waiting cures waits from its first such deferral until
        this pass admits it."""
        run_id = request.get("run_id")
        if isinstance(run_id, str) and cured_by_waiting(codes):
            self.waiting.setdefault(run_id, (request.get("team"), request.get("capacity", "stable"), now))

    def someone_waits(self, request: dict, now: datetime, max_age_days: float) -> bool:
        """Whether another request of `request`'s team, or of its pool, waits at `now` (deferred by this
        pass within `max_age_days` and not admitted since): then the gate's line, not its room, decides
        whether it starts."""
        team, pool, run_id = request.get("team"), request.get("capacity", "stable"), request.get("run_id")
        pooled = self.setting is not None and pool in self.setting.pools
        since = now - timedelta(days=max_age_days)
        return any(r != run_id and at >= since and (t == team or (pooled and p == pool))
                   for r, (t, p, at) in self.waiting.items())

    def keep_recorded(self, state: str, decided_at: datetime, run: RunRecord | None) -> None:
        """A recorded decision taken as it was: an admit whose run the world knows (and whose outcome
        is the replay's) holds its accelerators and spends as recorded."""
        if state != "admit" or run is None or not run["controlled"]:
            return
        holder: Reservation = {"run_id": run["run_id"], "team": run["team"], "kind": run["kind"],
                               "gpus": int(run["gpus"]), "reserved_gpu_hours": float(run["reserved_gpu_hours"] or 0.0),
                               "reserved_from": decided_at.replace(microsecond=0),
                               "reserved_until": expected_end(run["reserved_until"], run["ended_at"]),
                               "capacity": run.get("capacity", "stable")}
        end = run["ended_at"]
        if end is not None:
            self._push_end(end, run["team"], run)
        self._hold(run["team"], end, holder)
        self.booked.setdefault(run["run_id"], decided_at)
