"""Accelerators held over time as a step function, and the earliest start at which a run fits under a
limit for its whole span: the shape conservative backfill lays the gate's line out on
(lib.planning.plan.line). Holdings here may rise as well as fall (a request the plan starts later adds
to them from its planned start). Units: accelerators (`gpus`), hours; times are naive UTC datetimes.
"""
from __future__ import annotations

import bisect
from datetime import datetime, timedelta

from lib.gate.capacity import span_end

_INSTANT = timedelta(microseconds=1)   # a run of no length still needs its accelerators at its start


class Profile:
    """Accelerators held from `origin` on: from times[i] until times[i + 1] (the last: for ever),
    values[i] are held. Built by `add`; read by `at` and `earliest`."""
    __slots__ = ("times", "values")

    def __init__(self, origin: datetime):
        self.times: list[datetime] = [origin]
        self.values: list[int] = [0]

    def copy(self) -> Profile:
        out = Profile(self.times[0])
        out.times, out.values = list(self.times), list(self.values)
        return out

    def _cut(self, t: datetime) -> int:
        """The index of the step starting at t (made by splitting the step in force then)."""
        i = bisect.bisect_left(self.times, t)
        if i < len(self.times) and self.times[i] == t:
            return i
        self.times.insert(i, t)
        self.values.insert(i, self.values[i - 1])
        return i

    def add(self, start: datetime, end: datetime | None, gpus: int) -> None:
        """`gpus` more held from `start` (at least the origin) until `end` (None: for ever); a span
        that ends by the origin adds nothing."""
        start = max(start, self.times[0])
        if gpus == 0 or (end is not None and end <= start):
            return
        i = self._cut(start)
        j = len(self.times) if end is None else self._cut(end)
        values = self.values
        for k in range(i, j):
            values[k] += gpus

    def at(self, t: datetime) -> int:
        """What is held at t (>= the origin)."""
        return self.values[max(0, bisect.bisect_right(self.times, t) - 1)]

    def change_after(self, t: datetime) -> datetime | None:
        """The first time after t at which what is held changes (None: never)."""
        i = bisect.bisect_right(self.times, t)
        return self.times[i] if i < len(self.times) else None

    def earliest(self, start: datetime, hours: float, room: int) -> datetime | None:
        """The earliest time c >= `start` (>= the origin) such that at every moment of [c, c + hours)
        at most `room` accelerators are held; None when there is none (room below 0, or more than
        room held for ever from some time on)."""
        if room < 0:
            return None
        times, values, n = self.times, self.values, len(self.times)
        i = max(0, bisect.bisect_right(times, start) - 1)
        c = start
        while True:
            end = max(span_end(c, hours), c + _INSTANT)
            k = i
            while k < n and (k == i or times[k] < end):
                if values[k] > room:
                    break
                k += 1
            else:
                return c
            if k + 1 >= n:
                return None
            i = k + 1
            c = times[i]
