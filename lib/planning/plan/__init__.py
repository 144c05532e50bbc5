"""The forward plan: the gate's line of waiting requests laid out in time, in the order the gate serves
them, each placed at the earliest time it fits beside those before it (conservative backfill), with
the state each request is decided under (lib.ledger.plan reads its inputs from the ledger).

- `forward`: the plan's rules (placing each request), and what it returns: the queue, the calendar, the pools, the holdings.
- `line`: the line itself: what holds when (the ledger's reservations and the placed requests), and where a request fits.
- `profile`: accelerators held over time as a step function, and the earliest start that fits under a limit.
- `turn`: one request's turn in the line (what the deciders ask before they admit), and the `queue` reason.
- `data`: the plain data it reads (the inputs at as_of) and returns (queue rows, days, holdings).
"""
