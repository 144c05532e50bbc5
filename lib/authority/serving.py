"""The authority as the warm gate server uses it (lib.slurm.live.LiveGate): one round trip a decision,
and a failure policy for when PostgreSQL cannot be reached.

**One round trip.** The server keeps, per team, what it last read from the authority (a `TeamView`:
policy, every cluster's holds, the month's spend, and the team row's version, which every change of
them moves on). It decides against that view, then asks once:
- an admit writes its hold only if the team's version is still the one it decided on, moving it on
  (one statement: `UPDATE teams ... WHERE version = v` takes the team's row lock and tests the
  version; the hold is inserted in the same statement, or not at all);
- a defer (or a what-if) asks for the version alone.
When the version moved (another cluster decided, a run ended, a policy changed), the view is read
again and the decision taken again: two round trips. Never more than one decision of this server is
in flight (LiveGate serialises them); deciders elsewhere serialise on the row lock.

**When the authority cannot be reached** (or breaks off, and once more after opening a new
connection it still fails; then it is asked again at most every RETRY_AFTER_S, so a network that
hangs holds up decisions once a second, not each): with no `offline_share` (the default) the decision is not made:
`AuthorityUnavailable` is raised, and the server answers a gate failure with that reason, as it does
for a full journal (the hook's failure policy applies). With `offline_share` s (0 < s ≤ 1,
`GATE_AUTHORITY_OFFLINE_SHARE`) the server decides alone against floor(s × the team's reserved
accelerators) (the retraining set-aside likewise) and s × its month budget, counting only what its own
ledger holds and spent; the decision says so (`"authority": "offline"` and a note), and the journal
and ledger record it as any other. Its holds are written to the authority the next time it answers,
before any other decision, each keyed (cluster, run ID), so none is counted twice. The price: while
it is away, the clusters that decide alone may together take up to the sum of their shares on top
of what the others hold through the authority.

**Every wait is bounded.** One decision waits on the authority at most DEADLINE_S, however it fails
(refuses connections, stops answering, hangs mid-statement): the connection's round trips are cut
when the deadline passes (lib.authority.deadline), a new connection is tried only while time is
left (connect_timeout CONNECT_S), and PostgreSQL cancels a statement itself after DEADLINE_S
(statement_timeout, a lock wait among them). An overrun counts as away: the failure policy answers.
A caller waits at most DEADLINE_S for the authority plus the decision in flight before its own (at
most one at a time, the one that asks again after RETRY_AFTER_S), so it is answered within
ANSWER_BOUND_S. The outage is logged once when it starts and once when it ends, with its length and
how many decisions the failure policy answered meanwhile.
"""
from __future__ import annotations

import math
import os
import time
from datetime import datetime

from lib.authority.deadline import Watchdog
from lib.authority.facts import (BUMP_SQL, HOLD_SQL, TEAM_SQL, Authority, AuthorityFacts, TeamView,
                                 offline_decision, stamped)
from lib.authority.store import AuthorityUnavailable
from lib.authority.sync import sync_ledger
from lib.gate.contracts import Decision, DecisionFacts, Request
from lib.gate.terms import InputError, utcnow
from lib.ledger.deciding import decide_with
from lib.ledger.recording import booked_reservation

# the admit's one statement: the version tested and moved on, the hold inserted only if it was current
CAS_HOLD_SQL = """
WITH bump AS (
  UPDATE training_gate.teams SET version = version + 1 WHERE team = %s AND version = %s RETURNING version)
""" + HOLD_SQL.replace("VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                       "SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s, %s FROM bump") + " RETURNING (SELECT version FROM bump)"
VERSION_SQL = "SELECT version FROM training_gate.teams WHERE team = %s"
RETRY_WAITS_S = (0.0, 0.2, 0.5)   # a broken connection is opened again after each wait, then given up
MAX_REREADS = 20
RETRY_AFTER_S = 1.0   # while the authority is away, each decision in between fails at once
DEADLINE_S = 2.5      # the longest one decision waits on the authority (see the module docstring)
CONNECT_S = 2         # libpq's connect_timeout for the server's connections (its least: 2 s)
ANSWER_BOUND_S = 2 * DEADLINE_S   # the longest a caller waits for its answer: its own DEADLINE_S and that
                                  # of the one decision in flight before it (most wait one, or none)




def deadline_s(environ=None) -> float:
    """The deadline of one decision on the authority, seconds: $GATE_AUTHORITY_DEADLINE_S when set (a
    number from 0.5 to 60: a site whose PostgreSQL answers slowly under load, or a test that bursts on
    a loaded machine), else DEADLINE_S. InputError for any other value."""
    text = (os.environ if environ is None else environ).get("GATE_AUTHORITY_DEADLINE_S")
    if text is None or not text.strip():
        return DEADLINE_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.5 <= value <= 60:
        raise InputError(f"GATE_AUTHORITY_DEADLINE_S must be a number of seconds from 0.5 to 60, got {text!r}")
    return value


class CachedFacts(AuthorityFacts):
    """AuthorityFacts over the server's cached views (read on first use, not locked)."""

    def __init__(self, shared: "ServedAuthority", local: DecisionFacts, run_id):
        super().__init__(None, local, shared.authority.cluster, lock=False)
        self.shared, self.run_id = shared, run_id
        self.used: str | None = None   # the team whose view the decision read

    def view(self, team: str) -> TeamView | None:
        got = self.shared.views.get(team)
        if got is None:
            row = self.shared.authority.connection().execute(TEAM_SQL, [team]).fetchone()
            got = TeamView(row) if row is not None else None
            if got is not None:
                self.shared.views[team] = got
        self.used = team
        return got

    def known_teams(self) -> list[str]:
        return [r[0] for r in self.shared.authority.connection().execute(
            "SELECT team FROM training_gate.teams ORDER BY team").fetchall()]


class ServedAuthority:
    """See the module docstring. Not thread-safe: the caller serialises (LiveGate's decision lock)."""

    def __init__(self, authority: Authority, log=None, *, deadline_s: float = DEADLINE_S):
        self.authority = authority
        self.deadline_s = deadline_s
        authority.bounds = {"connect_timeout_s": CONNECT_S, "statement_timeout_ms": int(deadline_s * 1000)}
        self.log = log or (lambda text: None)
        self.watchdog = Watchdog(lambda: self.authority._con)
        self.views: dict[str, TeamView] = {}
        self.offline: dict[str, dict] = {}   # run ID -> hold admitted while the authority was away
        self.away: str | None = None          # why it is away (None: reachable when last asked)
        self.away_since: float | None = None  # time.monotonic() when the outage began
        self.away_answered = 0                # decisions the failure policy answered during it
        self.retry_at = 0.0                   # while away, not asked again before this (time.monotonic)

    def _sql(self, fn):
        """fn(connection) with the connection opened again after a break (RETRY_WAITS_S), all within
        the deadline (see the module docstring)."""
        import psycopg  # here: see lib.authority.store.connect
        last = None
        end = time.monotonic() + self.deadline_s
        with self.watchdog.bounded(self.deadline_s):
            for wait in RETRY_WAITS_S:
                if last is not None and time.monotonic() + wait + CONNECT_S > end:
                    break   # no time left for another connection
                time.sleep(wait)
                try:
                    con = self.authority.connection()
                    if self.offline:
                        self._push_offline(con)
                    return fn(con)
                except AuthorityUnavailable as exc:
                    last = exc
                except psycopg.Error as exc:
                    last = self.authority._broken(exc)
                self.views.clear()
                if self.watchdog.fired:
                    break
        if self.watchdog.fired:
            self.authority.close()
            raise AuthorityUnavailable(f"the authority {self.authority!r} did not answer within {self.deadline_s:g} s")
        raise last

    def _gone(self, why: str) -> None:
        if self.away is None:
            self.away_since, self.away_answered = time.monotonic(), 0
            policy = ("refused" if self.authority.offline_share is None
                      else f"decided alone within an offline share of {self.authority.offline_share:g}")
            self.log(f"the authority is away: {why}; until it is back, decisions are {policy} "
                     f"(asked again at most every {RETRY_AFTER_S:g} s)")
        self.away = why
        self.away_answered += 1

    def _back(self) -> None:
        if self.away is not None:
            self.log(f"the authority is back after {time.monotonic() - self.away_since:.1f} s away "
                     f"({self.away_answered} decision(s) answered by the failure policy meanwhile)")
        self.away = self.away_since = None

    def _push_offline(self, con) -> None:
        """Write the holds admitted while away, each once (keyed by cluster and run ID)."""
        with con.transaction():
            for r in self.offline.values():
                con.execute(HOLD_SQL, [self.authority.cluster, r["run_id"], r["team"], r["kind"], r["gpus"],
                                       r["reserved_gpu_hours"], r["reserved_from"], r["reserved_until"],
                                       r["reserved_from"], True])
            for team in sorted({r["team"] for r in self.offline.values()}):
                con.execute(BUMP_SQL, [team])
        self.offline.clear()
        self.views.clear()

    def decide(self, request: Request, now: datetime, local: DecisionFacts, *, write: bool) -> Decision:
        """The decision against the authority (its hold written on admit when `write`), or, when it
        cannot be reached, the offline policy's (see the module docstring)."""
        run_id = request.get("run_id") if isinstance(request, dict) else None
        try:
            if self.away is not None and time.monotonic() < self.retry_at:
                raise AuthorityUnavailable(self.away)   # asked again after RETRY_AFTER_S, not by every caller
            decision = self._sql(lambda con: self._decide(request, now, local, run_id, write, con))
        except AuthorityUnavailable as exc:
            if self.away is None or time.monotonic() >= self.retry_at:
                self.retry_at = time.monotonic() + RETRY_AFTER_S
            self._gone(str(exc).split("; refused")[0])
            if self.authority.offline_share is None:
                raise AuthorityUnavailable(f"{exc}; refused: no decision is made without the authority "
                                           "(GATE_AUTHORITY_OFFLINE_SHARE is not set)") from None
            return self._offline(request, now, local, write, str(exc))
        self._back()
        return decision

    def _decide(self, request, now, local, run_id, write: bool, con) -> Decision:
        for _ in range(MAX_REREADS):
            facts = CachedFacts(self, local, run_id)
            decision, _ = decide_with(request, now, facts)
            decision = stamped(decision, self.authority.cluster)
            team = facts.used
            view = self.views.get(team) if team is not None else None
            if view is None or decision.get("replayed") is True:
                return decision  # the authority was not needed, or knows no such team (read just now)
            if write and decision["state"] == "admit":
                r = booked_reservation(request, decision, now)
                row = con.execute(CAS_HOLD_SQL, [team, view.version, self.authority.cluster, r["run_id"], r["team"],
                                                 r["kind"], r["gpus"], r["reserved_gpu_hours"], r["reserved_from"],
                                                 r["reserved_until"], now, False]).fetchone()
                if row is not None:
                    view.version = row[0]
                    view.holds = [h for h in view.holds if not (h["cluster"] == self.authority.cluster
                                                                and h["run_id"] == r["run_id"])]
                    view.holds.append({**r, "cluster": self.authority.cluster})
                    return decision
            else:
                row = con.execute(VERSION_SQL, [team]).fetchone()
                if row is not None and row[0] == view.version:
                    return decision
            self.views.pop(team, None)   # the team changed since it was read: read it again, decide again
        raise AuthorityUnavailable(f"team {team!r} changed {MAX_REREADS} times while one decision was taken")

    def _offline(self, request, now, local, write: bool, why: str) -> Decision:
        decision = offline_decision(request, now, local, self.authority, why)
        if write and decision["state"] == "admit" and decision.get("replayed") is not True:
            r = booked_reservation(request, decision, now)
            self.offline[r["run_id"]] = r
        return decision

    def sync_on_start(self, db, *, timeout_s: float, log) -> None:
        """The authority brought in line with the ledger `db` (lib.authority.sync: holds it lacks added,
        this cluster's holds no decision reached released); `log(text)` says what changed, or that it
        cannot be reached yet (decisions then follow the failure policy until it can)."""
        try:
            with self.watchdog.bounded(max(timeout_s, self.deadline_s) * 3):
                counts = sync_ledger(self.authority, db, now=utcnow(), timeout_s=timeout_s)
        except AuthorityUnavailable as exc:
            log(f"the authority cannot be reached yet ({exc}); decisions follow the failure policy until it can")
        else:
            if any(counts.values()):
                log(f"authority synced with {db}: {counts}")

    def release(self, run_id: str, now: datetime) -> None:
        """The answer of an admit never went out: its hold is released (or never written, if offline)."""
        if self.offline.pop(run_id, None) is not None:
            return
        try:
            self._sql(lambda con: _release(con, self.authority.cluster, run_id, now))
        except AuthorityUnavailable:
            pass  # the hold stays until its window ends or `authority sync`: over-reserved, never over-booked
        self.views.clear()


def _release(con, cluster: str, run_id: str, now: datetime) -> None:
    with con.transaction():
        row = con.execute("UPDATE training_gate.holds SET released_at = %s, released_why = 'unanswered' "
                          "WHERE cluster = %s AND run_id = %s AND released_at IS NULL RETURNING team",
                          [now, cluster, run_id]).fetchone()
        if row is not None:
            con.execute(BUMP_SQL, [row[0]])
