"""The gate server's queue keeper: held Slurm jobs released when the gate admits them.

One keeper a ledger served (lib.slurm.server starts it with the ledger's LiveGate). Every
`interval_s` seconds (TG_QUEUE_INTERVAL_S / --queue-interval-s, default 30; 0: never), and soon
after another process wrote the ledger (an epilog, `finish`, an import), one pass:

1. the journal moved into the ledger (every answered decision is in the line);
2. with TG_ON_DEFER=hold (the server's environment; default): the expiry of every request that
   waited past its team's queue age recorded (lib.ledger.queue.expire_waiting), then every request
   whose turn has come (lib.ledger.queue.due_turns) - but a Slurm job's whose sbatch was refused
   (no held job: it waits for its expiry) - decided again by the LiveGate itself - on its
   live facts, journaled, then moved into the ledger, so its holdings stay exact - with actor
   `gate-queue` and the request's `waiting_since`, only an admit journaled, and only while the
   request still waits (the guard, under the decisions' turn);
3. Slurm's pending jobs read (`squeue --json`) and reconciled (lib.slurm.holds.reconcile_holds): a held job
   whose run is admitted is released (`scontrol release`) with its time limit lowered as for any
   admit (lib.slurm.limits.admitted_time_limit) and its begin time set to now; a waiting one gets
   its admin comment and begin time (`StartTime`, what `squeue --start` shows) set to the plan's
   place and planned start; one whose request left the line (expired, cancelled) is cancelled with
   the reason; a held run whose job left Slurm's queue (the user's scancel) is taken out of the
   line as `python -m lib cancel` does (code `cancelled`, actor `slurm:<user>`).

A release is idempotent: only a job still held whose run the ledger (or the journal) has admitted
is released, so a restarted server releases each job once and forgets none (it reads Slurm's queue
at its first pass). The ledger is opened only under the LiveGate's ledger lock (one open at a time
in the process). Slurm not answering is logged once and tried again at the next pass.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from datetime import datetime, timedelta

from lib.gate.terms import naive_utc, utcnow
from lib.ledger.connection import open_ledger
from lib.ledger.queue import QUEUE_ACTOR, cancel_all_waiting, due_turns, expire_waiting, left_line, queue_line, still_waiting
from lib.slurm.holds import Actions, PendingJob, gate_tag, pending_jobs, reconcile_holds
from lib.slurm.limits import admitted_time_limit
from lib.slurm.reservations import run_slurm

QUEUE_INTERVAL_S = 30.0
PLAN_DAYS = 14          # how far the line's planned starts are looked for
ADOPT_DELAY_S = 0.5    # after a held answer, before the keeper looks for the job in Slurm's queue
WAKE_CHECK_S = 1.0      # how often the keeper looks whether another process wrote the ledger
SLURM_TIMEOUT_S = 20.0
MAX_UPDATES = 50        # held jobs' admin comments and begin times updated a pass: each is one `scontrol
                        # update` under slurmctld's job write lock, which sbatch needs too


def _log(text: str) -> None:
    print(f"lib.slurm.server: queue: {text}", file=sys.stderr, flush=True)


def on_defer_setting(env=None) -> str:
    """TG_ON_DEFER: "refuse" keeps refusing deferred jobs; anything else (default) holds them."""
    env = os.environ if env is None else env
    return "refuse" if (env.get("TG_ON_DEFER") or "").strip() == "refuse" else "hold"


class QueueKeeper:
    """See the module docstring. `live`: the ledger's lib.slurm.live.LiveGate."""

    def __init__(self, live, *, interval_s: float = QUEUE_INTERVAL_S, on_defer: str = "hold",
                 run=run_slurm):
        self.live, self.interval_s, self.on_defer, self.run = live, interval_s, on_defer, run
        self.tag = gate_tag(live.db)
        self.watched: dict[str, datetime] = {}   # run ID -> when its job was held (or first seen held)
        self.released: list[str] = []            # job IDs released by this process, in order
        self.seen: set[str] = set()               # watched run IDs whose job a pass saw pending
        self._mu = threading.Lock()               # one pass at a time
        self._wake = threading.Event()
        self._adopt = threading.Event()           # a job was held at submission: adopt it soon
        self._to_adopt: set[str] = set()          # ... these runs' jobs
        self._stop = threading.Event()
        self._failing: str | None = None
        self._thread = None

    def start(self) -> None:
        if self.interval_s and self.interval_s > 0:
            self._thread = threading.Thread(target=self._loop, name="gate-queue", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def held(self, run_id: str, now: datetime) -> None:
        """The server answered a job held: watch its run from now on, and make its hold an admin
        hold soon (`adopt`)."""
        with self._mu:
            self.watched.setdefault(run_id, now)
            self._to_adopt.add(run_id)
        self._adopt.set()
        self._wake.set()

    def adopt(self) -> list[str]:
        """Make the hold of every job held at submission since the last adopt (JobHeldUser, named
        after its run by the hook) an admin hold now; the job IDs. One light squeue (job ID, reason,
        name: no JSON of every job), as it runs beside a burst of sbatch."""
        with self._mu:
            runs, self._to_adopt = self._to_adopt, set()
        if not runs:
            return []
        out = self.run(["squeue", "-h", "-t", "PD", "-o", "%i|%r|%j"], SLURM_TIMEOUT_S)
        jobs = []
        for line in out.splitlines():
            job_id, reason, name = (line.split("|", 2) + ["", ""])[:3]
            if reason == "JobHeldUser" and name in runs:
                jobs.append(PendingJob(job_id.strip(), name, reason, "", None, None, ""))
        self.seen.update(j.run_id for j in jobs)
        return self._admin_hold(jobs)

    def _admin_hold(self, jobs: list[PendingJob]) -> list[str]:
        """`scontrol hold` (as root or SlurmUser: an admin hold) on the jobs, 200 a call; their IDs."""
        ids = [j.job_id for j in jobs]
        for k in range(0, len(ids), 200):
            self.run(["scontrol", "hold", ",".join(ids[k:k + 200])], SLURM_TIMEOUT_S)
        return ids

    def _loop(self) -> None:
        last = time.monotonic() - self.interval_s   # the first pass at once: a restart reconciles
        seen_stamp = None
        while not self._stop.is_set():
            self._wake.clear()
            if self._adopt.is_set():
                self._adopt.clear()
                # the job exists once slurmctld has finished its submission; a burst's held jobs together
                time.sleep(ADOPT_DELAY_S)
                try:
                    self.adopt()
                except Exception as exc:   # the next pass does it
                    self._trouble(exc)
            stamp = self._foreign_stamp()
            due = time.monotonic() - last >= self.interval_s
            # another writer (an epilog, finish) may have made room: a pass soon, while jobs are held
            if due or (self.watched and stamp is not None and stamp != seen_stamp):
                try:
                    self.run_pass()
                except Exception as exc:   # a locked ledger, Slurm away: tried again at the next pass
                    self._trouble(exc)
                else:
                    if self._failing is not None:
                        _log("recovered: passes run again")
                        self._failing = None
                last, seen_stamp = time.monotonic(), self._foreign_stamp()
            self._wake.wait(WAKE_CHECK_S)

    def _foreign_stamp(self):
        """The ledger's change stamp when a process other than this server wrote it last, else None."""
        try:
            stamp = self.live._stamp()
        except Exception:
            return None
        return None if stamp == self.live._sig else stamp

    def _trouble(self, exc: Exception) -> None:
        text = f"{type(exc).__name__}: {exc}"
        if self._failing != text:
            _log(f"pass failed ({text}); tried again in {self.interval_s:g} s")
        self._failing = text

    # ------------------------------------------------------------------ one pass

    def run_pass(self, now: datetime | None = None) -> dict:
        """One pass (see the module docstring); what it did: {admitted, released, updated,
        cancelled_jobs, cancelled_waiting, expired, skipped}."""
        with self._mu:
            now = naive_utc(now) or utcnow().replace(microsecond=0)
            live = self.live
            live.flush_answered()
            out = {"admitted": [], "released": [], "updated": [], "cancelled_jobs": [], "cancelled_waiting": [],
                   "expired": [], "skipped": []}
            pending = pending_jobs(json.loads(self.run(["squeue", "--json"], SLURM_TIMEOUT_S)), self.tag)
            for job in pending:   # a restarted server watches what Slurm still holds for it
                self.watched.setdefault(job.run_id, now - timedelta(days=1))
            if self.on_defer == "hold":
                with live._ledger_mu:
                    out["expired"] = [e["run_id"] for e in expire_waiting(live.db, now, live.timeout_s)]
                    due = due_turns(live.db, now, live.timeout_s)
                    jobless = self._jobless([q["run_id"] for q, _ in due])
                for q, text in due:
                    if q["run_id"] in jobless:
                        out["skipped"].append(q["run_id"])
                        continue
                    decision = self._admit(q, text, now)
                    if decision is not None and decision["state"] == "admit":
                        out["admitted"].append(q["run_id"])
                live.flush_answered()
            acts = self._actions(pending, now)
            self._apply(acts, now, out)
            if any(v for k, v in out.items() if k != "skipped"):   # a skipped request would repeat each pass
                _log(json.dumps(out, sort_keys=True))
            return out

    def _admit(self, q: dict, text: str, now: datetime):
        live, run_id = self.live, q["run_id"]

        def guard() -> bool:   # under the decisions' turn: the request still waits, nothing newer journaled
            if any(e["request"].get("run_id") == run_id for e in live.journal.pending(live.applied)
                   if isinstance(e["request"], dict)):
                return False
            with live._ledger_mu, open_ledger(live.db, read_only=True, timeout_s=live.timeout_s) as con:
                return still_waiting(con, run_id, text)
        decision, seq = live.decide(json.loads(text), now=now, origin="slurm", write=True, actor=QUEUE_ACTOR,
                                    admit_only=True, extra={"waiting_since": q["waiting_since"].isoformat()},
                                    guard=guard)
        live.settle(seq, answered=True)   # no caller waits for it: recorded as answered at once
        return decision

    def _actions(self, pending: list[PendingJob], now: datetime) -> Actions:
        live = self.live
        if not pending and not self.watched:
            return Actions()
        with live._ledger_mu:
            line = {r["run_id"]: r for r in queue_line(live.db, now=now, days=PLAN_DAYS,
                                                       timeout_s=live.timeout_s)["queue"]}
        unknown = [j.run_id for j in pending if j.run_id not in line]
        admitted = {r for r in unknown if live.booked(r)}   # booked() opens the ledger itself
        with live._ledger_mu:
            left = left_line(live.db, [r for r in unknown if r not in admitted], timeout_s=live.timeout_s)
        acts = reconcile_holds(pending, watched=dict(self.watched), line=line, admitted=admitted, left=left,
                               tag=self.tag, now=now, seen=set(self.seen))
        self.seen.update(j.run_id for j in pending)
        return acts

    def _apply(self, acts: Actions, now: datetime, out: dict) -> None:
        live = self.live
        self._admin_hold(acts.admin_hold)
        admits = self._admits([j.run_id for j in acts.release]) if acts.release else {}
        for job in acts.release:
            request, decision = admits.get(job.run_id, ({}, {}))
            limit = admitted_time_limit(request, decision, live.policy(request.get("team")) or {},
                                        job.time_limit_min)
            args = [f"JobId={job.job_id}", f"StartTime={now:%Y-%m-%dT%H:%M:%S}",
                    f"AdminComment=training-gate: admitted run {job.run_id} from the queue at {now:%Y-%m-%d %H:%M} UTC"]
            if limit.get("minutes") is not None and (job.time_limit_min is None or limit["minutes"] < job.time_limit_min):
                args.append(f"TimeLimit={int(limit['minutes'])}")
            self.run(["scontrol", "update", *args], SLURM_TIMEOUT_S)
            self.run(["scontrol", "release", job.job_id], SLURM_TIMEOUT_S)
            self.released.append(job.job_id)
            out["released"].append(job.job_id)
        for job, comment, start in acts.update[:MAX_UPDATES]:   # the rest at the next passes
            args = [f"JobId={job.job_id}", f"AdminComment={comment}"]
            if start is not None:
                args.append(f"StartTime={start:%Y-%m-%dT%H:%M:%S}")
            self.run(["scontrol", "update", *args], SLURM_TIMEOUT_S)
            out["updated"].append(job.job_id)
        for job, why in acts.cancel_jobs:
            self.run(["scontrol", "update", f"JobId={job.job_id}",
                      f"AdminComment=training-gate: left the queue: {' '.join(why.split())}"[:900]], SLURM_TIMEOUT_S)
            self.run(["scancel", job.job_id], SLURM_TIMEOUT_S)
            out["cancelled_jobs"].append(job.job_id)
        if acts.cancel_waiting:   # one write for all: a user may scancel hundreds at once
            who = {"actor": "slurm:scancel", "origin": "cli", "file_name": None}
            with live._ledger_mu:
                done = cancel_all_waiting(acts.cancel_waiting, who, db=live.db, now=now, timeout_s=live.timeout_s)
            out["cancelled_waiting"] += [d["run_id"] for d in done]
        for run_id in acts.forget:
            self.watched.pop(run_id, None)
            self.seen.discard(run_id)

    def _jobless(self, run_ids: list[str]) -> set[str]:
        """Those of `run_ids` whose latest deferral came from Slurm and that hold no job of this gate
        in Slurm's queue (their sbatch was refused: TG_ON_DEFER=refuse, no server): an admit would
        hold GPUs no job uses, so they wait for their expiry. The caller holds the ledger lock."""
        if not run_ids:
            return set()
        with open_ledger(self.live.db, read_only=True, timeout_s=self.live.timeout_s) as con:
            rows = con.execute("SELECT run_id, max_by(origin, (decided_at, decision_id)) FROM decisions "
                               "WHERE list_contains(?, run_id) GROUP BY run_id", [run_ids]).fetchall()
        return {r for r, origin in rows if origin == "slurm" and r not in self.watched}

    def _admits(self, run_ids: list[str]) -> dict[str, tuple[dict, dict]]:
        """run ID -> (request, decision) of its latest admit in the ledger."""
        with self.live._ledger_mu, open_ledger(self.live.db, read_only=True, timeout_s=self.live.timeout_s) as con:
            rows = con.execute("SELECT run_id, max_by(request_json, (decided_at, decision_id)), "
                               "max_by(decision_json, (decided_at, decision_id)) FROM decisions "
                               "WHERE state = 'admit' AND list_contains(?, run_id) GROUP BY run_id",
                               [run_ids]).fetchall()
        return {r[0]: (json.loads(r[1]), json.loads(r[2])) for r in rows}

