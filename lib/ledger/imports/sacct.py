"""Slurm `sacct --parsable2` output: every rule turning its lines into runs.

Fields: any order, extra fields ignored, when the first line is a header (it names JobID); without
a header exactly the Open XDMoD list XDMOD_FIELDS in that order. Needed: SACCT_REQUIRED and
AllocTRES or ReqTRES. Times are taken as UTC (run sacct with TZ=UTC).
Mapping: Account -> team; GPUs from gres/gpu=N (or the sum of gres/gpu:TYPE=N) in AllocTRES, ReqTRES
when it was never allocated (AllocTRES empty); jobs with no GPU are skipped (counted in `skipped`).
actual_gpu_hours = Elapsed x GPUs for finished jobs (0 for jobs that never ran; NULL while running).
stop_reason from State (COMPLETED completed, TIMEOUT/DEADLINE wall-clock, PREEMPTED preempted,
CANCELLED [by N] cancelled, FAILED failed, OUT_OF_MEMORY out-of-memory, NODE_FAIL/BOOT_FAIL node-fail,
REQUEUED requeued; RUNNING, PENDING and other live states: unfinished, no end).
Reservation: reserved_from = Eligible (else Submit; never after Start), reserved_until =
(Start, else reserved_from) + Timelimit, reserved_gpu_hours = Timelimit x GPUs; max_runtime_hours =
Timelimit (UNLIMITED / Partition_Limit: unknown, so no reservation end and no requested estimate).
Estimate: Timelimit x GPUs with estimate_source 'requested' - used only when the ledger holds no
pilot/stated estimate for the run (that one is kept). kind: the ledger's kind for a known run, else
QOS or partition when named exploratory/production/retraining, else 'exploratory'.
capacity: preemptible when every partition the job names is in the team's preemptible_partitions.
Run id: JobName 'run_id=X' -> X; JobName equal to a run id already in the ledger -> that run
(the submit hook names admitted jobs after their run id); otherwise 'slurm-<JobID>'.
Steps (123.batch, 123.extern, 123.0) fold into their job line (a step without its job line is an
error); array tasks (123_4) and het components (123+0) are runs of their own.
Attempts (`sacct --duplicates`): the lines of one JobID are the attempts of a requeued job, folded
into one run, its earlier interrupted attempts recorded as interruptions (sacct_attempts).
A reservation the gate recorded (source other than sacct) is kept; kind, too; other fields sacct
knows (times, GPUs, actuals, stop reason, partition) take sacct's value, empty ones keep the ledger's.
"""
from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from pathlib import Path

import pyarrow as pa

from lib.ledger.imports.columns import ENUMS, MAX_TEXT_CHARS
from lib.ledger.imports.merge import Staged, check_and_write
from lib.ledger.imports.report import ImportReport, RowErrors, Steps, _err
from lib.ledger.imports.sacct_attempts import fold, interruptions
from lib.gate.terms import TEAM_NAME_RULE, naive_utc, team_name_problem

XDMOD_FIELDS = [
    "jobid", "jobidraw", "cluster", "partition", "qos", "account", "group", "gid", "user", "uid",
    "submit", "eligible", "start", "end", "elapsed", "exitcode", "state", "nnodes", "ncpus", "reqcpus",
    "reqmem", "reqtres", "alloctres", "timelimit", "nodelist", "jobname",
]
SACCT_REQUIRED = ["jobid", "account", "partition", "state", "start", "end", "elapsed", "timelimit"]
_STATE_MAP = {
    "COMPLETED": "completed", "TIMEOUT": "wall-clock", "DEADLINE": "wall-clock",
    "PREEMPTED": "preempted", "CANCELLED": "cancelled", "REVOKED": "cancelled", "FAILED": "failed",
    "OUT_OF_MEMORY": "out-of-memory", "NODE_FAIL": "node-fail", "BOOT_FAIL": "node-fail",
    "REQUEUED": "requeued",
}
_UNFINISHED = {"RUNNING", "PENDING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING",
               "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD",
               "SPECIAL_EXIT", "UPDATE_DB", "POWER_UP_NODE", "LAUNCH_FAILED"}
_JOBID = re.compile(r"^(?P<job>\d+(?:_(?:\d+|\[[0-9,\-%:]+\])|\+\d+)?)(?:\.(?P<step>[A-Za-z0-9_]+))?$")
_NEVER = {"", "unknown", "none", "n/a"}
_NO_LIMIT = {"UNLIMITED", "PARTITION_LIMIT", "INVALID", "", "UNKNOWN", "NONE"}
_RUN_ID_PREFIX = "run_id="
# the Unicode space separators (category Zs), stripped around each partition name
_SPACES = " \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000"

# the runs columns a sacct job supplies, and its merge rules (t = the job, r = the ledger's run)
_SUPPLIED = ["run_id", "team", "kind", "capacity", "gpus", "job_name", "estimated_gpu_hours",
             "estimate_source", "max_runtime_hours", "reserved_from", "reserved_until",
             "reserved_gpu_hours", "started_at", "ended_at", "actual_gpu_hours", "stop_reason",
             "interruptions", "act_lost_work_gpu_hours"]
_KEEP_MEASURED = "(r.estimated_gpu_hours IS NOT NULL AND r.estimate_source IS DISTINCT FROM 'requested')"
_KEEP_RESERVATION = "(r.reserved_gpu_hours IS NOT NULL AND r.source <> 'sacct')"
_MERGE_RULES = {
    "kind": "COALESCE(r.kind, t.kind)",
    **{c: f"CASE WHEN {_KEEP_MEASURED} THEN r.{c} ELSE COALESCE(t.{c}, r.{c}) END"
       for c in ("estimated_gpu_hours", "estimate_source")},
    **{c: f"CASE WHEN {_KEEP_RESERVATION} THEN r.{c} ELSE COALESCE(t.{c}, r.{c}) END"
       for c in ("reserved_from", "reserved_until", "reserved_gpu_hours")},
    # from a job's attempts (NULL: one attempt, the file says nothing): never below the ledger's
    **{c: f"CASE WHEN t.{c} IS NULL THEN r.{c} ELSE greatest(t.{c}, coalesce(r.{c}, 0)) END"
       for c in ("interruptions", "act_lost_work_gpu_hours")},
}



def _slurm_duration_h(text: str) -> float | None:
    """Slurm duration ([D-]HH:MM:SS, D-HH, D-HH:MM, MM, MM:SS) in hours; ValueError when malformed."""
    days = 0
    rest = text
    if "-" in text:
        d, rest = text.split("-", 1)
        days = int(d)
        parts = [float(p) for p in rest.split(":")]
        if not 1 <= len(parts) <= 3:
            raise ValueError(text)
        parts += [0.0] * (3 - len(parts))
        h, m, s = parts
    else:
        parts = [float(p) for p in rest.split(":")]
        if len(parts) == 1:
            h, m, s = 0.0, parts[0], 0.0
        elif len(parts) == 2:
            h, (m, s) = 0.0, parts
        elif len(parts) == 3:
            h, m, s = parts
        else:
            raise ValueError(text)
    if days < 0 or min(h, m, s) < 0 or m >= 60 or s >= 60:
        raise ValueError(text)
    return days * 24 + h + m / 60 + s / 3600


def _slurm_time(text: str) -> dt.datetime | None:
    if text.strip().lower() in _NEVER:
        return None
    value = naive_utc(text.strip())
    if not dt.datetime(2000, 1, 1) <= value < dt.datetime(2100, 1, 1):
        raise ValueError(text)
    return value


def _tres_gpus(text: str) -> int | None:
    """GPUs in a TRES string (gres/gpu=N, or the sum of gres/gpu:TYPE=N); None when it names none."""
    total = typed = None
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(item)
        if key == "gres/gpu":
            total = int(value)
        elif key.startswith("gres/gpu:"):
            typed = (typed or 0) + int(value)
    return total if total is not None else typed



def import_sacct(cur, path: Path, report: ImportReport, create_teams: bool, dry_run: bool,
                 steps: Steps) -> None:
    """Import the sacct output at `path` (module docstring) with `cur`, or say in report.errors why not."""
    steps(0.1, "reading sacct lines")
    rows = _parse(path, report)
    if report.errors:
        return
    if not rows:
        report.errors.append(_err(None, None, None, "no job lines with GPUs in the file"
                                  + (f" ({report.skipped} lines skipped: steps or jobs without GPUs)"
                                     if report.skipped else "")))
        return
    if report.skipped:
        report.notes.append(f"{report.skipped} lines skipped: job steps folded into their job, "
                            "or jobs without GPUs")
    steps(0.3, f"checking {len(rows)} jobs")
    errors = _resolve(cur, rows)
    attempts = interruptions(cur, rows, report)
    _stage(cur, rows, attempts)
    staged = Staged(supplied=_SUPPLIED, rules=_MERGE_RULES, errors=errors, reader_errors=[],
                    lines_for=None, drop=("DROP TABLE typed", "DROP TABLE attempts"), attempts=len(attempts))
    check_and_write(cur, report, staged, create_teams, dry_run, steps)


def _parse(path: Path, report: ImportReport) -> list[dict]:
    """The job lines of the file as run rows ('_row' = the file line), with '_jobid' and '_partition'
    for _resolve; every problem goes to report.errors, folded steps and jobs without GPUs to skipped."""
    raw = path.read_bytes()
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    first_idx = next((i for i, l in enumerate(lines) if l.strip()), None)
    if first_idx is None:
        report.errors.append(_err(1, None, None, "the file is empty (expected sacct --parsable2 output)"))
        return []
    first = lines[first_idx].rstrip(b"\r").decode("utf-8", "replace")
    fields = _fields(first, first_idx + 1, report)
    if fields is None:
        return []
    fields, has_header = fields
    header = fields if has_header else None
    jobs: dict[str, list[dict]] = {}          # job id -> the run rows of its lines (attempts)
    steps: list[tuple[int, str]] = []         # (line, job id) of each step
    for i in range(first_idx + 1 if header else 0, len(lines)):
        cells = _cells(lines[i], i + 1, fields, header, report)
        if cells is not None:
            _job_line(i + 1, cells, jobs, steps, report)
    for lineno, job in steps:
        if job not in jobs:
            report.errors.append(_err(lineno, "jobid", job, f"step of job {job}, whose job line is not in "
                                                            "the file (export jobs with their steps)"))
        else:
            report.skipped += 1
    rows = [fold(job, attempts, report) for job, attempts in jobs.items() if attempts]
    return [r for r in rows if r is not None]


def _fields(first: str, lineno: int, report: ImportReport) -> tuple[list[str], bool] | None:
    """(field names, whether `first` is a header): the header's names when the first line (`first`,
    on `lineno`) names jobid, else XDMOD_FIELDS; None after reporting a header lacking or repeating
    fields, or a CSV file."""
    names = [n.strip().lower() for n in first.split("|")]
    if "jobid" not in names:
        if "," in first and "|" not in first:
            report.errors.append(_err(lineno, None, first[:200], "this looks like a CSV file, not sacct "
                                                                 "--parsable2 output ('|'-separated)"))
            return None
        return XDMOD_FIELDS, False
    missing = [f for f in SACCT_REQUIRED if f not in names]
    if "alloctres" not in names and "reqtres" not in names:
        missing.append("alloctres")
    if missing:
        report.errors.append(_err(lineno, ", ".join(missing), first[:200],
                                  "sacct header lacks required field(s): " + ", ".join(missing)))
        return None
    dupes = sorted({n for n in names if names.count(n) > 1 and n})
    if dupes:
        report.errors.append(_err(lineno, ", ".join(dupes), first[:200], "sacct header names a field twice"))
        return None
    return names, True


def _cells(bline: bytes, lineno: int, fields: list[str], header: list[str] | None,
           report: ImportReport) -> dict[str, str] | None:
    """{field: stripped value} of one line ('' for a field it lacks); None for a blank line, a repeated header, or after
    reporting a line that is not UTF-8 or has the wrong number of fields."""
    bline = bline.rstrip(b"\r")
    if not bline.strip():
        return None
    try:
        text = bline.decode("utf-8")
    except UnicodeDecodeError as exc:
        report.errors.append(_err(lineno, None, repr(bline[max(0, exc.start - 10):exc.end + 10]),
                                  "not valid UTF-8"))
        return None
    parts = text.split("|")
    if header and [p.strip().lower() for p in parts] == header:
        return None   # repeated header (concatenated outputs)
    if len(parts) != len(fields):
        hint = " (a '|' inside a job name?)" if len(parts) > len(fields) else " (truncated line?)"
        what = "the header's" if header else "Open XDMoD's (no header line)"
        report.errors.append(_err(lineno, None, text[:200],
                                  f"line has {len(parts)} fields, {what} {len(fields)}{hint}"))
        return None
    return defaultdict(str, zip(fields, map(str.strip, parts)))


def _job_line(lineno: int, cells: dict[str, str], jobs: dict[str, list[dict]], steps: list[tuple[int, str]],
              report: ImportReport) -> None:
    """Sort one line by its JobID: a step (kept in `steps`), or an attempt of a job (its run row
    appended to `jobs[job]` unless it has errors or no GPUs)."""
    jobid = cells["jobid"]
    m = _JOBID.match(jobid)
    if not m:
        report.errors.append(_err(lineno, "jobid", jobid, "not a Slurm job id (like 123, 123_4, "
                                                          "123+0 or 123.batch)"))
        return
    job = m.group("job")
    if m.group("step"):
        steps.append((lineno, job))
        return
    report.rows_read += 1
    attempts = jobs.setdefault(job, [])
    row = _sacct_row(lineno, job, cells, report)
    if row is not None:
        attempts.append(row)


def _times_and_hours(lineno: int, cells: defaultdict[str, str], report: ImportReport) -> tuple:
    """({submit, eligible, start, end}: UTC datetime or None, Elapsed in hours, Timelimit in hours or
    None when unlimited); a malformed field is reported (its value is then None)."""
    def bad(name, value, message):
        report.errors.append(_err(lineno, name, value, message))

    times = {}
    for name in ("submit", "eligible", "start", "end"):
        value = cells[name]
        try:
            times[name] = _slurm_time(value)
        except ValueError:
            bad(name, value, "not a valid time (like 2024-05-01T13:00:00, Unknown or None)")
    try:
        elapsed_h = _slurm_duration_h(cells["elapsed"] or "0")
    except ValueError:
        bad("elapsed", cells["elapsed"], "not a valid duration (like 1-02:03:04 or 02:03:04)")
        elapsed_h = None
    limit_text = cells["timelimit"]
    limit_h = None
    if limit_text.upper() not in _NO_LIMIT:
        try:
            limit_h = _slurm_duration_h(limit_text)
        except ValueError:
            bad("timelimit", limit_text, "not a valid time limit (like 1-00:00:00, UNLIMITED)")
    return times, elapsed_h, limit_h


def _sacct_row(lineno: int, job: str, cells: defaultdict[str, str], report: ImportReport) -> dict | None:
    """The run row of job `job` on `lineno` (with '_jobid' and '_partition' for _resolve); None when a
    field has an error (reported) or the job has no GPUs (counted in skipped)."""
    errors_before = len(report.errors)
    times, elapsed_h, limit_h = _times_and_hours(lineno, cells, report)

    def bad(name, value, message):
        report.errors.append(_err(lineno, name, value, message))

    gpus = None
    tres_field = "alloctres" if cells["alloctres"] else "reqtres"
    try:
        gpus = _tres_gpus(cells[tres_field])
    except ValueError:
        bad(tres_field, cells[tres_field], "not a TRES list (like cpu=8,gres/gpu=2,mem=64G)")
    state_text = cells["state"]
    state = state_text.split(" ")[0].rstrip("+").upper()
    if state in _STATE_MAP:
        stop_reason = _STATE_MAP[state]
    elif state in _UNFINISHED:
        stop_reason = None
    else:
        bad("state", state_text, "unknown Slurm job state")
        stop_reason = None
    account = cells["account"]
    if not account:
        bad("account", account, "account is empty (it names the team)")
    elif team_name_problem(account):
        bad("account", account, f"account (it names the team) is not a valid team name: {TEAM_NAME_RULE}")
    for name in ("jobname", "account", "partition"):
        if len(cells[name]) > MAX_TEXT_CHARS:
            bad(name, cells[name], f"text longer than {MAX_TEXT_CHARS} characters")
        elif "\x00" in cells[name]:
            bad(name, cells[name], "holds a NUL byte (binary data?)")
    if len(report.errors) > errors_before:
        return None
    if not gpus:
        report.skipped += 1
        return None
    finished = stop_reason is not None
    started, ended = times["start"], times["end"] if finished else None
    reserved_from = times["eligible"] or times["submit"]
    if reserved_from and started and reserved_from > started:
        reserved_from = started
    base = started or reserved_from
    qos, partition = cells["qos"].lower(), cells["partition"]
    kind = qos if qos in ENUMS["kind"] else (partition.lower() if partition.lower() in ENUMS["kind"]
                                             else "exploratory")
    return {
        "_row": lineno, "_jobid": job, "_partition": partition or None,
        "team": account, "kind": kind, "gpus": gpus, "job_name": cells["jobname"] or None,
        "estimated_gpu_hours": limit_h * gpus if limit_h is not None else None,
        "estimate_source": "requested" if limit_h is not None else None,
        "max_runtime_hours": limit_h,
        "reserved_from": reserved_from,
        "reserved_until": base + dt.timedelta(hours=limit_h) if base and limit_h is not None else None,
        "reserved_gpu_hours": limit_h * gpus if limit_h is not None else None,
        "started_at": started, "ended_at": ended,
        "actual_gpu_hours": (elapsed_h or 0.0) * gpus if finished else None,
        "stop_reason": stop_reason,
        "_attempt": {"state": state, "finished": finished, "start": started, "end": times["end"],
                     "gpu_hours": (elapsed_h or 0.0) * gpus},
    }


def _resolve(cur, rows: list[dict]) -> RowErrors:
    """Give each row its run_id and capacity (replacing '_jobid' and '_partition'), reading the run ids
    and preemptible partitions the ledger holds; an error for each run id longer than MAX_TEXT_CHARS."""
    names = sorted({r["job_name"] for r in rows if r["job_name"] is not None})
    known = {r[0] for r in cur.execute("SELECT run_id FROM runs WHERE run_id IN (SELECT unnest(?))",
                                       [names]).fetchall()}
    partitions = dict(cur.execute("SELECT team, preemptible_partitions FROM teams").fetchall())
    errors = RowErrors()
    for row in rows:
        row["run_id"] = run_id = _run_id(row.pop("_jobid"), row["job_name"], known)
        row["capacity"] = _capacity(row.pop("_partition"), partitions.get(row["team"]) or [])
        if len(run_id) > MAX_TEXT_CHARS:
            errors.items.append((row["_row"], "run_id", run_id,
                                 f"run id longer than {MAX_TEXT_CHARS} characters", None))
    return errors


def _run_id(job: str, job_name: str | None, known: set[str]) -> str:
    """JobName 'run_id=X' -> X; a JobName that is a run id in the ledger (`known`) -> it; else slurm-<job>."""
    if job_name and job_name.startswith(_RUN_ID_PREFIX) and len(job_name) > len(_RUN_ID_PREFIX):
        return job_name[len(_RUN_ID_PREFIX):]
    if job_name in known:
        return job_name
    return f"slurm-{job}"


def _capacity(partition: str | None, preemptible: list[str]) -> str:
    """'preemptible' when every partition the job names (comma-separated) is in `preemptible`, the
    team's preemptible partitions; else 'stable'."""
    if partition is not None and all(p.strip(_SPACES) in preemptible for p in partition.split(",")):
        return "preemptible"
    return "stable"


def _stage(cur, rows: list[dict], attempts: list[dict]) -> None:
    """Store the rows in the temp table `typed` (its `_row` = the file line) and the interruptions to
    record in the temp table `attempts`."""
    ts = pa.timestamp("us")
    schema = pa.schema([
        ("_row", pa.int64()), ("run_id", pa.string()), ("team", pa.string()), ("kind", pa.string()),
        ("capacity", pa.string()), ("gpus", pa.int32()), ("job_name", pa.string()),
        ("estimated_gpu_hours", pa.float64()), ("estimate_source", pa.string()),
        ("max_runtime_hours", pa.float64()), ("reserved_from", ts), ("reserved_until", ts),
        ("reserved_gpu_hours", pa.float64()), ("started_at", ts), ("ended_at", ts),
        ("actual_gpu_hours", pa.float64()), ("stop_reason", pa.string()), ("interruptions", pa.int32()),
        ("act_lost_work_gpu_hours", pa.float64()),
    ])
    attempt_schema = pa.schema([
        ("_row", pa.int64()), ("run_id", pa.string()), ("event", pa.string()), ("occurred_at", ts),
        ("attempt", pa.int32()), ("attempt_started_at", ts), ("attempt_gpu_hours", pa.float64()),
        ("lost_gpu_hours", pa.float64()),
    ])
    for name, data, sch in (("typed", rows, schema), ("attempts", attempts, attempt_schema)):
        cur.register("sacct_rows", pa.Table.from_pylist(data, schema=sch))
        cur.execute(f"CREATE TEMP TABLE {name} AS SELECT * FROM sacct_rows").fetchall()
        cur.unregister("sacct_rows")
