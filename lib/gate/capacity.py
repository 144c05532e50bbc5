"""When would a deferred request fit? A pure rule over the team's running reservations.

A team holds `quota_gpus` reserved accelerators. Its running reservations each hold `gpus` until
their `ends_at` (None: no known end, so they never release within the horizon). A request for
`need_gpus` fits at the first instant the accelerators still held leave room for it: walk the
reservations in order of their end, releasing each, until `in_use + need <= quota`.

Only a time-dependent reason (capacity, retraining-protection) can be cured by waiting; the
month rolling over cures `period-budget`. Anything else (budget, caps, memory, no snapshot, no
pilot, no recovery, invalid request) needs the request changed, so waiting never makes it fit.
"""
from __future__ import annotations

import datetime as dt
from typing import Iterable

WAIT_CURES = {"capacity", "retraining-protection"}
MONTH_CURES = {"period-budget"}


def earliest_fit(now: dt.datetime, quota_gpus: int, running: Iterable[tuple[int, dt.datetime | None]],
                 need_gpus: int) -> dt.datetime | None:
    """The earliest time >= now at which `need_gpus` fit under `quota_gpus`, given the running
    reservations as (gpus, ends_at) pairs; None when it never fits (need above quota, or the
    room only appears when a reservation without an end releases)."""
    if need_gpus < 0 or quota_gpus < 0:
        raise ValueError("GPU counts cannot be negative")
    if need_gpus > quota_gpus:
        return None
    held = [(g, e) for g, e in running if g > 0 and (e is None or e > now)]
    in_use = sum(g for g, _ in held)
    if in_use + need_gpus <= quota_gpus:
        return now
    for gpus, ends_at in sorted((x for x in held if x[1] is not None), key=lambda x: x[1]):
        in_use -= gpus
        if in_use + need_gpus <= quota_gpus:
            return ends_at
    return None


def next_month_start(now: dt.datetime) -> dt.datetime:
    """First instant of the calendar month after `now` (UTC, naive)."""
    return dt.datetime(now.year + (now.month == 12), now.month % 12 + 1, 1)


def fit_for_reasons(now: dt.datetime, reason_codes: Iterable[str], quota_gpus: int,
                    running: Iterable[tuple[int, dt.datetime | None]], need_gpus: int
                    ) -> tuple[dt.datetime | None, str]:
    """(earliest time, explanation) for a deferred request with these reason codes.

    None with an explanation when waiting alone will not make it fit."""
    codes = set(reason_codes)
    blocking = sorted(codes - WAIT_CURES - MONTH_CURES)
    if blocking:
        return None, "waiting will not help: change the request (" + ", ".join(blocking) + ")"
    at = now
    why = []
    if codes & WAIT_CURES or not codes:
        fit = earliest_fit(now, quota_gpus, running, need_gpus)
        if fit is None:
            if need_gpus > quota_gpus:
                return None, f"needs {need_gpus} GPUs, above the team's {quota_gpus} reserved"
            return None, "only fits after a reservation with no end time releases"
        at = max(at, fit)
        why.append("when running reservations end" if fit > now else "fits now")
    if codes & MONTH_CURES:
        at = max(at, next_month_start(now))
        why.append("monthly budget resets")
    return at, "; ".join(why)
