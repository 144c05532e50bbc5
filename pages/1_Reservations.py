"""Reservations: who holds what against their quota, the queue of waiting requests as the gate would serve
them (the forward plan), the capacity calendar and the pools ahead, the monthly budget of a chosen month,
and what overran."""
import streamlit as st

import ui
from lib.dashboard import budget_queries, forecast_figures, queue_and_calendar, reservation_figures, reservation_queries

f = ui.frame()

data = ui.PageData(reservation_queries.reservations, f)

st.title("Reservations")
ui.caption(f.describe())

st.subheader("Reserved accelerators against quota")
data.chart(reservation_figures.reserved_over_time, "over_time", "quotas")

st.subheader("Queue: requests waiting now, as the gate would serve them")
st.caption(f"The forward plan: every request waiting now (its latest decision a deferral, not admitted since, at most "
           f"its team's queue age after its first deferral) decided again by the gate, in the order it serves them — "
           f"{data['serve_order']} — each seeing what the plan starts before it, as reservations end at their reserved "
           "end and the month resets budgets. Reasons now: what `python -m lib check` gives it now; ahead of it: "
           "what the plan starts first that holds what it needs. The team, kind and capacity filters apply; the "
           "dates do not (a plan starts now). `python -m lib plan` prints the same.")
data.chart(reservation_figures.queue_schedule, "waiting")
shown, total, planned = len(data["waiting"]), data["queue_count"], data["planned_count"]
ui.table(data["waiting"], "request_queue", "dl_res_queue",
         empty="No request is waiting: every deferral was admitted later, or none matches these filters.",
         caption=f"{total:,} waiting request{'' if total == 1 else 's'}, {planned:,} planned to start within "
                 f"{data['plan_days']} days" + (f"; the first {shown:,} shown (and in the CSV)." if shown < total else "."))
expired = data["expired_count"]
if expired:
    with st.expander(f"{expired:,} expired request{'' if expired == 1 else 's'}: waited longer than the queue age"):
        ui.table(data["expired"], "expired_requests", "dl_res_expired", empty="None in these filters.",
                 caption="Each left the queue when it had waited its team's queue_max_age_days: resubmit it to "
                         "wait again.")
else:
    st.caption("No request has waited past its team's queue age.")
ui.table(data["line_starts"], "line_starts", "dl_res_line_starts",
         empty="The line started no request in the period: none had to wait, or none matches these filters.",
         caption="Started from the line in the period: each request the gate admitted at its turn after waiting, "
                 "with the start its last deferral planned beside its admit and its run's start (late hours: "
                 "admitted after the planned start; negative: earlier). The dates, team and kind filters apply.")

st.subheader(f"Capacity calendar: the next {queue_and_calendar.CALENDAR_DAYS} days")
st.caption("Free = what the gate would admit a request of the team with, for experiments and for scheduled "
           "retraining apart: its quota less what admitted reservations hold (those that start later too, as the "
           "gate counts them) and what the plan above starts, less the retraining set-aside for experiments, and "
           "no more than its pool has free — today now, later days at their start (00:00 UTC). The team filter "
           "applies; the dates, kinds and capacity type do not.")
if data["over_committed_teams"]:
    st.warning(ui.as_text("Over-committed (more accelerators committed than the quota on some day): "
                          + ", ".join(data["over_committed_teams"])))
data.chart(reservation_figures.capacity_calendar, "calendar")
ui.table(data["calendar"], "capacity_calendar", "dl_res_calendar",
         empty="No team policies for these teams — load data/teams.toml with `python -m lib teams`.")
if len(data["overcommit"]):
    st.markdown("**Pools: the cluster's accelerators**")
    blocked = data["blocked"]
    st.caption(f"In the period, {int(blocked['by_pool_only']):,} deferral(s) were for the pool alone (within the "
               f"team's quota: cluster-capacity), {int(blocked['by_quota']):,} for a quota or the retraining "
               f"set-aside, of {int(blocked['deferred']):,} deferrals.")
    ui.table(data["overcommit"], "pool_overcommit", "dl_res_overcommit", empty="No pool.")
    ui.table(data["pools"], "pool_calendar", "dl_res_pools", empty="No pool.")

st.subheader("Monthly budget")
months = budget_queries.budget_months(ui.cached_sidebar_options()["first_day"], ui.now_minute())
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
    ui.show_budget_outlook(data["burn"])
    if len(data["burn"]):
        team = st.selectbox("Burn-down of", data["burn"]["team"].tolist(), key="res_burn_team")
        data.chart(forecast_figures.burn_down_chart, "burn_path", "burn", team=team)
        st.caption("Projected spend to month end: the team's weekly demand forecast, a seventh of its P50 a day "
                   "(P90: the model's own misses over as many weeks), never below what is committed — admitted "
                   "reservations and the requests the plan above starts this month — due to end by then (the "
                   "Forecast page has the table and the weekly forecast).")

st.subheader("Current reservations")
ui.table(data["current"], "current_reservations", "dl_res_current",
         empty="No reservation is running now for these teams and kinds.",
         caption="estimate_source 'requested, not measured' = time limit × GPUs, not a measured estimate. "
                 "A run holds its accelerators until its end is recorded: 'overrunning' = past its reserved end, "
                 "expected to end at Expected end (empty: no known end); 'no end recorded past its time limit' = "
                 "check the job (Slurm should have ended it).")
st.subheader("Upcoming reservations")
ui.table(data["upcoming"], "upcoming_reservations", "dl_res_upcoming",
         empty="No reservation starts later for these teams and kinds.")

st.subheader("Overruns: GPU-hours used beyond the reservation")
st.caption("Underestimates that block other teams: runs that ended in the period using more than they reserved.")
data.chart(reservation_figures.overrun_bars, "overrun_by_team")
ui.table(data["overruns"], "overruns", "dl_res_overruns",
         empty="No run used more than it reserved in this period.")
