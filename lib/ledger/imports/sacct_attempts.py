"""The attempts of a requeued job in `sacct --duplicates` output: one run, and its interruptions.

A requeued job keeps its JobID, and sacct lists each attempt as a line of its own (the earlier ones
ending PREEMPTED, REQUEUED or NODE_FAIL). The lines of one JobID, ordered by Start (else End; an
attempt not started yet is the latest), are one run (`fold`): the latest attempt gives its state,
end, GPUs and time limit; the first its start and reserved_from; actual_gpu_hours = the sum of the
attempts' Elapsed x GPUs (GPU-hours). Attempts naming different accounts, and an earlier attempt that
has not ended, are errors.

Each earlier attempt that ended PREEMPTED, REQUEUED or NODE_FAIL is an interruption of the run
(`interruptions`; table `interruptions`, source 'sacct', no decision: action NULL): attempt = its
place in that order, attempt_started_at = its Start (its End if it never started), occurred_at = its
End, attempt_gpu_hours = Elapsed x GPUs, lost_gpu_hours = (End - the last checkpoint the ledger
records for the run within the attempt) x GPUs, else the whole attempt. One the ledger already holds - an interrupting event of
the same run within MATCH_TOLERANCE of the End, which `recover` recorded when the gate saw it - is
not recorded again, so re-importing a file records nothing new. The run's `interruptions` and
`act_lost_work_gpu_hours` become its interruptions' count and lost GPU-hours once these are
recorded (the merge never lowers the ledger's).
"""
from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict

from lib.gate.terms import ATTEMPT_MATCH_TOLERANCE, INTERRUPTING_EVENTS
from lib.ledger.imports.report import ImportReport, _err

# the states an earlier attempt ends in that make it an interruption, as the ledger's events
_INTERRUPTED = {"PREEMPTED": "preempted", "REQUEUED": "requeued", "NODE_FAIL": "node-fail"}
MATCH_TOLERANCE = ATTEMPT_MATCH_TOLERANCE


def _order(row_attempt: tuple[dict, dict]) -> tuple:
    """An attempt's place among its job's: by Start, else End; not started and not ended: last."""
    row, a = row_attempt
    t = a["start"] or a["end"]
    return (t is None, t or dt.datetime.max, row["_row"])


def fold(job: str, lines: list[dict], report: ImportReport) -> dict | None:
    """The run row of job `job` from the rows of its lines (its attempts, module docstring), with
    '_attempts': the earlier attempts that ended interrupted (None for a job of one line); None
    after reporting attempts that contradict each other."""
    attempts = [(row, row.pop("_attempt")) for row in lines]
    if len(attempts) == 1:
        return {**attempts[0][0], "_attempts": None}
    attempts.sort(key=_order)
    errors_before = len(report.errors)
    first, latest = attempts[0][0], attempts[-1][0]
    out, ends = [], {}
    for n, (row, a) in enumerate(attempts, start=1):
        if row["team"] != first["team"]:
            report.errors.append(_err(row["_row"], "account", row["team"],
                                      f"attempts of job {job} name different accounts: {first['team']!r} "
                                      f"on line {first['_row']}"))
        if row is latest:
            continue
        if not a["finished"]:
            report.errors.append(_err(row["_row"], "state", a["state"],
                                      f"an attempt of job {job} that has not ended, but line {latest['_row']} "
                                      "lists a later attempt"))
        elif a["state"] in _INTERRUPTED:
            if a["end"] is None:
                report.errors.append(_err(row["_row"], "end", "", f"attempt of job {job} ended {a['state']} "
                                                                  "without an End time"))
                continue
            if a["end"] in ends:
                report.errors.append(_err(row["_row"], "end", a["end"].isoformat(), f"attempt of job {job} "
                                          f"ends at the same time as the one on line {ends[a['end']]}"))
            ends[a["end"]] = row["_row"]
            out.append({"_row": row["_row"], "attempt": n, "event": _INTERRUPTED[a["state"]],
                        "attempt_started_at": a["start"] or a["end"], "occurred_at": a["end"],
                        "gpus": row["gpus"], "attempt_gpu_hours": a["gpu_hours"]})
    if len(report.errors) > errors_before:
        return None
    starts = [row["started_at"] for row, _ in attempts if row["started_at"] is not None]
    froms = [row["reserved_from"] for row, _ in attempts if row["reserved_from"] is not None]
    return {**latest, "started_at": min(starts, default=None), "reserved_from": min(froms, default=None),
            "actual_gpu_hours": (sum(a["gpu_hours"] for _, a in attempts)
                                 if latest["actual_gpu_hours"] is not None else None),
            "_attempts": out}


def interruptions(cur, rows: list[dict], report: ImportReport) -> list[dict]:
    """The interruptions to record for the rows' interrupted attempts (rows with their run_id): those
    the ledger does not already hold (MATCH_TOLERANCE), with their lost GPU-hours from the ledger's
    checkpoint records. Sets each row's interruptions and act_lost_work_gpu_hours (the run's, once
    these are recorded; NULL for a job of one line) and notes what it found in `report`."""
    ids = sorted({r["run_id"] for r in rows if r["_attempts"] is not None})
    held: dict[str, list[dt.datetime]] = defaultdict(list)   # interrupting events the ledger holds
    # run -> [interruptions, the lost GPU-hours of each]: summed by math.fsum, exactly rounded whatever
    # the order, so a re-import that adds nothing gives the very float the first import stored
    totals: dict[str, list] = defaultdict(lambda: [0, []])
    saves: dict[str, list[dt.datetime]] = defaultdict(list)
    if ids:
        for run_id, event, at, lost in cur.execute(
                "SELECT run_id, event, occurred_at, lost_gpu_hours FROM interruptions "
                "WHERE run_id IN (SELECT unnest(?))", [ids]).fetchall():
            totals[run_id][1].append(lost)
            if event in INTERRUPTING_EVENTS:
                held[run_id].append(at)
                totals[run_id][0] += 1
        for run_id, saved_at in cur.execute("SELECT run_id, saved_at FROM checkpoints WHERE run_id IN "
                                            "(SELECT unnest(?)) ORDER BY saved_at", [ids]).fetchall():
            saves[run_id].append(saved_at)
    new, seen = [], 0
    for row in rows:
        attempts = row.pop("_attempts")
        if attempts is None:
            row["interruptions"] = row["act_lost_work_gpu_hours"] = None
            continue
        run_id, free, total = row["run_id"], held[row["run_id"]], totals[row["run_id"]]
        for a in attempts:
            near = min(free, key=lambda t: abs(t - a["occurred_at"]), default=None)
            if near is not None and abs(near - a["occurred_at"]) <= MATCH_TOLERANCE:
                free.remove(near)   # the gate recorded it: one interruption, not two
                seen += 1
                continue
            kept_at = max((t for t in saves[run_id] if a["attempt_started_at"] <= t <= a["occurred_at"]),
                          default=None)
            lost = a["attempt_gpu_hours"] if kept_at is None else min(
                a["attempt_gpu_hours"], (a["occurred_at"] - kept_at).total_seconds() / 3600.0 * a["gpus"])
            new.append({**a, "run_id": run_id, "lost_gpu_hours": lost})
            total[0] += 1
            total[1].append(lost)
        row["interruptions"], row["act_lost_work_gpu_hours"] = total[0], math.fsum(total[1])
    if new or seen:
        report.notes.append(f"{len(new) + seen} interrupted attempts of requeued jobs: {len(new)} new "
                            f"interruptions, {seen} already in the ledger")
    return new
