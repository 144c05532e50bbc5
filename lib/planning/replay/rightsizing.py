"""Quota right-sizing: per team, the accelerators its quota could give back over a window of recorded
requests, each cut proved by replaying the window with that team's quota cut against the baseline (the
ledger's policies, replayed by the same engine: lib.planning.replay.passes.replay_proposal). Plain rows;
the Policy replay page makes its tables of them (lib.dashboard.replay_view.sizing_tables). Units:
accelerators (`gpus`), hours.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from lib.planning.replay.data import ReplayWindow
from lib.planning.replay.kept import KeptPasses
from lib.planning.replay.passes import replay_proposal


def right_sizing(window: ReplayWindow, held: dict[str, int], *, progress: Callable[[float, str], None] | None = None,
                 kept: Path | None = None) -> dict:
    """Per team, the accelerators it could give back — its quota less its P90 held over the window
    (`held`: lib.ledger.replay.held_p90), never below its retraining set-aside — and the proof: the
    window replayed with that team's quota cut (every other policy as it is), its measures and the
    other teams' against the baseline (the current policy, same engine). window: the window, read once;
    kept: see lib.planning.replay.search.PoolSizes.

    Returns {"rows": one row (a dict) per team (team, quota_gpus, p90_held_gpus, give_back_gpus,
    proposed_quota_gpus, and for the team and for the others together: admitted and deferred, baseline
    and with the cut, and the team's P90 wait), "proof": rows, per cut and affected team its measures
    (team_cut, team, measure, baseline, with_cut), "edits": team -> {"reserved_gpus": N} for the cuts}."""
    requests, world, policies = window.requests, window.world, window.policies
    say = progress or (lambda fraction, message: None)
    fitted: dict = {}
    store = KeptPasses(kept, requests, world) if kept is not None else None
    cuts = {}
    for team, p in sorted(policies.items()):
        keep = max(held.get(team, 0), p["retraining_reserved_gpus"])
        if p["reserved_gpus"] > keep:
            cuts[team] = keep
    say(0.0, "replaying the current policy")
    base = replay_proposal(requests, policies, world, fitted=fitted, kept=store)
    rows, proof = [], []
    for i, (team, p) in enumerate(sorted(policies.items())):
        give = p["reserved_gpus"] - cuts[team] if team in cuts else 0
        row = {"team": team, "quota_gpus": p["reserved_gpus"], "p90_held_gpus": held.get(team, 0),
               "give_back_gpus": give, "proposed_quota_gpus": p["reserved_gpus"] - give}
        after = base
        if give:
            say((i + 1) / (len(policies) + 1), f"replaying {team} with {p['reserved_gpus'] - give:,} GPUs")
            after = replay_proposal(requests, {**policies, team: {**p, "reserved_gpus": cuts[team]}}, world,
                                    fitted=fitted, kept=store)
        empty = {"admit": 0, "defer": 0, "p90_wait_hours": None, "mean_wait_hours": None}
        own_b, own_a = base["teams"].get(team, empty), after["teams"].get(team, empty)
        others = [t for t in set(base["teams"]) | set(after["teams"]) if t != team]
        row.update({"admitted": own_b["admit"], "admitted_with_cut": own_a["admit"],
                    "deferred": own_b["defer"], "deferred_with_cut": own_a["defer"],
                    "p90_wait_hours": own_b["p90_wait_hours"], "p90_wait_hours_with_cut": own_a["p90_wait_hours"],
                    "others_admitted": sum(base["teams"].get(t, empty)["admit"] for t in others),
                    "others_admitted_with_cut": sum(after["teams"].get(t, empty)["admit"] for t in others)})
        rows.append(row)
        if give:
            for t in sorted(set(base["teams"]) | set(after["teams"])):
                b, a = base["teams"].get(t, empty), after["teams"].get(t, empty)
                for key, label in (("admit", "admitted"), ("defer", "deferred"),
                                   ("mean_wait_hours", "mean wait (hours)"), ("p90_wait_hours", "P90 wait (hours)")):
                    proof.append({"team_cut": team, "team": t, "measure": label, "baseline": b[key], "with_cut": a[key]})
    if store is not None:
        store.save()
    say(1.0, "right-sizing done")
    return {"rows": rows, "proof": proof, "edits": {team: {"reserved_gpus": n} for team, n in cuts.items()}}
