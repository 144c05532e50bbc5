"""slurmctld's EpilogSlurmctld for the gate: after an attempt of a gated job ends (a preemption, a
requeue, a node failure, a time-out), its interruption and the recovery decision are recorded and
carried out in Slurm (lib.slurm.aftermath). `lib/slurm/epilog.sh` is the script slurm.conf names:
it writes the job into the spool and starts this module detached, so no job's end waits for it.

    python -m lib.slurm.epilog job JOBID --restarts N    the job whose attempt just ended
    python -m lib.slurm.epilog catch-up [--since TIME]   what the spool still holds; with --since,
                                                         also every job sacct lists since TIME

`job`: when the gate admitted a run of the job's name (the submit hook names jobs after their run;
the warm gate server is told to drain its journal first, and while a journal may still hold the
admit it is looked for again, up to ADMIT_WAIT_S, before the job counts as not the gate's),
waits until slurmctld has finished the job's end (squeue no longer says COMPLETING) and sacct
lists the attempt that ended: N attempts (Slurm's restart count) when the job is back in the queue,
N + 1 when it has ended for good; then reconciles the job and removes its spool entry. What it
cannot finish within TG_EPILOG_TIMEOUT_S (default 120 s) - the ledger locked or missing, Slurm's
accounting not answering, a crash - stays in the spool for `catch-up`, which every later worker
runs for entries older than CATCH_UP_AGE_S, and `cluster.sh start` (or a timer) runs whole. An
interruption is never lost, and never recorded twice: recover_run is idempotent on (run, event, time).

Environment: GATE_DB (the ledger), TG_EPILOG_SPOOL (the spool folder; none: no spool),
TG_EPILOG_TIMEOUT_S, TG_GATE_SOCKET (a warm gate server, asked first to move its decisions into
the ledger). Output: one line per job handled, JSON after the prefix. Exit 0 done or nothing to do,
1 something left in the spool, 2 bad arguments.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import sys
import time
from datetime import datetime
from pathlib import Path

from lib.gate.terms import naive_utc, utcnow
from lib.ledger.connection import LedgerError, ledger_path
from lib.slurm import slurm_jobs
from lib.slurm.aftermath import LIVE, dump, gated_run, reconcile
from lib.slurm.attempts import ended_count, job_events
from lib.slurm.reservations import SlurmUnavailable
from lib.slurm.journal import journal_path
from lib.slurm.wire import flush

EPILOG_TIMEOUT_S = 120.0
ADMIT_WAIT_S = 30.0         # the longest a job's admit may take to reach the ledger from a journal
CATCH_UP_AGE_S = 120.0      # a spool entry this old has outlived its own worker
POLL_S = 0.5


class NotYet(RuntimeError):
    """The job's end cannot be reconciled yet (Slurm or the ledger not ready): it stays in the spool."""


def _log(text: str) -> None:
    print(f"{utcnow().isoformat(timespec='seconds')}Z lib.slurm.epilog: {text}", flush=True)


def _flush_gate(db) -> bool:
    """Ask the warm gate server to move all it journaled into the ledger; True when nothing of the
    ledger's is left in a journal afterwards (the server drained it, or there is no journal)."""
    sock = os.environ.get("TG_GATE_SOCKET")
    no_journal = not journal_path(ledger_path(db).resolve()).exists()
    if not sock or not Path(sock).exists():
        return no_journal
    try:
        return flush(sock, str(ledger_path(db).resolve())) is not None or no_journal   # None: no server there
    except Exception as exc:  # a server that does not answer: its journal reaches the ledger later
        _log(f"the gate server at {sock} did not flush ({type(exc).__name__}: {exc})")
        return False


def _admitted(name: str, db, deadline: float) -> dict | None:
    """The run the gate admitted as `name` (aftermath.gated_run); while it is not in the ledger and a
    journal may still hold its admit, asked again every POLL_S for up to ADMIT_WAIT_S (the gate
    server told to flush each time) before the job counts as not the gate's."""
    end = min(deadline, time.monotonic() + ADMIT_WAIT_S)
    drained = _flush_gate(db)
    while True:
        run = gated_run(name, db=db, timeout_s=_left(deadline, 10))
        if run is not None or drained or time.monotonic() >= end:
            return run
        time.sleep(POLL_S)
        drained = _flush_gate(db)


def handle_job(job_id: str, restarts: int, *, db=None, wait_s: float = EPILOG_TIMEOUT_S, name: str | None = None) -> dict:
    """Reconcile one job after its epilog (module docstring); NotYet when it cannot be done within
    `wait_s`. `name`: the job's name when known (a job of no admitted run is done at once)."""
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            if name is not None and _admitted(name, db, deadline) is None:
                return {"job_id": job_id, "run_id": name, "recorded": [], "action": None,
                        "skipped": [f"no run the gate admitted is named {name!r}"]}
            now = slurm_jobs.job_now(job_id)
            while now is not None and now["state"] == "COMPLETING" and time.monotonic() < deadline:
                time.sleep(POLL_S)
                now = slurm_jobs.job_now(job_id)
            expected = restarts if now is not None and now["state"] in LIVE else restarts + 1
            attempts = slurm_jobs.attempts_of(job_id).get(job_id, [])
            while ended_count(attempts) < expected and time.monotonic() < deadline:
                time.sleep(POLL_S)
                attempts = slurm_jobs.attempts_of(job_id).get(job_id, [])
            if ended_count(attempts) < expected:
                raise NotYet(f"sacct lists {ended_count(attempts)} ended attempts of job {job_id}, not {expected}")
            return reconcile(job_id, attempts, requeued_through=restarts, db=db, now=now,
                             timeout_s=_left(deadline, 10), log=_log)
        except (LedgerError, SlurmUnavailable) as exc:
            if time.monotonic() >= deadline:
                raise NotYet(f"{type(exc).__name__}: {exc}") from None
            if not said:   # once: it tries every 2 s until its deadline
                _log(f"job {job_id}: {type(exc).__name__}: {exc}; trying again until "
                     f"{wait_s:g} s have passed")
                said = True
            time.sleep(min(2.0, _left(deadline, 2.0)))


def _left(deadline: float, most: float) -> float:
    return max(0.5, min(most, deadline - time.monotonic()))


# ---------------------------------------------------------------------------------------------- spool

def _spool() -> Path | None:
    folder = os.environ.get("TG_EPILOG_SPOOL")
    return Path(folder) if folder else None


def _entries(spool: Path, older_than_s: float) -> list[tuple[Path, str, int]]:
    """(file, job ID, restart count) of the spool's entries `<job>.<restarts>` at least this old."""
    out = []
    for f in sorted(spool.glob("*.*")):
        job, _, restarts = f.name.partition(".")
        try:
            old = time.time() - f.stat().st_mtime >= older_than_s
        except FileNotFoundError:   # its worker finished meanwhile
            continue
        if job.isdigit() and restarts.isdigit() and old:
            out.append((f, job, int(restarts)))
    return out


def _entry_name(entry: Path) -> str | None:
    """The job name epilog.sh wrote into the entry (`printf '%s\\n'`), exactly; None when unreadable."""
    try:
        return entry.read_bytes().decode("utf-8", "surrogateescape").removesuffix("\n") or None
    except OSError:
        return None


def catch_up(*, db=None, since: datetime | None = None, older_than_s: float = 0.0,
             wait_s: float = 30.0) -> tuple[list[dict], int]:
    """The spool's entries at least `older_than_s` old, then (with `since`) every gated job sacct
    lists since then: reconciled. Returns (results, how many are left: spool entries and jobs that
    could not be reconciled). One catch-up at a time: another running one makes this return at once."""
    spool, results, left = _spool(), [], 0
    lock = None
    if spool is not None:
        spool.mkdir(parents=True, exist_ok=True)
        lock = open(spool / ".catch-up.lock", "a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            return [], 0
    try:
        for entry, job, restarts in (_entries(spool, older_than_s) if spool else []):
            try:
                results.append(handle_job(job, restarts, db=db, wait_s=wait_s, name=_entry_name(entry)))
                entry.unlink(missing_ok=True)
            except NotYet as exc:
                left += 1
                _log(f"job {job}: still in the spool: {exc}")
        if since is not None:
            done, failed = _since(since, db)
            results += done
            left += failed
    finally:
        if lock is not None:
            lock.close()
    return results, left


def _since(since: datetime, db) -> tuple[list[dict], int]:
    """Every job sacct lists since `since` with an event (lib.slurm.attempts.job_events), reconciled:
    (results, how many could not be)."""
    try:
        jobs = slurm_jobs.attempts_of(since=since.strftime("%Y-%m-%dT%H:%M:%S"))
    except SlurmUnavailable as exc:
        _log(f"sacct since {since.isoformat()}: {exc}")
        return [], 1
    out, failed = [], 0
    for job_id, attempts in sorted(jobs.items(), key=lambda kv: int(kv[0])):
        if not job_events(attempts):
            continue
        try:
            out.append(reconcile(job_id, attempts, db=db, now=slurm_jobs.job_now(job_id), log=_log))
        except (LedgerError, SlurmUnavailable) as exc:
            failed += 1
            _log(f"job {job_id}: not reconciled: {type(exc).__name__}: {exc}")
    return out, failed


# ---------------------------------------------------------------------------------------------- main

def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lib.slurm.epilog", description=__doc__.split("\n\n")[0])
    p.add_argument("--db", default=None, help="the ledger (default $GATE_DB, else data/gate.duckdb)")
    sub = p.add_subparsers(dest="command", required=True)
    j = sub.add_parser("job", help="reconcile the job whose attempt just ended (the epilog's worker)")
    j.add_argument("job_id", type=_job_id)
    j.add_argument("--restarts", type=int, default=0, help="Slurm's restart count (SLURM_JOB_RESTART_COUNT)")
    c = sub.add_parser("catch-up", help="the spool's entries, and with --since every job sacct lists since then")
    c.add_argument("--since", type=naive_utc, default=None, help="ISO-8601 time (UTC when no offset)")
    args = p.parse_args(argv)
    wait_s = _float_env("TG_EPILOG_TIMEOUT_S", EPILOG_TIMEOUT_S)
    if args.command == "catch-up":
        results, left = catch_up(db=args.db, since=args.since, wait_s=wait_s)
        for r in results:
            _log(dump(r))
        return 1 if left else 0
    spool = _spool()
    entry = spool / f"{args.job_id}.{args.restarts}" if spool else None
    try:
        result = handle_job(args.job_id, args.restarts, db=args.db, wait_s=wait_s,
                            name=_entry_name(entry) if entry else None)
    except NotYet as exc:
        _log(f"job {args.job_id}: left in the spool for catch-up: {exc}")
        return 1
    _log(dump(result))
    if entry is not None:
        entry.unlink(missing_ok=True)
        catch_up(db=args.db, older_than_s=CATCH_UP_AGE_S, wait_s=wait_s)
    return 0


def _job_id(text: str) -> str:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a job ID is a number, got {text!r}")
    return text


def _float_env(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if 0 < value < 86400 else default


if __name__ == "__main__":
    sys.exit(main())
