"""The admit's budget line (`budget_text`): the burn-down's projected run-out days, kept warm in the
gate server, and the month's budget as the server counts it (`month_budget`).

`RunOuts.get()` answers from memory at once: each team's (P50 day, P90 day) as the burn-down
(lib.ledger.forecast.forecast, the one Overview and Forecast show) last gave them, or None
before the first computation. A get that finds them older than `max_age_s` (or the month changed)
starts one computation; sbatch never waits for it. The computation runs in a process of its own at
a lower priority (`python -m lib.slurm.runouts --db LEDGER`: the forecast's imports and fits never
hold the server's interpreter, and its read-only open of the ledger is one more reader, as the app's
are), watched by a thread of the server.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from lib.gate.terms import utcnow

MAX_AGE_S = 300.0     # run-out days (a day's resolution) older than this: recomputed in the background on a get
COMPUTE_TIMEOUT_S = 300.0
NICE = 10             # the computation's lower CPU priority: decisions first
REPO = Path(__file__).resolve().parent.parent.parent


class RunOuts:
    """{team: (P50 day | None, P90 day | None)} of one ledger, refreshed off the sbatch path."""

    def __init__(self, db: Path, *, max_age_s: float = MAX_AGE_S):
        self.db, self.max_age_s = Path(db), max_age_s
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
            stale = time.monotonic() - self._at > self.max_age_s or self._month != (now.year, now.month)
            if stale and self._running is None:
                self._running = threading.Thread(target=self._refresh, args=(now,), name="gate-runouts",
                                                 daemon=True)
                self._running.start()
            return self._days if self._month == (now.year, now.month) else None

    def wait(self, timeout_s: float = COMPUTE_TIMEOUT_S) -> None:
        """Wait for a refresh under way (tests)."""
        t = self._running
        if t is not None:
            t.join(timeout_s)

    def _refresh(self, now: dt.datetime) -> None:
        try:
            done = subprocess.run([sys.executable, "-m", "lib.slurm.runouts", "--db", str(self.db),
                                   "--now", now.isoformat()], cwd=REPO, capture_output=True, text=True,
                                  timeout=COMPUTE_TIMEOUT_S, preexec_fn=lambda: os.nice(NICE),
                                  env={**os.environ, "PYTHONPATH": str(REPO)})
            if done.returncode != 0:
                raise RuntimeError((done.stderr.strip().splitlines() or ["no message"])[-1])
            days = {team: tuple(None if d is None else dt.date.fromisoformat(d) for d in pair)
                    for team, pair in json.loads(done.stdout).items()}
            with self._mu:
                self._days, self._month, self.error = days, (now.year, now.month), None
        except Exception as exc:  # a locked or damaged ledger: the line says "not known yet", tried again later
            self.error = f"{type(exc).__name__}: {exc}"
            print(f"lib.slurm.server: budget run-out days not computed: {self.error}", file=sys.stderr, flush=True)
        finally:
            with self._mu:
                self._at = time.monotonic()
                self._running = None


def compute_runouts(db, now: dt.datetime) -> dict[str, tuple]:
    """{team: (P50 run-out day, P90 run-out day)} of this month's burn-down at `now`, every team with a
    policy (None: not this month)."""
    # here: pandas and the forecast's statsmodels are heavy, and only this command needs them
    from lib.ledger.forecast import forecast  # (see above)
    teams = forecast(db, as_of=now, live=True)["teams"]
    return {team: (e["burn_down"]["exhausts_p50"], e["burn_down"]["exhausts_p90"])
            for team, e in teams.items() if "burn_down" in e}


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


def budget_text(team: str, budget: float, left: float, runout: tuple | None) -> str:
    """The admit's budget line: the team's month budget left (GPU-hours: budget less what ended this
    month and what admitted reservations hold, as the gate counts them) and the burn-down's projected
    run-out day at P50 and P90 (`runout`: (day or None, day or None); None: not known yet)."""
    head = (f"training-gate: team {team} budget this month: {max(left, 0.0):,.1f} of {budget:,.1f} GPU-h left"
            + (f" ({-left:,.1f} GPU-h over)" if left < 0 else ""))
    if runout is None:
        return head + "; projected run-out: not known yet (the burn-down is being computed)"
    p50, p90 = runout
    if p50 is None and p90 is None:
        return head + "; not projected to run out this month (P50 and P90)"
    days = [f"{d:%b %d} at {q}" for q, d in (("P50", p50), ("P90", p90)) if d is not None]
    return (head + "; projected to run out " + ", ".join(days)
            + ("" if p50 is not None else " (not at P50)"))


def main(argv=None) -> int:
    """`python -m lib.slurm.runouts --db LEDGER [--now ISO]`: the run-out days as JSON on stdout."""
    args = list(sys.argv[1:] if argv is None else argv)
    opts = dict(zip(args[::2], args[1::2]))
    now = dt.datetime.fromisoformat(opts["--now"]) if "--now" in opts else None
    days = compute_runouts(opts["--db"], now or utcnow())
    print(json.dumps({t: [None if d is None else d.isoformat() for d in pair] for t, pair in days.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
