"""The decision: pure functions over plain, typed data (request, policy, state in; decision out).

Nothing here opens a file or a database; every layer above may import it.

- `terms`: the one vocabulary: kinds, capacities, stop reasons, budget bases, time and number helpers.
- `contracts`: the typed dicts every layer passes: request, policy, state, decision, ...
- `request`: a request validated, every problem with where it is.
- `reasons`: the reason codes a decision gives, and their messages.
- `estimate`: a run's GPU-hours estimated from its pilot, with its margins.
- `calibration`: the team's history applied to an estimate (median correction, upper bound).
- `calibration_change`: calibration following a change in a team's costs.
- `tobit`: the censored normal, for runs stopped at their budget.
- `backtest`: the bound replayed over past runs, and the drift alarm.
- `capacity`: the capacity timeline, the pools and the earliest fit.
- `admission`: `decide`, admit or defer a request under its team's policy and state.
- `stopping`: stop rules fixed before results are seen.
- `promotion`: promotion kept apart from admission.
- `access`: who may do what: the access file and its roles.
"""
