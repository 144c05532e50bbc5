"""Reservations holding accelerators as time moves forward: the part of the world the policy replay
(lib.planning.replay, over a past window) and the forward plan (lib.planning.forward_plan, from now
on) both keep, so both hand `lib.gate.admission.decide` the reservations a request would see.

A holder holds under a key (its team for a quota, or a pool's name) from when it is held until its
release (None: never); at a time t the key's holders are those not released by then (release > t,
the ledger's held_condition), in run-ID order, the order lib.ledger.state.held_reservations reads
them in (so sums over them add up in the same order as the gate's over the ledger).
"""
from __future__ import annotations

import bisect
import operator
from datetime import datetime

from lib.gate.contracts import Reservation

_RUN_ID = operator.itemgetter(0)


def _run_id(reservation: Reservation) -> str:
    return reservation.get("run_id") or ""


class Holdings:
    """Holders by key. `held(key, now)` is cached for the last `now` asked of each key and kept up to
    date by `hold`, so many decisions at one time read one list: read it, never change it."""

    def __init__(self):
        self._by: dict = {}     # key -> [(run ID, release, Reservation)] in run-ID order
        self._live: dict = {}   # key -> (now, [Reservation] held then)
        self.holds: dict = {}   # key -> holds so far (a key's holders changed when it moves)

    def hold(self, key, release: datetime | None, reservation: Reservation) -> None:
        """`reservation` holds under `key` from now until `release` (None: never)."""
        entry = (_run_id(reservation), release, reservation)
        self.holds[key] = self.holds.get(key, 0) + 1
        bisect.insort(self._by.setdefault(key, []), entry, key=_RUN_ID)
        cached = self._live.get(key)
        if cached is not None and (release is None or release > cached[0]):
            bisect.insort(cached[1], reservation, key=_run_id)

    def held(self, key, now: datetime) -> list[Reservation]:
        """The key's holders at `now` (dropping those released by then), in run-ID order."""
        cached = self._live.get(key)
        if cached is not None and cached[0] == now:
            return cached[1]
        live = [h for h in self._by.get(key, ()) if h[1] is None or h[1] > now]
        self._by[key] = live
        out = [h[2] for h in live]
        self._live[key] = (now, out)
        return out

    def keys(self):
        return self._by.keys()
