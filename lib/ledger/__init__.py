"""The ledger: everything that opens the DuckDB file (connection, schema, the gate over the ledger:
state, deciding, recording, finishing; the team policy file and a proposal written into it, imports,
the demo history).

- `connection`: opening the ledger, one embedded DuckDB file per unit of work (`schema.sql`: its tables).
- `writer`: every writer's turn, then DuckDB's own file lock.
- `decider_lock`: who may decide for a ledger, one warm gate server or in-process deciders.
- `state`: a team's policy and state as the gate reads them, and the held reservations.
- `deciding`: the gate over the ledger, `check_request` (the what-if) and `submit_request`.
- `recording`: decisions appended, and an admit booked as a reservation.
- `batch`: decisions made by the warm gate server's journal moved into the ledger in batches.
- `booked_ids`: the run IDs a ledger has booked, as 64-bit hashes for the gate server.
- `finishing`: a run's actuals and how it stopped (`python -m lib finish`).
- `recovering`: checkpoints and interruptions of a started run, and its recovery decision.
- `calibration_rows`: the finished runs calibration reads.
- `calibration_scopes`: every team's calibration at once.
- `cluster_windows`: the cluster's capacity windows (Slurm reservations holding GPUs back).
- `plan_inputs`: the forward plan's reads: the queue of waiting requests and everything else the plan reads.
- `plan`: the forward plan over the ledger: `plan_ledger`, `check_request_at`, `planned_holdings`.
- `queue`: the gate's line of waiting requests: listed, admitted at their turn, expired, cancelled.
- `replay`: policy replay over the ledger: a window read once, replayed.
- `forecast`: the demand forecast and the month's budget burn-down over the ledger (weekly usage, budgets,
  commitments), for the pages, the Slurm server's run-out days and `python -m lib forecast`.
- `teams_file`: data/teams.toml, the team policy, parsed, validated and synced.
- `teams_pools`: its `[pools.<capacity type>]` tables.
- `teams_proposal`: a proposal written into data/teams.toml (tomlkit), only the changed keys touched.
- `team_weeks`: each team's GPU-hours per week, kept beside runs for the forecast.
- `alert_settings`: data/teams.toml `[alerts]`, where budget alerts go and when.
- `alert_log`: the budget alerts raised, once per (team, alert, month), and their delivery.
- `audit`: who wrote what that is not a decision.
- `files`: reading a file a user named, only if it is a regular file.
- `imports/` (a package): run history imported from a CSV or Slurm `sacct`.
- `demo/` (a package): a seeded run history for the demo ledger and the benchmarks.
"""
