"""When would a deferred request fit? Pure rules over the reservations that hold a team's quota.

The reservations that count against a team's quota are its admitted, unfinished ones whose window
has not passed (lib.ledger.state.held_condition selects them, for the gate and the dashboard
alike): each holds its `gpus` accelerators from now until its `reserved_until` (None: no known end),
including one whose window starts later, as the admission check counts it. Waiting cures only the
time-dependent reasons (capacity, retraining-protection); the month rolling over cures
`period-budget`; anything else needs the request changed.
"""
from __future__ import annotations

import datetime as dt
from typing import Iterable

from lib.gate.contracts import Reservation, TimelineStep
from lib.gate.terms import next_month_start

WAIT_CURES = {"capacity", "retraining-protection"}
MONTH_CURES = {"period-budget"}


def holdings_timeline(now: dt.datetime, holders: Iterable[Reservation]) -> list[TimelineStep]:
    """The accelerators `holders` hold from `now` on, as steps: from each step's `at` until the next
    step's, `gpus` accelerators are held.

    Every holder (an admitted, unfinished reservation, one starting later included) holds its `gpus`
    from `now` until its `reserved_until`, and none after; a holder without an end (None) never
    releases, and one whose end is not after `now` holds nothing. The first step is at `now`; each
    later step is a distinct end time after `now`, in time order. Holdings only fall: the peak over
    any span is the step in force at its start. The gate's earliest fit (`earliest_fit`) and the
    dashboard's capacity calendar both read it.
    """
    holders = list(holders)
    held = sum(r["gpus"] for r in holders if r["reserved_until"] is None or r["reserved_until"] > now)
    releases: dict[dt.datetime, int] = {}
    for r in holders:
        end = r["reserved_until"]
        if end is not None and end > now:
            releases[end] = releases.get(end, 0) + r["gpus"]
    steps: list[TimelineStep] = [{"at": now, "gpus": held}]
    for at in sorted(releases):
        held -= releases[at]
        steps.append({"at": at, "gpus": held})
    return steps


def held_at(timeline: list[TimelineStep], at: dt.datetime) -> int:
    """The accelerators a `holdings_timeline` holds at time `at` (>= its first step): the step in
    force then. Holdings only fall, so it is also the peak from `at` on."""
    gpus = timeline[0]["gpus"]
    for step in timeline:
        if step["at"] > at:
            break
        gpus = step["gpus"]
    return gpus


def earliest_fit(now: dt.datetime, quota_gpus: int, holders: Iterable[Reservation],
                 need_gpus: int) -> dt.datetime | None:
    """The earliest time >= `now` at which `need_gpus` more accelerators fit under `quota_gpus`.

    Every holder (an admitted, unfinished reservation, one starting later included) holds its
    `gpus` until its `reserved_until`: the answer is the first step of `holdings_timeline` that
    leaves room (`now` when they fit already). None when they never fit: `need_gpus` above the
    quota, or room only appears when a holder without an end releases.
    """
    if need_gpus < 0 or quota_gpus < 0:
        raise ValueError("GPU counts cannot be negative")
    if need_gpus > quota_gpus:
        return None
    for step in holdings_timeline(now, holders):
        if step["gpus"] + need_gpus <= quota_gpus:
            return step["at"]
    return None


def capacity_fit(now: dt.datetime, kind: str, reserved_gpus: int, retraining_reserved_gpus: int,
                 holders: Iterable[Reservation], need_gpus: int) -> dt.datetime | None:
    """The earliest time >= `now` at which a `kind` request for `need_gpus` passes both capacity
    checks of lib.gate.admission.decide; None when it never does.

    Retraining: the team's retraining holdings + need ≤ reserved_gpus (experiments are preempted).
    Other kinds: all holdings + need ≤ reserved_gpus, and experiments' holdings + need ≤
    reserved_gpus - retraining_reserved_gpus when a set-aside exists.
    """
    holders = list(holders)
    if kind == "retraining":
        return earliest_fit(now, reserved_gpus, [r for r in holders if r["kind"] == "retraining"], need_gpus)
    at = earliest_fit(now, reserved_gpus, holders, need_gpus)
    if at is None or not retraining_reserved_gpus:
        return at
    experiments = [r for r in holders if r["kind"] != "retraining"]
    other = earliest_fit(now, max(0, reserved_gpus - retraining_reserved_gpus), experiments, need_gpus)
    return None if other is None else max(at, other)


def fit_for_reasons(now: dt.datetime, reason_codes: Iterable[str], kind: str, reserved_gpus: int,
                    retraining_reserved_gpus: int, holders: Iterable[Reservation], need_gpus: int
                    ) -> tuple[dt.datetime | None, str]:
    """(earliest time, explanation) for a request deferred with these reason codes.

    None with an explanation when waiting alone will not make it fit."""
    codes = set(reason_codes)
    blocking = sorted(codes - WAIT_CURES - MONTH_CURES)
    if blocking:
        return None, "waiting will not help: change the request (" + ", ".join(blocking) + ")"
    at = now
    why = []
    if codes & WAIT_CURES or not codes:
        fit = capacity_fit(now, kind, reserved_gpus, retraining_reserved_gpus, holders, need_gpus)
        if fit is None:
            quota = reserved_gpus if kind == "retraining" else reserved_gpus - retraining_reserved_gpus
            if need_gpus > quota:
                return None, f"needs {need_gpus} GPUs, above the {max(0, quota)} the team's quota leaves it"
            return None, "only fits after a reservation with no end time releases"
        at = max(at, fit)
        why.append("when reservations end" if fit > now else "fits now")
    if codes & MONTH_CURES:
        at = max(at, next_month_start(now))
        why.append("monthly budget resets")
    return at, "; ".join(why)
