"""The dashboard's read models: queries, figures, filters, tables and the what-if form's mapping.

No Streamlit here: the pages call these and render what they return.

- `reading`: one read-only open of the ledger per unit of work, queries with bound parameters.
- `run_sql`: the SQL the read models share.
- `filters`: the shared filters (teams, kinds, capacity type, dates) as plain data.
- `sidebar_queries`: what the sidebar's filters offer, and the ledger's counts.
- `settings`: team colours and GPU-hour prices as the ledger holds them.
- `labels`: how the tables name and show their columns.
- `tables`: CSV bytes that spreadsheets cannot mistake for formulas.
- `figure_kit`: what every chart is built from (team colours, layout, axes).
- `figure_text`: user text in a Plotly figure, shown as typed.
- `overview_queries`: Overview's headline numbers, spend, deferrals and reserved against used.
- `team_board`: Overview's team board, riskiest first.
- `budget_queries`: a month's budget per team.
- `costs`: money next to GPU-hours, at the `[prices]`.
- `reservation_queries`: the Reservations page's read model.
- `reservation_figures`: the charts of Overview and Reservations.
- `queue_and_calendar`: the queue, the capacity calendar and the pools, from the one forward plan.
- `line_starts`: the requests the gate's line started, their planned start beside their admit and start.
- `forecasts`: the forecast over the ledger (lib.ledger.forecast) shaped into the Forecast page's tables
  and the month's budget outlook; it reads nothing itself.
- `forecast_figures`: the Forecast charts.
- `alerts`: budget alerts end to end, raised, kept and delivered.
- `estimate_queries`: estimates against what runs used, and the calibration applied.
- `estimate_figures`: the charts of Estimate accuracy and of one itemised estimate.
- `idle_queries`: idle reserved GPU-hours by week, team, cause and capacity type.
- `idle_figures`: the charts of Idle reserved capacity.
- `stop_queries`: runs by stop reason, and whether production candidates may be promoted.
- `stop_figures`: the Stops and promotion chart.
- `lost_work_queries`: the GPU-hours lost to interruptions.
- `recovery_view`: the Recovery planner's inputs and tables.
- `recovery_figures`: the Recovery planner's charts.
- `replay_view`: the Policy replay page's shapes: the proposal's effect, pool sizes, costs, right-sizing tables.
- `replay_figures`: the Policy replay page's charts.
- `whatif`: the what-if form's values as a request.
- `cluster_queries`: several clusters' ledgers read together, and the shared authority's numbers.
- `audit`: who imported or exported what, and when.
"""
