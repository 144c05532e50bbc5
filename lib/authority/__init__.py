"""The shared authority: one PostgreSQL database that the gates of several clusters decide against,
so a team's quota and month budget hold across them (opt-in: `$GATE_AUTHORITY`, `$GATE_CLUSTER`).

`url` (the URL, checked and redacted), `store` (connection, schema, status), `facts` (deciding in
one transaction: `AuthorityFacts`, `Authority`), `settings` (which authority, if any), `sync`
(a cluster's ledger and the authority brought into agreement). Above lib.ledger, below the
dashboard and the Slurm integration.
"""
