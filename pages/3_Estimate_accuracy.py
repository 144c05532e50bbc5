"""Estimate accuracy: predicted vs actual, the error trend per team, where the error came from, and
the calibration the gate applies today."""
import streamlit as st

import ui
from lib.dashboard import estimate_figures, estimate_queries

f = ui.frame()

data = ui.PageData(estimate_queries.estimate_accuracy, f)
counts = data["counts"]

st.title("Estimate accuracy")
ui.caption(f.describe())

if not counts.get("runs"):
    st.info("No finished runs with an estimate in this period — widen the dates or upload history on the "
            "Upload page.")
else:
    shown = len(data["points"])
    st.caption(f"{counts['runs']:,} finished runs with an estimate ({shown:,} drawn"
               f"{', a fixed random sample' if shown < counts['runs'] else ''}); "
               f"{counts['requested_runs']:,} of them carry only a requested estimate (crosses: requested, not "
               "measured) and are left out of the trend and error sources.")

data.chart(estimate_figures.predicted_vs_actual, "points")
data.chart(estimate_figures.rolling_ratio, "rolling")

st.subheader("Where the error came from")
data.chart(estimate_figures.error_sources, "sources")
ui.table(data["sources"], "error_sources", "dl_acc_sources",
         empty="No finished run with an itemised estimate in this period.")

st.subheader("Calibration the gate applies today")
with st.spinner("Calibrating from the gate's history window (slow on a large ledger the first time)…"):
    cal = ui.PageData(estimate_queries.calibration_shown, f, hourly=True)
alarms = cal["alarms"]
if len(alarms):
    st.warning(f"Drift alarm: {len(alarms)} team × kind "
               f"{'scope goes' if len(alarms) == 1 else 'scopes go'} over the calibrated upper bound, or "
               "stop at the budget, far more often than the level or the past allows. Their costs have probably "
               "changed: re-run the pilots and check for a model or data change.")
    ui.table(alarms, "drift_alarms", "dl_acc_alarms", empty="")
elif (cal["table"]["backtest_checked"] > 0).any():
    st.success("No drift alarm: every team × kind's last 20 runs went over the bound about as often as its "
               "level allows.")
st.caption("The factors `check` and `submit` apply today, learned from each team's recent finished runs: "
           "median factor × raw estimate = the calibrated median; upper-bound factor × raw = the calibrated "
           "upper bound (empty when unknown: too few runs, or too many stopped at their budget). Runs and "
           "censored runs say what each factor rests on; after a change in a team's costs the bound rests on "
           "the runs since the change only (bound adapted since). Backtest coverage: how often the gate's own "
           "bound (conformal, Tobit or shifted) covered the team's last 100 runs of that kind, each replayed "
           "from the runs before it; it should sit near the target coverage. A run stopped at its budget "
           "below its bound is never counted as covered.")
cal.chart(estimate_figures.calibration_factors, "table")
ui.table(cal["table"], "calibration", "dl_acc_calibration",
         empty="No finished runs in the calibration window yet: every bound is unknown.")
ui.glossary("calibrated estimate", "conformal bound", "Tobit", "censored run", "drift alarm", "adapted bound",
            "requested, not measured")
