"""Planning maths: preemption economics, the recovery simulator, resume/restart/end.

- `forecast/`: weekly GPU-hour demand bands per team and the month's budget burn-down (demand, models, cache).

Pure functions; imports only lib.gate.
"""
