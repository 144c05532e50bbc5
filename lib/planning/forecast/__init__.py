"""The weekly GPU-hour demand forecast and the month's budget burn-down, as plain numbers.

- `demand`: each team's weekly P50/P90 bands from its chosen model, and the month's burn-down from them.
- `models`: the candidate statsmodels ETS models of one team, and the one its own backtest chose.
- `cache`: the fitted models kept on disk between processes, keyed by their history and code.
"""
