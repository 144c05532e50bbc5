"""The live state of one ledger, held by the warm gate server: decisions in memory, durable in a journal,
moved into the ledger in batches.

`LiveGate(db)` loads once what a decision reads (team policies, the reservations not ended, the run
IDs booked or run, the gate's line: lib.slurm.server_line) and, per team and kind on first use (a
thread reads them all ahead from the start: lib.slurm.warm), what `lib.ledger.state.team_state`
reads. It decides with the ledger's own `decide_with` and `heard_in_line` over those facts (it is the
facts object), so the answer is the one `python -m lib submit` would give; `decide_job` makes it the
Slurm judge's decider (lib.slurm.judge.JobDecider). A decision is appended to the journal
(lib.slurm.journal, fsync'ed, one fsync for decisions that arrive together) before anyone hears it;
a flusher thread moves answered decisions into the ledger every `flush_interval_s` seconds
(lib.ledger.batch: exactly once per journal entry), holding the ledger only for the batch.

Other writers (imports, finish, teams, a demo rebuild) change the ledger file. Before every decision
the gate compares the ledger's change stamp (lib.ledger.connection.change_stamp) with the one it last
saw and reloads when they differ, before deciding. While its own batch is written the stamp moves
because of that batch: a decision then waits until the batch, holding DuckDB's write lock, has
compared the stamp with the one last seen (a difference there was another writer's: reload). A
batch takes the stamp it leaves after an explicit CHECKPOINT, before it lets go of the file, so a
writer after it always moves the stamp. Per-team facts are dropped by every reload, and read again
after `FACTS_TTL_S` and when the month changes.

The cluster's windows (its Slurm reservations: lib.slurm.windows_sync) come from the ledger at each
reload; with `windows_interval_s` a thread reads them from Slurm at start and then every that many
seconds, off the decisions' lock, and a set that changed is written into the ledger as a batch is.

One LiveGate per ledger file: it holds the ledger's decider lock (lib.ledger.decider_lock) for its
lifetime; a second one raises ServerBusy naming the holder. Disk full: a decision whose journal
entry cannot be written is not made (JournalError); a mark that cannot be written is kept in memory
and written again by the flusher, and a batch that cannot be written waits in the journal: each
failure and its recovery is logged once.
"""
from __future__ import annotations

import sys
import threading
import time
from datetime import datetime
from typing import Callable

from lib.authority.facts import Authority
from lib.authority.serving import ServedAuthority, deadline_s
from lib.gate.contracts import CapacityWindow, Decision, Policy, Request, Reservation, State
from lib.gate.terms import finite_number, utcnow
from lib.ledger.batch import applied_through, apply_batch
from lib.ledger.booked_ids import load_booked
from lib.ledger.cluster_windows import read_windows
from lib.ledger.connection import LedgerError, change_stamp, ledger_path, open_ledger
from lib.ledger.decider_lock import ServerLock
from lib.ledger.deciding import LedgerFacts, decide_with, heard_in_line, policy_for
from lib.ledger.plan_inputs import read_queue
from lib.ledger.recording import booked_reservation, canonical_json
from lib.ledger.state import HELD_COLUMNS, held_reservation, held_row, pool_states, team_policy, team_state
from lib.ledger.writer import write_ledger
from lib.slurm.journal import ANSWERED, UNANSWERED, Journal, journal_path
from lib.slurm.live_windows import LiveWindows
from lib.slurm.server_line import ServerLine
from lib.slurm.warm import warm_facts
from lib.slurm.judge import Caller, Decided, Prepare
from lib.slurm.windows_sync import WindowWatch

FACTS_TTL_S = 300.0


def _log(text: str) -> None:
    print(f"lib.slurm.server: {text}", file=sys.stderr, flush=True)


class LiveGate(LiveWindows):
    """See the module docstring. Thread-safe: decisions are serialized; the flusher runs beside them."""

    def __init__(self, db=None, *, timeout_s: float = 5.0, flush_interval_s: float = 0.25,
                 journal_max_mb: float | None = None, journal_sync: str = "FULL", flusher: bool = True,
                 windows_interval_s: float | None = None, authority: Authority | None = None):
        self.db = ledger_path(db).resolve()
        # the shared authority, when the cluster names one (lib.authority.serving: one round trip a decision)
        self.shared = (ServedAuthority(authority.fresh(), _log, deadline_s=deadline_s())
                       if authority is not None else None)
        if not self.db.exists():
            raise LedgerError(f"ledger {self.db} does not exist")
        self.timeout_s, self.flush_interval_s = timeout_s, flush_interval_s
        self.window_watch = WindowWatch(_log, interval_s=windows_interval_s) if windows_interval_s else None
        self._lock = ServerLock(self.db)
        try:
            self._start(journal_max_mb, journal_sync, flusher)
        except BaseException:
            if getattr(self, "journal", None) is not None:
                self.journal.close()
            self._lock.release()
            raise

    def _start(self, journal_max_mb, journal_sync: str, flusher: bool) -> None:
        self.journal = None
        self.journal = Journal(journal_path(self.db), max_mb=journal_max_mb, sync=journal_sync)
        self._mu = self.decisions_turn = threading.Lock()   # the live state and the order of decisions
        self._ledger_mu = threading.Lock()   # this process opens the ledger once at a time
        self._flush_mu = threading.Lock()
        self._batch = threading.Condition()  # a batch's progress, for decisions waiting on it
        self._writing = False                # a batch holds (or waits for) the ledger
        self._checked = False                # ... and has compared the stamp with the one last seen
        self._marks: dict[int, int] = {}     # journal seq -> mark not written yet (a full disk)
        self._failing: dict[str, str] = {}   # what fails now (journal marks, batches) -> the error logged
        self._stop = threading.Event()
        self.applied = 0
        self._sig = None
        self._stale = True
        self.flush_error: str | None = None
        self._inflight: dict[int, str] = {}  # journal seq -> run ID of an admit not yet settled
        self._unsettled: set[int] = set()    # journal seqs whose answer is on its way
        try:
            unsure = self.journal.settle_left_over()
        except Exception as exc:  # a full disk: taken as answered in memory, written when there is room
            unsure = self.journal.left_over()
            self._marks.update({seq: ANSWERED for seq in unsure})
            self._trouble("marks", exc)
        if unsure:
            _log(f"{len(unsure)} decision(s) of a stopped server may not have reached their caller; recorded "
                 f"as answered (journal entries {unsure[:10]})")
        try:
            self.flush()  # what a stopped server answered but did not move into the ledger
        except Exception as exc:  # a full disk: the decisions wait in the journal and count in memory
            self._trouble("batch", exc)
        with self._mu:
            self._reload()   # per-team facts: on first need, and warmed by a thread (lib.slurm.warm)
        if self.shared is not None:  # once the journal is in the ledger
            self.shared.sync_on_start(self.db, timeout_s=self.timeout_s, log=_log)
        self._thread = None
        if flusher:
            self._thread = threading.Thread(target=self._flush_loop, name="gate-flusher", daemon=True)
            self._thread.start()
        threading.Thread(target=warm_facts, args=(self,), name="gate-warm", daemon=True).start()
        self._windows_thread = None
        self._windows_written: list[CapacityWindow] | None = None  # the set this gate last wrote
        if self.window_watch is not None:
            self._windows_thread = threading.Thread(target=self._windows_loop, name="gate-windows", daemon=True)
            self._windows_thread.start()

    # ------------------------------------------------------------------ the ledger's file, reloading

    def _reload(self, now: datetime | None = None) -> None:
        """Read the ledger's facts afresh, then add the journal's decisions it does not have yet.
        Holds the ledger lock throughout, so no batch lands between the two reads. Per-team facts:
        each on its first use (a reload after another writer's change then costs tens of ms, not one
        team_state per team and kind), and at start read ahead by lib.slurm.warm."""
        with self._ledger_mu:
            self._lock.follow()
            with open_ledger(self.db, read_only=True, timeout_s=self.timeout_s) as con:
                sig = self._stamp()
                teams = [r[0] for r in con.execute("SELECT team FROM teams ORDER BY team").fetchall()]
                policies = {t: team_policy(con, t) for t in teams}
                rows = con.execute(
                    f"SELECT {HELD_COLUMNS}, r.started_at IS NOT NULL FROM runs r "
                    "WHERE r.reserved_gpu_hours IS NOT NULL AND r.ended_at IS NULL").fetchall()
                booked = load_booked(con)
                windows = read_windows(con, utcnow())
                applied = applied_through(con, self.journal.journal_id)
                waiting, _ = read_queue(con, now or utcnow())
            pending = [e for e in self.journal.pending(applied) if self._marks.get(e["seq"]) != UNANSWERED]
            self._sig, self._stale, self.applied = sig, False, applied
        self.policies: dict[str, Policy] = policies
        # every admitted run without an end, as HELD_COLUMNS rows: what holds at a time is
        # lib.ledger.state.held_reservation's to say, as for the ledger's readers
        self.held: dict[str, tuple] = {r[0]: r[:-1] for r in rows}
        self.started = {r[0] for r in rows if r[-1]}
        self.ledger_windows: list[CapacityWindow] = windows
        self.booked_in_ledger = booked       # the run IDs the ledger has booked, hashed (see `booked`)
        self.booked_ids: set[str] = set()     # booked by this server since
        self.admits: dict[str, tuple[str, Decision, datetime]] = {}  # run_id -> admit not yet read from the ledger
        self._team_facts: dict = {}
        self.line = ServerLine(waiting)      # the gate's line, kept current by `_remember` and `settle`
        for e in pending:
            self._remember(e["request"], e["decision"], e["decided_at"], e["seq"])
        self.loaded_at = time.monotonic()

    def _refresh(self, now: datetime) -> None:
        """Reload when another process changed the ledger since the state was read (see the module
        docstring): a decision never starts on state older than the ledger's last commit."""
        if not self._stale and self._stamp() == self._sig:
            return
        if not self._stale:
            with self._batch:
                while self._writing and not self._checked:
                    if not self._batch.wait(self.timeout_s):
                        break
                ours = self._writing and self._checked
            # the stamp moved because our own batch is being written (checked: no one else wrote
            # before it took the file), or it has just finished and left its stamp
            if not self._stale and (ours or self._stamp() == self._sig):
                return
        self._reload(now)

    # ------------------------------------------------------------------ the facts decide_with reads

    def policy(self, team: str) -> Policy | None:
        return self.policies.get(team)

    def known_teams(self) -> list[str]:
        return sorted(self.policies)

    def booked(self, run_id) -> bool:
        """A run ID booked since the load, or one whose hash the ledger's booked run IDs have and the
        ledger confirms (lib.ledger.booked_ids: 8 bytes of hash a run, quick to load, instead of a set of
        strings)."""
        if run_id in self.booked_ids:
            return True
        if type(run_id) is not str or not self.booked_in_ledger.maybe(run_id):
            return False
        with self._ledger_mu, open_ledger(self.db, read_only=True, timeout_s=self.timeout_s) as con:
            return LedgerFacts(con).booked(run_id)

    def recorded_admit(self, request, now: datetime) -> dict | None:
        run_id = request.get("run_id")
        r = self.held.get(run_id)
        if r is None or run_id in self.started or (r[6] is not None and r[6] <= now):   # r[6]: reserved_until
            return None
        if run_id in self.admits:
            canon, decision, at = self.admits[run_id]
            if canon != canonical_json(request):
                return None
            return {**decision, "replayed": True, "recorded_at": at.isoformat()}
        with self._ledger_mu, open_ledger(self.db, read_only=True, timeout_s=self.timeout_s) as con:
            return LedgerFacts(con).recorded_admit(request, now)

    def state(self, team: str, now: datetime, kind: str | None, capacity: str | None = None) -> State:
        facts = self.team_facts(team, kind, now)
        pools = facts.get("pools")
        held = self.held_at(now, None if pools else team)
        state = {**facts, "now": now, "reservations": [r for r in held if r["team"] == team] if pools else held}
        if pools:   # the pools' sizes as read with the facts; every team's reservations as held now, and
            # the cluster's windows as Slurm last gave them
            state["pools"] = pool_states({n: p["gpus"] for n, p in pools.items()}, held, self.capacity_windows(now))
        return state

    def held_at(self, now: datetime, team: str | None = None) -> list[Reservation]:
        """The reservations held at `now` (of `team`; None: every team's), in run-ID order, as
        lib.ledger.state.held_reservations reads them (an overrun's expected end from its calibration)."""
        def upper(t: str, k: str) -> float | None:
            return (self.team_facts(t, k, now).get("calibration") or {}).get("upper_factor")
        return sorted((h for h in (held_reservation(r, now, upper) for r in self.held.values()
                                   if team is None or r[1] == team) if h is not None), key=lambda r: r["run_id"])

    def team_facts(self, team: str, kind: str | None, now: datetime) -> dict:
        """What team_state reads besides the reservations (loaded with the rest; read again after
        FACTS_TTL_S seconds, or in a new month)."""
        key = (team, kind)
        got = self._team_facts.get(key)
        if got is None or time.monotonic() - got[0] > FACTS_TTL_S or got[1] != (now.year, now.month):
            with self._ledger_mu, open_ledger(self.db, read_only=True, timeout_s=self.timeout_s) as con:
                got = self._read_facts(con, team, kind, now)
            self._team_facts[key] = got
        return got[2]

    @staticmethod
    def _read_facts(con, team: str, kind: str | None, now: datetime):
        st = team_state(con, team, now, kind=kind)
        st.pop("reservations")
        st.pop("now")
        return time.monotonic(), (now.year, now.month), st

    # ------------------------------------------------------------------ deciding

    def decide(self, request: Request, *, now: datetime, origin: str, write: bool,
               caller: tuple[int | None, int | None] = (None, None),
               actor: str | None = None, admit_only: bool = False, extra: dict | None = None,
               guard: Callable[[], bool] | None = None) -> tuple[Decision | None, int | None]:
        """(decision, journal seq) for the request. write=False is the what-if (nothing journaled).
        `caller`: the socket peer's (uid, pid); `actor`: who asked, when the peer relays someone else
        (a Slurm job's user), else the peer's user is recorded.
        A written decision is durable before this returns (JournalError otherwise: not decided);
        the caller must `settle(seq, answered)` once it knows whether the answer went out.
        The queue's admit (lib.slurm.queue_keeper) asks, as lib.ledger.deciding.submit_request does:
        `guard()` first, on the refreshed state under the decisions' turn (False: (None, None),
        nothing decided), `admit_only` (a deferral is answered, not journaled) and `extra` (keys added
        to the decision before it is journaled)."""
        with self._mu:
            self._refresh(now)
            if guard is not None and not guard():
                return None, None
            if self.shared is None:   # the line as the in-process deciders hear it, from memory
                decision, policy = decide_with(request, now, self)
                decision = heard_in_line(lambda needed: self.line.inputs(self, request, now, needed), self, request,
                                         decision, policy, now, turn_of=self.line.turn)
            else:  # the authority's hold is written first (see lib.authority.serving)
                decision = self.shared.decide(request, now, self, write=write)
            if extra and not decision.get("replayed"):
                decision = {**decision, **extra}
            if not write or decision.get("replayed") is True or (admit_only and decision["state"] != "admit"):
                return decision, None
            try:
                seq = self.journal.append(
                    decided_at=now, origin=origin, request_json=canonical_json(request),
                    decision_json=canonical_json(decision), state=decision["state"], caller_uid=caller[0],
                    caller_pid=caller[1], actor=actor, durable=False)
            except Exception:
                if self.shared is not None and decision["state"] == "admit":
                    self.shared.release(decision["run_id"], now)  # not decided after all
                raise
            self._remember(request, decision, now, seq)
            self._unsettled.add(seq)
        # group commit: the fsync outside the decision lock, shared with the decisions taken meanwhile
        try:
            self.journal.make_durable(seq)
        except Exception:
            self.settle(seq, answered=False)   # never answered: undone here and in the authority
            raise
        return decision, seq

    def decide_job(self, request: Request, *, now: datetime, prepare: Prepare, actor: str | None = None,
                   caller: Caller = (None, None)) -> Decided:
        """lib.slurm.judge.JobDecider.decide_job: the request completed from the team's policy held
        here, decided and journaled (origin "slurm"); the caller settles `Decided.seq`."""
        policy = policy_for(request, self)
        request = prepare(request, policy)
        decision, seq = self.decide(request, now=now, origin="slurm", write=True, caller=caller, actor=actor)
        return Decided(decision, request, policy, seq)

    def _remember(self, request, decision, decided_at: datetime, seq: int) -> None:
        self.line.decided(request, decision, self.policies.get(request.get("team")), decided_at, seq)
        if decision.get("state") != "admit":
            return
        r = booked_reservation(request, decision, decided_at)
        self.held[r["run_id"]] = held_row(r, r["reserved_from"], finite_number((decision["estimate"] or {}).get(
            "raw_gpu_hours")), finite_number(request["max_runtime_hours"]))   # as record_decision books it
        self.booked_ids.add(r["run_id"])
        self.admits[r["run_id"]] = (canonical_json(request), decision, decided_at)
        self._inflight[seq] = r["run_id"]

    def settle(self, seq: int | None, answered: bool) -> None:
        """The answer of journal entry `seq` went out (or not: then the decision is undone)."""
        if seq is None:
            return
        status = ANSWERED if answered else UNANSWERED
        try:
            self.journal.settle(seq, status)
        except Exception as exc:  # a full disk: keep the mark here, the flusher writes it later
            self._marks[seq] = status
            self._trouble("marks", exc)
        with self._mu:
            self._unsettled.discard(seq)
            self.line.settled(seq, answered)
            run_id = self._inflight.pop(seq, None)
            if not answered and run_id is not None:
                if self.shared is not None:
                    self.shared.release(run_id, utcnow())
                self.held.pop(run_id, None)
                self.booked_ids.discard(run_id)
                self.admits.pop(run_id, None)

    # ------------------------------------------------------------------ moving decisions into the ledger

    def flush(self) -> int:
        """Move the settled journal entries into the ledger (one transaction); how many decisions."""
        with self._flush_mu:
            self._write_marks()
            entries = self.journal.settled(self.applied, marks=self._marks)
            if not entries:
                return 0
            with self._ledger_mu:
                self._batch_state(writing=True, checked=False)
                try:
                    with write_ledger(self.db, self.timeout_s) as con:
                        if self._stamp() != self._sig:
                            self._stale = True  # someone else wrote since we looked: reload
                        self._batch_state(writing=True, checked=True)
                        n = apply_batch(con, self.journal.journal_id, entries)
                        con.execute("CHECKPOINT")  # so closing changes nothing after the stamp
                        self._sig = self._stamp()
                        # done before the file is let go: a writer that takes it next is not ours
                        self._batch_state(writing=False, checked=False)
                finally:
                    self._batch_state(writing=False, checked=False)
                self.applied = entries[-1]["seq"]
                self.journal.forget_through(self.applied)
            return n

    def _stamp(self) -> tuple:
        return change_stamp(self.db, self._lock.fd)

    def _batch_state(self, *, writing: bool, checked: bool) -> None:
        with self._batch:
            self._writing, self._checked = writing, checked
            self._batch.notify_all()

    def flush_answered(self, wait_s: float = 10.0) -> int:
        """`flush` once every decision already answered (or going out now) is noted as such, so a
        caller that has its answer finds its decision in the ledger afterwards."""
        deadline = time.monotonic() + wait_s
        with self._mu:
            waiting = set(self._unsettled)
        while time.monotonic() < deadline:
            with self._mu:
                if not waiting & self._unsettled:
                    break
            time.sleep(0.002)
        return self.flush()

    def drain(self, wait_s: float = 10.0) -> tuple[int, int]:
        """`flush_answered`, then batch after batch until every decision journaled when it was called
        is in the ledger (later ones are left to the flusher, so a busy server's drain ends):
        (decisions moved into the ledger, of those journaled by then the entries left: decisions
        whose answer is still on its way, or that a failing ledger kept). Raises what a failing batch
        raised."""
        target = self.journal.last_seq()
        moved = self.flush_answered(wait_s)
        while self.applied < target:
            before = self.applied
            moved += self.flush()
            if self.applied == before:
                break
        return moved, self.journal.count(through=target)

    def _write_marks(self) -> None:
        """Write the marks a full disk kept in memory (see settle); log when they are all written."""
        for seq, status in sorted(self._marks.items()):
            try:
                self.journal.settle(seq, status)
            except Exception as exc:
                self._trouble("marks", exc)
                return
            self._marks.pop(seq, None)
        self._recovered("marks", "every answered / unanswered mark is written to the journal again")

    def _trouble(self, what: str, exc: Exception) -> None:
        """Log a failure of `what` once, until it recovers."""
        text = f"{type(exc).__name__}: {exc}"
        if what not in self._failing and what == "windows":
            _log(f"cannot write the cluster's windows into {self.db} ({text}); decisions use them from "
                 f"memory, and it is tried again every {self.window_watch.interval_s:g} s")
        elif what not in self._failing:
            doing = {"marks": "write to its journal", "batch": f"move decisions into {self.db}"}[what]
            _log(f"cannot {doing} ({text}); the decisions are kept and counted, and it is tried again "
                 f"every {self.flush_interval_s:g} s")
        self._failing[what] = text
        if what == "batch":
            self.flush_error = text

    def _recovered(self, what: str, detail: str) -> None:
        if self._failing.pop(what, None) is not None:
            _log(f"recovered: {detail}")
        if what == "batch":
            self.flush_error = None

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            try:
                n = self.flush()
            except Exception as exc:  # a locked ledger, a full disk: the decisions wait in the journal
                self._trouble("batch", exc)
            else:
                self._recovered("batch", f"decisions move into {self.db} again ({n} in this batch)")

    def close(self) -> int:
        """Stop: the journal drained into the ledger (`drain`); how many entries stay in it."""
        self._stop.set()
        if self.window_watch is not None:
            self.window_watch.stop()  # a scontrol under way ends now
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._ledger_mu:  # a windows write under way ends first; none starts after (_stop)
            pass
        try:
            moved, left = self.drain()  # answers on their way get their note first
        except Exception as exc:
            left = self.journal.count()
            _log(f"on stop: {type(exc).__name__}: {exc}: {left} decision(s) stay in the journal "
                 f"{self.journal.path} for the next start")
        else:
            _log(f"on stop: moved {moved} decision(s) into {self.db}"
                 + (f"; {left} stay in the journal for the next start" if left else ""))
        self.journal.close()
        if self.shared is not None:
            self.shared.authority.close()
        self._lock.release()
        return left

