"""A realistic, seeded run history for the demo ledger (and benchmarks), two years long by default.

`build_demo(db, runs=10_000, seed=0)` syncs the teams of data/teams.toml, then generates runs ending
at `now` (default: the current UTC minute) entirely with numpy (no per-row Python), and bulk-inserts
them from a DataFrame with one INSERT ... SELECT per table (strings are built in SQL). What it models:

- the teams' sizes (more runs for bigger teams) and kind mix (exploratory, production candidates,
  scheduled retraining at a fixed time of day), growth over the history;
- estimates from a pilot (small error) or stated by the team (a team-specific median bias of actual /
  estimate between 0.9 and 1.6 that drifts down over time, a log-normal spread, and a long tail of
  overruns), itemised: compute + checkpoint + evaluation + data loading + restarts = the estimate;
- stable and preemptible capacity; interruptions (Poisson, far more often on preemptible) with
  restarts, retry GPU-hours and lost work; actual items (checkpoint, retry, evaluation, lost work) are
  parts of the actual total, the rest being useful compute;
- budget stops (actual capped at the budget, artifact incomplete, last valid checkpoint kept),
  wall-clock stops at max_runtime_hours, early stops, failures, cancellations, out-of-memory;
- reservations: late starts and early ends that leave reserved capacity idle, reservations never used,
  a few runs still running and reservations starting in the future;
- the decisions table: an admit for every run, recording the full request (its pilot for
  pilot-estimated runs), plus deferred requests (about 8 % of runs), most of them admitted later
  under the same run ID. Each deferral is the gate's own decision: a full request built to meet a
  drawn reason, decided by lib.gate.admission.decide over the team's policy and `demo_state`, and
  serialised as lib.ledger.recording.record_decision records a submit (re-deciding it gives it again);
  the demo's admits are generated history and are not re-decided;
- a change: every run `COST_SHIFT` names (team, days ago, factor) requested in its last days needs
  that factor more (a new model family, pilots still from the old one), so the Estimate accuracy
  page shows a drift alarm and a bound that adapted;
- pilots for pilot-estimated runs, holdout reads (a few over their allowance), full-evaluation flags.

Re-running replaces the previous demo rows (source 'demo', origin 'demo') and nothing else.
Same seed and same `now` -> the same ledger. Every build is recorded in the ledger's audit (action
"demo": who built it, and how many runs) in the transaction of its last chunk.

`ensure_demo_history` is the bootstrap of a new ledger: it builds only into a ledger that holds
nothing yet (`already_holds`), checked under the write lock the build then keeps.
"""
from __future__ import annotations

import contextlib
import re
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from lib.gate.admission import decide
from lib.gate.calibration import calibrate
from lib.gate.terms import CAPACITIES, KINDS, STOP_REASONS, finite_number, naive_utc, utcnow
from lib.ledger import team_weeks
from lib.ledger.audit import Who, command_line, record
from lib.ledger.connection import open_ledger, transaction
from lib.ledger.teams_file import load_teams, sync_teams

HISTORY_DAYS = 730   # the demo history's default length, days before now
MIN_DAYS = 60        # shortest history: the cost shift below lies inside it
STOPS = tuple(s for s in STOP_REASONS if s != "requeued")  # requeued jobs come from sacct only
ARTIFACTS = ("complete", "incomplete", "none")
SOURCES = ("pilot", "stated")
GPU_CHOICES = np.array([1, 2, 4, 8, 16, 32, 64])
# probabilities over GPU_CHOICES per kind
GPU_P = {
    "exploratory": [0.18, 0.17, 0.22, 0.25, 0.11, 0.05, 0.02],
    "production": [0.02, 0.05, 0.13, 0.35, 0.25, 0.14, 0.06],
    "retraining": [0.05, 0.10, 0.25, 0.35, 0.20, 0.05, 0.00],
}
# (median wall hours of the estimate, log sigma)
WALL = {"exploratory": (4.0, 0.9), "production": (16.0, 0.7), "retraining": (5.0, 0.35)}
# team -> (median actual/estimate for stated estimates, log sigma, long-tail probability, kind mix)
TEAM_TRAITS = {
    "nlp-research": (1.45, 0.40, 0.09, (0.72, 0.25, 0.03)),
    "vision": (1.15, 0.30, 0.05, (0.55, 0.30, 0.15)),
    "search": (1.05, 0.22, 0.04, (0.40, 0.30, 0.30)),
    "ranking": (0.92, 0.18, 0.03, (0.35, 0.25, 0.40)),
    "ads": (1.25, 0.28, 0.06, (0.35, 0.25, 0.40)),
    "speech": (1.10, 0.25, 0.04, (0.55, 0.30, 0.15)),
    "robotics": (1.60, 0.45, 0.10, (0.70, 0.25, 0.05)),
    "safety": (1.00, 0.20, 0.03, (0.60, 0.35, 0.05)),
}
DEFER_CODES = ("no-snapshot", "no-pilot", "budget", "period-budget", "gpu-cap", "memory-cap",
               "runtime-cap", "memory", "no-recovery", "capacity", "retraining-protection")
DEFER_P = np.array([0.02, 0.08, 0.17, 0.12, 0.04, 0.02, 0.04, 0.02, 0.04, 0.39, 0.06])
DEFAULT_RUNS = 10_000
COST_SHIFT = ("ranking", 45, 2.0)   # team, days before now, factor on what its runs needed since


def _traits(team: str, rng: np.random.Generator):
    if team in TEAM_TRAITS:
        return TEAM_TRAITS[team]
    bias = float(rng.uniform(0.9, 1.6))
    return (bias, float(rng.uniform(0.2, 0.4)), float(rng.uniform(0.03, 0.08)), (0.6, 0.3, 0.1))


def _sql_list(values) -> str:
    return "[" + ", ".join("'" + str(v).replace("'", "''") + "'" for v in values) + "]"


def _ts(base: np.datetime64, hours: np.ndarray) -> np.ndarray:
    """base + hours (float array, NaN -> NaT) as datetime64[us]."""
    us = np.where(np.isfinite(hours), hours * 3.6e9, 0).astype("int64")
    out = base + us.astype("timedelta64[us]")
    out[~np.isfinite(hours)] = np.datetime64("NaT")
    return out


def generate(teams: list[dict], snapshots: list[dict], runs: int, seed, now: datetime, *,
             offset: int = 0, active: bool = True, days: int = HISTORY_DAYS) -> dict:
    """The demo tables as DataFrames of codes and numbers (strings are made in SQL on insert), over
    the `days` before `now`.
    Rows are numbered from `offset` (column i); `active=False` leaves out the runs still running or
    reserved ahead (a chunk of a large build that is not its last)."""
    rng = np.random.default_rng(seed)
    T = len(teams)
    names = [t["team"] for t in teams]
    reserved = np.array([t["reserved_gpus"] for t in teams], float)
    traits = [_traits(n, rng) for n in names]

    # the few runs still running or reserved in the future: per team a share of its GPUs
    active_rows = []
    budget_active = max(0, min(runs // 10, 6 * T)) if active else 0
    if budget_active:
        for ti, t in enumerate(teams):
            free = t["reserved_gpus"] - t["retraining_reserved_gpus"]
            target = free * rng.uniform(0.3, 0.7)
            used = 0
            while len(active_rows) < budget_active and used < target:
                cap = max(1, min(t["max_gpus_per_job"], int(target - used)))
                g = int(rng.choice(GPU_CHOICES[GPU_CHOICES <= cap]))
                active_rows.append((ti, int(rng.random() < 0.2), g))
                used += g
                if rng.random() < 0.15:
                    break
            if t["retraining_reserved_gpus"] and len(active_rows) < budget_active:
                g = int(min(t["retraining_reserved_gpus"], 8))
                active_rows.append((ti, 2, g))
    A = len(active_rows)
    H = runs - A  # finished (or abandoned) history

    # ---- who, what, when --------------------------------------------------------------------
    w = reserved ** 0.8
    team_i = np.concatenate([rng.choice(T, size=H, p=w / w.sum()),
                             np.array([r[0] for r in active_rows], dtype=np.int64)])
    n = runs
    mix = np.array([tr[3] for tr in traits])
    mix = mix / mix.sum(axis=1, keepdims=True)
    u = rng.random(n)
    kind_i = (u[:, None] > np.cumsum(mix, axis=1)[team_i][:, :2]).sum(axis=1)
    if A:
        kind_i[H:] = [r[1] for r in active_rows]

    # time in hours before now (negative = past). Growth: density ~ t^0.35 over the history.
    span_h = days * 24.0
    t_frac = rng.random(n) ** (1 / 1.35)
    t_sub = -span_h * (1 - t_frac)
    # scheduled retraining: daily, at 02:00 UTC + a per-team offset, a few minutes of jitter
    now_np = np.datetime64(now, "us")
    day0 = np.datetime64(now.replace(hour=0, minute=0, second=0, microsecond=0), "us")
    hour_now = (now_np - day0) / np.timedelta64(1, "h")
    is_rt = kind_i == 2
    offset_h = 2 + (team_i % 4) * 0.5 + rng.random(n) / 6
    t_sub = np.where(is_rt, np.floor((t_sub + hour_now) / 24) * 24 - hour_now + offset_h, t_sub)

    gpus = np.empty(n, np.int64)
    for k, kind in enumerate(KINDS):
        m = kind_i == k
        gpus[m] = rng.choice(GPU_CHOICES, size=int(m.sum()), p=GPU_P[kind])
    team_cap = np.array([t["max_gpus_per_job"] for t in teams])[team_i]
    gpus = np.maximum(1, np.minimum(gpus, team_cap))
    if A:
        gpus[H:] = [r[2] for r in active_rows]
    mem_cap = np.array([t["max_gpu_mem_gb"] for t in teams])[team_i]
    gpu_mem = np.minimum(np.where(rng.random(n) < 0.7, 80.0, 40.0), mem_cap)

    has_spot = np.array([bool(t["preemptible_partitions"]) for t in teams])[team_i]
    p_spot = np.array([0.35, 0.10, 0.05])[kind_i]
    preempt = has_spot & (rng.random(n) < p_spot)

    # ---- the estimate -------------------------------------------------------------------------
    med = np.array([WALL[k][0] for k in KINDS])[kind_i]
    sig = np.array([WALL[k][1] for k in KINDS])[kind_i]
    team_rt = np.array([t["max_runtime_hours"] for t in teams])[team_i]
    est_wall = np.clip(med * np.exp(sig * rng.standard_normal(n)), 0.25, team_rt * 0.9)
    est = np.round(gpus * est_wall, 3)
    threshold = np.array([t["pilot_required_above_gpu_hours"] for t in teams])[team_i]
    pilot = np.where(est > threshold, rng.random(n) < 0.92, rng.random(n) < 0.25)

    skip_eval = (kind_i == 0) & (rng.random(n) < 0.6)
    s_ckpt = rng.uniform(0.01, 0.05, n)
    s_eval = np.where(skip_eval, 0.0, np.where(kind_i == 0, rng.uniform(0.01, 0.05, n),
                                               rng.uniform(0.04, 0.10, n)))
    s_data = rng.uniform(0.01, 0.06, n)
    s_rst = np.where(preempt, rng.uniform(0.04, 0.12, n), rng.uniform(0.0, 0.02, n))
    e_ckpt = np.round(est * s_ckpt, 3)
    e_eval = np.round(est * s_eval, 3)
    e_data = np.round(est * s_data, 3)
    e_rst = np.round(est * s_rst, 3)
    e_comp = est - (e_ckpt + e_eval + e_data + e_rst)

    # ---- what the run really needed --------------------------------------------------------------
    bias = np.array([tr[0] for tr in traits])[team_i]
    spread = np.array([tr[1] for tr in traits])[team_i]
    tail_p = np.array([tr[2] for tr in traits])[team_i]
    drift = np.exp(-0.15 * (t_frac - 0.5) * np.log(bias + 0.5))     # teams slowly learn
    med_ratio = np.where(pilot, bias ** 0.2 * 1.02, bias * drift)
    sd = np.where(pilot, 0.12, spread)
    ratio = med_ratio * np.exp(sd * rng.standard_normal(n))
    tail = rng.random(n) < np.where(pilot, tail_p / 3, tail_p)
    ratio = np.where(tail, ratio * (1 + np.minimum(rng.pareto(1.6, n), 6.0)), ratio)
    if COST_SHIFT[0] in names:
        shifted = (team_i == names.index(COST_SHIFT[0])) & (t_sub > -COST_SHIFT[1] * 24.0)
        ratio = np.where(shifted, ratio * COST_SHIFT[2], ratio)
    needed = est * ratio

    margin = np.select([kind_i == 0, kind_i == 1], [rng.uniform(1.05, 1.6, n), rng.uniform(1.25, 1.8, n)],
                       rng.uniform(1.25, 1.6, n))
    budget = np.round(np.maximum(est * margin * np.where(pilot, 1.0, bias ** 0.7), 0.5), 1)
    budget = np.maximum(budget, np.ceil(est * 10) / 10)   # the gate admitted it: its estimate fits
    max_rt = np.round(np.minimum(team_rt, est_wall * rng.uniform(1.5, 3.0, n)), 1)
    max_rt = np.maximum(max_rt, np.minimum(team_rt, 0.5))
    ckpt_ok = rng.random(n) < np.select([kind_i == 1, kind_i == 2], [0.99, 0.97], 0.88)
    ckpt_ok |= preempt   # the gate admits preemptible capacity only to jobs that can checkpoint
    holdout_allow = np.select([kind_i == 1, kind_i == 2], [rng.integers(1, 4, n), np.ones(n, np.int64)], 0)

    # interruptions: mean time between interruptions per job, hours
    mtbi = np.where(preempt, 7.0 / (1 + gpus / 16), 4000.0 / gpus)
    run_wall = needed / gpus
    interrupts = rng.poisson(run_wall / mtbi)
    restart_min = rng.uniform(3, 20, n)
    ckpt_interval_h = rng.uniform(0.5, 2.0, n)
    lost_each = np.where(ckpt_ok, ckpt_interval_h / 2, run_wall * rng.uniform(0.1, 0.6, n))
    lost = interrupts * lost_each * gpus * rng.uniform(0.6, 1.4, n)
    retry = interrupts * restart_min / 60 * gpus
    a_ckpt = needed * s_ckpt * rng.uniform(0.8, 1.6, n)
    a_eval = needed * s_eval * rng.uniform(0.8, 1.5, n)
    full = needed + lost + retry

    # ---- how it ended --------------------------------------------------------------------------
    stop = np.zeros(n, np.int64)  # completed
    u = rng.random(n)
    early = np.where(kind_i == 0, 0.15, np.where(kind_i == 1, 0.05, 0.0))
    cuts = np.cumsum([early, np.full(n, 0.025), np.full(n, 0.02), np.full(n, 0.007),
                      np.full(n, 0.008), np.full(n, 0.01), np.where(preempt, 0.08, 0.0),
                      np.full(n, 0.025)], axis=0)
    outcome = (u[None, :] > cuts).sum(axis=0)   # 0 early, 1 failed, 2 cancelled, 3 oom, 4 node-fail,
    #                                             5 failed-steps, 6 preempted, 7 never used, 8 normal
    scale = np.ones(n)
    code_of = {0: 1, 1: 6, 2: 7, 3: 8, 4: 9, 5: 4, 6: 5}
    for o, s in code_of.items():
        m = outcome == o
        stop[m] = s
        lo, hi = {0: (0.35, 0.85), 3: (0.005, 0.05)}.get(o, (0.05, 0.8))
        scale[m] = rng.uniform(lo, hi, int(m.sum()))
    never = outcome == 7
    stop[never] = 7
    scale[never] = 0.0
    actual = full * scale
    limit_wall = gpus * max_rt
    limit = np.minimum(budget, limit_wall)
    over = (actual > limit) & ~never
    stop = np.where(over & (stop == 0) | over & (stop == 1),
                    np.where(budget <= limit_wall, 2, 3), stop)
    stop = np.where(over & (stop > 3), np.where(budget <= limit_wall, 2, 3), stop)
    actual = np.where(over, limit, actual)
    k = np.where(full > 0, actual / full, 0.0)
    a_ckpt, a_eval, lost, retry = (np.round(x * k, 4) for x in (a_ckpt, a_eval, lost, retry))
    actual = np.round(actual, 3)
    parts = a_ckpt + a_eval + lost + retry
    actual = np.maximum(actual, np.round(parts + 5e-4, 3))  # items never exceed the total
    frac_done = np.where(full > 0, np.minimum(1.0, actual / np.maximum(full, 1e-9)), 0)
    interrupts = np.round(interrupts * frac_done).astype(np.int64)
    restarts = np.where((stop == 5) & (interrupts > 0), interrupts - 1, interrupts)
    artifact = np.select([np.isin(stop, (0, 1)), np.isin(stop, (2, 3, 4))], [0, 1], 2)
    full_eval = np.select([stop == 0, stop == 1], [~skip_eval & (rng.random(n) < 0.97),
                                                    ~skip_eval & (rng.random(n) < 0.5)], False)
    reads = np.where(kind_i > 0, rng.binomial(np.maximum(holdout_allow, 1), 0.6), 0)
    reads = np.minimum(reads, holdout_allow)
    over_read = rng.random(n) < np.where(kind_i == 0, 0.03, 0.04)
    reads = np.where(over_read, holdout_allow + rng.integers(1, 4, n), reads)
    reads = np.where(never | ~np.isin(stop, (0, 1, 2, 3)), np.where(never, 0, reads // 2), reads)
    has_ckpt = ckpt_ok & ~never & (actual > 0) & ~np.isin(stop, (7, 8))
    ckpt_step = np.floor(frac_done * rng.integers(2_000, 200_000, n) / 500) * 500

    # ---- reservation and times (hours relative to now) ------------------------------------------
    res_from = t_sub
    wall_est = est_wall * np.where(kind_i == 1, 1.15, 1.05)
    res_until = res_from + wall_est
    reserved_gh = np.round(np.minimum(est * np.where(kind_i == 0, 1.05, 1.2), budget), 3)
    late = np.where(rng.random(n) < 0.12, rng.exponential(2.0, n), rng.exponential(0.1, n))
    started = res_from + late
    wall_actual = actual / gpus + restarts * restart_min / 60
    ended = started + wall_actual
    ended = np.where(never, res_until, ended)
    started = np.where(never, np.nan, started)
    # history must have ended before now: shift runs that would still be going back in time
    hist = np.arange(n) < H
    shift = np.where(hist & (ended > -0.25), ended + 0.25 + rng.uniform(0, 48, n), 0.0)
    res_from, res_until, started, ended, t_sub = (x - shift for x in (res_from, res_until, started,
                                                                      ended, t_sub))
    # active runs: running (started a while ago) or reserved in the future (not started)
    if A:
        act = ~hist
        fut = act & (rng.random(n) < 0.35)
        run_ = act & ~fut
        elapsed = wall_est * rng.uniform(0.05, 0.8, n)
        res_from = np.where(run_, -elapsed, np.where(fut, rng.uniform(1, 72, n), res_from))
        t_sub = np.where(act, np.minimum(res_from, 0) - rng.uniform(0, 0.5, n), t_sub)
        res_until = np.where(act, res_from + wall_est, res_until)
        started = np.where(run_, res_from + np.minimum(late, elapsed / 2), np.where(fut, np.nan, started))
        ended = np.where(act, np.nan, ended)
    active = ~hist

    runs_df = pd.DataFrame({
        "i": np.arange(n) + offset, "team_i": team_i, "kind_i": kind_i, "cap_i": preempt.astype(np.int64),
        "gpus": gpus, "gpu_mem_gb": gpu_mem,
        "est": est, "src_i": np.where(pilot, 0, 1),
        "e_comp": np.round(e_comp, 3), "e_ckpt": e_ckpt, "e_eval": e_eval, "e_data": e_data,
        "e_rst": e_rst, "budget": budget, "max_rt": max_rt,
        "reserved_from": _ts(now_np, res_from), "reserved_until": _ts(now_np, res_until),
        "reserved_gh": reserved_gh, "submitted_at": _ts(now_np, t_sub),
        "started_at": _ts(now_np, started), "ended_at": _ts(now_np, ended),
        "actual": np.where(active, np.nan, actual),
        "a_ckpt": np.where(active, np.nan, a_ckpt), "a_retry": np.where(active, np.nan, retry),
        "a_eval": np.where(active, np.nan, a_eval), "a_lost": np.where(active, np.nan, lost),
        "stop_i": np.where(active, -1, stop), "interrupts": np.where(active, -1, interrupts),
        "restarts": np.where(active, -1, restarts), "artifact_i": np.where(active, -1, artifact),
        "has_ckpt": has_ckpt & ~active, "ckpt_step": ckpt_step.astype(np.int64),
        "full_eval": np.where(active, False, full_eval), "active": active,
        "reads": np.where(active, -1, reads), "allow": holdout_allow,
        "ckpt_ok": ckpt_ok, "skip_eval": skip_eval, "exp_int": np.round(wall_est / mtbi, 2),
        "snap_u": rng.random(n),
    })

    # pilots of pilot-estimated runs
    p = pilot
    sps = rng.uniform(0.5, 8.0, n)
    pilots_df = pd.DataFrame({
        "i": (np.arange(n) + offset)[p],
        "measured_at": _ts(now_np, (t_sub - rng.uniform(1, 48, n))[p]),
        "sps": np.round(sps, 3)[p],
        "wc_sps": np.round(sps * rng.uniform(0.45, 0.9, n), 3)[p],
        "wc_share": np.round(rng.uniform(0.0, 0.15, n), 3)[p],
        "peak_mem": np.round(gpu_mem * rng.uniform(0.45, 0.95, n), 1)[p],
        "ckpt_s": np.round(rng.uniform(15, 300, n), 0)[p],
        "steps": np.maximum(1, np.round(e_comp / gpus * 3600 * sps)).astype(np.int64)[p],
        "interval": rng.choice(np.array([250, 500, 1000, 2000, 5000]), n)[p],
        "eval_gh": e_eval[p], "dl_frac": np.round(s_data, 3)[p],
        "restart_min": np.round(restart_min, 1)[p],
    })

    # deferred requests: ~8 % of runs; 60 % of them were admitted later under the same run ID
    n_def = int(round(0.08 * H))
    later = rng.random(n_def) < 0.6
    of_run = rng.integers(0, max(H, 1), n_def)
    c1 = rng.choice(len(DEFER_CODES), n_def, p=DEFER_P / DEFER_P.sum())
    c2 = np.where(rng.random(n_def) < 0.15, rng.choice(len(DEFER_CODES), n_def, p=DEFER_P / DEFER_P.sum()), -1)
    c2 = np.where(c2 == c1, -1, c2)
    d_time = np.where(later, res_from[of_run] - rng.uniform(0.3, 36, n_def), -span_h * rng.random(n_def))
    deferred_df = pd.DataFrame({
        "j": np.arange(n_def) + offset, "later": later, "i": of_run + offset,
        "team_i": np.where(later, team_i[of_run], rng.choice(T, n_def, p=w / w.sum())),
        "kind_i": np.where(later, kind_i[of_run], rng.choice(3, n_def, p=[0.6, 0.3, 0.1])),
        "c_lo": np.where(c2 < 0, c1, np.minimum(c1, c2)), "c_hi": np.where(c2 < 0, -1, np.maximum(c1, c2)),
        "decided_at": _ts(now_np, d_time),
        "judged": np.round(np.where(later, est[of_run] * rng.uniform(1.0, 1.4, n_def),
                                    rng.lognormal(3.5, 1.2, n_def)), 3),
    }) if H else pd.DataFrame()
    return {"runs": runs_df, "pilots": pilots_df, "deferred": deferred_df, "teams": names,
            "snapshots": snapshots, "active": A}


_NO_HISTORY = calibrate([], "", "")   # the calibration of a team without history (no correction)


def demo_state(policy: dict, snapshots: list[dict], request: dict, codes) -> dict:
    """The team state a demo request for `policy`'s team was decided under, from the request
    (its submitted_at is the decision time) and the reason codes the decision gave: the team's
    snapshots; for 'capacity' one reservation holding every reserved accelerator; for
    'retraining-protection' experiments holding just too many of the accelerators left to them;
    for 'period-budget' the month's budget already spent. Without calibration history."""
    now = naive_utc(request["submitted_at"])
    reserved, set_aside = policy["reserved_gpus"], policy["retraining_reserved_gpus"]
    held = []
    if "capacity" in codes:
        kind = "retraining" if request["kind"] == "retraining" else "exploratory"
        held = [(kind, reserved)]
    elif "retraining-protection" in codes:
        held = [("exploratory", max(0, reserved - set_aside - int(request["gpus"]) + 1))]
    return {
        "now": now,
        "reservations": [{"run_id": f"{policy['team']}-held-{i}", "team": policy["team"], "kind": k,
                          "gpus": g, "reserved_gpu_hours": 10.0 * g, "reserved_from": now,
                          "reserved_until": now + timedelta(hours=10)}
                         for i, (k, g) in enumerate(held) if g > 0],
        "period_spent_gpu_hours": float(policy["monthly_budget_gpu_hours"]) if "period-budget" in codes else 0.0,
        "snapshots": {s["snapshot"] for s in snapshots if s["team"] in (None, policy["team"])},
        "calibration": _NO_HISTORY,
    }


def _deferred_request(policy: dict, snapshots: list[dict], run_id: str, kind: str, gpus: int,
                      judged: float, codes: list[str], decided_at: datetime, u: float) -> dict:
    """A full request that the gate defers for (at least) `codes`, under demo_state."""
    team = policy["team"]
    snaps = sorted(s["snapshot"] for s in snapshots if s["team"] in (None, team)) or [None]
    gpus = int(max(1, min(gpus, policy["max_gpus_per_job"] or 1)))
    est = float(round(min(judged, 0.9 * policy["pilot_required_above_gpu_hours"] or judged,
                          0.5 * gpus * policy["max_runtime_hours"]), 3)) or 1.0
    req = {
        "run_id": run_id, "team": team, "kind": kind, "gpus": gpus,
        "gpu_mem_gb": float(min(80.0, policy["max_gpu_mem_gb"])) or 40.0,
        "max_runtime_hours": float(round(min(policy["max_runtime_hours"], max(1.0, 2 * est / gpus)), 1)),
        "budget_gpu_hours": float(round(est * 1.5 + 1, 1)), "checkpoint_supported": True,
        "expected_interruptions": 0.0, "capacity": "stable", "data_snapshot": snaps[int(u * len(snaps))],
        "estimated_gpu_hours": est, "skip_full_evaluation": False, "holdout_allowance": 0,
        "submitted_at": decided_at.isoformat(timespec="seconds"),
    }
    if kind == "production":
        req["holdout_allowance"] = 1
    for code in codes:
        if code == "no-snapshot":
            req["data_snapshot"] = f"{team}-scratch-{run_id[-4:]}"
        elif code == "no-pilot":
            est = float(round(policy["pilot_required_above_gpu_hours"] * (1.2 + u), 3))
            req.update(estimated_gpu_hours=est, budget_gpu_hours=float(round(est * 1.5 + 1, 1)))
        elif code == "budget":
            req["budget_gpu_hours"] = float(round(req["estimated_gpu_hours"] * (0.4 + 0.5 * u), 1))
        elif code == "gpu-cap":
            req["gpus"] = int(policy["max_gpus_per_job"]) * 2 or 1
        elif code == "memory-cap":
            req["gpu_mem_gb"] = float(policy["max_gpu_mem_gb"]) + 40.0
        elif code == "runtime-cap":
            req["max_runtime_hours"] = float(policy["max_runtime_hours"]) * 1.5
        elif code == "memory":
            g, e = req["gpus"], req.pop("estimated_gpu_hours")
            req["pilot"] = {"steps_per_second": 2.0, "planned_steps": max(1, int(e / g * 3600 * 2)),
                            "peak_mem_gb": req["gpu_mem_gb"] + 8.0,
                            "eval_gpu_hours": 1.0 if kind == "production" else 0.0}
        elif code == "no-recovery":
            req.update(capacity="preemptible", checkpoint_supported=False)
    return req


def _deferred_decisions(data: dict, teams: list[dict], snapshots: list[dict]) -> pd.DataFrame:
    """The deferred demo decisions, each decided by the gate (lib.gate.admission.decide) over the
    team's policy and demo_state, and serialised as lib.ledger.recording.record_decision records it."""
    from lib.ledger.recording import canonical_json
    d = data["deferred"]
    codes = np.array(DEFER_CODES)
    rows = []
    run_gpus = data["runs"]["gpus"].to_numpy()
    first = int(data["runs"]["i"].iloc[0]) if len(data["runs"]) else 0
    later_rows = np.unique(d["i"].to_numpy()[d["later"].to_numpy()]) - first
    run_ids = dict(zip((later_rows + first).tolist(), _run_ids(data, later_rows)))
    times = d["decided_at"].to_numpy().astype("datetime64[s]").astype(datetime)
    for j, later, i, ti, ki, lo, hi, at, judged in zip(
            d["j"].tolist(), d["later"].tolist(), d["i"].tolist(), d["team_i"].tolist(),
            d["kind_i"].tolist(), d["c_lo"].tolist(), d["c_hi"].tolist(), times,
            d["judged"].tolist()):
        policy = teams[ti]
        run_id = run_ids[i] if later else f"{policy['team']}-deferred-{j:07d}"
        drawn = [str(codes[lo])] + ([str(codes[hi])] if hi >= 0 else [])
        kind = KINDS[ki]
        gpus = int(run_gpus[i - first]) if later else int(GPU_CHOICES[j % 5])
        request = _deferred_request(policy, snapshots, run_id, kind, gpus, judged, drawn, at,
                                    (j * 0.6180339887) % 1.0)
        wanted = drawn
        for _ in range(4):   # the state follows the codes: decide until they agree
            decision = decide(request, policy, demo_state(policy, snapshots, request, wanted))
            got = [r["code"] for r in decision["reasons"]]
            if decision["state"] == "defer" and got == wanted:
                break
            if decision["state"] != "defer":   # nothing deferred it: it was over budget after all
                request["budget_gpu_hours"] = 0.0
            wanted = got or ["budget"]
        est = decision["estimate"] or {}
        rows.append((at, run_id, policy["team"], kind, decision["state"],
                     [r["code"] for r in decision["reasons"]], finite_number(est.get("judged_gpu_hours")),
                     decision["policy_version"], canonical_json(request), canonical_json(decision)))
    return pd.DataFrame(rows, columns=["decided_at", "run_id", "team", "kind", "state", "reason_codes",
                                       "judged_gpu_hours", "policy_version", "request_json",
                                       "decision_json"])


def _snapshot_sql(teams: list[str], snapshots: list[dict]) -> str:
    """SQL expression picking a data snapshot for a run from its team's (and shared) snapshots."""
    per_team = []
    for name in teams:
        snaps = [s["snapshot"] for s in snapshots if s["team"] in (None, name)] or [f"{name}-data"]
        per_team.append(_sql_list(snaps))
    return (f"(list_value({', '.join(per_team)})[team_i + 1])"
            f"[1 + floor(snap_u * len(list_value({', '.join(per_team)})[team_i + 1]))::INT]")


def build_demo(db=None, runs: int = DEFAULT_RUNS, seed: int = 0, progress=None, *, now=None,
               teams_file=None, timeout_s: float = 30.0, days: int = HISTORY_DAYS, who: Who | None = None,
               only_into_new: bool = False) -> dict:
    """Build the demo history of `days` days into the ledger (replacing an earlier demo); returns
    row counts. The same runs over more days are a longer history at a lower daily rate.
    `who` is recorded in the audit as the builder (default: the command line's OS user).
    `only_into_new`: raise NotNew, writing nothing, when the ledger already holds anything.
    Runs are generated and inserted CHUNK_RUNS at a time, one transaction each, so memory stays
    bounded at any size: a build of up to CHUNK_RUNS runs (the default included) is all or nothing;
    a larger one that is interrupted leaves whole chunks, which the next build replaces. Each chunk
    is stored in time order (runs by reservation start, decisions by decision time), as a ledger
    filled over time holds them, so the pages' time filters skip what lies outside them."""
    for name, value, least in (("runs", runs, 1), ("days", days, MIN_DAYS)):
        if type(value) is not int or value < least:
            raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    say = progress or (lambda fraction, message: None)
    now = now or utcnow().replace(second=0, microsecond=0)
    teams, snapshots = load_teams(teams_file)
    names = [t["team"] for t in teams]
    chunks = _chunks(runs, seed)
    counts = {"runs": 0, "pilots": 0, "decisions": 0, "deferred": 0, "active": 0}
    say(0.02, "writing teams and snapshots")
    with open_ledger(db, read_only=False, timeout_s=timeout_s) as con:
        con.execute("SET enable_progress_bar = false")
        con.execute(f"SET memory_limit = '{DEMO_MEMORY_LIMIT}'")
        if only_into_new and (held := already_holds(con)):
            raise NotNew(f"the ledger already holds {held}")
        counts.update(sync_teams(con, teams_file))
        # the next chunk is generated (and its deferrals decided, in Python) in a thread while
        # DuckDB, which releases the GIL, inserts this one
        with ThreadPoolExecutor(1) as pool:
            ahead = pool.submit(_prepare, teams, snapshots, now, chunks[0], days)
            for k, (size, offset, _, _) in enumerate(chunks):
                def step(part: float, message: str, k=k, offset=offset, size=size) -> None:
                    where = f" (runs {offset + 1:,}-{offset + size:,} of {runs:,})" if len(chunks) > 1 else ""
                    say(0.05 + 0.9 * (k + part) / len(chunks), message + where)
                step(0.0, f"generating {size:,} runs")
                data = ahead.result()
                if k + 1 < len(chunks):
                    ahead = pool.submit(_prepare, teams, snapshots, now, chunks[k + 1], days)
                # one transaction per chunk: DuckDB keeps a transaction's rows (and its key index)
                # in memory until it commits
                with transaction(con):
                    if k == 0:
                        step(0.01, "removing the previous demo")
                        counts["deleted_runs"] = con.execute(
                            "SELECT count(*) FROM runs WHERE source = 'demo'").fetchall()[0][0]
                        con.execute("DELETE FROM pilots WHERE run_id IN (SELECT run_id FROM runs WHERE source = 'demo')")
                        con.execute("DELETE FROM runs WHERE source = 'demo'")
                        con.execute("DELETE FROM decisions WHERE origin = 'demo'")
                    _insert_chunk(con, data, names, snapshots, counts, step)
                    team_weeks.rebuild(con)
                    if k + 1 == len(chunks):
                        record(con, who or command_line(), "demo", inserted=counts["runs"],
                               detail=f"{runs:,} runs over {days} days, seed {seed}; replaced "
                                      f"{counts['deleted_runs']:,} earlier demo runs")
                    step(0.95, "committing")
                del data
    say(1.0, f"demo ledger built: {counts['runs']:,} runs")
    return counts


CHUNK_RUNS = 1_000_000   # runs generated and inserted at a time by build_demo
DEMO_MEMORY_LIMIT = "1GB"  # DuckDB's buffer limit while building (it writes or spills beyond)


def _chunks(runs: int, seed: int) -> list[tuple[int, int, object, bool]]:
    """(size, offset, seed, last) per chunk: one chunk (seeded `seed`, as every build up to
    CHUNK_RUNS is) or CHUNK_RUNS-sized chunks seeded (seed, k); the last holds the active runs."""
    sizes = [CHUNK_RUNS] * (runs // CHUNK_RUNS) + ([runs % CHUNK_RUNS] if runs % CHUNK_RUNS else [])
    offsets = np.cumsum([0] + sizes[:-1]).tolist()
    return [(size, int(offset), seed if len(sizes) == 1 else [seed, k], k == len(sizes) - 1)
            for k, (size, offset) in enumerate(zip(sizes, offsets))]


def _prepare(teams: list[dict], snapshots: list[dict], now: datetime, chunk: tuple, days: int) -> dict:
    """One chunk's generated tables (`generate`) with its deferred decisions decided
    (`_deferred_decisions`) as "deferred_rows"."""
    size, offset, seed, last = chunk
    data = generate(teams, snapshots, size, seed, now, offset=offset, active=last, days=days)
    data["deferred_rows"] = _deferred_decisions(data, teams, snapshots) if len(data["deferred"]) else None
    return data


def _run_ids(data: dict, rows: np.ndarray) -> list[str]:
    """The run IDs of the generated runs at positions `rows` of the chunk, as _insert_chunk's SQL
    makes them: team-k-yymmdd-i, k the kind's letter, yymmdd the submission day, i the row number."""
    runs = data["runs"]
    team = np.array(data["teams"], dtype=object)[runs["team_i"].to_numpy()[rows]]
    kind = np.array(KIND_LETTERS, dtype=object)[runs["kind_i"].to_numpy()[rows]]
    day = pd.DatetimeIndex(runs["submitted_at"].to_numpy()[rows]).strftime("%y%m%d")
    return [f"{t}-{k}-{d}-{str(i).rjust(7, '0')[:7]}"
            for t, k, d, i in zip(team, kind, day, runs["i"].to_numpy()[rows].tolist())]


KIND_LETTERS = ("x", "p", "r")   # a demo run ID's letter per kind (KINDS order)


def _insert_chunk(con, data: dict, names: list[str], snapshots: list[dict], counts: dict, step) -> None:
    """Insert one generated chunk: its runs (in reservation order), pilots, the admit of every run
    and the deferred decisions (in decision order); adds to `counts`."""
    con.register("demo_runs", data["runs"])
    T, K, C, S = (_sql_list(x) for x in (names, KINDS, CAPACITIES, STOPS))
    run_id = (f"{T}[team_i + 1] || '-' || {_sql_list(KIND_LETTERS)}[kind_i + 1] || '-' || "
              "strftime(submitted_at, '%y%m%d') || '-' || lpad(i::VARCHAR, 7, '0')")
    step(0.05, "inserting runs")
    con.execute(f"""
        CREATE TEMP TABLE demo_ids AS
        SELECT i, {run_id} AS run_id, {_snapshot_sql(names, snapshots)} AS snap FROM demo_runs""")
    con.register("demo_pilots", data["pilots"])
    con.execute("""
        CREATE TEMP TABLE demo_chunk_pilots AS
        SELECT d.run_id, measured_at, sps AS steps_per_second, wc_sps AS worst_case_steps_per_second,
            wc_share AS worst_case_share, peak_mem AS peak_mem_gb, ckpt_s AS checkpoint_write_s,
            steps AS planned_steps, interval AS checkpoint_interval_steps,
            to_json(struct_pack(steps_per_second := sps, worst_case_steps_per_second := wc_sps,
                worst_case_share := wc_share, peak_mem_gb := peak_mem, checkpoint_write_s := ckpt_s,
                planned_steps := steps, checkpoint_interval_steps := interval,
                eval_gpu_hours := eval_gh, data_loading_fraction := dl_frac,
                restart_minutes := restart_min))::VARCHAR AS pilot_json
        FROM demo_pilots JOIN demo_ids d USING (i)""")
    con.execute(f"""
        CREATE TEMP TABLE demo_chunk AS
        SELECT d.i, d.run_id, {T}[team_i + 1] AS team, {K}[kind_i + 1] AS kind, {C}[cap_i + 1] AS capacity,
            gpus, gpu_mem_gb, d.snap AS data_snapshot,
            {K}[kind_i + 1] || '-' || {_sql_list(['lm', 'vit', 'asr', 'rank', 'ctr', 'policy', 'rm', 'retr'])}[1 + i % 8]
                || '-v' || (1 + i % 13)::VARCHAR AS job_name,
            est AS estimated_gpu_hours, {_sql_list(SOURCES)}[src_i + 1] AS estimate_source,
            e_comp AS est_compute_gpu_hours, e_ckpt AS est_checkpoint_gpu_hours,
            e_eval AS est_eval_gpu_hours, e_data AS est_data_loading_gpu_hours,
            e_rst AS est_restart_gpu_hours, budget AS budget_gpu_hours, max_rt AS max_runtime_hours,
            reserved_from, reserved_until, reserved_gh AS reserved_gpu_hours, started_at, ended_at,
            actual AS actual_gpu_hours, a_ckpt AS act_checkpoint_gpu_hours, a_retry AS act_retry_gpu_hours,
            a_eval AS act_eval_gpu_hours, a_lost AS act_lost_work_gpu_hours,
            CASE WHEN stop_i >= 0 THEN {S}[stop_i + 1] END AS stop_reason,
            CASE WHEN interrupts >= 0 THEN interrupts END AS interruptions,
            CASE WHEN restarts >= 0 THEN restarts END AS restarts,
            CASE WHEN artifact_i >= 0 THEN {_sql_list(ARTIFACTS)}[artifact_i + 1] END AS artifact_status,
            CASE WHEN has_ckpt THEN 'ckpt://' || d.run_id || '/step-' || ckpt_step::VARCHAR END
                AS last_valid_checkpoint,
            CASE WHEN NOT active THEN full_eval END AS full_evaluation,
            CASE WHEN reads >= 0 THEN reads END AS holdout_reads, allow AS holdout_allowance,
            'demo' AS source, coalesce(ended_at, submitted_at) AS updated_at,
            ckpt_ok, skip_eval, exp_int, p.pilot_json
        FROM demo_runs JOIN demo_ids d USING (i) LEFT JOIN demo_chunk_pilots p ON p.run_id = d.run_id
        ORDER BY reserved_from, d.run_id""")
    con.execute(f"INSERT INTO runs ({RUN_COLUMNS}) SELECT {RUN_COLUMNS} FROM demo_chunk")
    counts["runs"] += con.execute("SELECT count(*) FROM demo_ids").fetchall()[0][0]
    step(0.25, "inserting pilots")
    con.execute("INSERT INTO pilots (run_id, measured_at, steps_per_second, worst_case_steps_per_second, "
                "worst_case_share, peak_mem_gb, checkpoint_write_s, planned_steps, checkpoint_interval_steps, "
                "pilot_json) SELECT * FROM demo_chunk_pilots")
    counts["pilots"] += len(data["pilots"])
    step(0.35, "inserting decisions")
    pv = "(SELECT policy_version FROM teams t WHERE t.team = r.team)"
    # the admitted request, as a submit records it (a run that cannot checkpoint stated no
    # interruptions: the gate would not have admitted it otherwise)
    admit_request = (
        "run_id := r.run_id, team := r.team, kind := r.kind, gpus := r.gpus, "
        "gpu_mem_gb := r.gpu_mem_gb, max_runtime_hours := r.max_runtime_hours, "
        "budget_gpu_hours := r.budget_gpu_hours, capacity := r.capacity, "
        "data_snapshot := r.data_snapshot, checkpoint_supported := r.ckpt_ok, "
        "expected_interruptions := CASE WHEN r.ckpt_ok THEN r.exp_int ELSE 0.0 END, "
        "skip_full_evaluation := r.skip_eval, holdout_allowance := r.holdout_allowance, "
        "submitted_at := strftime(coalesce(r.reserved_from, r.updated_at), '%Y-%m-%dT%H:%M:%S')")
    con.execute(f"""
        INSERT INTO decisions (decided_at, run_id, team, kind, state, reason_codes, judged_gpu_hours,
            reserved_gpu_hours, policy_version, origin, request_json, decision_json)
        SELECT coalesce(r.reserved_from, r.updated_at) AS decided_at, r.run_id, r.team, r.kind,
            'admit', []::VARCHAR[], r.reserved_gpu_hours, r.reserved_gpu_hours, {pv}, 'demo',
            CASE WHEN r.pilot_json IS NULL THEN to_json(struct_pack({admit_request},
                estimated_gpu_hours := r.estimated_gpu_hours))
            ELSE to_json(struct_pack({admit_request}, pilot := r.pilot_json::JSON)) END::VARCHAR,
            to_json(struct_pack(state := 'admit', run_id := r.run_id, team := r.team, kind := r.kind,
                reasons := []::VARCHAR[], reserved_gpu_hours := r.reserved_gpu_hours,
                estimate := struct_pack(source := r.estimate_source,
                    raw_gpu_hours := r.estimated_gpu_hours, judged_gpu_hours := r.reserved_gpu_hours,
                    wall_hours := round(epoch(r.reserved_until - r.reserved_from) / 3600, 3)),
                decided_at := strftime(coalesce(r.reserved_from, r.updated_at), '%Y-%m-%dT%H:%M:%S'),
                origin := 'demo'))::VARCHAR
        FROM demo_chunk r""")   # in demo_chunk's order: reserved_from (= decided_at), run ID
    n_def = len(data["deferred"])
    if n_def:
        step(0.55, f"inserting {n_def:,} deferred requests")
        con.register("demo_deferred", data["deferred_rows"])
        con.execute("""
            INSERT INTO decisions (decided_at, run_id, team, kind, state, reason_codes,
                judged_gpu_hours, reserved_gpu_hours, policy_version, origin, request_json,
                decision_json)
            SELECT decided_at, run_id, team, kind, state, reason_codes, judged_gpu_hours, NULL,
                policy_version, 'demo', request_json, decision_json FROM demo_deferred
            ORDER BY decided_at, run_id""")
    counts["decisions"] += len(data["runs"]) + n_def
    counts["deferred"] += n_def
    counts["active"] += data["active"]
    for name in ("demo_runs", "demo_pilots", "demo_deferred"):
        with contextlib.suppress(Exception):
            con.unregister(name)
    for table in ("demo_ids", "demo_chunk", "demo_chunk_pilots"):
        con.execute(f"DROP TABLE {table}")


RUN_COLUMNS = ", ".join((
    "run_id", "team", "kind", "capacity", "gpus", "gpu_mem_gb", "data_snapshot", "job_name",
    "estimated_gpu_hours", "estimate_source", "est_compute_gpu_hours", "est_checkpoint_gpu_hours",
    "est_eval_gpu_hours", "est_data_loading_gpu_hours", "est_restart_gpu_hours", "budget_gpu_hours",
    "max_runtime_hours", "reserved_from", "reserved_until", "reserved_gpu_hours", "started_at", "ended_at",
    "actual_gpu_hours", "act_checkpoint_gpu_hours", "act_retry_gpu_hours", "act_eval_gpu_hours",
    "act_lost_work_gpu_hours", "stop_reason", "interruptions", "restarts", "artifact_status",
    "last_valid_checkpoint", "full_evaluation", "holdout_reads", "holdout_allowance", "source", "updated_at"))


class NotNew(Exception):
    """The ledger already holds something, so the demo bootstrap leaves it alone."""


LEDGER_TABLES = frozenset(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)",
                                     Path(__file__).with_name("schema.sql").read_text(encoding="utf-8")))


def already_holds(con) -> str | None:
    """What the ledger on `con` holds besides its empty schema ("3 teams", "a table x that is not the
    ledger's", …), or None for a new ledger: no row in any table, no table or view of anyone else,
    nothing in `meta` but the schema version."""
    for schema, name, kind in con.execute(
            "SELECT table_schema, table_name, table_type FROM information_schema.tables "
            "WHERE table_catalog = current_database() ORDER BY ALL").fetchall():
        if schema != "main" or name not in LEDGER_TABLES or kind != "BASE TABLE":
            return f"a {kind.lower()} {schema}.{name} that is not the ledger's"
    first = ("runs", "decisions", "teams")
    for name in [*first, *sorted(LEDGER_TABLES - set(first))]:
        where = " WHERE key <> 'schema_version'" if name == "meta" else ""
        n = con.execute(f"SELECT count(*) FROM {name}{where}").fetchall()[0][0]
        if n:
            return f"{n:,} row(s) in its {name} table"
    return None


def ensure_demo_history(db=None, *, who: Who | None = None, **kwargs) -> bool:
    """Build the default demo into a new ledger (one that does not exist yet, or holds nothing:
    `already_holds`), recording `who` built it; True when it did. A ledger holding anything at all
    (teams, runs, decisions, an audit, tables of someone else) is left as it is: False."""
    try:
        build_demo(db, who=who, only_into_new=True, **kwargs)
    except NotNew:
        return False
    return True
