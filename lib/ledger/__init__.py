"""The ledger: everything that opens the DuckDB file (connection, schema, the gate over the ledger:
state, deciding, recording, finishing; the team policy file and a proposal written into it, imports,
the demo history).

- `forecast`: the demand forecast and the month's budget burn-down over the ledger (weekly usage, budgets,
  commitments), for the pages, the Slurm server's run-out days and `python -m lib forecast`.
"""
