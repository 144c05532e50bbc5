"""The demo's requests, generated with numpy from a seed (no per-row Python) as tables of codes and
numbers, each with what its run does once admitted; lib.ledger.demo.decisions has the gate decide them
in time order (which sets the reservations and times), lib.ledger.demo.insert makes the strings in SQL.

What it models (its numbers: lib.ledger.demo.parameters):

- the teams' sizes (more runs for bigger teams) and kind mix (exploratory, production candidates,
  scheduled retraining at a fixed time of day), growth over the history, deadline pushes (a team's
  handful of runs within hours); a build busier than WORK_AT_RATE runs a day has shorter runs;
- estimates from a pilot (small error) or stated by the team (a team-specific median bias of actual /
  estimate between 0.9 and 1.6 that drifts down over time, a log-normal spread, and a long tail of
  overruns), itemised: compute + checkpoint + evaluation + data loading + restarts = the estimate;
- stable and preemptible capacity; interruptions (Poisson, far more often on preemptible) with
  restarts, retry GPU-hours and lost work; actual items (checkpoint, retry, evaluation, lost work) are
  parts of the actual total, the rest being useful compute;
- how runs end (`ending`, with the budget and accelerators the gate admitted): budget stops (actual
  capped at the budget, artifact incomplete, last valid checkpoint kept), wall-clock stops at
  max_runtime_hours, early stops, failures, cancellations, out-of-memory; late starts and early ends
  that leave reserved capacity idle, reservations never used;
- a few runs still running and requests for later;
- requests drawn with a flaw the gate defers (about 6 % of runs; most name a run submitted again
  later, fixed): their time, team, kind and flaws; lib.ledger.demo.deferrals builds them;
- a change: every run `COST_SHIFT` names (team, days ago, factor) requested in its last days needs
  that factor more (a new model family, pilots still from the old one), so the Estimate accuracy
  page shows a drift alarm and a bound that adapted;
- pilots (for the pilot-estimated runs, and the runs the gate asks one of), holdout reads (a few over
  their allowance), full-evaluation flags.

Same seed and same `now` -> the same tables.
"""
from __future__ import annotations

from datetime import datetime

import numpy as np
import pandas as pd

from lib.gate.terms import KINDS
from lib.ledger.demo.parameters import (ARTIFACT_OF_STOP, BURST_HOURS, BURST_RUNS, BURST_SHARE, CHECKED_SHARE,
                                        COST_SHIFT, CUT_SHORT, DEFER_CODES, DEFER_P, EXPLORATORY, GPU_CHOICES,
                                        GPU_P, HISTORY_DAYS, KIND_MIX, NEVER_USED_SHARE, OTHER_KIND_MIX,
                                        PREEMPTIBLE, PREEMPTIBLE_SHARE, PRODUCTION, RETRAINING, STABLE, STOP,
                                        TEAM_TRAITS, WALL, WORK_AT_RATE)


def _traits(team: str, rng: np.random.Generator):
    """TEAM_TRAITS and the kind mix (in KINDS order) of `team`; drawn for a team the demo does not know."""
    mix = tuple(KIND_MIX.get(team, OTHER_KIND_MIX)[k] for k in KINDS)
    if team in TEAM_TRAITS:
        return (*TEAM_TRAITS[team], mix)
    bias = float(rng.uniform(0.9, 1.6))
    return (bias, float(rng.uniform(0.2, 0.4)), float(rng.uniform(0.03, 0.08)), mix)


def _stops(*names: str) -> list[int]:
    """The codes of the stop reasons `names` in the generated runs."""
    return [STOP[name] for name in names]


def _ts(base: np.datetime64, hours: np.ndarray) -> np.ndarray:
    """base + hours (float array, NaN -> NaT) as datetime64[us]."""
    us = np.where(np.isfinite(hours), hours * 3.6e9, 0).astype("int64")
    out = base + us.astype("timedelta64[us]")
    out[~np.isfinite(hours)] = np.datetime64("NaT")
    return out


def generate(teams: list[dict], snapshots: list[dict], runs: int, seed, now: datetime, *,
             offset: int = 0, active: bool = True, days: int = HISTORY_DAYS, part: tuple[int, int] = (0, 1),
             total: int | None = None) -> dict:
    """The demo's requests as DataFrames of codes and numbers (strings are made in SQL on insert),
    submitted over the `days` before `now`, each with what its run will do once admitted; the gate
    decides them (lib.ledger.demo.decisions), which sets their reservations and times.
    Rows are numbered from `offset` (column i); `active=False` leaves out the runs still running or
    reserved ahead (a chunk of a large build that is not its last). `part` (k, K): this chunk is the
    k-th of K slices of the history in time (each holding as many runs); `total`: the build's runs
    (default `runs`), whose daily rate sets how much work each run is (WORK_AT_RATE)."""
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
                active_rows.append((ti, PRODUCTION if rng.random() < 0.2 else EXPLORATORY, g))
                used += g
                if rng.random() < 0.15:
                    break
            if t["retraining_reserved_gpus"] and len(active_rows) < budget_active:
                g = int(min(t["retraining_reserved_gpus"], 8))
                active_rows.append((ti, RETRAINING, g))
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
    kind_i = (u[:, None] > np.cumsum(mix, axis=1)[team_i][:, :len(KINDS) - 1]).sum(axis=1)
    if A:
        kind_i[H:] = [r[1] for r in active_rows]

    # time in hours before now (negative = past). Growth: density ~ t^0.35 over the history.
    span_h = days * 24.0
    t_frac = ((part[0] + rng.random(n)) / part[1]) ** (1 / 1.35)
    t_sub = -span_h * (1 - t_frac)
    # deadline pushes: a team submits a handful of runs within hours, more than its quota holds
    burst = (rng.random(n) < BURST_SHARE) & (np.arange(n) < H)
    n_bursts = max(1, int(burst.sum()) // BURST_RUNS)
    which = rng.integers(0, n_bursts, n)
    centre = rng.choice(np.flatnonzero(np.arange(n) < H), n_bursts) if H else np.zeros(n_bursts, np.int64)
    team_i = np.where(burst, team_i[centre][which], team_i)
    t_sub = np.where(burst, t_sub[centre][which] + rng.uniform(0, BURST_HOURS, n), t_sub)
    # scheduled retraining: daily, at 02:00 UTC + a per-team offset, a few minutes of jitter
    now_np = np.datetime64(now, "us")
    day0 = np.datetime64(now.replace(hour=0, minute=0, second=0, microsecond=0), "us")
    hour_now = (now_np - day0) / np.timedelta64(1, "h")
    is_rt = kind_i == RETRAINING
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
    p_spot = np.array([PREEMPTIBLE_SHARE[k] for k in KINDS])[kind_i]
    preempt = has_spot & (rng.random(n) < p_spot)

    # ---- the estimate -------------------------------------------------------------------------
    med = np.array([WALL[k][0] for k in KINDS])[kind_i]
    sig = np.array([WALL[k][1] for k in KINDS])[kind_i]
    team_rt = np.array([t["max_runtime_hours"] for t in teams])[team_i]
    work = min(1.0, WORK_AT_RATE * days / (total or runs))   # busier builds: shorter runs, same load
    est_wall = np.clip(med * work * np.exp(sig * rng.standard_normal(n)), 0.05, team_rt * 0.3)
    est = np.round(gpus * est_wall, 3)
    threshold = np.array([t["pilot_required_above_gpu_hours"] for t in teams])[team_i]
    pilot = np.where(est > threshold * 0.5, rng.random(n) < 0.92, rng.random(n) < 0.25)

    skip_eval = (kind_i == EXPLORATORY) & (rng.random(n) < 0.6)
    s_ckpt = rng.uniform(0.01, 0.05, n)
    s_eval = np.where(skip_eval, 0.0, np.where(kind_i == EXPLORATORY, rng.uniform(0.01, 0.05, n),
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

    margin = np.select([kind_i == EXPLORATORY, kind_i == PRODUCTION],
                       [rng.uniform(1.05, 1.6, n), rng.uniform(1.25, 1.8, n)], rng.uniform(1.25, 1.6, n))
    budget = np.round(np.maximum(est * margin * np.where(pilot, 1.0, bias ** 0.7), 0.5), 1)
    budget = np.maximum(budget, np.ceil(est * 10) / 10)   # a team asks for at least its own estimate
    max_rt = np.round(np.minimum(team_rt, est_wall * rng.uniform(1.5, 3.0, n)), 1)
    max_rt = np.maximum(max_rt, np.minimum(team_rt, 0.5))
    ckpt_ok = rng.random(n) < np.select([kind_i == PRODUCTION, kind_i == RETRAINING], [0.99, 0.97], 0.88)
    ckpt_ok |= preempt   # the gate admits preemptible capacity only to jobs that can checkpoint
    holdout_allow = np.select([kind_i == PRODUCTION, kind_i == RETRAINING],
                              [rng.integers(1, 4, n), np.ones(n, np.int64)], 0)

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

    # ---- how it ends once admitted: drawn now, settled by `ending` with the budget and accelerators
    # the gate admitted it with --------------------------------------------------------------------
    stop = np.full(n, STOP["completed"], np.int64)
    u = rng.random(n)

    def share(name: str, p) -> np.ndarray:   # of the runs that end as `name` (CUT_SHORT)
        if name == "early-stop":
            return np.array([p[k] for k in KINDS])[kind_i]
        return np.where(preempt, p, 0.0) if name == "preempted" else np.full(n, p)
    cuts = np.cumsum([share(name, p) for name, (p, _) in CUT_SHORT.items()] + [np.full(n, NEVER_USED_SHARE)],
                     axis=0)
    outcome = (u[None, :] > cuts).sum(axis=0)   # the o-th stop of CUT_SHORT, then never used, then ran to its end
    scale = np.ones(n)
    for o, (name, (_, (lo, hi))) in enumerate(CUT_SHORT.items()):
        m = outcome == o
        stop[m] = STOP[name]
        scale[m] = rng.uniform(lo, hi, int(m.sum()))
    never = outcome == len(CUT_SHORT)
    stop[never] = STOP["cancelled"]
    scale[never] = 0.0
    reads = np.where(kind_i != EXPLORATORY, rng.binomial(np.maximum(holdout_allow, 1), 0.6), 0)
    reads = np.minimum(reads, holdout_allow)
    over_read = rng.random(n) < np.where(kind_i == EXPLORATORY, 0.03, 0.04)
    reads = np.where(over_read, holdout_allow + rng.integers(1, 4, n), reads)
    drawn = {"full": full, "drawn_actual": full * scale, "never": never, "drawn_stop": stop,
             "a_ckpt": a_ckpt, "a_eval": a_eval, "a_lost": lost, "a_retry": retry, "interrupts": interrupts,
             "skip_eval": skip_eval, "ckpt_ok": ckpt_ok, "u_eval": rng.random(n), "drawn_reads": reads,
             "max_rt": max_rt}

    # ---- when: submitted at t_sub (hours relative to now); the gate sets the reservation -----------
    wall_est = est_wall * np.where(kind_i == PRODUCTION, 1.15, 1.05)
    late = np.where(rng.random(n) < 0.12, rng.exponential(2.0, n), rng.exponential(0.1, n))
    hist = np.arange(n) < H
    # active runs: running (submitted a while ago, still going now) or submitted for later
    fut = ~hist & (rng.random(n) < 0.35)
    run_ = ~hist & ~fut
    elapsed = wall_est * rng.uniform(0.05, 0.8, n)
    t_sub = np.where(run_, -elapsed - rng.uniform(0, 0.5, n), np.where(fut, rng.uniform(1, 72, n), t_sub))
    late = np.where(run_, np.minimum(late, elapsed / 2), late)

    runs_df = pd.DataFrame({
        "i": np.arange(n) + offset, "team_i": team_i, "kind_i": kind_i, "cap_i": np.where(preempt, PREEMPTIBLE, STABLE),
        "gpus": gpus, "gpu_mem_gb": gpu_mem,
        "est": est, "pilot": pilot, "e_comp": np.round(e_comp, 3), "e_ckpt": e_ckpt, "e_eval": e_eval,
        "e_data": e_data, "e_rst": e_rst, "budget": budget, "max_rt": max_rt,
        "t_sub": t_sub, "late": late, "restart_h": restart_min / 60, "open": ~hist,
        "checks": rng.random(n) < CHECKED_SHARE,
        "submitted_at": _ts(now_np, t_sub), "allow": holdout_allow,
        "ckpt_ok": ckpt_ok, "skip_eval": skip_eval, "exp_int": np.round(wall_est / mtbi, 2),
        "snap_u": rng.random(n), "ckpt_step_u": rng.integers(2_000, 200_000, n),
        **{k: v for k, v in drawn.items() if k not in ("skip_eval", "ckpt_ok", "max_rt")},
    })

    # the pilot each run has, or runs when the gate asks for one (kept for pilot-estimated runs)
    sps = rng.uniform(0.5, 8.0, n)
    pilots_df = pd.DataFrame({
        "i": np.arange(n) + offset,
        "before_h": rng.uniform(1, 48, n), "p_gpus": gpus,
        "sps": np.round(sps, 3),
        "wc_sps": np.round(sps * rng.uniform(0.45, 0.9, n), 3),
        "wc_share": np.round(rng.uniform(0.0, 0.15, n), 3),
        "peak_mem": np.round(gpu_mem * rng.uniform(0.45, 0.95, n), 1),
        "ckpt_s": np.round(rng.uniform(15, 120, n), 0),
        "steps": np.maximum(1, np.round(e_comp / gpus * 3600 * sps)).astype(np.int64),
        "interval": rng.choice(np.array([1000, 2000, 5000, 10000]), n),
        "eval_gh": e_eval, "dl_frac": np.round(s_data, 3),
        "restart_min": np.round(restart_min, 1),
    })

    # requests deferred for what they ask (the gate decides them): ~6 % of runs; 60 % of them
    # name a run that is submitted again later, fixed
    n_def = int(round(0.06 * H))
    later = rng.random(n_def) < 0.6
    of_run = rng.integers(0, max(H, 1), n_def)
    c1 = rng.choice(len(DEFER_CODES), n_def, p=DEFER_P / DEFER_P.sum())
    c2 = np.where(rng.random(n_def) < 0.15, rng.choice(len(DEFER_CODES), n_def, p=DEFER_P / DEFER_P.sum()), -1)
    c2 = np.where(c2 == c1, -1, c2)
    d_time = np.where(later, t_sub[of_run] - rng.uniform(0.3, 36, n_def), -span_h * rng.random(n_def))
    deferred_df = pd.DataFrame({
        "j": np.arange(n_def) + offset, "later": later, "i": of_run + offset,
        "team_i": np.where(later, team_i[of_run], rng.choice(T, n_def, p=w / w.sum())),
        "kind_i": np.where(later, kind_i[of_run], rng.choice(len(KINDS), n_def, p=[OTHER_KIND_MIX[k] for k in KINDS])),
        "c_lo": np.where(c2 < 0, c1, np.minimum(c1, c2)), "c_hi": np.where(c2 < 0, -1, np.maximum(c1, c2)),
        "d_time": d_time,
        "judged": np.round(np.where(later, est[of_run] * rng.uniform(1.0, 1.4, n_def),
                                    rng.lognormal(3.5, 1.2, n_def)), 3),
    }) if H else pd.DataFrame()
    return {"runs": runs_df, "pilots": pilots_df, "deferred": deferred_df, "teams": names,
            "snapshots": snapshots, "active": A}


ENDING_COLUMNS = ("full", "drawn_actual", "never", "drawn_stop", "a_ckpt", "a_eval", "a_lost", "a_retry",
                  "interrupts", "skip_eval", "ckpt_ok", "u_eval", "drawn_reads", "max_rt", "ckpt_step_u")


def ending(c: dict, budget: np.ndarray, gpus: np.ndarray) -> dict:
    """How the runs ended whose ENDING_COLUMNS (of generate's runs) are `c` (name -> array), with the
    `budget` (GPU-hours) and `gpus` the gate admitted them with: a run needing more than its budget,
    or than its wall clock allows on its accelerators, stops there (budget or wall-clock, censored);
    the items, interruptions, holdout reads and checkpoint follow. Arrays by row; actual GPU-hours
    as "actual"."""
    never, full, stop = c["never"], c["full"], c["drawn_stop"]
    limit_wall = gpus * c["max_rt"]
    limit = np.minimum(budget, limit_wall)
    actual = c["drawn_actual"]
    over = (actual > limit) & ~never   # stopped at its budget or its wall clock, whatever came next
    stop = np.where(over, np.where(budget <= limit_wall, STOP["budget"], STOP["wall-clock"]), stop)
    actual = np.where(over, limit, actual)
    k = np.where(full > 0, actual / full, 0.0)
    a_ckpt, a_eval, lost, retry = (np.round(c[x] * k, 4) for x in ("a_ckpt", "a_eval", "a_lost", "a_retry"))
    actual = np.round(actual, 3)
    parts = a_ckpt + a_eval + lost + retry
    actual = np.maximum(actual, np.round(parts + 5e-4, 3))  # items never exceed the total
    frac_done = np.where(full > 0, np.minimum(1.0, actual / np.maximum(full, 1e-9)), 0)
    interrupts = np.round(c["interrupts"] * frac_done).astype(np.int64)
    restarts = np.where((stop == STOP["preempted"]) & (interrupts > 0), interrupts - 1, interrupts)
    skip_eval = c["skip_eval"]
    full_eval = np.select([stop == STOP["completed"], stop == STOP["early-stop"]],
                          [~skip_eval & (c["u_eval"] < 0.97), ~skip_eval & (c["u_eval"] < 0.5)], False)
    # a run cut short by a failure read the holdout half as often as one that ended by plan
    ended_by_plan = np.isin(stop, _stops("completed", "early-stop", "budget", "wall-clock"))
    reads = c["drawn_reads"]
    reads = np.where(never | ~ended_by_plan, np.where(never, 0, reads // 2), reads)
    has_ckpt = c["ckpt_ok"] & ~never & (actual > 0) & ~np.isin(stop, _stops("cancelled", "out-of-memory"))
    ckpt_step = (np.floor(frac_done * c["ckpt_step_u"] / 500) * 500).astype(np.int64)
    return {"actual": actual, "a_ckpt": a_ckpt, "a_eval": a_eval, "a_lost": lost, "a_retry": retry,
            "stop_i": stop, "interrupts": interrupts, "restarts": restarts, "artifact_i": ARTIFACT_OF_STOP[stop],
            "full_eval": full_eval, "reads": reads, "has_ckpt": has_ckpt, "ckpt_step": ckpt_step}
