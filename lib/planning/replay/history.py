"""What a policy replay (lib.planning.replay.passes) has learnt from the runs finished so far in its replay
world, as time moves forward: the calibration rows per scope, the interruption rate on preemptible
capacity, and the calibration each request sees (recomputed only when needed).
"""
from __future__ import annotations

import hashlib
from collections import Counter, deque
from datetime import datetime, timedelta

from lib.gate.calibration import calibrate_scopes
from lib.gate.contracts import Calibration
from lib.planning.replay.data import Refresh


_EPOCH, _US = datetime(1970, 1, 1), timedelta(microseconds=1)
_CODES: dict = {}


def _stable_code(text) -> int:
    """A number for `text` that is the same in every process (Python's own str hash is not), so that a
    row's hash, and a scope's content (CalibrationScopes.fingerprint), can key calibrations kept on disk."""
    code = _CODES.get(text)
    if code is None:
        code = _CODES[text] = int.from_bytes(hashlib.blake2b(repr(text).encode(), digest_size=8).digest(), "big")
    return code


class CalibrationScopes:
    """The calibration rows of runs finished so far, per scope (team × kind, team, everyone): each
    the `max_runs` most recent in end order (older ones can never be among the most recent again),
    with a version that changes whenever a row enters or leaves."""

    def __init__(self, max_runs: int, window_days: int):
        self.max_runs, self.window = max_runs, timedelta(days=window_days)
        self.rows: dict = {}
        self.version: Counter = Counter()
        self.content: Counter = Counter()   # scope -> XOR of its rows' hashes: equal rows, equal content

    def copy(self) -> CalibrationScopes:
        """Another with the same rows (shared: never changed), to go on from here on its own."""
        out = CalibrationScopes(self.max_runs, self.window.days)
        out.rows = {k: deque(dq, maxlen=dq.maxlen) for k, dq in self.rows.items()}
        out.version, out.content = self.version.copy(), self.content.copy()
        return out

    def _dq(self, key) -> deque:
        dq = self.rows.get(key)
        if dq is None:
            dq = self.rows[key] = deque(maxlen=self.max_runs)
        return dq

    def add(self, ended_at: datetime, team: str, kind: str, estimated: float, actual: float,
            censored: bool) -> None:
        row = (ended_at, {"estimated_gpu_hours": estimated, "actual_gpu_hours": actual, "censored": censored,
                          "ended_at": ended_at, "kind": kind},
               hash(((ended_at - _EPOCH) // _US, _stable_code(kind), estimated, actual, censored)))
        for key in ((team, kind), (team,), ()):
            dq = self._dq(key)
            if len(dq) == dq.maxlen:   # the oldest leaves as this one enters
                self.content[key] ^= dq[0][2]
            dq.append(row)
            self.content[key] ^= row[2]
            self.version[key] += 1

    def prune(self, key, now: datetime) -> None:
        """Drop the rows of scope `key` that ended at or before now - window (SQL: ended_at > since)."""
        dq = self.rows.get(key)
        since = now - self.window
        while dq and dq[0][0] <= since:
            self.content[key] ^= dq.popleft()[2]
            self.version[key] += 1

    def fingerprint(self, team: str, kind: str, now: datetime) -> tuple:
        """What the calibration of (team, kind) at `now` reads, in a few numbers: each scope's row count and
        content hash (after pruning to the window). Passes over one window with the same fingerprint
        have the same rows, so the same calibration."""
        out = []
        for key in ((team, kind), (team,), ()):
            self.prune(key, now)
            out.append((len(self.rows.get(key, ())), self.content[key]))
        return tuple(out)

    def scoped(self, team: str, kind: str, now: datetime, read: list):
        """(scope name, rows) in fallback order, lazily; appends each scope key read to `read`."""
        for name, key in (("team×kind", (team, kind)), ("team", (team,)), ("all", ())):
            self.prune(key, now)
            read.append(key)
            yield name, [r[1] for r in self.rows.get(key, ())]


class InterruptionRates:
    """Interruptions per GPU-hour on preemptible capacity over the runs finished in the window before
    now (lib.ledger.state.interruption_rate's rule): the team's with enough runs, else everyone's."""

    def __init__(self, base: dict, min_runs: int, window_days: int):
        self.min_runs, self.window = min_runs, timedelta(days=window_days)
        self.rows: deque = deque()
        self.sums: dict = {t: list(v) for t, v in base.items()}   # team -> [runs, GPU-hours, interruptions]
        self.total = [sum(v[i] for v in base.values()) for i in range(3)]

    def copy(self) -> InterruptionRates:
        """Another with the same runs, to go on from here on its own."""
        out = InterruptionRates({}, self.min_runs, self.window.days)
        out.rows = deque(self.rows)
        out.sums = {t: list(v) for t, v in self.sums.items()}
        out.total = list(self.total)
        return out

    def _apply(self, team: str, hours: float, n: int, sign: int) -> None:
        t = self.sums.setdefault(team, [0, 0.0, 0])
        for acc in (t, self.total):
            acc[0] += sign
            acc[1] += sign * hours
            acc[2] += sign * n

    def add(self, ended_at: datetime, team: str, hours: float, n: int) -> None:
        self.rows.append((ended_at, team, hours, n))
        self._apply(team, hours, n, 1)

    def rate(self, team: str, now: datetime) -> dict | None:
        since = now - self.window
        while self.rows and self.rows[0][0] <= since:
            _, t, hours, n = self.rows.popleft()
            self._apply(t, hours, n, -1)
        own = self.sums.get(team, [0, 0.0, 0])
        for scope, (runs, hours, n) in (("team", own), ("all", self.total)):
            if runs > 0 and (scope == "all" or runs >= self.min_runs):   # runs have actual > 0
                return {"per_gpu_hour": float(n) / float(hours), "scope": scope, "runs": int(runs),
                        "gpu_hours": float(hours), "interruptions": int(n)}
        return None


class Calibrations:
    """Calibration per request, recomputed only when needed: whenever a scope it read changed
    ("exact"), or once per (team, kind, level, UTC day) ("daily"). `shared`: calibrations by the
    rows they were fitted on (`CalibrationScopes.fingerprint`), kept across the passes of one
    window (a baseline and its proposals), so a pass fits only what its own admits changed."""

    def __init__(self, scopes: CalibrationScopes, refresh: Refresh, shared: dict | None = None, kept=None):
        self.scopes, self.refresh = scopes, refresh
        self.cache: dict = {}
        self.shared = {} if shared is None else shared
        self.kept = kept   # lib.planning.replay.kept.KeptPasses: calibrations fitted in earlier processes
        self.computed = 0

    def copy(self, scopes: CalibrationScopes) -> Calibrations:
        """Another over `scopes` (a copy of this one's), with the same cache, to go on on its own."""
        out = Calibrations(scopes, self.refresh, self.shared, self.kept)
        out.cache, out.computed = dict(self.cache), self.computed
        return out

    def get(self, team: str, kind: str, level: float, now: datetime) -> Calibration:
        key = (team, kind, level)
        hit = self.cache.get(key)
        if hit is not None:
            stamp, cal = hit
            if self.refresh == "daily":
                if stamp == now.date():
                    return cal
            else:
                for scope, version in stamp:
                    self.scopes.prune(scope, now)
                    if self.scopes.version[scope] != version:
                        break
                else:
                    return cal
        read: list = []
        seen = (team, kind, level, self.scopes.fingerprint(team, kind, now))
        cal = self.shared.get(seen)
        if cal is None:
            # a fit kept from an earlier process counts as computed, and reads the scopes it read then
            # (fingerprint has pruned them all), so the pass goes on exactly as if it had fitted it
            earlier = self.kept.fitted(seen) if self.kept is not None else None
            if earlier is not None:
                cal, n_read = earlier
                read += [(team, kind), (team,), ()][:n_read]
            else:
                cal = calibrate_scopes(self.scopes.scoped(team, kind, now, read), level=level)
                if self.kept is not None:
                    self.kept.fit(seen, cal, len(read))
            self.shared[seen] = cal
            self.computed += 1
        else:
            read += [(team, kind), (team,), ()]
        stamp = now.date() if self.refresh == "daily" else tuple((k, self.scopes.version[k]) for k in read)
        self.cache[key] = (stamp, cal)
        return cal
