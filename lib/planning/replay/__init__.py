"""Policy replay: a past window's recorded requests decided again by the gate under proposed policies or
pools, each with the state it would have seen (lib.ledger.replay reads the window from the ledger).

- `passes`: the replay's passes (proposed, baseline, recorded) and the proposal's pass alone.
- `data`: the plain data it reads (recorded requests, the recorded world, a window read once) and returns.
- `world`: the replay world as time moves forward, and the state each request is decided under.
- `history`: what the replay learns from the runs finished so far (calibration, interruption rates).
- `report`: the per-team tallies, the result, and its table rows.
- `kept`: the passes that do not depend on the proposal, kept by content beside the ledger.
- `resume`: a pass resumed part-way from a mark, for the pool search.
- `search`: the capacity what-if's search for the smallest pool that meets a target.
- `rightsizing`: quota right-sizing, each team's cut proved by a replay of it.
- `collector`: CPython's cyclic garbage collector paused while a replay runs.
"""
