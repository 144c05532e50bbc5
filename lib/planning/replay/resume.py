"""Resuming a replay pass part-way, for the capacity search (lib.planning.replay.search.PoolSizes).

A pass whose pool never lacked room marks where it stands every MARK_EVERY of the window's requests
(a copy of its replay world, tallies, outcomes and retries due), and notes each step at which the
most that any request needed of the pool rose (lib.planning.replay.passes.PoolNeed). A pass with a smaller
pool of N decides every request exactly as the marked pass does until the first one that needs more
than N: each pool check before it passes at N too, and a deferred request's earliest fit never waits
for the pool (it had room at its decision, and the holdings only fall after it). So that pass starts
from the last mark at or before that request, with the pool set to N, instead of from the window's
start. The result is the same as a pass from the start (a test holds them equal).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from lib.planning.replay.world import ReplayWorld

MARK_EVERY = 0.04   # a mark every 4 % of the window's requests (about 5 MB each at 150,000 requests)


def copy_tallies(tallies: dict) -> dict:
    """Per-team tallies (lib.planning.replay.report.empty_tally's) copied, to go on on their own."""
    return {team: {k: v.copy() if hasattr(v, "copy") else v for k, v in t.items()} for team, t in tallies.items()}


class Mark(NamedTuple):
    step: int           # the request the pass goes on with
    world: ReplayWorld   # before that request's step
    tallies: dict
    outcomes: list
    retries: object     # lib.planning.replay.passes's retries due (its _Retries)
    most: int           # PoolNeed.most by then


class PassMarks:
    """The marks of one pass over `n` requests, and the steps at which its pool need rose."""

    def __init__(self, n: int):
        self.every = max(1, int(n * MARK_EVERY))
        self.marks: list[Mark] = []
        self.rises: list[tuple[int, int]] = []   # (step, the pool need from then on), rising

    def due(self, step: int) -> bool:
        return step > 0 and step % self.every == 0

    def take(self, step: int, ws, tallies: dict, outcomes: list, retries, most: int) -> None:
        self.marks.append(Mark(step, ws.copy(), copy_tallies(tallies), list(outcomes), retries.copy(None), most))

    def rose(self, step: int, most: int) -> None:
        self.rises.append((step, most))

    def start_for(self, gpus: int) -> Mark | None:
        """The last mark before the first step that needs more than `gpus` of the pool (None: none)."""
        first = next((step for step, most in self.rises if most > gpus), None)
        return next((m for m in reversed(self.marks) if first is None or m.step <= first), None)
