"""The shared authority: one PostgreSQL database that the gates of several clusters decide against,
so a team's quota and month budget hold across them (opt-in: `$GATE_AUTHORITY`, `$GATE_CLUSTER`).
Above lib.ledger, below the dashboard and the Slurm integration.

- `url`: the connection string (a URL or key=value pairs), read by libpq, checked, shown redacted.
- `store`: connection, schema, status.
- `facts`: deciding in one transaction (`AuthorityFacts`, `Authority`).
- `serving`: the authority as the warm gate server uses it (one round trip, the failure policy).
- `deadline`: a deadline on one connection's round trips that holds when PostgreSQL stops answering.
- `settings`: which authority, if any.
- `sync`: a cluster's ledger and the authority brought into agreement.
"""
