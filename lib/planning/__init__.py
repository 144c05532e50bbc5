"""Planning: pure computations over plain data, on top of the gate's decision (lib.gate). Imports only
lib.gate and lib.planning: the ledger reads their inputs, the dashboard and the command line show
their results.

- `replay/` (a package): policy replay, a past window's requests decided again under proposed policies or pools.
- `plan/` (a package): the forward plan, the waiting requests decided again from now on, in serve order.
- `holdings`: the reservations holding accelerators as time moves forward, which the replay and the plan both keep.
- `forecast/` (a package): weekly GPU-hour demand bands per team and the month's budget burn-down (demand,
  models, cache).
- `content_store`: results kept on disk by content (kept replay passes, calibrations, forecast models).
- `alerts`: which budget thresholds a team's month has crossed, from its burn-down.
- `preemption`: closed forms for checkpointed work under exponential interruptions.
- `simulate`: Monte Carlo simulation of a checkpointed job under interruptions.
- `interval_curve`: expected completion time over checkpoint intervals, and the optima.
- `lifetimes`: job lifetimes between interruptions (from the ledger's counts), by Kaplan-Meier.
- `recovery`: after a preemption or a budget breach, resume, restart or end.
"""
