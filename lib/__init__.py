"""Training Gate's core: a training request states its budget, stop rules and recovery plan before it
occupies shared accelerators. Each package is a layer and imports only its own and those listed above
it here (tests/test_layers.py); none imports Streamlit.

- `gate`: the decision, pure functions over plain typed data (`decide`, estimates, calibration, capacity).
- `planning`: planning maths over plain data: recovery, preemption, the forecast, policy replay, the forward plan.
- `ledger`: everything that opens the DuckDB ledger: state, decisions, imports, the demo history.
- `authority`: the PostgreSQL authority several clusters decide against (opt-in).
- `dashboard`: the dashboard's read models: queries, figures, tables (no Streamlit).
- `slurm`: the Slurm integration: the submit hook, the warm gate server, the epilog.
- `cli`: the command line, `python -m lib`.
"""
