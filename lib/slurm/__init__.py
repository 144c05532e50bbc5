"""The Slurm integration: the submit hook's Python side (the Lua hook and the test cluster's
script live beside it).
"""
