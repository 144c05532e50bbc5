"""Deciding against the shared authority: `AuthorityFacts`, the `DecisionFacts` (lib.gate.contracts)
of one PostgreSQL transaction, and `Authority`, what a decider (lib.ledger.deciding.submit_request,
check_request; finish and recover) is handed when a cluster names one.

What is shared is small and read from PostgreSQL: the team's policy, the reservations every cluster
holds for it, and its month's spend, read with the team's row locked (`SELECT ... FOR UPDATE`), so
the deciders of one team, on any cluster, take turns (the lock is taken in a statement before the
read: see `AuthorityFacts.view`). What stays with the cluster is read from its
own ledger through the local facts object (a `LedgerFacts`, or the gate server's live state): booked
run IDs and recorded admits (run IDs are a cluster's own), snapshots, calibration and the
interruption rate.

A hold is recorded in the same PostgreSQL transaction before the answer, keyed (cluster, run ID); the
local ledger records the decision after that commit. Should the process die between the two, the
authority holds a reservation no ledger has: the team's quota is over-reserved (never over-booked)
until the hold's window ends, or until `python -m lib authority sync` on that cluster releases holds
its ledger does not know, or the run ID is submitted again (its hold is replaced, not added to).
"""
from __future__ import annotations

import json
import math
from contextlib import contextmanager
from datetime import datetime
from typing import Callable

from lib.authority.store import AuthorityUnavailable, connect
from lib.authority.url import check_cluster, check_url, redact, shown_authority
from lib.gate.contracts import Decision, DecisionFacts, Policy, Request, State
from lib.gate.terms import naive_utc
from lib.ledger.deciding import decide_with, policy_for
from lib.ledger.recording import booked_reservation

# one statement, one round trip: the team's policy and version, its holds not released, and its
# spend per month (a decision may be asked about any month: `check --now`)
TEAM_SQL = """
SELECT t.policy, t.version,
  (SELECT coalesce(json_agg(json_build_array(h.cluster, h.run_id, h.kind, h.gpus, h.reserved_gpu_hours,
                                             h.reserved_from, h.reserved_until)), '[]')
     FROM training_gate.holds h WHERE h.team = t.team AND h.released_at IS NULL),
  (SELECT coalesce(json_agg(json_build_array(m.y, m.mo, m.spent)), '[]') FROM (
     SELECT extract(year FROM ended_at)::int AS y, extract(month FROM ended_at)::int AS mo,
            sum(gpu_hours) AS spent
       FROM training_gate.spend s WHERE s.team = t.team GROUP BY 1, 2) m)
FROM training_gate.teams t WHERE t.team = %s"""

LOCK_SQL = "SELECT 1 FROM training_gate.teams WHERE team = %s FOR UPDATE"

HOLD_SQL = """
INSERT INTO training_gate.holds (cluster, run_id, team, kind, gpus, reserved_gpu_hours, reserved_from,
                                 reserved_until, held_at, offline)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (cluster, run_id) DO UPDATE SET team = excluded.team, kind = excluded.kind,
  gpus = excluded.gpus, reserved_gpu_hours = excluded.reserved_gpu_hours,
  reserved_from = excluded.reserved_from, reserved_until = excluded.reserved_until,
  held_at = excluded.held_at, offline = excluded.offline, released_at = NULL, released_why = NULL"""

BUMP_SQL = "UPDATE training_gate.teams SET version = version + 1 WHERE team = %s"


class TeamView:
    """What the authority holds for one team, as read in one statement (see TEAM_SQL)."""

    def __init__(self, row):
        policy, self.version, holds, spend = row
        self.policy: Policy = {**policy, "preemptible_partitions": list(policy.get("preemptible_partitions") or [])}
        self.holds = [{"cluster": c, "run_id": r, "team": policy["team"], "kind": k, "gpus": int(g),
                       "reserved_gpu_hours": float(h), "reserved_from": _time(f), "reserved_until": _time(u)}
                      for c, r, k, g, h, f, u in (holds if isinstance(holds, list) else json.loads(holds))]
        self.spend = {(int(y), int(mo)): float(s)
                      for y, mo, s in (spend if isinstance(spend, list) else json.loads(spend))}

    def reservations(self, now: datetime, *, cluster: str, run_id=None) -> list[dict]:
        """The holds that count at `now`, every cluster's, ordered by run ID then cluster; a hold of
        this very run on this cluster is left out (a retry after a lost answer must not count itself).
        A hold counts until it is released (its run's end, from `finish`, the epilog or a sync) if its
        window has begun by `now` (a started run holds until it ends, as in a ledger:
        lib.ledger.state.held_condition), else until its window passes. One past its planned end is
        shown with no known end (reserved_until None): the authority does not know its estimate."""
        held = []
        for h in self.holds:
            if h["cluster"] == cluster and h["run_id"] == run_id:
                continue
            until, start = h["reserved_until"], h["reserved_from"]
            if until is None or until > now:
                held.append(h)
            elif start is not None and start <= now:
                held.append({**h, "reserved_until": None})
        return sorted(held, key=lambda h: (h["run_id"], h["cluster"]))

    def spent(self, now: datetime) -> float:
        return self.spend.get((now.year, now.month), 0.0)


def _time(text):
    return None if text is None else naive_utc(datetime.fromisoformat(text))


class AuthorityFacts:
    """`DecisionFacts` whose shared part comes from the authority inside one transaction on `con`
    (the team's row locked when `lock`), the rest from `local`."""

    def __init__(self, con, local: DecisionFacts, cluster: str, *, lock: bool = True):
        self.con, self.local, self.cluster, self.lock = con, local, cluster, lock
        self.teams: dict[str, TeamView | None] = {}
        self.run_id = None  # the run being decided (see TeamView.reservations)

    def view(self, team: str) -> TeamView | None:
        if team not in self.teams:
            if self.lock:
                # the lock first, the read in a statement of its own: under READ COMMITTED a statement
                # reads as of its start, so a read in the locking statement itself could miss the
                # holds committed by the decider it waited for. Sent together (one round trip).
                with self.con.pipeline():
                    self.con.execute(LOCK_SQL, [team])
                    cur = self.con.execute(TEAM_SQL, [team])
                row = cur.fetchone()
            else:
                row = self.con.execute(TEAM_SQL, [team]).fetchone()
            self.teams[team] = TeamView(row) if row is not None else None
        return self.teams[team]

    def policy(self, team: str) -> Policy | None:
        got = self.view(team) if type(team) is str else None
        return got.policy if got is not None else None

    def known_teams(self) -> list[str]:
        return [r[0] for r in self.con.execute("SELECT team FROM training_gate.teams ORDER BY team").fetchall()]

    def booked(self, run_id) -> bool:
        return self.local.booked(run_id)

    def recorded_admit(self, request: Request, now: datetime) -> Decision | None:
        return self.local.recorded_admit(request, now)

    def state(self, team: str, now: datetime, kind: str | None, capacity: str | None = None) -> State:
        st = self.local.state(team, now, kind, capacity)
        got = self.view(team)
        if got is not None:
            st["reservations"] = got.reservations(now, cluster=self.cluster, run_id=self.run_id)
            st["period_spent_gpu_hours"] = got.spent(now)
        return st

    def hold(self, request: Request, decision: Decision, now: datetime, *, offline: bool = False) -> None:
        """Record the admit's hold (in this transaction) and move the team's version on."""
        r = booked_reservation(request, decision, now)
        self.con.execute(HOLD_SQL, [self.cluster, r["run_id"], r["team"], r["kind"], r["gpus"],
                                    r["reserved_gpu_hours"], r["reserved_from"], r["reserved_until"], now, offline])
        self.con.execute(BUMP_SQL, [r["team"]])


class ScaledFacts:
    """The local facts with each team's quota and month budget scaled to this cluster's share."""

    def __init__(self, local: DecisionFacts, share: float):
        self.local, self.share = local, share

    def policy(self, team: str) -> Policy | None:
        p = self.local.policy(team)
        if p is None:
            return None
        reserved = math.floor(p["reserved_gpus"] * self.share)
        return {**p, "reserved_gpus": reserved,
                "retraining_reserved_gpus": min(reserved, math.floor(p["retraining_reserved_gpus"] * self.share)),
                "monthly_budget_gpu_hours": p["monthly_budget_gpu_hours"] * self.share}

    def __getattr__(self, name):  # known_teams, booked, recorded_admit, state: the local ones
        return getattr(self.local, name)


def offline_decision(request: Request, now: datetime, local: DecisionFacts, authority: "Authority",
                     why: str) -> Decision:
    """The decision taken without the authority, within this cluster's `offline_share` of each team's
    quota and month budget over its own ledger's holds and spend (lib.authority.serving says when),
    marked "authority": "offline" with a note saying why."""
    share = authority.offline_share
    decision, _ = decide_with(request, now, ScaledFacts(local, share))
    if decision.get("replayed") is True:
        return decision
    return {**stamped(decision, authority.cluster), "authority": "offline",
            "notes": [*decision.get("notes", []), f"decided without the authority ({why}): within this "
                      f"cluster's share {share:g} of the team's quota and month budget"]}


def stamped(decision: Decision, cluster: str) -> Decision:
    """The decision with the cluster that made it (a replayed one is returned as recorded)."""
    if decision.get("replayed") is True or decision.get("cluster") == cluster:
        return decision
    return {**decision, "cluster": cluster}


class Authority:
    """The shared authority as a decider uses it: one connection, opened on first use and again
    after it broke. Not thread-safe (the gate server serialises its decisions)."""

    def __init__(self, url: str, cluster: str, *, offline_share: float | None = None):
        self.url, self.cluster = check_url(url), check_cluster(cluster)
        self.offline_share = offline_share  # None: refuse when unreachable (lib.authority.serving)
        self.bounds: dict = {}   # lib.authority.store.connect's connect_timeout_s, statement_timeout_ms
        self._con = None

    def __repr__(self) -> str:
        return f"Authority({shown_authority(self.url)!r}, cluster={self.cluster!r})"

    def fresh(self) -> "Authority":
        """An Authority of the same settings with a connection of its own (one per thread of use)."""
        return Authority(self.url, self.cluster, offline_share=self.offline_share)

    def connection(self):
        if self._con is None or self._con.closed:
            self._con = connect(self.url, cluster=self.cluster, **self.bounds)
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def _broken(self, exc: Exception) -> AuthorityUnavailable:
        self.close()
        text = redact(" ".join(str(exc).split()), self.url) or type(exc).__name__
        return AuthorityUnavailable(f"the authority {shown_authority(self.url)} broke off: {text}")

    @contextmanager
    def transaction(self, *, write: bool = True):
        """A transaction on the authority; psycopg's errors leave as AuthorityUnavailable (redacted)."""
        import psycopg  # here: see lib.authority.store.connect
        con = self.connection()
        try:
            with con.transaction():
                yield con
                if not write:
                    raise _ReadOnly
        except _ReadOnly:
            pass
        except psycopg.Error as exc:
            raise self._broken(exc) from None

    def decide(self, request: Request, now: datetime, local: DecisionFacts, *, write: bool = True,
               prepare: Callable[[Request, Policy | None], Request] | None = None) -> tuple[Request, Decision]:
        """(request, decision) decided against the authority and `local`, the hold recorded on admit
        when `write` (committed before this returns). A connection that broke is opened again and
        the decision taken again, once: the hold is keyed by (cluster, run ID), so a commit whose
        answer was lost is replaced, never added to."""
        for attempt in (1, 2):
            try:
                with self.transaction(write=write) as con:
                    facts = AuthorityFacts(con, local, self.cluster, lock=write)
                    facts.run_id = request.get("run_id") if isinstance(request, dict) else None
                    req = prepare(request, policy_for(request, facts)) if prepare is not None else request
                    decision, _ = decide_with(req, now, facts)
                    decision = stamped(decision, self.cluster)
                    if write and decision["state"] == "admit" and decision.get("replayed") is not True:
                        facts.hold(req, decision, now)
                return req, decision
            except AuthorityUnavailable as exc:
                if attempt == 2:
                    if self.offline_share is None:
                        raise AuthorityUnavailable(f"{exc}; refused: no decision is made without the authority "
                                                   "(GATE_AUTHORITY_OFFLINE_SHARE is not set)") from None
                    # decided alone: the ledger records it; `authority sync` (or a gate server's start)
                    # writes its hold to the authority once it answers again
                    req = prepare(request, policy_for(request, local)) if prepare is not None else request
                    return req, offline_decision(req, now, local, self, str(exc))

    def finished(self, run_id: str, team: str, ended_at: datetime, gpu_hours: float, why: str, now: datetime) -> None:
        """A run of this cluster ended (`why`: finish, recover-end): its hold released and its spend
        recorded, in one statement (so no decider sees neither or both)."""
        sql = """
WITH released AS (
  UPDATE training_gate.holds SET released_at = %(now)s, released_why = %(why)s
   WHERE cluster = %(cluster)s AND run_id = %(run_id)s AND released_at IS NULL RETURNING 1),
spent AS (
  INSERT INTO training_gate.spend (cluster, run_id, team, ended_at, gpu_hours, recorded_at)
  VALUES (%(cluster)s, %(run_id)s, %(team)s, %(ended_at)s, %(gpu_hours)s, %(now)s)
  ON CONFLICT (cluster, run_id) DO UPDATE SET team = excluded.team, ended_at = excluded.ended_at,
    gpu_hours = excluded.gpu_hours, recorded_at = excluded.recorded_at RETURNING 1)
UPDATE training_gate.teams SET version = version + 1 WHERE team = %(team)s"""
        args = {"now": now, "why": why, "cluster": self.cluster, "run_id": run_id, "team": team,
                "ended_at": ended_at, "gpu_hours": float(gpu_hours)}
        for attempt in (1, 2):
            try:
                with self.transaction() as con:
                    con.execute(sql, args)
                return
            except AuthorityUnavailable:
                if attempt == 2:
                    raise


class _ReadOnly(Exception):
    """Leaves a read-only transaction by rolling it back."""
