"""The budget burn-down's projected run-out days, kept warm in the gate server for the admit's budget
line (lib.slurm.hook.budget_text): never computed on an sbatch's path.

`RunOuts.get()` answers from memory at once: each team's (P50 day, P90 day) as the burn-down
(lib.dashboard.forecasts.budget_outlook, the one Overview and Forecast show) last gave them, or None
before the first computation. A get that finds them older than `max_age_s` (or the month changed)
starts one computation in a thread of its own; sbatch never waits for it. The computation reads the
ledger in the LiveGate's turn (`ledger_turn`: the process opens the ledger once at a time), fits after
it (decisions that need the ledger never wait for a fit), and its forecast fits are cached per weekly
history (lib.planning.forecast_models), so a refresh after the
first costs the reads and the forward plan, not a fit.
"""
from __future__ import annotations

import datetime as dt
import sys
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path

MAX_AGE_S = 300.0     # run-out days (a day's resolution) older than this are recomputed, in the background, on the next get


class RunOuts:
    """{team: (P50 day | None, P90 day | None)} of one ledger, refreshed off the sbatch path."""

    def __init__(self, db: Path, ledger_turn: AbstractContextManager, *,
                 max_age_s: float = MAX_AGE_S):
        self.db, self.ledger_turn, self.max_age_s = db, ledger_turn, max_age_s
        self._days: dict[str, tuple] | None = None
        self._at = -float("inf")
        self._month: tuple | None = None
        self._mu = threading.Lock()
        self._running: threading.Thread | None = None
        self.error: str | None = None

    def get(self, now: dt.datetime) -> dict[str, tuple] | None:
        """The last run-out days (None before the first computation has finished); starts a
        background refresh when they are stale."""
        with self._mu:
            stale = (time.monotonic() - self._at > self.max_age_s or self._month != (now.year, now.month))
            if stale and self._running is None:
                self._running = threading.Thread(target=self._refresh, args=(now,), name="gate-runouts",
                                                 daemon=True)
                self._running.start()
            return self._days if self._month == (now.year, now.month) else None

    def wait(self, timeout_s: float = 60.0) -> None:
        """Wait for a refresh under way (tests, a server warming up)."""
        t = self._running
        if t is not None:
            t.join(timeout_s)

    def _refresh(self, now: dt.datetime) -> None:
        try:
            days = compute_runouts(self.db, now, self.ledger_turn)
            with self._mu:
                self._days, self._month, self.error = days, (now.year, now.month), None
        except Exception as exc:  # a locked or damaged ledger: the line says "not known yet", tried again later
            self.error = f"{type(exc).__name__}: {exc}"
            print(f"lib.slurm.server: budget run-out days not computed: {self.error}", file=sys.stderr, flush=True)
        finally:
            with self._mu:
                self._at = time.monotonic()
                self._running = None


def compute_runouts(db, now: dt.datetime, ledger_turn: AbstractContextManager) -> dict[str, tuple]:
    """{team: (P50 run-out day, P90 run-out day)} of this month's burn-down at `now`, every team with a
    policy (None: not this month)."""
    # here: pandas and the forecast's statsmodels are heavy, and a server that never admits needs neither
    from lib.dashboard.filters import Filters
    from lib.dashboard.forecasts import budget_outlook
    import pandas as pd
    burn = budget_outlook(Filters(date_from=now.date(), date_to=now.date()), db, now, turn=ledger_turn)["burn"]

    def day(v):
        return None if pd.isna(v) else v
    return {r["team"]: (day(r["exhausts_p50"]), day(r["exhausts_p90"])) for r in burn.to_dict("records")}


def month_budget(live, team: str, kind: str | None, now: dt.datetime) -> tuple[float, float, float] | None:
    """(monthly budget, spent this month, held by admitted reservations not ended) GPU-hours of `team`
    as the LiveGate `live` counts them now (what its next decision reads); None for a team without a
    policy, or when a shared authority holds the month's numbers."""
    policy = live.policy(team)
    if policy is None or live.shared is not None:
        return None
    with live.decisions_turn:  # the state reads the held reservations that decisions change
        state = live.state(team, now, kind)
    held = sum(r["reserved_gpu_hours"] for r in state["reservations"] if r["team"] == team)
    return float(policy["monthly_budget_gpu_hours"]), float(state["period_spent_gpu_hours"]), float(held)
