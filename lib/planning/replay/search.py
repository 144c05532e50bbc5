"""The capacity what-if's search: the smallest pool that meets a planner's target, over one window of
recorded requests replayed under the ledger's policies.

It replays the window (a ReplayWindow, read once: lib.ledger.replay.read_window) with N accelerators in
one pool (lib.planning.replay.passes.replay_proposal: the gate's own pool check, cluster-capacity), and
bisects over N: it assumes more accelerators never make the target harder to meet (true of the pool
check alone; a run admitted earlier can, rarely, hold room a later one needed, so the answer is the
smallest N the bisection found, each N it tried listed). Units: accelerators (`gpus`), hours.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Collection, TypedDict

from lib.planning.replay.data import ReplayWindow
from lib.planning.replay.kept import KeptPasses
from lib.planning.replay.passes import replay_proposal
from lib.planning.replay.resume import PassMarks

SHOWN_AROUND = 2               # pool sizes shown either side of the smallest that meets the target


class Target(TypedDict):
    measure: str                # a measure of tally_summary: "p90_wait_hours" or "deferral_share"
    limit: float                # hours, or a share 0-1


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

    window: the window, read once. The replays share the calibrations they fit; with `kept` (the file
    beside the ledger, lib.ledger.replay.kept_file) also those an earlier replay of the window fitted,
    in any process, and they keep theirs there (lib.planning.replay.kept; the same measures either
    way). A size no replay is needed for: one at or above the need of a pass whose pool never lacked
    room (PoolNeed), which decides exactly as that pass, when the scheduler has no windows for the
    pool. A size below it goes on from such a pass's last mark before its first request that needs
    more (lib.planning.replay.resume)."""

    def __init__(self, window: ReplayWindow, capacity: str, *, kept: Path | None = None):
        self.requests, self.world, self.policies = window.requests, window.world, window.policies
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


def smallest_pool(window: ReplayWindow, capacity: str, target: Target, *,
                  progress: Callable[[float, str], None] | None = None, kept: Path | None = None) -> dict:
    """The smallest N accelerators of `capacity` with which the window's replay meets `target`.

    window: the window, read once; kept: see PoolSizes.
    Returns {"found": N or None (not met even at the ceiling: the quotas or budgets, not the pool,
    stand in the way), "ceiling", "tried": {N: measures}, "sizes": the PoolSizes, for the sizes
    around it}; each N is replayed at most once.

    Bisection over N, with a shortcut that changes no answer. A pass whose pool never lacked room
    decides the same with any pool down to the most any request needed (PoolNeed). Those sizes are
    known without a replay, and listed, and the bisection goes on below them."""
    say = progress or (lambda fraction, message: None)
    sizes = PoolSizes(window, capacity, kept=kept)
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
