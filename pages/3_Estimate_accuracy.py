"""Estimate accuracy: predicted vs actual, the error trend per team, where the error came from, and
the calibration the gate applies today."""
import streamlit as st

import ui
from lib.dashboard import figures, queries

f = ui.frame()

data = ui.PageData(queries.estimate_accuracy, f)
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

data.chart(figures.predicted_vs_actual, "points")
data.chart(figures.rolling_ratio, "rolling")

st.subheader("Where the error came from")
data.chart(figures.error_sources, "sources")
ui.table(data["sources"], "error_sources", "dl_acc_sources",
         empty="No finished run with an itemised estimate in this period.")

st.subheader("Calibration the gate applies today")
st.caption("The factors `check` and `submit` apply today, learned from each team's recent finished runs: "
           "median factor × raw estimate = the calibrated median; upper-bound factor × raw = the calibrated "
           "upper bound (empty when unknown: too few runs, or too many stopped at their budget). Runs and "
           "censored runs say what each factor rests on. Backtest coverage: how often the bound covered the "
           "team's last 100 runs of that kind, each replayed from the runs before it; it should sit near the "
           "target coverage. It is empty where the Tobit fit stands in for the conformal bound (that fit is "
           "not replayed here).")
with st.spinner("Calibrating from the gate's history window (slow on a large ledger the first time)…"):
    cal = ui.PageData(queries.calibration, f, hourly=True)
cal.chart(figures.calibration_factors, "table")
ui.table(cal["table"], "calibration", "dl_acc_calibration",
         empty="No finished runs in the calibration window yet: every bound is unknown.")
ui.glossary("calibrated estimate", "conformal bound", "Tobit", "censored run", "requested, not measured")

