"""Reservations holding accelerators as time moves forward: the part of the world the policy replay
(lib.planning.replay.world, over a past window) and the forward plan (lib.planning.plan.world, from now
on) both keep, so both hand `lib.gate.admission.decide` the reservations a request would see.

The words both engines use: a *holder* is a reservation (lib.gate.contracts.Reservation) that holds
accelerators; a *holding* is one over its span, as an engine's data gives it (the replay's
BackgroundHolding, the plan's PlanHolding); `Holdings` keeps the holders by key, and each engine's
world keeps one per team (`team_holdings`) and one per pool (`pool_holdings`).

A holder holds under a key (its team for a quota, or a pool's name) from when it is held until its
release (None: never); at a time t the key's holders are those not released by then (release > t,
the ledger's held_condition), in run-ID order, the order lib.ledger.state.held_reservations reads
them in (so sums over them add up in the same order as the gate's over the ledger).
"""
from __future__ import annotations

import bisect
import heapq
from datetime import datetime

from lib.gate.contracts import Reservation


def expected_end(reserved_until: datetime | None, ended_at: datetime | None) -> datetime | None:
    """The end a holder shows (its `reserved_until`) in an engine that knows when its run ended: the
    reservation's planned end, or the run's end when it outlived that (a run holds until it ends)."""
    if ended_at is not None and (reserved_until is None or ended_at > reserved_until):
        return ended_at
    return reserved_until


def _run_id(reservation: Reservation) -> str:
    return reservation.get("run_id") or ""


class _Held:
    """One key's holders not yet released, in run-ID order (`ids` and `holders` side by side), and a
    heap of their releases, so that moving forward drops only those released meanwhile."""
    __slots__ = ("ids", "holders", "releases", "seq")

    def __init__(self):
        self.ids: list[str] = []
        self.holders: list[Reservation] = []
        self.releases: list = []   # heap of (release, seq, reservation)
        self.seq = 0

    def add(self, release: datetime | None, reservation: Reservation) -> None:
        run_id = _run_id(reservation)
        i = bisect.bisect_right(self.ids, run_id)   # after equal run IDs: in the order they were held
        self.ids.insert(i, run_id)
        self.holders.insert(i, reservation)
        if release is not None:
            heapq.heappush(self.releases, (release, self.seq, reservation))
            self.seq += 1

    def copy(self) -> _Held:
        out = _Held()
        out.ids, out.holders, out.releases, out.seq = list(self.ids), list(self.holders), list(self.releases), self.seq
        return out

    def release_to(self, now: datetime) -> None:
        """Drop the holders released at or before `now`."""
        releases = self.releases
        while releases and releases[0][0] <= now:
            reservation = heapq.heappop(releases)[2]
            i = bisect.bisect_left(self.ids, _run_id(reservation))
            while self.holders[i] is not reservation:
                i += 1
            del self.ids[i], self.holders[i]


class Holdings:
    """Holders by key. `held(key, now)` is cached for the last `now` asked of each key and kept up to
    date by `hold`, so many decisions at one time read one list: read it, never change it."""

    def __init__(self):
        self._by: dict[object, _Held] = {}   # key -> its holders not yet released
        self._live: dict = {}   # key -> (now, [Reservation] held then)
        self.added: dict = {}   # key -> holders added so far (a key's holders changed when it moves)

    def copy(self) -> Holdings:
        """Another with the same holders (the reservations themselves shared: never changed), to go on
        from here on its own."""
        out = Holdings()
        out._by = {k: h.copy() for k, h in self._by.items()}
        out._live = {k: (now, list(held)) for k, (now, held) in self._live.items()}
        out.added = dict(self.added)
        return out

    def hold(self, key, release: datetime | None, reservation: Reservation) -> None:
        """`reservation` holds under `key` from now until `release` (None: never)."""
        self.added[key] = self.added.get(key, 0) + 1
        held = self._by.get(key)
        if held is None:
            held = self._by[key] = _Held()
        held.add(release, reservation)
        cached = self._live.get(key)
        if cached is not None and (release is None or release > cached[0]):
            bisect.insort(cached[1], reservation, key=_run_id)

    def held(self, key, now: datetime) -> list[Reservation]:
        """The key's holders at `now` (dropping those released by then), in run-ID order; `now` only
        moves forward."""
        cached = self._live.get(key)
        if cached is not None and cached[0] == now:
            return cached[1]
        held = self._by.get(key)
        if held is None:
            out: list[Reservation] = []
        else:
            held.release_to(now)
            out = list(held.holders)
        self._live[key] = (now, out)
        return out

    def keys(self):
        return self._by.keys()
