"""When would a deferred request fit? Pure rules over the reservations that hold a team's quota, and
over the cluster's pools of physical accelerators.

The reservations that count against a team's quota are its admitted ones with no end recorded that
have started or whose window has not passed (lib.ledger.state.held_condition selects them, for the
gate and the dashboard alike): each holds its `gpus` accelerators from now until its `reserved_until`
(its expected end: for a run past its planned end, lib.ledger.state.overrun_end; None: no known end),
including one whose window starts later, as the admission check counts it. Waiting cures only the
time-dependent reasons (capacity, cluster-capacity, retraining-protection); the month rolling over
cures `period-budget`; anything else needs the request changed.

Pools (lib.gate.contracts.PoolState: a capacity type's physical accelerators, `[pools.<type>]` in
data/teams.toml): team quotas may add up to more than a pool (the usual overcommit), so a request
within its quota can still find no accelerators. What counts against a pool at time t: every team's
held reservations on it, counted as quotas count them (retraining leaves out its own team's
experiments: the scheduler preempts them), plus each of the scheduler's windows (maintenance,
reservations for other accounts: lib.gate.contracts.CapacityWindow) active at t that is not the
request's team's own (its `accounts`). A request that would run from t for `hours` fits when at
every moment of [t, t + hours) held + windows + need ≤ the pool's accelerators (`pool_room`).
Units: accelerators (`gpus`), hours.
"""
from __future__ import annotations

import bisect
import datetime as dt
import heapq
import operator
from typing import Iterable

from lib.gate.contracts import CapacityWindow, PoolState, Reservation, TimelineStep
from lib.gate.terms import next_month_start

WAIT_CURES = {"capacity", "cluster-capacity", "retraining-protection"}
MONTH_CURES = {"period-budget"}
LINE_CURES = {"queue"}   # the gate's own line: the request's turn comes


def cured_by_waiting(codes) -> bool:
    """Whether a deferral with these reason codes needs only time (its turn in the gate's line, room
    freed, the month's reset): such a request waits in the queue; any other code needs it changed."""
    codes = set(codes)
    return bool(codes) and not codes - WAIT_CURES - MONTH_CURES - LINE_CURES


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
    i = bisect.bisect_right(timeline, at, key=_step_at) - 1
    return timeline[max(i, 0)]["gpus"]


def _step_at(step: TimelineStep) -> dt.datetime:
    return step["at"]


_first = operator.itemgetter(0)


def _minus_gpus(step: TimelineStep) -> int:
    return -step["gpus"]


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
    held, releases = 0, []
    for r in holders:
        end = r["reserved_until"]
        if end is None or end > now:
            held += r["gpus"]
            if end is not None:
                releases.append((end, r["gpus"]))
    if held + need_gpus <= quota_gpus:   # fits now
        return now
    # the steps of holdings_timeline, walked until one leaves room (without building the rest)
    releases.sort(key=_first)
    for i, (end, gpus) in enumerate(releases):
        held -= gpus
        last_at_end = i + 1 == len(releases) or releases[i + 1][0] != end
        if last_at_end and held + need_gpus <= quota_gpus:
            return end
    return None


def capacity_fit(now: dt.datetime, kind: str, reserved_gpus: int, retraining_reserved_gpus: int,
                 holders: Iterable[Reservation], need_gpus: int, pool: PoolState | None = None,
                 team: str | None = None, hours: float = 0.0) -> dt.datetime | None:
    """The earliest time >= `now` at which a `kind` request for `need_gpus` passes every capacity
    check of lib.gate.admission.decide; None when it never does.

    Retraining: the team's retraining holdings + need ≤ reserved_gpus (experiments are preempted).
    Other kinds: all holdings + need ≤ reserved_gpus, and experiments' holdings + need ≤
    reserved_gpus - retraining_reserved_gpus when a set-aside exists. With the request's `pool`
    (and its `team`, and `hours`, its estimated wall clock), also room in the pool for the whole
    run (`pool_fit`), so the time never falls inside a window of the scheduler's that leaves none.
    """
    holders = list(holders)
    if kind == "retraining":
        at = earliest_fit(now, reserved_gpus, [r for r in holders if r["kind"] == "retraining"], need_gpus)
    else:
        at = earliest_fit(now, reserved_gpus, holders, need_gpus)
        if at is not None and retraining_reserved_gpus:
            experiments = [r for r in holders if r["kind"] != "retraining"]
            other = earliest_fit(now, max(0, reserved_gpus - retraining_reserved_gpus), experiments, need_gpus)
            at = None if other is None else max(at, other)
    if at is None or pool is None:
        return at
    # team holdings only fall, so every time from `at` on passes the quota checks
    return pool_fit(pool, team, kind, need_gpus, hours, at)


def window_applies(window: CapacityWindow, pool: str, team: str | None) -> bool:
    """Whether the scheduler's `window` takes accelerators out of `pool` for `team`: not when the team's
    account may run inside it (named in `accounts`, or not excluded by a "-name" list there), nor when
    it only excludes some users (everyone else may use it). A window for some users only takes them
    from every team: the gate decides per team, not per user."""
    if window["pool"] is not None and window["pool"] != pool:
        return False
    allowed = [a for a in window["accounts"] if not a.startswith("-")]
    excluded = [a[1:] for a in window["accounts"] if a.startswith("-")]
    if team in allowed or (excluded and not allowed and team not in excluded):
        return False
    users = window["users"]
    return bool(allowed or excluded or not users or not all(u.startswith("-") for u in users))


def pool_counted(pool: PoolState, team: str | None, kind: str) -> list[Reservation]:
    """The reservations that count against the pool for a `kind` request of `team`: all of them, but
    for retraining not its own team's experiments (the scheduler preempts those)."""
    if kind != "retraining":
        return pool["reservations"]
    return [r for r in pool["reservations"] if r.get("team") != team or r["kind"] == "retraining"]


def pool_room(pool: PoolState, team: str | None, kind: str, start: dt.datetime, hours: float,
              timeline: list[TimelineStep] | None = None) -> tuple[int, int, list[CapacityWindow]]:
    """(room, held, windows) for a `kind` request of `team` running from `start` for `hours`:
    room = the accelerators free in the pool at every moment of [start, start + hours) (never below
    0); held = what the reservations counted (`pool_counted`) hold at start; windows = the
    scheduler's windows that take accelerators out of the pool during the span. `timeline`: the
    counted reservations' holdings_timeline from `start` or earlier, when the caller has it."""
    windows: list[CapacityWindow] = []
    if pool["windows"]:   # without any (a replay's every pool check, mostly) the span is not worked out
        windows = _in_span([w for w in pool["windows"] if window_applies(w, pool["name"], team)], start,
                           span_end(start, hours))
    if timeline is None and not any(w["start"] > start for w in windows):   # only the start matters
        held = sum(r["gpus"] for r in pool_counted(pool, team, kind)
                   if r["reserved_until"] is None or r["reserved_until"] > start)
        return max(0, pool["gpus"] - held - sum(w["gpus"] for w in windows)), held, windows
    if timeline is None:
        timeline = _pool_timeline(pool, team, kind, start)
    return max(0, pool["gpus"] - _peak(timeline, windows, start)), held_at(timeline, start), windows


def _in_span(windows: list[CapacityWindow], start: dt.datetime, end: dt.datetime) -> list[CapacityWindow]:
    """The windows active at some moment of [start, end) (at start, for a run of no length)."""
    return [w for w in windows if w["start"] < max(end, start + _INSTANT) and w["end"] > start]


def _peak(timeline: list[TimelineStep], windows: list[CapacityWindow], start: dt.datetime) -> int:
    """The most that holdings and `windows` (those of the span) take at once from `start` on: holdings
    only fall, so the peak is at the start or where a window begins."""
    peak = 0
    for at in [start] + [w["start"] for w in windows if w["start"] > start]:
        peak = max(peak, held_at(timeline, at) + sum(w["gpus"] for w in windows if w["start"] <= at < w["end"]))
    return peak


_INSTANT = dt.timedelta(microseconds=1)   # a run of no length still needs the pool at its start
_LAST = dt.datetime(9999, 1, 1)


def span_end(start: dt.datetime, hours: float) -> dt.datetime:
    """start + hours (hours < 0 count as 0), never past the calendar's end (a huge estimate)."""
    left = (_LAST - start).total_seconds() / 3600.0
    return _LAST if hours >= left else start + dt.timedelta(hours=max(0.0, hours))


def _pool_timeline(pool: PoolState, team: str | None, kind: str, start: dt.datetime) -> list[TimelineStep]:
    """The counted reservations' holdings_timeline from start (or the one the pool state brings, when
    it starts no later)."""
    given = pool.get("timeline")
    if given is not None and given[0]["at"] <= start:
        return given
    return holdings_timeline(start, pool_counted(pool, team, kind))


def pool_fit(pool: PoolState, team: str | None, kind: str, need_gpus: int, hours: float,
             start: dt.datetime) -> dt.datetime | None:
    """The earliest time >= `start` from which `need_gpus` fit in the pool for `hours` (`pool_room`);
    None when they never do (more than the pool, or room only after a reservation with no end)."""
    if need_gpus > pool["gpus"]:
        return None
    ends = sorted({w["end"] for w in pool["windows"] if w["end"] > start and window_applies(w, pool["name"], team)})
    given = pool.get("timeline")
    if not ends and (given is None or given[0]["at"] > start):   # the first step with room, no timeline built
        return earliest_fit(start, pool["gpus"], pool_counted(pool, team, kind), need_gpus)
    timeline = _pool_timeline(pool, team, kind, start)
    i = bisect.bisect_right(timeline, start, key=_step_at)
    if not ends:   # no window ahead: holdings only fall, so the first step with room is the answer
        if timeline[i - 1]["gpus"] + need_gpus <= pool["gpus"]:
            return start
        j = bisect.bisect_left(timeline, need_gpus - pool["gpus"], lo=i, key=_minus_gpus)
        return timeline[j]["at"] if j < len(timeline) else None
    windows = [w for w in pool["windows"] if window_applies(w, pool["name"], team)]
    later = (s["at"] for s in timeline[i:])
    last = None
    # room only grows where a holding releases or a window ends; after the last of those it never changes
    for at in heapq.merge([start], later, ends):
        if at == last or held_at(timeline, at) + need_gpus > pool["gpus"]:   # no window can make room
            continue
        last = at
        if pool["gpus"] - _peak(timeline, _in_span(windows, at, span_end(at, hours)), at) >= need_gpus:
            return at
    return None


def fit_for_reasons(now: dt.datetime, reason_codes: Iterable[str], kind: str, reserved_gpus: int,
                    retraining_reserved_gpus: int, holders: Iterable[Reservation], need_gpus: int,
                    pool: PoolState | None = None, team: str | None = None, hours: float = 0.0
                    ) -> tuple[dt.datetime | None, str]:
    """(earliest time, explanation) for a request deferred with these reason codes (with its `pool`,
    `team` and estimated `hours` when the pool is checked too: see `capacity_fit`).

    None with an explanation when waiting alone will not make it fit."""
    codes = set(reason_codes)
    blocking = sorted(codes - WAIT_CURES - MONTH_CURES)
    if blocking:
        return None, "waiting will not help: change the request (" + ", ".join(blocking) + ")"
    at = now
    why = []
    if codes & WAIT_CURES or not codes:
        fit = capacity_fit(now, kind, reserved_gpus, retraining_reserved_gpus, holders, need_gpus, pool, team, hours)
        if fit is None:
            quota = reserved_gpus if kind == "retraining" else reserved_gpus - retraining_reserved_gpus
            if need_gpus > quota:
                return None, f"needs {need_gpus} GPUs, above the {max(0, quota)} the team's quota leaves it"
            if pool is not None and need_gpus > pool["gpus"]:
                return None, f"needs {need_gpus} GPUs, above the {pool['gpus']} of the {pool['name']} pool"
            return None, "only fits after a reservation with no end time releases"
        at = max(at, fit)
        why.append("when reservations end" if fit > now else "fits now")
    if codes & MONTH_CURES:
        at = max(at, next_month_start(now))
        why.append("monthly budget resets")
    return at, "; ".join(why)
