"""The Policy replay page's read model (no Streamlit): the proposal's effect as proposal - baseline per
team (lib.ledger.replay), the capacity what-if's search for the smallest pool that meets a planner's
target, what that pool costs at the `[prices]`, and the week the demand forecast outgrows today's pool.

The search replays one window, read once (lib.ledger.replay.read_window), under the ledger's policies
with N accelerators in one pool (lib.planning.replay.passes.replay_proposal: the gate's own pool check,
cluster-capacity), and bisects over N: it assumes more accelerators never make the target harder to
meet (true of the pool check alone; a run admitted earlier can, rarely, hold room a later one needed,
so the answer is the smallest N the bisection found, each N it tried listed). Units: accelerators
(`gpus`), hours, GPU-hours; money in the `[prices]` currency.
"""
from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Callable, Collection, TypedDict

import pandas as pd

from lib.dashboard import settings
from lib.dashboard.forecasts import forecast
from lib.dashboard.reading import reader
from lib.ledger.state import pool_sizes
from lib.planning.forecast import MAX_WEEKS
from lib.planning.replay.passes import replay_proposal
from lib.planning.replay.kept import KeptPasses
from lib.planning.replay.resume import PassMarks
from lib.planning.replay.data import ReplayResult

HOURS_PER_WEEK = 168
ALL_TEAMS = "(all teams)"      # the row of every team together in the search's tables
TARGETS = {"p90_wait_hours": "P90 wait at most (hours)", "deferral_share": "deferral share at most (%)"}
SHOWN_AROUND = 2               # pool sizes shown either side of the smallest that meets the target


class Target(TypedDict):
    measure: str                # a key of TARGETS
    limit: float                # hours, or a share 0-1


def difference_table(result: ReplayResult) -> pd.DataFrame:
    """Proposal - baseline per team and measure: admits, deferrals (all, and per reason), mean and P90
    wait. Columns team, measure, unit ("decisions" | "hours"), baseline, proposed, difference
    (None where a P90 wait falls on requests that never fit by waiting)."""
    rows = []
    for t in result["teams"]:
        base, prop = t["baseline"], t["proposed"]
        pairs = [("admitted", "decisions", base["admit"], prop["admit"]),
                 ("deferred", "decisions", base["defer"], prop["defer"])]
        for code in sorted(set(base["deferrals_by_reason"]) | set(prop["deferrals_by_reason"])):
            pairs.append((f"deferred: {code}", "decisions", base["deferrals_by_reason"].get(code, 0),
                          prop["deferrals_by_reason"].get(code, 0)))
        pairs += [("mean wait", "hours", base["mean_wait_hours"], prop["mean_wait_hours"]),
                  ("P90 wait", "hours", base["p90_wait_hours"], prop["p90_wait_hours"])]
        for measure, unit, b, p in pairs:
            rows.append({"team": t["team"], "measure": measure, "unit": unit, "baseline": b, "proposed": p,
                         "difference": None if b is None or p is None else p - b})
    return pd.DataFrame(rows, columns=["team", "measure", "unit", "baseline", "proposed", "difference"])


def meets(summary: dict, target: Target) -> bool:
    """Whether replay measures (tally_summary) meet the target; nothing decided meets any target."""
    if summary["admit"] + summary["defer"] + summary["reject"] == 0:
        return True
    value = summary[target["measure"]]
    return value is not None and value <= target["limit"] + 1e-12


def search_ceiling(policies: dict, world_pools: dict[str, int], capacity: str) -> int:
    """The largest pool the search tries: every quota together (above it no reservation of the teams'
    can find the pool full), or today's pool when larger."""
    return max(1, sum(p["reserved_gpus"] for p in policies.values()), world_pools.get(capacity, 0))


class PoolSizes:
    """Replays of one window with N accelerators of the pool `capacity`, every policy as the ledger
    has it, each N replayed at most once (`tried`: N -> measures, lib.planning.replay.passes.replay_proposal's).

    data: lib.ledger.replay.read_window's (requests, world, policies, window). The replays share the
    calibrations they fit; with `kept` (the file beside the ledger, lib.ledger.replay.kept_file) also
    those an earlier replay of the window fitted, in any process, and they keep theirs there
    (lib.planning.replay.kept; the same measures either way). A size no replay is needed for: one at or
    above the need of a pass whose pool never lacked room (PoolNeed), which decides exactly as that
    pass, when the scheduler has no windows for the pool. A size below it goes on from such a pass's
    last mark before its first request that needs more (lib.planning.replay.resume)."""

    def __init__(self, data: tuple, capacity: str, *, kept: Path | None = None):
        self.requests, self.world, self.policies, _ = data
        self.capacity, self.tried, self.replays = capacity, {}, 0
        self.fitted: dict = {}   # calibrations by the rows they were fitted on, shared by every N
        self.store = KeptPasses(kept, self.requests, self.world) if kept is not None else None
        self.windows = [w for w in self.world.get("windows", []) if w.get("pool") in (None, capacity)]
        self.marks: PassMarks | None = None   # a never-short pass's, once one ran

    def at(self, n: int) -> dict:
        """The measures with `n` accelerators (replayed unless known)."""
        if n not in self.tried:
            same = self.same_as(n)
            if same is None:
                marks = PassMarks(len(self.requests)) if self.marks is None and not self.windows else None
                same = replay_proposal(self.requests, self.policies, self.world, pools={self.capacity: n},
                                       fitted=self.fitted, need_of=self.capacity, kept=self.store, marks=marks,
                                       start=self.marks.start_for(n) if self.marks is not None else None)
                if marks is not None and same["pool_need"] is not None:
                    self.marks = marks
                self.replays += 1
            self.tried[n] = same
        return self.tried[n]

    def same_as(self, n: int) -> dict | None:
        """A pass known to decide exactly as one with `n` accelerators would, or None."""
        if self.windows:
            return None
        return next((m for m in self.tried.values()
                     if m.get("pool_need") is not None and m["pool_need"] <= n), None)

    def known_from(self) -> int | None:
        """The smallest size known without a replay (every size from it up decides as a never-short
        pass: `same_as`), or None."""
        if self.windows:
            return None
        return min((m["pool_need"] for m in self.tried.values() if m.get("pool_need") is not None), default=None)

    def save(self) -> None:
        """Keep the calibrations fitted beside the ledger (with `kept`)."""
        if self.store is not None:
            self.store.save()


def smallest_pool(data: tuple, capacity: str, target: Target, *,
                  progress: Callable[[float, str], None] | None = None, kept: Path | None = None) -> dict:
    """The smallest N accelerators of `capacity` with which the window's replay meets `target`.

    data: lib.ledger.replay.read_window's (requests, world, policies, window); kept: see PoolSizes.
    Returns {"found": N or None (not met even at the ceiling: the quotas or budgets, not the pool,
    stand in the way), "ceiling", "tried": {N: measures}, "sizes": the PoolSizes, for the sizes
    around it}; each N is replayed at most once.

    Bisection over N, with a shortcut that changes no answer. A pass whose pool never lacked room
    decides the same with any pool down to the most any request needed (PoolNeed). Those sizes are
    known without a replay, and listed, and the bisection goes on below them."""
    say = progress or (lambda fraction, message: None)
    sizes = PoolSizes(data, capacity, kept=kept)
    ceiling = search_ceiling(sizes.policies, sizes.world.get("pools", {}), capacity)
    expected = max(2, math.ceil(math.log2(ceiling + 1)) + 2)

    def at(n: int) -> dict:
        if n not in sizes.tried:
            say(min(0.99, sizes.replays / expected), f"replaying with {n:,} {capacity} accelerators")
        return sizes.at(n)

    def meeting(n: int) -> int:
        """The smallest size known to replay exactly as n, which meets the target."""
        need = sizes.tried[n].get("pool_need")
        if need is None or need >= n or sizes.same_as(need) is None:
            return n
        sizes.at(need)   # known without a replay: a pass that decides the same
        return need

    found = None
    if meets(at(ceiling)["overall"], target):
        lo, hi = -1, meeting(ceiling)     # hi meets; lo is the largest N known not to (-1: none yet)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if meets(at(mid)["overall"], target):
                hi = meeting(mid)
            else:
                lo = mid
        found = hi
    sizes.save()
    say(1.0, "search done")
    return {"found": found, "ceiling": ceiling, "tried": dict(sorted(sizes.tried.items())), "sizes": sizes}


def around(found: int, ceiling: int, tried: Collection[int] = (), known_from: int | None = None) -> list[int]:
    """The pool sizes shown beside the one found: SHOWN_AROUND steps of about a tenth either side.

    A step's size that is not known yet is shown by the known size nearest it instead, when one lies
    within a step of it, on its side of the one found, and is neither shown already nor another step's
    own known size (the farther steps choose first). Known: replayed by the search (`tried`), or known
    without a replay (at or above `known_from`: PoolSizes.known_from). So the rows beside the answer
    seldom cost a replay of their own: the bisection has replayed sizes on both sides of it."""
    step, top = max(1, found // 10), max(ceiling, found)

    def known(n: int) -> bool:
        return n in tried or (known_from is not None and n >= known_from)
    steps = [found + k * step for k in (*range(-SHOWN_AROUND, 0), *range(SHOWN_AROUND, 0, -1))]
    # a known step's size is shown as itself: no other step takes it
    candidates = (set(tried) | ({known_from} if known_from is not None else set())) - set(filter(known, steps))
    shown = {found}
    for size in steps:
        if not 0 <= size <= top:
            continue
        if not known(size):
            near = [n for n in candidates if n not in shown and 0 <= n <= top and abs(n - size) <= step
                    and (n < found) == (size < found)]
            size = min(near, key=lambda n: (abs(n - size), n), default=size)
        shown.add(size)
    return sorted(shown)


def sizes_beside(found: dict) -> list[int]:
    """`around` the answer of a smallest_pool result, with what its search knows ([] with no answer)."""
    if found["found"] is None:
        return []
    return around(found["found"], found["ceiling"], found["tried"], found["sizes"].known_from())


def pool_rows(sizes: PoolSizes, ns: list[int]) -> pd.DataFrame:
    """Admits, deferrals and waits per team (and all teams) for each pool size in `ns` (replaying those
    not known yet). Columns pool_gpus, team, admitted, deferred, deferral_share,
    cluster_capacity_deferrals, mean_wait_hours, p90_wait_hours."""
    rows = []
    for n in ns:
        measures = sizes.at(n)
        for team, m in [(ALL_TEAMS, measures["overall"]), *measures["teams"].items()]:
            rows.append({"pool_gpus": n, "team": team, "admitted": m["admit"], "deferred": m["defer"],
                         "deferral_share": m["deferral_share"],
                         "cluster_capacity_deferrals": m["deferrals_by_reason"].get("cluster-capacity", 0),
                         "mean_wait_hours": m["mean_wait_hours"], "p90_wait_hours": m["p90_wait_hours"]})
    sizes.save()
    return pd.DataFrame(rows, columns=["pool_gpus", "team", "admitted", "deferred", "deferral_share",
                                       "cluster_capacity_deferrals", "mean_wait_hours", "p90_wait_hours"])


def pools_today(db=None) -> dict[str, int]:
    """The cluster's accelerators per capacity type as the ledger's [pools] hold them ({} when none)."""
    with reader(db) as con:
        return pool_sizes(con)


def pool_cost(gpus: int, capacity: str, window_hours: float, db=None) -> dict | None:
    """What `gpus` accelerators of `capacity` cost at its `[prices]` price per GPU-hour: per week and over
    the replay window ({currency, per_gpu_hour, per_week, per_window}); None when the type has no price."""
    p = settings.prices(db)
    price = p["per_gpu_hour"].get(capacity)
    if price is None:
        return None
    return {"currency": p["currency"], "per_gpu_hour": price, "per_week": gpus * HOURS_PER_WEEK * price,
            "per_window": gpus * window_hours * price}


def forecast_outgrows(pool_gpus: int, db=None, *, as_of: dt.datetime | None = None,
                      weeks: int = MAX_WEEKS) -> dict:
    """The first week of the `weeks`-week demand forecast whose P90, every team's added up, exceeds
    `pool_gpus` accelerators x 168 hours. The forecast is per team over every capacity type, so the pool
    is weighed against all demand. {"week_start" (None: not within the horizon), "p90_gpu_hours" of that
    week, "pool_gpu_hours_per_week", "weeks"}."""
    result = forecast(db, as_of=as_of, weeks=weeks)
    by_week: dict = {}
    for entry in result["teams"].values():
        for w in entry["weeks"]:
            by_week[w["week_start"]] = by_week.get(w["week_start"], 0.0) + float(w["p90_gpu_hours"] or 0.0)
    limit = pool_gpus * HOURS_PER_WEEK
    first = next(((week, hours) for week, hours in sorted(by_week.items()) if hours > limit), (None, None))
    return {"week_start": first[0], "p90_gpu_hours": first[1], "pool_gpu_hours_per_week": limit, "weeks": weeks}


def right_sizing(data: tuple, held: dict[str, int], *, progress: Callable[[float, str], None] | None = None,
                 kept: Path | None = None) -> dict:
    """Per team, the accelerators it could give back — its quota less its P90 held over the window
    (`held`: lib.ledger.replay.held_p90), never below its retraining set-aside — and the proof: the
    window replayed with that team's quota cut (every other policy as it is), its measures and the
    other teams' against the baseline (the current policy, same engine). kept: see PoolSizes.

    Returns {"rows": one row per team (team, quota_gpus, p90_held_gpus, give_back_gpus, proposed_quota_gpus,
    and for the team and for the others together: admitted and deferred, baseline and with the cut,
    and the team's P90 wait), "proof": per cut and affected team its measures (team_cut, team, measure,
    baseline, with_cut), "edits": team -> {"reserved_gpus": N} for the cuts}."""
    requests, world, policies, _ = data
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
    return {"rows": pd.DataFrame(rows), "proof": pd.DataFrame(
                proof, columns=["team_cut", "team", "measure", "baseline", "with_cut"]),
            "edits": {team: {"reserved_gpus": n} for team, n in cuts.items()}}
