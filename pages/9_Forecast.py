"""Forecast: which teams run out of budget before month end, and how many GPU-hours each team will
need over the next eight weeks."""
import streamlit as st

import ui
from lib.dashboard import forecast_figures, forecasts

f = ui.frame()

data = ui.PageData(forecasts.plan_ahead, f)
burn, weeks = data["burn"], data["weeks"]

st.title("Forecast")
ui.caption(f"From now ({data['as_of']:%Y-%m-%d %H:%M} UTC) · "
           f"{', '.join(f.teams) if f.teams else 'all teams'} · the date filter does not apply: a forecast "
           "starts now and rests on each team's whole history")

st.subheader("Budget this month")
ui.budget_outlook(burn)
ui.table(burn, "budget_burn_down", "dl_fc_burn",
         empty="No team policies in the ledger — load data/teams.toml with `python -m lib teams`.",
         caption="Spend is counted when a run ends, as the gate counts a team's monthly spend. The spend still "
                 "to come is drawn from the team's daily spend over the last 91 days (P50 and P90 of as many "
                 "consecutive days as are left), and never below the committed reservations due to end by then.")

teams = sorted(set(weeks["team"]) | set(burn["team"])) if len(weeks) or len(burn) else []
if not teams:
    st.info("No history to forecast from yet — upload run history on the Upload page.")
    st.stop()
team = st.selectbox("Team to chart", teams, key="fc_team")
data.chart(forecast_figures.burn_down_chart, "burn_path", "burn", team=team)

st.subheader("Weekly demand, next 8 weeks")
ui.caption(f"Method: {data['method']}. A week's demand is the GPU-hours of the runs that started in it; runs "
           "still running count what they reserved.")
data.chart(forecast_figures.demand_forecast, "history", "weeks", team=team)
ui.table(weeks, "demand_forecast", "dl_fc_weeks", empty="No forecast.",
         caption="Quota for P90: the accelerators that, kept busy all week, would give the P90 GPU-hours.")
ui.glossary("committed")
