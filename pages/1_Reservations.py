"""Reservations: who holds what against their quota and monthly budget, what overran, and when the
deferred requests would fit."""
import streamlit as st

import ui
from lib.dashboard import figures, queries

f = ui.frame()

data = ui.PageData(queries.reservations, f)

st.title("Reservations")
ui.caption(f.describe())

st.subheader("Reserved accelerators against quota")
data.chart(figures.reserved_over_time, "over_time", "quotas")

st.subheader(f"Monthly budget ({data['month']:%B %Y})")
st.caption("Budgets are per team: the kind and capacity filters do not apply here. Committed = reservations "
           "admitted and not finished.")
data.chart(figures.budget_bars, "budget", month_label=f"{data['month']:%B %Y}")
ui.table(data["budget"], "monthly_budget", "dl_res_budget",
         empty="No team policies in the ledger — load data/teams.toml with `python -m lib teams`.")

st.subheader("Current reservations")
ui.table(data["current"], "current_reservations", "dl_res_current",
         empty="No reservation is running now for these teams and kinds.",
         caption="estimate_source 'requested, not measured' = time limit × GPUs, not a measured estimate.")
st.subheader("Upcoming reservations")
ui.table(data["upcoming"], "upcoming_reservations", "dl_res_upcoming",
         empty="No reservation starts later for these teams and kinds.")

st.subheader("Overruns: GPU-hours used beyond the reservation")
st.caption("Underestimates that block other teams: runs that ended in the period using more than they reserved.")
data.chart(figures.overrun_bars, "overrun_by_team")
ui.table(data["overruns"], "overruns", "dl_res_overruns",
         empty="No run used more than it reserved in this period.")

st.subheader("Deferred requests: earliest time they would fit")
st.caption("Requests of the period whose latest decision is a deferral. The earliest fit assumes running "
           "reservations release at their reserved end; reasons that waiting cannot cure say so.")
ui.table(data["waiting"], "deferred_earliest_fit", "dl_res_waiting",
         empty="No deferred request is waiting in this period.")
