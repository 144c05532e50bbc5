"""Overview: the period's headline numbers, each against the previous period of the same length."""
import streamlit as st

import ui
from lib.dashboard import figures, queries

f = ui.frame()

data = ui.PageData(queries.overview, f)
cur, prev = data["current"], data["previous"]

st.title("Overview")
ui.caption(f"{f.describe()} · compared with {f.previous().date_from} to {f.previous().date_to}")

if not cur["runs"] and not cur["deferred"]:
    st.info("No runs in this period — widen the dates, clear the team/kind filters, or upload history "
            "on the Upload page.")


def delta(key, fmt="{:+,.0f}"):
    a, b = cur.get(key), prev.get(key)
    return None if a is None or b is None else fmt.format(a - b)


def show(value, fmt):
    return "—" if value is None else fmt.format(value)


c = st.columns(4)
c[0].metric("Reserved GPU-hours", show(cur["reserved_gpu_hours"], "{:,.0f}"), delta("reserved_gpu_hours"),
            delta_color="off", help="GPU-hours held by reservations starting in the period")
c[1].metric("Used GPU-hours", show(cur["used_gpu_hours"], "{:,.0f}"), delta("used_gpu_hours"),
            delta_color="off", help="actual GPU-hours of those runs")
c[2].metric("Idle reserved share", show(cur["idle_share"], "{:.1%}"),
            delta("idle_share", "{:+.1%}"), delta_color="inverse",
            help="late starts + early ends + never-used reservations, over closed reservation windows")
c[3].metric("Deferred requests", show(cur["deferred"], "{:,}"), delta("deferred"), delta_color="inverse")
c = st.columns(4)
c[0].metric("Median actual ÷ estimated", show(cur["median_ratio"], "{:.2f}"), delta("median_ratio", "{:+.2f}"),
            delta_color="off", help="finished runs with a measured or stated estimate; 1.00 = exact")
c[1].metric("P90 actual ÷ estimated", show(cur["p90_ratio"], "{:.2f}"), delta("p90_ratio", "{:+.2f}"),
            delta_color="inverse")
c[2].metric("Runs stopped for budget", show(cur["budget_stopped"], "{:,}"), delta("budget_stopped"),
            delta_color="inverse")
c[3].metric("Runs in period", show(cur["runs"], "{:,}"), delta("runs"), delta_color="off")
if cur["requested_runs"]:
    st.caption(f"{cur['requested_runs']:,} finished runs carry only a requested estimate (time limit × GPUs: "
               "requested, not measured) and are left out of the estimate-error figures.")

data.chart(figures.reserved_vs_used, "daily")
data.chart(figures.deferred_reasons, "deferred_by_reason")
ui.table(data["deferred_by_reason"], "deferred_by_reason", "dl_overview_reasons",
         empty="No deferred requests in this period or the previous one.")
