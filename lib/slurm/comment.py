"""A Slurm job description and its --comment as a gate request: the submit hook's first step
(lib.slurm.judge.judge_job), run by the warm gate server or by the hook in-process, never by the
hook's socket client (which imports only os, sys and lib.slurm.wire).

What becomes of a job's comment:

- a request: a JSON object, whatever its fields hold. The gate judges it; a field it cannot take
  (a wrong type, NaN or ±Infinity, an integer too large for any float, text that is not valid
  Unicode, e.g. a lone surrogate or invalid UTF-8 bytes inside a JSON string, a string over its
  field's length, an unknown field, nested junk) makes it a `reject` naming the field;
- `Rejected` (an invalid-request reject before any decision, nothing recorded): JSON nested deeper
  than MAX_JSON_DEPTH (64) levels, refused before it is parsed;
- `IncompleteRequest` (a gate failure: the failure policy applies): no comment; @FILE that cannot
  be read, is not a regular file of the submitter or is over 1 MB; text that is not JSON; JSON
  that is not an object; a required field missing or null that the job itself does not supply;
- `Refusal` (refused before any decision): an array job with GPUs.
"""
from __future__ import annotations

import json
import os
import stat

from lib.gate.reasons import reason
from lib.ledger.audit import os_actor
from lib.gate.terms import JSONTooDeep, loads_bounded, shown

NO_VAL = 0xFFFFFFFE  # Slurm's "not set" for 32-bit fields (INFINITE is 0xFFFFFFFF)
# without these the gate cannot judge the job (a gate failure); a missing data_snapshot is not among
# them: the decision defers it with `no-snapshot`, as it does for the command line
REQUIRED = ("run_id", "team", "kind", "gpus", "gpu_mem_gb", "max_runtime_hours", "budget_gpu_hours",
            "checkpoint_supported", "expected_interruptions", "capacity")
MAX_REQUEST_FILE_BYTES = 1_000_000
COMMENT_HELP = ("put the request in --comment as JSON, e.g. --comment='{\"run_id\": \"r1\", \"kind\": "
                "\"exploratory\", \"gpu_mem_gb\": 80, \"budget_gpu_hours\": 4, \"estimated_gpu_hours\": 2, "
                "\"checkpoint_supported\": true, \"expected_interruptions\": 0, \"data_snapshot\": \"S\"}' "
                "or --comment=@request.json")


class IncompleteRequest(Exception):
    """The job brings no complete gate request (a gate failure: the failure policy applies)."""


class Refusal(Exception):
    """The hook refuses the job by itself, before any decision (e.g. an array job with GPUs)."""


class Rejected(Exception):
    """The job's request is invalid before any decision can be taken (its JSON nests too deeply):
    an invalid-request reject, never a gate failure. `problems`: the invalid-request reasons."""

    def __init__(self, problems: list):
        super().__init__("; ".join(p["message"] for p in problems))
        self.problems = problems


def _slurm_int(value) -> int | None:
    """A Slurm 32-bit count/minutes field as int; None when unset (NO_VAL, INFINITE, empty, nil) or
    not a finite number."""
    if value is None:
        return None
    try:
        n = int(float(str(value).strip()))
    except (ValueError, OverflowError):  # OverflowError: "1e999" is inf
        return None
    return None if n >= NO_VAL or n < 0 else n


def gpu_count(spec) -> int | None:
    """GPUs named in one tres string: 'gres:gpu:2', 'gres/gpu:2', 'gpu:6', 'gres:gpu:a100:2',
    'gres/gpu=2', 'cpu=4,gres/gpu:1'. A gpu entry without a count means 1. None when no gpu entry."""
    if not spec:
        return None
    total = None
    for entry in str(spec).split(","):
        entry = entry.strip()
        for prefix in ("gres:", "gres/", "tres:", "tres/"):
            if entry.startswith(prefix):
                entry = entry[len(prefix):]
        entry = entry.replace("=", ":")
        parts = entry.split(":")
        if not parts or parts[0].lower() != "gpu":
            continue
        count = 1
        if len(parts) > 1 and parts[-1].isascii() and parts[-1].isdigit():
            # more digits than any count Slurm takes: the decision refuses it as too many GPUs
            count = int(parts[-1]) if len(parts[-1]) <= 18 else 10 ** 18
        total = (total or 0) + count
    return total


def job_gpus(fields: dict) -> int | None:
    """Total GPUs the job asks for, the largest of its per-job, per-node × nodes, per-task × tasks and
    per-socket × nodes forms (a job may carry several; judging the largest never under-counts)."""
    nodes = _slurm_int(fields.get("min_nodes")) or 1
    tasks = _slurm_int(fields.get("num_tasks")) or 1
    forms = []
    if (n := gpu_count(fields.get("tres_per_job"))) is not None:
        forms.append(n)
    if (n := gpu_count(fields.get("tres_per_node"))) is not None:
        forms.append(n * nodes)
    if (n := gpu_count(fields.get("tres_per_task"))) is not None:
        forms.append(n * tasks)
    if (n := gpu_count(fields.get("tres_per_socket"))) is not None:
        forms.append(n * nodes)
    return max(forms) if forms else None


def runtime_hours(time_limit) -> float | None:
    """Slurm's time_limit (minutes) as hours; None when unset or unlimited."""
    minutes = _slurm_int(time_limit)
    return None if minutes is None or minutes == 0 else minutes / 60.0


def capacity_for(partition, preemptible_partitions, default_partition=None) -> str:
    """'preemptible' when any partition the job may run in is one of the team's preemptible ones."""
    names = [p.strip() for p in str(partition or default_partition or "").split(",") if p.strip()]
    preemptible = set(preemptible_partitions or ())
    return "preemptible" if any(p in preemptible for p in names) else "stable"


def parse_comment(comment, *, work_dir=None, uid=None) -> dict:
    """The request fields the job's --comment carries: a JSON object, or @FILE naming a JSON file.

    Raises IncompleteRequest when there is no comment, it is neither, or the file cannot be used;
    Rejected when its JSON nests deeper than MAX_JSON_DEPTH levels (see the module docstring).
    A request file must be a regular file owned by the submitting user (any file when root submits),
    under 1 MB: the hook runs as SlurmUser and must not read other people's files on a user's behalf.
    Bytes that are not UTF-8 are kept as lone surrogates (as Python reads them from the command
    line): inside a JSON string the decision refuses them by field, elsewhere the text is not JSON.
    """
    text = (comment or "").strip()
    if not text:
        raise IncompleteRequest(f"the job has no --comment with the gate request; {COMMENT_HELP}")
    source = "--comment"
    if text.startswith("@"):
        path = text[1:].strip()
        if not os.path.isabs(path):
            path = os.path.join(work_dir or "/", path)
        source = f"request file {path}"
        # open first (never following a symlink), then check what was opened: no window in which
        # a swapped link could make SlurmUser read another user's file
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            raise IncompleteRequest(f"{source} cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            submitter = _slurm_int(uid)
            owner_ok = submitter is not None and (submitter == 0 or st.st_uid == submitter)
            if not stat.S_ISREG(st.st_mode) or not owner_ok:
                raise IncompleteRequest(f"{source} must be a regular file owned by the submitting user")
            if st.st_size > MAX_REQUEST_FILE_BYTES:
                raise IncompleteRequest(f"{source} is larger than {MAX_REQUEST_FILE_BYTES} bytes")
            try:
                text = f.read(MAX_REQUEST_FILE_BYTES + 1).removeprefix(b"\xef\xbb\xbf").decode(
                    "utf-8", "surrogateescape")
            except OSError as exc:
                raise IncompleteRequest(f"{source} cannot be read ({exc})") from None
    try:
        # NaN / Infinity are read as floats, integers of any length as ints: the decision refuses
        # them by field name (never accepted, never a gate failure)
        obj = loads_bounded(text)
    except JSONTooDeep as exc:
        raise Rejected([reason(
            "invalid-request", f"the {source} JSON is {exc}; a request is one object whose fields nest "
            "at most two levels (pilot, stop_policy.early_stop)", field="request",
            fix=f"send the request as a flat JSON object; {COMMENT_HELP}")]) from None
    except json.JSONDecodeError as exc:
        raise IncompleteRequest(
            f"{source} is not a JSON object ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f"{COMMENT_HELP}") from None
    if not isinstance(obj, dict):
        raise IncompleteRequest(f"{source} is JSON but not an object; {COMMENT_HELP}")
    return obj


def build_request(fields: dict, *, preemptible_partitions=None, default_partition=None):
    """(request, time_limit_min_to_set, notes) from the job description and its comment.

    `preemptible_partitions`: the team's list, for the capacity (None: stable; lib.slurm.judge
    completes it from the team's policy when the decider reads that).
    Raises IncompleteRequest when required fields are missing, Refusal for jobs the gate cannot take,
    Rejected for a comment nested too deeply (see the module docstring).
    """
    if str(fields.get("array") or "").strip():
        raise Refusal("array jobs that request GPUs are not gated task by task: submit each run as its "
                      "own job (one run ID each)")
    req = parse_comment(fields.get("comment"), work_dir=fields.get("work_dir"), uid=fields.get("uid"))
    notes = []

    def enforce(key, value, unit=""):
        if value is None:
            return
        if key in req and req[key] != value:
            notes.append(f"{key} from the job ({shown(value)}{unit}) replaces the comment's {shown(req[key])}")
        req[key] = value

    enforce("team", (fields.get("account") or "").strip() or None)
    gpus = job_gpus(fields)
    enforce("gpus", gpus)
    hours = runtime_hours(fields.get("time_limit"))
    time_to_set = None
    runtime = req.get("max_runtime_hours")
    if hours is not None:
        enforce("max_runtime_hours", hours, " h")
    elif _is_number(runtime) and 0 < runtime < float("inf"):
        # no --time: the job gets the judged runtime as its limit, so Slurm enforces it (at most
        # Slurm's largest limit: a runtime beyond it is refused by the decision anyway)
        time_to_set = max(1, int(-(-min(runtime * 60, NO_VAL - 1) // 1)))
    if not req.get("run_id") and (fields.get("name") or "").strip():
        req["run_id"] = fields["name"].strip()
    req["capacity"] = capacity_for(fields.get("partition"), preemptible_partitions, default_partition)
    missing = [k for k in REQUIRED if req.get(k) is None]
    if "estimated_gpu_hours" not in req and "pilot" not in req:
        missing.append("estimated_gpu_hours or pilot")
    if missing:
        hint = {"team": "--account=TEAM", "gpus": "--gres=gpu:N or --gpus=N",
                "max_runtime_hours": "--time=HH:MM:SS", "run_id": "--job-name=RUN_ID"}
        how = "; ".join(f"{k}: {hint.get(k, '--comment')}" for k in missing)
        raise IncompleteRequest(f"missing request fields: {', '.join(missing)} ({how})")
    return req, time_to_set, notes


def job_actor(fields: dict) -> str | None:
    """Who submitted the job, as the ledger records actors ("NAME (uid N)"), from the user and uid
    Slurm reports; None when the job description carries no uid."""
    uid = _slurm_int(fields.get("uid"))
    if uid is None:
        return None
    name = fields.get("user")
    return os_actor(uid, name.strip()[:64] if isinstance(name, str) and name.strip() else None)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)

