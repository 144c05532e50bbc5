"""The Recovery planner's read model, no Streamlit: its ledger inputs (interruption rate, restart time
and lifetimes, `recovery_inputs`) and its tables — the checkpoint-interval curve and its optima, the
preemptible-vs-stable comparison, and the options after a preemption or a budget breach — shaped as
the page shows them and lib.dashboard.recovery_figures draws them. The maths is in lib.planning."""
from __future__ import annotations

import datetime as dt

import pandas as pd

from lib.dashboard.filters import Filters
from lib.dashboard.labels import ALL_TEAMS
from lib.dashboard.reading import read_frame, period_params, reader
from lib.ledger.state import MEASURED_EVENTS, run_interruptions
from lib.planning import interval_curve as ic
from lib.planning.lifetimes import km_sample

OPTION_NUMBERS = ("expected_extra_gpu_hours", "expected_total_gpu_hours", "simulated_extra_gpu_hours_mean",
                  "mean", "p50", "p90", "p99", "p_budget_breach")


def interval_frames(work_h: float, gpus: int, checkpoint_h: float, restart_h: float, mtbf_h: float,
                    downtime_h: float = 0.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(curve, optima) of lib.planning.interval_curve as DataFrames, for
    recovery_figures.checkpoint_interval_curve. Raises ValueError / OverflowError on inputs it refuses."""
    curve, optima = ic.interval_curve(work_h, gpus, checkpoint_h, restart_h, mtbf_h, downtime_h)
    return pd.DataFrame(curve), pd.DataFrame(optima)


def capacity_table(cmp: dict) -> pd.DataFrame:
    """lib.planning.preemption.compare_capacity's answer as rows: quantity, stable, preemptible."""
    pre = cmp["preemptible"]
    return pd.DataFrame([
        {"quantity": "expected completion (hours)", "stable": cmp["stable_hours"],
         "preemptible": cmp["preemptible_hours"]},
        {"quantity": "billed GPU-hours", "stable": cmp["stable_cost_gpu_hours"],
         "preemptible": cmp["preemptible_billed_gpu_hours"]},
        {"quantity": "cost (stable-price GPU-hours)", "stable": cmp["stable_cost_gpu_hours"],
         "preemptible": cmp["preemptible_cost_gpu_hours"]},
        {"quantity": "expected interruptions", "stable": 0.0, "preemptible": pre["expected_interruptions"]},
        {"quantity": "expected lost work (GPU-hours)", "stable": 0.0,
         "preemptible": cmp["expected_lost_work_gpu_hours"]},
        {"quantity": "expected restarts (GPU-hours)", "stable": 0.0, "preemptible": cmp["expected_restart_gpu_hours"]},
    ])


def options_table(outcome: dict) -> pd.DataFrame:
    """lib.planning.recovery.scenario_outcomes' answer as one row per option: the decision's closed
    form next to the simulated completion times and breach share (numbers as float64, NaN if none)."""
    rows = []
    for name, opt in outcome["decision"]["options"].items():
        sim = outcome["options"].get(name) or {}
        ch = sim.get("completion_hours") or {}
        rows.append({
            "option": name, "available": bool(opt["available"]), "fits_budget": opt["fits_budget"],
            "expected_extra_gpu_hours": opt["expected_extra_gpu_hours"],
            "expected_total_gpu_hours": opt["expected_total_gpu_hours"],
            "simulated_extra_gpu_hours_mean": sim.get("billed_gpu_hours", {}).get("mean"),
            "mean": ch.get("mean"), "p50": ch.get("p50"), "p90": ch.get("p90"), "p99": ch.get("p99"),
            "p_budget_breach": sim.get("p_budget_breach"), "note": opt.get("note", ""),
        })
    options = pd.DataFrame(rows)
    for col in OPTION_NUMBERS:
        options[col] = pd.to_numeric(options[col], errors="coerce").astype("float64")
    return options


# ---------------------------------------------------------------------------- recovery planner

MIN_LIFETIME_SAMPLES = 30     # fewer empirical lifetimes than this: simulate exponential lifetimes
MAX_LIFETIME_SAMPLES = 5000   # empirical lifetimes returned per team x capacity at most (a fixed sample)
LIFETIME_DIGITS = 3           # significant digits a lifetime is grouped by (0.1 %: finer than a count-based lifetime)
RESTART_DEFAULT_MINUTES = ((8, 5.0), (64, 10.0))   # (up to GPUs, minutes); larger jobs: 15 minutes
RESTART_DEFAULT_LARGE_MINUTES = 15.0


def default_restart_h(gpus) -> float:
    """Restart time (hours) to assume when the ledger records none (typically 2-5 min for a
    small job, 10-15 min for a large one; MegaScale: ~15 min at >10k GPUs). The upper end of each
    range: 5 min up to 8 GPUs (one node), 10 min up to 64, 15 min above."""
    g = 1 if gpus is None or pd.isna(gpus) else float(gpus)
    for up_to, minutes in RESTART_DEFAULT_MINUTES:
        if g <= up_to:
            return minutes / 60.0
    return RESTART_DEFAULT_LARGE_MINUTES / 60.0


def finished_runs_cte(where: str) -> str:
    """SQL `WITH fin AS (...)`: the finished runs the planner's rates read (recovery_inputs' rows;
    `where` = Filters.where("r")), one row each: team, capacity, gpus, actual_gpu_hours, run_hours,
    interruptions, measured, restarts, act_retry_gpu_hours. Parameters $start, $end."""
    return f"""WITH fin AS (SELECT * FROM (
          SELECT r.team, r.capacity, r.gpus, r.actual_gpu_hours, r.actual_gpu_hours / r.gpus AS run_hours,
                 {run_interruptions('r', 'm')} AS interruptions, m.n IS NOT NULL AS measured,
                 r.restarts, r.act_retry_gpu_hours
          FROM runs r LEFT JOIN {MEASURED_EVENTS} m ON m.run_id = r.run_id
          WHERE {where} AND r.ended_at >= $start AND r.ended_at < $end
            AND r.actual_gpu_hours > 0 AND r.gpus > 0) WHERE interruptions IS NOT NULL)"""


def recovery_inputs(f: Filters, db=None, now: dt.datetime | None = None) -> dict:
    """The Recovery planner's ledger inputs: interruption rate, restart time and lifetimes per team x
    capacity type (and pooled over teams per capacity type, team = ALL_TEAMS).

    Rows: finished runs of the period (ended_at in the dates; team, kind and capacity filters apply)
    with actual_gpu_hours > 0, gpus > 0 and known interruptions: a run's interruption events in the
    ledger when it has any (measured_runs counts those runs), else its recorded count
    (lib.ledger.state.run_interruptions, the rule of the gate's interruption rate). Per row, hours:
    - run_hours = sum(actual_gpu_hours / gpus): wall-clock exposure (restart and lost time included);
    - mtbf_h = run_hours / interruptions (the rate estimate of exponential lifetimes; NULL without
      interruptions: none observed);
    - restart_h = median over runs with restarts > 0 and act_retry_gpu_hours of
      act_retry_gpu_hours / (restarts x gpus) (the ledger has no restart-duration column: retry
      GPU-hours per relaunch per accelerator), restart_source 'ledger'; without such runs
      default_restart_h(median GPUs), restart_source 'default';
    - lifetime_samples: how many lifetimes `lifetimes` holds for the row; censored_lifetimes: how
      many lifetimes ended without an interruption (right-censored);
      enough_lifetimes = interruptions >= MIN_LIFETIME_SAMPLES (the curve needs observed ones).
    Lifetimes (lib.planning.lifetimes, approximation: the ledger keeps counts, not interruption
    times): a run of h wall hours with n interruptions gives n lifetimes of h / (n + 1) that ended in
    an interruption and one of that length censored by the run's end (a run never interrupted: one
    censored lifetime of h), each to LIFETIME_DIGITS significant digits. `lifetimes` is the
    Kaplan-Meier curve's quantiles at evenly spaced probabilities, one per lifetime up to
    MAX_LIFETIME_SAMPLES per row, with an exponential tail
    (mean mtbf of the same lifetimes) beyond the last interruption; none without interruptions.
    Returns {"rates": DataFrame (team, capacity, runs, interrupted_runs, measured_runs, run_hours, gpu_hours,
    interruptions, mtbf_h, median_gpus, restart_runs, restart_h, restart_source, lifetime_samples,
    censored_lifetimes, enough_lifetimes), "lifetimes": DataFrame (team, capacity, lifetime_h)}.
    """
    where, p = f.where("r")
    p.update(period_params(f), cap=MAX_LIFETIME_SAMPLES, all=ALL_TEAMS, digits=LIFETIME_DIGITS)
    with reader(db) as con:
        # the period's rows, read by each query straight from runs (the time filter skips the rest
        # of the history; copying them into a table first cost more than reading them twice)
        fin = finished_runs_cte(where)
        rates = read_frame(con, fin + """
          SELECT CASE WHEN grouping(team) = 1 THEN $all ELSE team END AS team, capacity,
                 count(*) AS runs, count(*) FILTER (WHERE interruptions > 0) AS interrupted_runs,
                 count(*) FILTER (WHERE measured) AS measured_runs,
                 sum(run_hours) AS run_hours, sum(actual_gpu_hours) AS gpu_hours,
                 sum(interruptions)::BIGINT AS interruptions,
                 CASE WHEN sum(interruptions) > 0 THEN sum(run_hours) / sum(interruptions) END AS mtbf_h,
                 median(gpus)::DOUBLE AS median_gpus,
                 count(*) FILTER (WHERE restarts > 0 AND act_retry_gpu_hours IS NOT NULL) AS restart_runs,
                 median(act_retry_gpu_hours / (restarts * gpus))
                   FILTER (WHERE restarts > 0 AND act_retry_gpu_hours IS NOT NULL) AS restart_h,
                 CASE WHEN sum(interruptions) > 0 THEN least(count(*) + sum(interruptions), $cap) ELSE 0 END::BIGINT
                   AS lifetime_samples
          FROM fin GROUP BY GROUPING SETS ((team, capacity), (capacity))
          ORDER BY grouping(team) DESC, team, capacity""", p)
        # per team x capacity and pooled: lifetimes grouped by length (ended by an interruption,
        # censored), each length to LIFETIME_DIGITS significant digits, so a busy period makes a few
        # thousand groups, not one per run
        gaps = read_frame(con, fin + """
          SELECT CASE WHEN grouping(team) = 1 THEN $all ELSE team END AS team, capacity,
                 round(run_hours / (interruptions + 1),
                       $digits - 1 - floor(log10(run_hours / (interruptions + 1)))::INTEGER) AS lifetime_h,
                 sum(interruptions)::DOUBLE AS events,
                 count(*)::DOUBLE AS censored
          FROM fin GROUP BY GROUPING SETS ((team, capacity, lifetime_h), (capacity, lifetime_h))""", p)
    samples, censored_n = [], {}
    for (team, capacity), g in gaps.groupby(["team", "capacity"], sort=False):
        groups = list(zip(g["lifetime_h"], g["events"], g["censored"]))
        censored_n[(team, capacity)] = int(g["censored"].sum())
        size = min(MAX_LIFETIME_SAMPLES, int(g["events"].sum() + g["censored"].sum()))
        samples += [(team, capacity, t) for t in km_sample(groups, size)]
    lifetimes = pd.DataFrame(samples, columns=["team", "capacity", "lifetime_h"])
    lifetimes["lifetime_h"] = lifetimes["lifetime_h"].astype("float64")
    rates["restart_source"] = pd.Series(["ledger" if pd.notna(v) else "default" for v in rates["restart_h"]],
                                        index=rates.index, dtype="object")
    rates["restart_h"] = [v if pd.notna(v) else default_restart_h(g)
                          for v, g in zip(rates["restart_h"], rates["median_gpus"])]
    rates["restart_h"] = rates["restart_h"].astype("float64")
    rates["mtbf_h"] = rates["mtbf_h"].astype("float64")
    rates["censored_lifetimes"] = pd.Series([censored_n.get((t, c), 0) for t, c in zip(rates["team"], rates["capacity"])],
                                            index=rates.index, dtype="int64")
    rates["enough_lifetimes"] = (rates["interruptions"] >= MIN_LIFETIME_SAMPLES).astype("bool")
    return {"rates": rates, "lifetimes": lifetimes}
