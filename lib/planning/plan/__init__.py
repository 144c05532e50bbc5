"""The forward plan: the waiting requests decided again from now on, in the order the gate serves them,
each with the state it would see then (lib.ledger.plan reads its inputs from the ledger).

- `forward`: the plan's rules, and what it returns: the queue, the calendar, the pools, the holdings.
- `world`: the plan's world as time moves forward, and the state each request is decided under.
- `data`: the plain data it reads (the inputs at as_of) and returns (queue rows, days, holdings).
"""
