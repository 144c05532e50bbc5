"""The ledger: everything that opens the DuckDB file (connection, schema, the gate over the ledger:
state, deciding, recording, finishing; the team policy file and a proposal written into it, imports,
the demo history).
"""
