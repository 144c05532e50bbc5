"""Forecast: which teams run out of budget before month end, and how many GPU-hours each team will
need over the weeks ahead a planner picks (up to half a year)."""
import streamlit as st

import ui
from lib.dashboard import forecast_figures, forecasts
from lib.planning.forecast.demand import MAX_WEEKS

f = ui.frame()

data = ui.PageData(forecasts.plan_ahead, f)
burn, models = data["burn"], data["models"]

st.title("Forecast")
ui.caption(f"From now ({data['as_of']:%Y-%m-%d %H:%M} UTC) · "
           f"{', '.join(f.teams) if f.teams else 'all teams'} · the date filter does not apply: a forecast "
           "starts now and rests on each team's whole history")

st.subheader("Budget this month")
ui.show_budget_outlook(burn)
ui.table(burn, "budget_burn_down", "dl_fc_burn",
         empty="No team policies in the ledger — load data/teams.toml with `python -m lib teams`.",
         caption="Spend is counted when a run ends, as the gate counts a team's monthly spend; demand when it "
                 "starts. Spend is demand moved later by the runs' durations, so both come to the same GPU-hours "
                 "a day: the spend still to come is the weekly forecast below, each day its week's P50 ÷ 7 (P90: "
                 "the model's own misses over as many weeks), and never below the committed reservations due to "
                 "end by then.")

teams = sorted(set(models["team"]) | set(burn["team"])) if len(models) or len(burn) else []
if not teams:
    st.info("No history to forecast from yet — upload run history on the Upload page.")
    st.stop()
team = st.selectbox("Team to chart", teams, key="fc_team")
data.chart(forecast_figures.burn_down_chart, "burn_path", "burn", team=team)

horizon = st.slider("Weeks ahead", min_value=1, max_value=MAX_WEEKS, value=8, key="fc_weeks",
                    help="How far the weekly forecast looks: 8 weeks for the queue, up to 26 for procurement.")
st.subheader(f"Weekly demand, next {horizon} week{'s' if horizon != 1 else ''}")
ui.caption(f"Method: {data['method']}. A week's demand is the GPU-hours of the runs that started in it; runs "
           "still running count what they reserved. Model chosen: "
           + "; ".join(f"{t} {m} ({n} weeks of history)" for t, m, n in models.itertuples(index=False)) + ".")
data.chart(forecast_figures.demand_forecast, "history", "weeks", team=team, horizon=horizon)
ui.table(forecasts.weeks_ahead(data["weeks"], horizon), "demand_forecast", "dl_fc_weeks", empty="No forecast.",
         caption="Quota for P90: the accelerators that, kept busy all week, would give the P90 GPU-hours.")
ui.glossary("committed")
