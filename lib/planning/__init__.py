"""Planning maths: preemption economics, the recovery simulator, resume/restart/end.

Pure functions; imports only lib.gate.
"""
