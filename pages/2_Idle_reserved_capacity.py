"""Idle reserved capacity: reserved GPU-hours that ran nothing, per team and week, split by cause
and charged to the team that held the reservation."""
import streamlit as st

import ui
from lib.dashboard import costs, idle_figures, idle_queries

f = ui.frame()

data = ui.PageData(idle_queries.idle_capacity, f)
money = costs.idle_money(ui.PageData(costs.pricing, f).data, data.data)

st.title("Idle reserved capacity")
ui.caption(f"{f.describe()} · causes: late start (reserved, not yet started), early end (finished before the "
           "window closed), never used (window passed without a start)")

if data["weekly"].empty:
    st.info("No reservations start in this period — widen the dates or upload history on the Upload page.")
else:
    total = data["by_team"]["idle_gpu_hours"].sum()
    reserved = data["by_team"]["reserved_gpu_hours"].sum()
    c = ui.row(3)
    c[0].metric("Idle reserved GPU-hours", f"{total:,.0f}")
    c[1].metric("Share of reserved capacity", f"{total / reserved:.1%}" if reserved else "—")
    if money["total_idle_cost"] is not None:
        c[2].metric("Idle reserved cost", costs.money_text(money["total_idle_cost"], money["currency"]),
                    help="idle reserved GPU-hours × the price of their capacity type, charged to the team "
                         "that held the reservation: "
                         f"{costs.money_text(money['total_idle_cost'], money['currency'], whole=True)}")
ui.caption(costs.pricing_note(money))

data.chart(idle_figures.idle_by_cause, "weekly")
data.chart(idle_figures.idle_by_team, "by_team")
data.chart(idle_figures.idle_share_trend, "weekly")

if money["per_gpu_hour"]:
    st.subheader("Idle cost per team")
    ui.table(money["by_team"].round(2), "idle_cost_per_team", "dl_idle_cost",
             empty="No reservation left capacity idle in this period.",
             caption=f"Money in {money['currency']}, charged to the team that held the reservation.")

st.subheader("Per team and week")
ui.table(data["weekly"], "idle_per_team_week", "dl_idle_weekly",
         empty="No reservations start in this period.")
st.subheader("Reservations that wasted most")
ui.table(data["top"], "idle_top_reservations", "dl_idle_top",
         empty="No reservation left capacity idle in this period.")
