"""The demo history's numbers: how long it is, who runs what on how many accelerators for how long,
how runs end, why requests are deferred, and the cost shift it shows.

The demo re-types no term: its subsets of the vocabulary are derived from lib.gate.terms and
lib.gate.reasons, and each weight is a dict keyed by the vocabulary's names, never a list whose
positions stand for them (tests/test_demo.py checks every key is a term).
"""
from __future__ import annotations

import numpy as np

from lib.gate.reasons import CODES
from lib.gate.stopping import artifact_status_for
from lib.gate.terms import ARTIFACT_STATUSES, CAPACITIES, ESTIMATE_SOURCES, KINDS, STOP_REASONS

HISTORY_DAYS = 730   # the demo history's default length, days before now
MIN_DAYS = 60        # shortest history: the cost shift below lies inside it
COST_SHIFT = ("ranking", 45, 2.0)   # team, days before now, factor on what its runs needed since

# ---- the demo's subsets of the vocabulary, and the codes its generated runs hold for them
STOPS = tuple(s for s in STOP_REASONS if s != "requeued")  # requeued jobs come from sacct only
STOP = {s: i for i, s in enumerate(STOPS)}                 # a stop reason's code in the generated runs
SOURCES = tuple(s for s in ESTIMATE_SOURCES if s != "requested")  # requested estimates: sacct only
EXPLORATORY, PRODUCTION, RETRAINING = (KINDS.index(k) for k in ("exploratory", "production", "retraining"))
STABLE, PREEMPTIBLE = (CAPACITIES.index(c) for c in ("stable", "preemptible"))

# ---- who runs what
GPU_CHOICES = np.array([1, 2, 4, 8, 16, 32, 64])
# probabilities over GPU_CHOICES per kind
GPU_P = {
    "exploratory": [0.18, 0.17, 0.22, 0.25, 0.11, 0.05, 0.02],
    "production": [0.02, 0.05, 0.13, 0.35, 0.25, 0.14, 0.06],
    "retraining": [0.05, 0.10, 0.25, 0.35, 0.20, 0.05, 0.00],
}
# (median wall hours of the estimate, log sigma)
WALL = {"exploratory": (4.0, 0.9), "production": (16.0, 0.7), "retraining": (5.0, 0.35)}
# the share of a kind's runs on preemptible capacity, where the team has it
PREEMPTIBLE_SHARE = {"exploratory": 0.35, "production": 0.10, "retraining": 0.05}
# team -> (median actual/estimate for stated estimates, log sigma, long-tail probability)
TEAM_TRAITS = {
    "nlp-research": (1.45, 0.40, 0.09), "vision": (1.15, 0.30, 0.05), "search": (1.05, 0.22, 0.04),
    "ranking": (0.92, 0.18, 0.03), "ads": (1.25, 0.28, 0.06), "speech": (1.10, 0.25, 0.04),
    "robotics": (1.60, 0.45, 0.10), "safety": (1.00, 0.20, 0.03),
}
# team -> the share of its runs of each kind
KIND_MIX = {
    "nlp-research": {"exploratory": 0.72, "production": 0.25, "retraining": 0.03},
    "vision": {"exploratory": 0.55, "production": 0.30, "retraining": 0.15},
    "search": {"exploratory": 0.40, "production": 0.30, "retraining": 0.30},
    "ranking": {"exploratory": 0.35, "production": 0.25, "retraining": 0.40},
    "ads": {"exploratory": 0.35, "production": 0.25, "retraining": 0.40},
    "speech": {"exploratory": 0.55, "production": 0.30, "retraining": 0.15},
    "robotics": {"exploratory": 0.70, "production": 0.25, "retraining": 0.05},
    "safety": {"exploratory": 0.60, "production": 0.35, "retraining": 0.05},
}
# a team the demo does not know, and the requests deferred and never admitted
OTHER_KIND_MIX = {"exploratory": 0.6, "production": 0.3, "retraining": 0.1}

# ---- how runs end
# How a run ended that neither ran to its end nor went unused, in the order they are drawn: the stop
# -> (the share of runs ending so, the range of the share of its need used by then). Early stops
# depend on the kind; preemptions happen on preemptible capacity only.
EARLY_STOP_SHARE = {"exploratory": 0.15, "production": 0.05, "retraining": 0.0}
CUT_SHORT = {"early-stop": (EARLY_STOP_SHARE, (0.35, 0.85)), "failed": (0.025, (0.05, 0.8)),
             "cancelled": (0.02, (0.05, 0.8)), "out-of-memory": (0.007, (0.005, 0.05)),
             "node-fail": (0.008, (0.05, 0.8)), "failed-steps": (0.01, (0.05, 0.8)),
             "preempted": (0.08, (0.05, 0.8))}
NEVER_USED_SHARE = 0.025   # reservations that ran nothing (stopped as cancelled)
ARTIFACT_OF_STOP = np.array([ARTIFACT_STATUSES.index(artifact_status_for(s)) for s in STOPS])

# ---- how busy teams are
WORK_AT_RATE = 14.0   # runs a day up to which a run is as long as WALL says (the default build's rate); a
                      # busier build's runs are shorter, so its teams' load stays within quotas and budgets
BURST_SHARE = 0.05    # the share of runs submitted in a deadline push: a team's handful within hours,
BURST_RUNS = 12       # about this many runs per push,
BURST_HOURS = 3.0     # over this many hours (capacity deferrals: more than the team's quota holds)

# ---- why requests are deferred
# The gate decides every request; a request is deferred for what the team's state is (capacity,
# retraining-protection, period-budget: pushes and busy months) or for what it asks. Besides the runs,
# some requests ask for something the gate refuses: how often each such flaw is drawn.
DEFER_WEIGHTS = {"no-snapshot": 0.06, "no-pilot": 0.16, "budget": 0.30, "gpu-cap": 0.08,
                 "memory-cap": 0.05, "runtime-cap": 0.08, "memory": 0.05, "no-recovery": 0.08}
# a deferred run is submitted again, changed as the gate's fix says, after (hours): a budget raised,
# a pilot run first; waiting (capacity, period-budget) resubmits when the gate says it fits
RESUBMIT_AFTER_H = {"budget": (0.1, 6.0), "no-pilot": (2.0, 24.0), "runtime-cap": (0.2, 4.0), "wait": (0.02, 1.0),
                    "month": (0.0, 48.0)}
EXACT_DAYS = 29       # days before now over which a request's calibration is exactly the replay's
CHECKED_SHARE = 0.9   # the share of runs whose team checks the request on the what-if form before submitting
MAX_ATTEMPTS = 60     # a run deferred this many times is given up (never admitted, no run row)
DEFER_CODES = tuple(c for c in CODES if c in DEFER_WEIGHTS)   # in the order decisions list them
DEFER_P = np.array([DEFER_WEIGHTS[c] for c in DEFER_CODES])
