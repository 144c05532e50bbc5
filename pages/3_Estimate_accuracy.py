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
st.caption("From lib.ledger.service.calibration — what `submit` and `check` apply — over the gate's own history window: factor × raw estimate = median "
           "estimate; upper factor × raw = upper bound (empty when unknown — too few runs, or too many "
           "stopped for budget). 'runs' and 'censored_runs' say what each rests on. 'backtest_coverage': how "
           "often the team × kind split-conformal bound covered its last 100 runs, each replayed from the "
           "runs before it — it should sit near the level. It is empty where more than about a tenth of "
           "the runs stopped for budget: conformal is then unknown and the gate's Tobit bound, which this "
           "replay does not refit, takes over.")
with st.spinner("Calibrating from the gate's history window (slow on a large ledger the first time)…"):
    cal = ui.PageData(queries.calibration, f, hourly=True)
cal.chart(figures.calibration_factors, "table")
ui.table(cal["table"], "calibration", "dl_acc_calibration",
         empty="No finished runs in the calibration window yet: every bound is unknown.")

