"""The gate's line laid out in time (conservative backfill): the reservations the ledger holds, and each
waiting request placed, in the order the gate serves them, at the earliest time it fits for its whole
run beside everything placed before it. A request placed later never moves one placed earlier: that is
the promise "no later request delays an earlier one". Pure over the plan's inputs
(lib.planning.plan.data.PlanInputs).

What holds, and when (`Line.state` hands `lib.gate.admission.decide` the state at a time t):
- a reservation the ledger holds at as_of holds its team's quota (and its pool) from as_of until its
  expected end (`reserved_until`: lib.ledger.state.held_reservations, an overrun's expected end
  included), as the gate counts it;
- a request placed at t holds its `gpus` from t for its estimated wall clock (t + the decision's wall
  hours, as lib.ledger.recording books an admit).
A team's quota, its experiments' share beside the retraining set-aside, its retraining, and each pool
are step functions (lib.planning.plan.profile.Profile); a request fits from t when each it draws on
leaves room for it over [t, t + wall) (`fit`).

Budgets: a reservation spends what it reserved at its end; a month's spend starts from what the ledger
had ended in it, and a new month resets it. A request placed later in the same month counts as
committed for every request decided before its start, so a later request never takes the budget an
earlier one was promised within its month.
Units: accelerators (`gpus`), GPU-hours, hours; times are naive UTC datetimes.
"""
from __future__ import annotations

from datetime import datetime

from lib.gate.capacity import span_end, window_applies
from lib.gate.contracts import Decision, Policy, Reservation, State
from lib.gate.terms import month_start, next_month_start
from lib.planning.plan.data import PlanHolding, PlanInputs, WaitingRequest
from lib.planning.plan.profile import Profile


class Line:
    """The ledger's holdings at as_of and the requests placed so far, with the step functions of every
    team's and pool's accelerators (see the module docstring). Holdings are only added (`place`)."""

    def __init__(self, inputs: PlanInputs):
        self.inputs = inputs
        self.as_of = inputs["as_of"]
        self.pool_sizes = dict(inputs["pools"])
        self.holdings: list[PlanHolding] = []        # the ledger's, then the placed, in placing order
        self.by_key: dict = {}                       # team, or ("pool", name) -> [(holding, reservation)]
        self.steps: dict = {}                        # see `_steps_of`
        self.placed: dict[str, PlanHolding] = {}     # run ID -> the holding the plan placed
        self._snapshots: dict = {}
        for r in inputs["held"]:
            self._hold(r, self.as_of, r["reserved_until"], planned=False)

    # ----------------------------------------------------------------- holding

    def _steps(self, key) -> Profile:
        s = self.steps.get(key)
        if s is None:
            s = self.steps[key] = Profile(self.as_of)
        return s

    def _hold(self, r: Reservation, start: datetime, end: datetime | None, *, planned: bool) -> PlanHolding:
        team, kind, gpus, pool = r["team"], r["kind"], int(r["gpus"]), r.get("capacity")
        h: PlanHolding = {"run_id": r.get("run_id") or "", "team": team, "kind": kind, "capacity": pool,
                          "gpus": gpus, "start": start if planned else r.get("reserved_from"), "end": end,
                          "gpu_hours": float(r["reserved_gpu_hours"] or 0.0), "planned": planned}
        self.holdings.append(h)
        held = {**r, "reserved_until": end} if planned else r
        self.by_key.setdefault(team, []).append((h, held, start))
        retraining = kind == "retraining"
        self._steps(("team", team)).add(start, end, gpus)
        self._steps(("retraining" if retraining else "experiments", team)).add(start, end, gpus)
        if pool in self.pool_sizes:
            self.by_key.setdefault(("pool", pool), []).append((h, held, start))
            self._steps(("pool", pool)).add(start, end, gpus)
            if not retraining:
                self._steps(("pool-experiments", pool, team)).add(start, end, gpus)
        if planned:
            self.placed[h["run_id"]] = h
        return h

    def place(self, w: WaitingRequest, decision: Decision, t: datetime, wall: float) -> PlanHolding:
        """The admitted request holds from t for `wall` hours (its estimated wall clock)."""
        r: Reservation = {"run_id": w["run_id"], "team": w["team"], "kind": w["kind"], "gpus": int(w["gpus"]),
                          "reserved_gpu_hours": float(decision["reserved_gpu_hours"]), "reserved_from": t,
                          "reserved_until": span_end(t, wall), "capacity": w["capacity"]}
        return self._hold(r, t, r["reserved_until"], planned=True)

    # ----------------------------------------------------------------- reading

    def held(self, key, t: datetime) -> list[Reservation]:
        """The reservations holding under `key` (a team, or ("pool", name)) at t, in run-ID order."""
        rows = [(h["run_id"], held) for h, held, start in self.by_key.get(key, ())
                if start <= t and (held["reserved_until"] is None or held["reserved_until"] > t)]
        rows.sort(key=lambda x: x[0])
        return [held for _, held in rows]

    def planned_in(self, key, start: datetime, end: datetime | None) -> list[str]:
        """The run IDs the plan placed under `key` holding at some moment of [start, end)."""
        return [h["run_id"] for h, _, _ in self.by_key.get(key, ()) if h["planned"]
                and (h["end"] is None or h["end"] > start) and (end is None or h["start"] < end)]

    def spent(self, team: str, t: datetime) -> float:
        """The team's GPU-hours of the month of t counted as spent at t: the ledger's, the reservations
        ended by t within the month, and those the plan places later in the month (promised)."""
        month, nxt = month_start(t), next_month_start(t)
        total = float(self.inputs["spent"].get((team, month), 0.0))
        for h, _, start in self.by_key.get(team, ()):
            end = h["end"]
            if end is not None and month <= end <= t and end > self.as_of:
                total += h["gpu_hours"]
            elif h["planned"] and t < start < nxt:
                total += h["gpu_hours"]
        return total

    def state(self, team: str | None, kind: str | None, t: datetime, *, ledger_only: bool = False) -> State:
        """The state `decide` takes for a `kind` request of `team` at t: what holds then (with
        `ledger_only`, the ledger's alone, as `python -m lib check` reads it at as_of)."""
        def held(key):
            out = self.held(key, t)
            return [r for r in out if not (ledger_only and r.get("run_id") in self.placed)]
        snaps = self._snapshots.get(team)
        if snaps is None:
            snaps = self._snapshots[team] = (self.inputs["snapshots"].get(None, set())
                                             | self.inputs["snapshots"].get(team, set()))
        return {"now": t, "reservations": held(team),
                "period_spent_gpu_hours": (float(self.inputs["spent"].get((team, month_start(t)), 0.0))
                                           if ledger_only else self.spent(team, t)),
                "snapshots": snaps, "calibration_history": [],
                "calibration": self.inputs["calibrations"].get((team, kind)),
                "interruption_rate": self.inputs["interruption_rates"].get(team),
                "pools": {name: {"name": name, "gpus": gpus, "reservations": held(("pool", name)),
                                 "windows": self.inputs["windows"]}
                          for name, gpus in self.pool_sizes.items()}}

    # ----------------------------------------------------------------- fitting

    def _limits(self, team: str, kind: str, capacity: str | None, gpus: int,
                policy: Policy) -> list[tuple[Profile, int]]:
        """(steps, room) pairs a `kind` request of `team` for `gpus` must stay within."""
        quota, set_aside = policy["reserved_gpus"], policy["retraining_reserved_gpus"]
        if kind == "retraining":   # experiments are preempted for it
            limits = [(self._steps(("retraining", team)), quota - gpus)]
        else:
            limits = [(self._steps(("team", team)), quota - gpus)]
            if set_aside:
                limits.append((self._steps(("experiments", team)), quota - set_aside - gpus))
        size = self.pool_sizes.get(capacity)
        if size is not None:
            pool = self._steps(("pool", capacity))
            windows = [w for w in self.inputs["windows"] if window_applies(w, capacity, team)]
            if windows or kind == "retraining":
                pool = pool.copy()
                if kind == "retraining":   # its own team's experiments are preempted
                    mine = self.steps.get(("pool-experiments", capacity, team))
                    for i, at in enumerate(mine.times if mine else ()):
                        pool.add(at, mine.times[i + 1] if i + 1 < len(mine.times) else None, -mine.values[i])
                for w in windows:
                    pool.add(w["start"], w["end"], int(w["gpus"]))
            limits.append((pool, size - gpus))
        return limits

    def fit(self, team: str, kind: str, capacity: str | None, gpus: int, t: datetime, wall: float,
            policy: Policy) -> datetime | None:
        """The earliest time >= t from which a request fits for `wall` hours beside every holding of
        the line (its team's quota, the retraining set-aside, its pool with the scheduler's windows);
        None: never."""
        limits = self._limits(team, kind, capacity, gpus, policy)
        at = t
        while True:
            moved = False
            for steps, room in limits:
                got = steps.earliest(at, wall, room)
                if got is None:
                    return None
                if got > at:
                    at, moved = got, True
            if not moved:
                return at

    def change_after(self, team: str, capacity: str | None, t: datetime) -> datetime | None:
        """The next time after t at which what the team or its pool holds changes (None: never)."""
        times = [s.change_after(t) for key, s in self.steps.items()
                 if key[1] == team or (key[0] == "pool" and key[1] == capacity)]
        times += [w[k] for w in self.inputs["windows"] for k in ("start", "end") if w[k] > t]
        times = [x for x in times if x is not None]
        return min(times) if times else None
