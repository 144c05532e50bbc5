"""Stops and promotion: how runs ended, runs stopped at a limit (incomplete and unpromotable), holdout
over-reads, and which production candidates are promotable and what the others lack."""
import streamlit as st

import ui
from lib.dashboard import stop_figures, stop_queries

f = ui.frame()

data = ui.PageData(stop_queries.stops_promotion, f)

st.title("Stops and promotion")
ui.caption(f"{f.describe()} · runs that ended in the period")

data.chart(stop_figures.stop_reasons, "by_reason")
ui.table(data["by_reason"], "runs_by_stop_reason", "dl_stop_reasons",
         empty="No runs ended in this period — widen the dates or upload history on the Upload page.")

st.subheader(f"Stopped at a limit: incomplete and never promotable ({data['limit_count']:,})")
st.caption("A budget or wall-clock stop is not a failed evaluation: the artifact is incomplete; resume from the "
           "last valid checkpoint or end the run.")
ui.table(data["limit_stopped"], "stopped_at_limit", "dl_stop_limit",
         empty="No run stopped for budget or wall clock in this period.")

st.subheader(f"Holdout read beyond its allowance ({data['over_read_count']:,})")
ui.table(data["over_reads"], "holdout_over_reads", "dl_stop_holdout",
         empty="No run read its holdout more often than declared in this period.")

st.subheader(f"Promotion status of production candidates ({data['candidate_count']:,})")
promo = data["promotion"]
if len(promo):
    st.caption(f"{int(promo['promotable'].sum()):,} of the {len(promo):,} most recent are promotable "
               "(promotable: a complete artifact, a full evaluation, a run that completed or stopped early on its "
               "dev metric, and holdout reads within the allowance).")
ui.table(promo, "promotion_status", "dl_stop_promotion",
         empty="No production run ended in this period.")
