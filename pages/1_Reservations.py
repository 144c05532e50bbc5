"""Reservations: who holds what against their quota, the capacity calendar ahead, the queue of
waiting requests and when each would fit, the monthly budget of a chosen month, and what overran."""
import streamlit as st

import ui
from lib.dashboard import (budget_queries, forecast_figures, forecasts, queue_and_calendar, reservation_figures,
                           reservation_queries)

f = ui.frame()

data = ui.PageData(reservation_queries.reservations, f)

st.title("Reservations")
ui.caption(f.describe())

st.subheader("Reserved accelerators against quota")
data.chart(reservation_figures.reserved_over_time, "over_time", "quotas")

st.subheader(f"Capacity calendar: the next {queue_and_calendar.CALENDAR_DAYS} days")
st.caption("Committed = the most accelerators held during the day by admitted, unfinished reservations — "
           "those that start later included, each from now until its reserved end — exactly as the gate "
           "counts them against the quota (the same timeline gives the gate's \"fits from\"). "
           "Free = quota − committed, never below 0. The team filter applies; the dates, kinds and capacity "
           "type do not: every kind counts against the quota. Rows \"(all teams)\" add up the shown teams.")
if data["over_committed_teams"]:
    st.warning(ui.as_text("Over-committed (more accelerators committed than the quota on some day): "
                          + ", ".join(data["over_committed_teams"])))
data.chart(reservation_figures.capacity_calendar, "calendar")
ui.table(data["calendar"], "capacity_calendar", "dl_res_calendar",
         empty="No team policies for these teams — load data/teams.toml with `python -m lib teams`.")

st.subheader("Queue: requests waiting now, and when they would fit")
st.caption(f"Every request whose latest decision is a deferral and that has not been admitted since, "
           f"whatever the dates above (a queue is now), up to {queue_and_calendar.QUEUE_DAYS} days after its latest "
           "deferral (a request never decided again by then has left the queue); the team, kind and capacity "
           "filters apply. Waited = hours since the run's first deferral in those days. The earliest fit is the rule of the gate's fix, over the "
           "reservations held now, each released at its reserved end; reasons that waiting cannot cure say "
           "so. Ordered by earliest fit, then longest wait.")
shown, total = len(data["waiting"]), data["queue_count"]
ui.table(data["waiting"], "request_queue", "dl_res_queue",
         empty="No request is waiting: every deferral was admitted later, or none matches these filters.",
         caption=f"{total:,} waiting request{'' if total == 1 else 's'}"
                 + (f"; the first {shown:,} shown (and in the CSV)." if shown < total else "."))

st.subheader("Monthly budget")
months = budget_queries.budget_months(ui.sidebar_options()["first_day"], ui.now_minute())
month = st.selectbox("Month", months, key="res_budget_month", format_func=lambda m: f"{m:%B %Y}")
# this month's budget comes with the page's data; another month is its own cached query
budget = data if month == data["month"] else ui.PageData(budget_queries.monthly_budget_in(month), f)
st.caption(f"{budget['month']:%B %Y}. Budgets are per team: the dates, kinds and capacity type do not apply "
           "here. Consumed = GPU-hours of runs that ended in the month. "
           + ("Committed = reservations admitted and not finished." if budget["current_month"]
              else "A past month shows consumed against the budget; committed applies to the current month only."))
if budget["current_month"] and budget.data.get("source") == "authority":
    ui.caption("This month's numbers are the shared authority's: every cluster's spend and holds (see Clusters).")
elif budget["current_month"] and budget.data.get("authority_error"):
    st.warning(f"The shared authority cannot be read, so these are this cluster's own numbers: "
               f"{ui.as_text(budget.data['authority_error'])}")
budget.chart(reservation_figures.budget_bars, "budget", month_label=f"{budget['month']:%B %Y}")
ui.table(budget["budget"], "monthly_budget", "dl_res_budget",
         empty="No team policies in the ledger — load data/teams.toml with `python -m lib teams`.")
if budget["current_month"]:
    outlook = ui.PageData(forecasts.budget_outlook, f)
    ui.budget_outlook(outlook["burn"])
    if len(outlook["burn"]):
        team = st.selectbox("Burn-down of", outlook["burn"]["team"].tolist(), key="res_burn_team")
        outlook.chart(forecast_figures.burn_down_chart, "burn_path", "burn", team=team)
        st.caption("Projected spend to month end: the team's weekly demand forecast, a seventh of its P50 a day "
                   "(P90: the model's own misses over as many weeks), never below the committed reservations due to "
                   "end by then (the Forecast page has the table and the weekly forecast).")

st.subheader("Current reservations")
ui.table(data["current"], "current_reservations", "dl_res_current",
         empty="No reservation is running now for these teams and kinds.",
         caption="estimate_source 'requested, not measured' = time limit × GPUs, not a measured estimate.")
st.subheader("Upcoming reservations")
ui.table(data["upcoming"], "upcoming_reservations", "dl_res_upcoming",
         empty="No reservation starts later for these teams and kinds.")

st.subheader("Overruns: GPU-hours used beyond the reservation")
st.caption("Underestimates that block other teams: runs that ended in the period using more than they reserved.")
data.chart(reservation_figures.overrun_bars, "overrun_by_team")
ui.table(data["overruns"], "overruns", "dl_res_overruns",
         empty="No run used more than it reserved in this period.")
