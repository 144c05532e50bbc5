"""The flag log ($TG_FLAG_LOG): one short JSON line per job the gate could not judge (the failure
policy's answer: refused, or accepted and flagged for review), bounded and rotated.

A line holds when, what was done and why (at most WHY_CHARS characters), the run ID, the policy and
its note, and the job's identifying fields (JOB_KEYS, each at most FIELD_CHARS characters: never its
comment, which may be megabytes), so a line stays under about 2 KB. When the file would grow past
MAX_BYTES (10 MB, or $TG_FLAG_LOG_MAX_MB) it is renamed to `.1` (`.1` to `.2`, ... up to KEEP files;
the oldest goes) and a new one begun: at most (KEEP + 1) × MAX_BYTES on disk, whatever a flood of
failures writes. Writers (the gate server's threads, hooks deciding in-process) take an exclusive
lock on the file, so lines never interleave and one rotation happens once.
"""
from __future__ import annotations

import fcntl
import os
import sys
from datetime import datetime, timezone

from lib.gate.terms import json_text

MAX_BYTES = 10 * 1024 * 1024
KEEP = 3
WHY_CHARS = 500
FIELD_CHARS = 200
JOB_KEYS = ("account", "partition", "name", "user", "uid", "time_limit")


def short_line(record: dict) -> str:
    """`record` ({action, why, run_id, policy, note, job: {field: value}}) as one short JSON line."""
    job = record.get("job") or {}
    line = {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            **{k: _clip(v, WHY_CHARS) for k, v in record.items() if k != "job"},
            "job": {k: _clip(job.get(k), FIELD_CHARS) for k in JOB_KEYS if job.get(k) is not None}}
    return json_text(line, sort_keys=True) + "\n"  # any text: lone surrogates as \\u escapes


def _clip(value, most: int):
    if isinstance(value, str) and len(value) > most:
        return f"{value[:most]}... ({len(value)} characters)"
    return value


def max_bytes() -> int:
    """MAX_BYTES, or $TG_FLAG_LOG_MAX_MB (a positive number of megabytes) when set."""
    try:
        mb = float(os.environ.get("TG_FLAG_LOG_MAX_MB", ""))
    except ValueError:
        return MAX_BYTES
    return int(mb * 1024 * 1024) if 0 < mb < 1e6 else MAX_BYTES


def append(path: str, record: dict) -> None:
    """Append `record`'s short line to the flag log `path`, rotating it first when it would pass
    `max_bytes()`; a failure to write is said on stderr (the job's answer never waits on the log)."""
    line = short_line(record).encode("utf-8", "backslashreplace")
    limit = max_bytes()
    try:
        for _ in range(3):   # another writer may rotate between our open and our lock
            with open(path, "ab") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                st = os.fstat(f.fileno())
                try:
                    current = os.stat(path).st_ino == st.st_ino
                except FileNotFoundError:
                    current = False
                if not current:
                    continue   # rotated meanwhile: write to the new file
                if st.st_size and st.st_size + len(line) > limit:
                    _rotate(path)
                    continue
                f.write(line)
                return
    except OSError as exc:
        print(f"training-gate: cannot write the flag log {path}: {exc}", file=sys.stderr)


def _rotate(path: str) -> None:
    for n in range(KEEP - 1, 0, -1):
        if os.path.exists(f"{path}.{n}"):
            os.replace(f"{path}.{n}", f"{path}.{n + 1}")
    os.replace(path, f"{path}.1")
