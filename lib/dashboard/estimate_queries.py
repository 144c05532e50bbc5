"""The Estimate accuracy page's read model: estimates against what runs used (points, the error over
time and by source), and the calibration the gate applies today with its drift alarms.
"""
from __future__ import annotations

import datetime as dt

import pandas as pd

from lib.dashboard.filters import Filters
from lib.dashboard.labels import REQUESTED_LABEL
from lib.dashboard.reading import read_frame, one_row, period_params, reader
from lib.gate.backtest import backtest, drift_alarm
from lib.gate.calibration import DEFAULT_MAX_RUNS
from lib.gate.terms import KINDS, utcnow
from lib.ledger.calibration_rows import CALIBRATION_WINDOW_DAYS
from lib.ledger.calibration_scopes import ScopeRows, calibration_code
from lib.planning import content_store

BACKTEST_RUNS = 100           # recent runs per team x kind replayed against the bound they would have had
SCATTER_POINTS = 4000         # points in the predicted-vs-actual chart at most (a fixed sample)
# beside the ledger: the backtests' replayed bounds, kept by content (lib.planning.content_store): a run's
# replayed bound depends only on the runs before it, so after a few more runs end only theirs are replayed
BOUNDS_SUFFIX = ".replayed-bounds.json"
BOUNDS_KEPT = 40_000          # replayed bounds kept (about 150 bytes each): 24 team x kinds x 100 runs, many times
BOUNDS_FORMAT = 1
DRIFT_ADVICE = "re-run the pilots on the current model and data; check for a model or data change"


ERROR_SOURCES = ("runtime", "checkpoint overhead", "retries and lost work", "evaluation")


def estimate_accuracy(f: Filters, db=None, now: dt.datetime | None = None, window_days: int = 28) -> dict:
    """Predicted vs actual points (a fixed sample when large), the rolling median of actual /
    estimated per team (trailing `window_days`, one point per week), the error by source, and
    counts of runs whose estimate was requested, not measured."""
    now = now or utcnow()
    where, p = f.where("r")
    p.update(period_params(f), now=now, wstart=f.start - dt.timedelta(days=window_days),
             wdays=window_days)
    with reader(db) as con:
        base = (f"FROM runs r WHERE {where} AND r.ended_at >= $start AND r.ended_at < $end "
                "AND r.estimated_gpu_hours > 0 AND r.actual_gpu_hours > 0")
        counts = one_row(con, f"""SELECT count(*) AS runs,
                 count(*) FILTER (WHERE r.estimate_source = 'requested') AS requested_runs {base}""", p)
        points = read_frame(con, f"""SELECT * FROM (
                 SELECT r.run_id, r.team, r.kind, r.estimated_gpu_hours, r.actual_gpu_hours, r.stop_reason,
                        CASE WHEN r.estimate_source = 'requested' THEN '{REQUESTED_LABEL}'
                             ELSE coalesce(r.estimate_source, 'unknown') END AS estimate_source {base})
                 USING SAMPLE reservoir({SCATTER_POINTS} ROWS) REPEATABLE (7)""", p)
        rolling = read_frame(con, f"""
          WITH x AS (SELECT r.team, r.ended_at, r.actual_gpu_hours / r.estimated_gpu_hours AS ratio
                     FROM runs r WHERE {where} AND r.ended_at >= $wstart AND r.ended_at < $end
                       AND r.estimated_gpu_hours > 0 AND r.actual_gpu_hours IS NOT NULL
                       AND r.estimate_source IS DISTINCT FROM 'requested'),
          weeks AS (SELECT w::TIMESTAMP AS week_end FROM range($start::TIMESTAMP + INTERVAL 7 DAY,
                    $end::TIMESTAMP + INTERVAL 7 DAY, INTERVAL 7 DAY) t(w))
          SELECT (least(weeks.week_end, $end::TIMESTAMP) - INTERVAL 1 DAY)::DATE AS day, x.team,
                 median(x.ratio) AS median_ratio, count(*) AS runs
          FROM weeks JOIN x ON x.ended_at < least(weeks.week_end, $end::TIMESTAMP)
                           AND x.ended_at >= least(weeks.week_end, $end::TIMESTAMP) - to_days($wdays::INTEGER)
          GROUP BY ALL ORDER BY day, team""", p)
        sources = read_frame(con, f"""
          WITH x AS (SELECT r.team,
                 coalesce(r.est_compute_gpu_hours, 0) + coalesce(r.est_data_loading_gpu_hours, 0) AS est_runtime,
                 r.actual_gpu_hours - coalesce(r.act_checkpoint_gpu_hours, 0) - coalesce(r.act_retry_gpu_hours, 0)
                   - coalesce(r.act_eval_gpu_hours, 0) - coalesce(r.act_lost_work_gpu_hours, 0) AS act_runtime,
                 coalesce(r.est_checkpoint_gpu_hours, 0) AS est_ckpt, coalesce(r.act_checkpoint_gpu_hours, 0) AS act_ckpt,
                 coalesce(r.est_restart_gpu_hours, 0) AS est_retry,
                 coalesce(r.act_retry_gpu_hours, 0) + coalesce(r.act_lost_work_gpu_hours, 0) AS act_retry,
                 coalesce(r.est_eval_gpu_hours, 0) AS est_eval, coalesce(r.act_eval_gpu_hours, 0) AS act_eval,
                 r.estimated_gpu_hours
            {base} AND r.estimate_source IS DISTINCT FROM 'requested' AND r.est_compute_gpu_hours IS NOT NULL)
          SELECT team, count(*) AS runs, sum(estimated_gpu_hours) AS estimated_gpu_hours,
                 sum(act_runtime - est_runtime) AS "runtime",
                 sum(act_ckpt - est_ckpt) AS "checkpoint overhead",
                 sum(act_retry - est_retry) AS "retries and lost work",
                 sum(act_eval - est_eval) AS "evaluation"
          FROM x GROUP BY team ORDER BY team""", p)
    long = sources.melt(id_vars=["team", "runs", "estimated_gpu_hours"], value_vars=list(ERROR_SOURCES),
                        var_name="source", value_name="error_gpu_hours")
    long["error_share_of_estimate"] = long["error_gpu_hours"] / long["estimated_gpu_hours"]
    return {"counts": counts, "points": points, "rolling": rolling, "sources": long}


def calibration_shown(f: Filters, db=None, now: dt.datetime | None = None, *, max_runs: int | None = None,
                window_days: int | None = None) -> dict:
    """The calibration the gate applies at `now` per team x kind, with how many runs (and censored
    runs) each rests on, and the drift alarms. Team and kind filters apply; dates do not (the gate
    reads its own window).
    backtest_coverage: how often the gate's team x kind bound (conformal, Tobit, or shifted after a
    change: lib.gate.backtest.backtest) covered the scope's last BACKTEST_RUNS runs when replayed
    from the runs before each; it should sit near the level. adapted_since: where the bound follows a
    change in the cost ratio, the first run after it.
    alarms: the team x kind scopes whose last ALARM_RUNS replayed runs exceeded their bound more often
    than the level allows (lib.gate.backtest.drift_alarm), with since when and what to do.

    Same rows (lib.ledger.calibration_rows.CALIBRATION_ROWS_SQL) and same function as
    lib.ledger.calibration_rows.calibration (what submit and check use): the `max_runs` most recent
    per scope, fed to lib.gate.calibration.calibrate_scopes. Instead of up to three scans per team x
    kind, it reads each scope for every team at once (lib.ledger.calibration_scopes.ScopeRows): a few
    queries in all, not a few per team x kind (what that saves: docs/benchmarks.md)."""
    now = now or utcnow()
    max_runs = DEFAULT_MAX_RUNS if max_runs is None else max_runs
    window_days = CALIBRATION_WINDOW_DAYS if window_days is None else window_days
    with reader(db) as con:
        scopes = ScopeRows(con, now, max_runs=max_runs, window_days=window_days, replay=BACKTEST_RUNS)
    return calibration_from(scopes, list(f.teams) or scopes.teams, f.kinds or KINDS, max_runs=max_runs)


def calibration_from(scopes: ScopeRows, teams: list[str], kinds, *, max_runs: int = DEFAULT_MAX_RUNS) -> dict:
    """`calibration`'s table and alarms for `teams` x `kinds` from calibration rows read already
    (`scopes`, read with replay=BACKTEST_RUNS and `max_runs`); the replayed bounds are kept beside
    the ledger they were read from (BOUNDS_SUFFIX)."""
    replayed, streams = {}, {}
    memo_file = scopes.beside(BOUNDS_SUFFIX)
    memo = content_store.load(memo_file, BOUNDS_FORMAT) if memo_file is not None else {}
    known_bounds = len(memo)
    for k, g in scopes.replay_frame.groupby(["team", "kind"]):
        # each run replayed from the runs that had ended when it was admitted (reserved or started)
        streams[k] = g
        replayed[k] = backtest(g["r"].to_numpy(), g["censored"].to_numpy(bool), window=max_runs,
                               last=BACKTEST_RUNS, ended_at=g["ended_at"].to_numpy(),
                               decided_at=g["decided_at"].to_numpy(), memo=memo, memo_tag=calibration_code())
    if memo_file is not None and len(memo) > known_bounds:
        content_store.save(memo_file, memo, BOUNDS_FORMAT, BOUNDS_KEPT)
    rows, alarms = [], []
    for team in teams:
        for kind in kinds:
            cal = scopes.calibrate(team, kind)
            back = replayed.get((team, kind), {})
            rows.append({"team": team, "kind": kind, "factor": cal["factor"],
                         "upper_factor": cal["upper_factor"], "method": cal["method"],
                         "scope": cal["scope"], "runs": cal["n"], "censored_runs": cal["n_censored"],
                         "level": cal["level"], "backtest_checked": back.get("checked", 0),
                         "backtest_coverage": back.get("coverage"),
                         "adapted_since": pd.Timestamp(cal["adapted_since"]) if cal["adapted_since"] else pd.NaT,
                         "note": calibration_remark(cal)})
            g = streams.get((team, kind))
            alarm = None
            if g is not None:
                back_out = replayed[(team, kind)]["outcomes"]
                # the budget stops since the change the calibration followed, against those before it
                after = (g["decided_at"] >= pd.Timestamp(cal["adapted_since"])).to_numpy() \
                    if cal["adapted_since"] else None
                alarm = drift_alarm(back_out, list(g["ended_at"])[-len(back_out):],
                                    censored=g["censored"].to_numpy(bool), after_change=after)
            if alarm and alarm["alarm"]:
                # since when: where the gate's bound found the change, else the first run that went over
                since = pd.Timestamp(cal["adapted_since"]) if cal["adapted_since"] else alarm["since"]
                alarms.append({"team": team, "kind": kind, "recent_exceeded": alarm["message"],
                               "drift_since": since, "what_to_do": DRIFT_ADVICE})
    scopes.keep()
    table = pd.DataFrame(rows, columns=["team", "kind", "factor", "upper_factor", "method", "scope", "runs",
                                        "censored_runs", "level", "backtest_checked", "backtest_coverage",
                                        "adapted_since", "note"])
    table["upper_factor"] = table["upper_factor"].astype("float64")
    table["backtest_coverage"] = table["backtest_coverage"].astype("float64")
    table["adapted_since"] = pd.to_datetime(table["adapted_since"])
    alarms = pd.DataFrame(alarms, columns=["team", "kind", "recent_exceeded", "drift_since", "what_to_do"])
    alarms["drift_since"] = pd.to_datetime(alarms["drift_since"])
    return {"table": table, "alarms": alarms}


def calibration_remark(cal: dict) -> str:
    """What a calibration table row's other columns (method, scope, runs, censored runs, bound adapted
    since) do not say already: why its upper bound is unknown, or how many runs a change set aside;
    "" otherwise."""
    if cal["upper_factor"] is None:
        return f"upper bound unknown: it needs {cal['runs_needed']} runs with few enough of them censored"
    if cal["adapted_since"]:
        return f"adapted to a change in the cost ratio: {cal['runs_before_change']} earlier runs set aside"
    return ""
