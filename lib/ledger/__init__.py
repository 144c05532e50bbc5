"""The ledger: everything that opens the DuckDB file (connection, schema, the gate's service
functions, the team policy file, imports, the demo history).
"""
