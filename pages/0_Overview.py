"""Overview: the period's headline numbers, each against the previous period of the same length."""
import streamlit as st

import ui
from lib.dashboard import alerts, costs, overview_queries, reservation_figures, team_board

f = ui.frame()

data = ui.PageData(overview_queries.overview, f)
cur, prev = data["current"], data["previous"]
money = costs.overview_money(ui.PageData(costs.pricing, f).data, data.data)

st.title("Overview")
ui.caption(f"{f.describe()} · compared with {f.previous().date_from} to {f.previous().date_to}")

board = ui.PageData(team_board.team_board, f)   # the forward plan and the burn-down, made once
at_risk = team_board.runout_this_month(board["burn"])
if at_risk:
    st.warning(f"Budget may run out this month ({len(at_risk)} team{'' if len(at_risk) == 1 else 's'}, "
               "earliest first):\n" + "\n".join(
                   f"- **{ui.as_text(r['team'])}**: P90 {r['exhausts_p90']:%b %d}"
                   + (f", P50 {r['exhausts_p50']:%b %d}" if r["exhausts_p50"] else ", not at P50")
                   for r in at_risk))
raised = ui.PageData(alerts.alerts_this_month, f).data
if not raised.empty:
    with st.expander(f"Budget alerts this month: {len(raised)}", expanded=False):
        ui.table(raised, "budget_alerts", "dl_overview_alerts", empty="No budget alert this month.",
                 caption="Raised by `python -m lib alerts` (thresholds in data/teams.toml [alerts]); each is "
                         "sent to the webhook once.")

if not cur["runs"] and not cur["deferred"]:
    st.info("No runs in this period — widen the dates, clear the team/kind filters, or upload history "
            "on the Upload page.")


def delta(key, fmt="{:+,.0f}", now=cur, before=prev):
    a, b = now.get(key), before.get(key)
    return None if a is None or b is None else fmt.format(a - b)


def show(value, fmt):
    return "—" if value is None else fmt.format(value)


def metric(col, label, value, key, fmt="{:+,.0f}", colour="normal", periods=(cur, prev), **options):
    """A metric with its change against the previous period (`periods`: this one's and that one's
    numbers). No change (to the shown precision) is said in grey without an arrow: never a red or
    green '↑ +0'."""
    change = delta(key, fmt, *periods)
    if change is not None and not any(ch in "123456789" for ch in change):
        col.metric(label, value, "no change", delta_color="off", delta_arrow="off", **options)
    else:
        col.metric(label, value, change, delta_color=colour, **options)


c = ui.row(4)
metric(c[0], "Reserved GPU-hours", show(cur["reserved_gpu_hours"], "{:,.0f}"), "reserved_gpu_hours",
       colour="off", help="GPU-hours held by reservations starting in the period")
metric(c[1], "Used GPU-hours", show(cur["used_gpu_hours"], "{:,.0f}"), "used_gpu_hours",
       colour="off", help="actual GPU-hours of those runs")
metric(c[2], "Idle reserved share", show(cur["idle_share"], "{:.1%}"), "idle_share", "{:+.1%}", "inverse",
       help="late starts + early ends + never-used reservations, over closed reservation windows")
metric(c[3], "Deferred requests", show(cur["deferred"], "{:,}"), "deferred", colour="inverse")
if money["per_gpu_hour"]:
    c = ui.row(4)
    for col, spend, label, explained in (
            (c[0], "reserved", "Reserved cost", "reserved GPU-hours × price"),
            (c[1], "used", "Used cost", "used GPU-hours × price"),
            (c[2], "idle", "Idle reserved cost", "idle reserved GPU-hours (closed windows) × price, charged "
                                                 "to the team that held the reservation")):
        amount = money["current"][f"{spend}_cost"]
        metric(col, label, costs.money_text(amount, money["currency"]),
               f"{spend}_cost", colour="off" if spend != "idle" else "inverse",
               periods=(money["current"], money["previous"]),
               help=f"{explained}, per capacity type: {costs.money_text(amount, money['currency'], whole=True)}")
ui.caption(costs.pricing_note(money))
c = ui.row(4)
metric(c[0], "Median actual ÷ estimated", show(cur["median_ratio"], "{:.2f}"), "median_ratio", "{:+.2f}",
       "off", help="finished runs with a measured or stated estimate; 1.00 = exact")
metric(c[1], "P90 actual ÷ estimated", show(cur["p90_ratio"], "{:.2f}"), "p90_ratio", "{:+.2f}", "inverse")
metric(c[2], "Runs stopped for budget", show(cur["budget_stopped"], "{:,}"), "budget_stopped", colour="inverse")
metric(c[3], "Runs in period", show(cur["runs"], "{:,}"), "runs", colour="off")
if cur["requested_runs"]:
    st.caption(f"{cur['requested_runs']:,} finished runs carry only a requested estimate (time limit × GPUs: "
               "requested, not measured) and are left out of the estimate-error figures.")

st.subheader("Teams this month, riskiest first")
if board["authority_error"]:
    st.warning("The shared authority could not be read, so budget left is this cluster's ledger's alone: "
               + ui.as_text(board["authority_error"]))
board_caption = ("Riskiest first: the earliest run-out day at P90, then at P50, then the smallest share of the "
                 "budget left at month end (P90). Budget left = the month's budget less what ended this month and "
                 "what admitted reservations hold (as the gate counts); month end: less the burn-down's projected "
                 "spend. Free = the capacity calendar's (Reservations), now and the fewest on the next 7 days; "
                 "queue: the forward plan's. The period applies to idle only"
                 + ("; budget and budget left are the shared authority's (every cluster's spend and holds)"
                    if board["source"] == "authority" else "")
                 + (f"; money in {board['currency']}." if board["currency"] else "; no price is set, so no money.")
                 + " Drift: the kinds with a drift alarm on Estimate accuracy.")
ui.table(board["board"], "team_board", "dl_overview_board",
         empty="No team policies for these teams — load data/teams.toml with `python -m lib teams`.",
         caption=board_caption)

data.chart(reservation_figures.reserved_vs_used, "daily")
data.chart(reservation_figures.deferred_reasons, "deferred_by_reason")
ui.table(data["deferred_by_reason"], "deferred_by_reason", "dl_overview_reasons",
         empty="No deferred requests in this period or the previous one.")
if money["per_gpu_hour"]:
    st.subheader("Cost by capacity type")
    ui.table(money["by_capacity"].round(2), "cost_by_capacity", "dl_overview_costs",
             empty="No priced capacity in this view.", caption=f"Money in {money['currency']}.")
