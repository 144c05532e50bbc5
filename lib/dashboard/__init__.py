"""The dashboard's read models: queries, figures, filters, tables and the what-if form's mapping.

No Streamlit here: the pages call these and render what they return.

- `forecasts`: the forecast over the ledger (lib.ledger.forecast) shaped into the Forecast page's tables
  and the month's budget outlook; it reads nothing itself.
"""
