"""Slurm's submit hook for the gate: a job description in, the gate's decision out.

`lib/slurm/job_submit.lua` runs it for every job that requests GPUs (imported, so its bytecode is cached;
`python -S lib/slurm/hook.py ARGS` does the same):

    <python> -S -c 'import sys, lib.slurm.hook as h; sys.exit(h.main())' --account A --partition P
             --time-limit MIN --name N --comment C --tres-per-node ... --tres-per-job ... --num-tasks ...

It turns the job description into a gate request (see `build_request`), decides and records it as
`lib.ledger.service.submit_request(origin="slurm")` does (`submit_in_ledger`: the same decision `python -m lib
submit` and the what-if form use, in one write transaction) and answers on stdout with protocol lines the Lua reads, plus an exit code:

    MSG <one readable line for the user>     NAME <run id: becomes the job name>
    TIME <minutes: becomes the job's time limit>   FLAG <admin comment for a flagged job>
    exit 0 admitted | 1 refused by the gate | 3 gate failed, refused | 4 gate failed, accepted and flagged

The --comment convention (what Slurm's job description cannot say):
    --comment='{"kind": "exploratory", "budget_gpu_hours": 4, "estimated_gpu_hours": 2, ...}'
    --comment=@/path/to/request.json   (or @relative.json, relative to the job's working directory; the
                                        file must belong to the submitting user)
Any request field may appear there (run_id, kind, gpu_mem_gb, budget_gpu_hours, checkpoint_supported,
expected_interruptions, data_snapshot, estimated_gpu_hours | pilot, stop_policy, ...). The job
description is authoritative for what Slurm itself enforces: GPUs (from the tres_per_* fields), the time
limit (-> max_runtime_hours), the partition (-> capacity, via the team's preemptible_partitions) and the
account (-> team); the comment fills them only where the job leaves them unset (a comment's
max_runtime_hours without --time becomes the job's time limit, so Slurm enforces what was judged).
run_id: the comment's, else the job name; the job is renamed to the run ID so that the sacct import
lands the job's actual GPU-hours on the same run.

Failure policy (TG_ON_GATE_FAILURE): when the gate cannot judge a job — the ledger stays locked past
TG_GATE_TIMEOUT_S, the gate crashes, or the job brings no complete request (no or malformed comment,
missing fields) — `refuse` (default) refuses it with the reason; `accept-and-flag` lets it through,
sets its admin comment, tells the user, and appends a JSON line to TG_FLAG_LOG (the warm server's
own, when it answers). A complete request that the gate judges (defer, or reject as invalid) is
always refused.

Speed: Lua starts this with `python -S` (no site .pth processing); the client imports only os, sys
and _socket. When a warm gate server is listening on TG_GATE_SOCKET
(`python -m lib.slurm.hook serve --socket PATH`, lib.slurm.server, started by cluster.sh), the script
only forwards the job description to it; otherwise it decides in-process (imports DuckDB: slower,
same answer). The server decides from live state in memory and journals each decision before it
answers (lib.slurm.live).
"""
from __future__ import annotations

import os
import sys

EXIT_ADMIT, EXIT_REFUSED, EXIT_FAILED_REFUSED, EXIT_FAILED_ACCEPTED = 0, 1, 3, 4
FAILURE_POLICIES = ("refuse", "accept-and-flag")
NO_VAL = 0xFFFFFFFE  # Slurm's "not set" for 32-bit fields (INFINITE is 0xFFFFFFFF)
# without these the gate cannot judge the job (a gate failure); a missing data_snapshot is not among
# them: the decision defers it with `no-snapshot`, as it does for the command line
REQUIRED = ("run_id", "team", "kind", "gpus", "gpu_mem_gb", "max_runtime_hours", "budget_gpu_hours",
            "checkpoint_supported", "expected_interruptions", "capacity")
FIELDS = ("account", "partition", "time_limit", "name", "comment", "user", "uid", "work_dir",
          "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket", "num_tasks",
          "min_nodes", "array")
MAX_REQUEST_FILE_BYTES = 1_000_000
COMMENT_HELP = ("put the request in --comment as JSON, e.g. --comment='{\"run_id\": \"r1\", \"kind\": "
                "\"exploratory\", \"gpu_mem_gb\": 80, \"budget_gpu_hours\": 4, \"estimated_gpu_hours\": 2, "
                "\"checkpoint_supported\": true, \"expected_interruptions\": 0, \"data_snapshot\": \"S\"}' "
                "or --comment=@request.json")


class IncompleteRequest(Exception):
    """The job brings no complete gate request (a gate failure: the failure policy applies)."""


class Refusal(Exception):
    """The hook refuses the job by itself, before any decision (e.g. an array job with GPUs)."""


class Outcome:
    """What the hook answers: exit code and protocol lines."""

    def __init__(self, code: int, msg: str = "", *, name=None, time_min=None, flag=None,
                 decision=None, raw_lines=None):
        self.code, self.msg, self.name, self.time_min, self.flag = code, msg, name, time_min, flag
        self.decision, self.raw_lines = decision, raw_lines

    def lines(self) -> list[str]:
        if self.raw_lines is not None:
            return list(self.raw_lines)
        out = []
        if self.msg:
            out.append("MSG " + _one_line(self.msg))
        if self.name:
            out.append("NAME " + _one_line(self.name))
        if self.time_min is not None:
            out.append(f"TIME {int(self.time_min)}")
        if self.flag:
            out.append("FLAG " + _one_line(self.flag))
        return out


def _one_line(text) -> str:
    return " ".join(str(text).split())


# ------------------------------------------------------------------------ job description -> request

def _slurm_int(value) -> int | None:
    """A Slurm 32-bit count/minutes field as int; None when unset (NO_VAL, INFINITE, empty, nil)."""
    if value is None:
        return None
    try:
        n = int(float(str(value).strip()))
    except ValueError:
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
        if len(parts) > 1 and parts[-1].isdigit():
            count = int(parts[-1])
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

    Raises IncompleteRequest when there is no comment, it is neither, or the file cannot be used.
    A request file must be a regular file owned by the submitting user (any file when root submits),
    under 1 MB: the hook runs as SlurmUser and must not read other people's files on a user's behalf.
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
        except OSError as exc:
            raise IncompleteRequest(f"{source} cannot be read ({exc.strerror})") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            submitter = _slurm_int(uid)
            owner_ok = submitter is not None and (submitter == 0 or st.st_uid == submitter)
            import stat as _stat
            if not _stat.S_ISREG(st.st_mode) or not owner_ok:
                raise IncompleteRequest(f"{source} must be a regular file owned by the submitting user")
            if st.st_size > MAX_REQUEST_FILE_BYTES:
                raise IncompleteRequest(f"{source} is larger than {MAX_REQUEST_FILE_BYTES} bytes")
            try:
                text = f.read(MAX_REQUEST_FILE_BYTES + 1).decode("utf-8-sig")
            except (OSError, UnicodeDecodeError) as exc:
                raise IncompleteRequest(f"{source} cannot be read ({exc})") from None
    import json
    try:
        # NaN / Infinity stay strings: the decision then rejects them as not numbers (never accepted)
        obj = json.loads(text, parse_constant=str)
    except json.JSONDecodeError as exc:
        raise IncompleteRequest(
            f"{source} is not a JSON object ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            f"{COMMENT_HELP}") from None
    if not isinstance(obj, dict):
        raise IncompleteRequest(f"{source} is JSON but not an object; {COMMENT_HELP}")
    return obj


def build_request(fields: dict, *, preemptible_partitions=None, default_partition=None):
    """(request, time_limit_min_to_set, notes) from the job description and its comment.

    `preemptible_partitions`: the team's list, or a callable team -> list (looked up in the ledger).
    Raises IncompleteRequest when required fields are missing, Refusal for jobs the gate cannot take.
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
            notes.append(f"{key} from the job ({value}{unit}) replaces the comment's {req[key]!r}")
        req[key] = value

    enforce("team", (fields.get("account") or "").strip() or None)
    gpus = job_gpus(fields)
    enforce("gpus", gpus)
    hours = runtime_hours(fields.get("time_limit"))
    time_to_set = None
    if hours is not None:
        enforce("max_runtime_hours", hours, " h")
    elif _is_number(req.get("max_runtime_hours")) and 0 < req["max_runtime_hours"] < float("inf"):
        # no --time: the job gets the judged runtime as its limit, so Slurm enforces it
        time_to_set = max(1, int(-(-req["max_runtime_hours"] * 60 // 1)))
    if not req.get("run_id") and (fields.get("name") or "").strip():
        req["run_id"] = fields["name"].strip()
    team = req.get("team")
    if callable(preemptible_partitions):
        preemptible_partitions = preemptible_partitions(team) if isinstance(team, str) else []
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


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# ------------------------------------------------------------------------ deciding

def config_from_env(env=None) -> dict:
    env = os.environ if env is None else env
    return {
        "db": env.get("GATE_DB") or None,
        "on_failure": (env.get("TG_ON_GATE_FAILURE") or "refuse").strip(),
        "timeout_s": _float(env.get("TG_GATE_TIMEOUT_S"), 5.0),
        "flag_log": env.get("TG_FLAG_LOG") or None,
        "default_partition": env.get("TG_DEFAULT_PARTITION") or None,
        "socket": env.get("TG_GATE_SOCKET") or None,
    }


def _float(text, default):
    try:
        return float(text)
    except (TypeError, ValueError):
        return default


def submit_in_ledger(request: dict, *, partition=None, default_partition=None, db=None,
                     timeout_s: float = 5.0, closer=None) -> dict:
    """Decide and record the request as lib.ledger.service.submit_request(origin="slurm") does, with the
    capacity read from the team's preemptible_partitions inside the same write transaction.

    One ledger open instead of two (a read-only open for the team's partitions, then submit_request)
    halves the hook's time: a DuckDB open costs ~30 ms here. It uses the service layer's own
    decide-and-record steps, so the hook and `python -m lib submit` decide and record alike.
    `closer` (a contextlib.ExitStack): the ledger is closed when the caller closes it, so the warm
    server can answer Slurm right after COMMIT (durable) and pay DuckDB's checkpoint-on-close after.
    """
    import lib.ledger.service as store
    from lib.gate.terms import utcnow
    from lib.ledger.connection import open_ledger, transaction
    from lib.slurm.live import drain_left_over_journal

    drain_left_over_journal(db, timeout_s=timeout_s)  # what a stopped gate server answered comes first

    team = request.get("team")
    # whole seconds, like Slurm's own times: the reservation then never starts after the job's Start
    # as sacct reports it (a job admitted and started within one second)
    now = utcnow().replace(microsecond=0)
    import contextlib
    with contextlib.ExitStack() as own:
        con = (closer if closer is not None else own).enter_context(
            open_ledger(db, read_only=False, timeout_s=timeout_s))
        with transaction(con):
            policy = store.team_policy(con, team)
            request["capacity"] = capacity_for(partition, (policy or {}).get("preemptible_partitions"),
                                               default_partition)
            decision, _ = store.decide_in_ledger(con, request, now)
            store.record_decision(con, request, decision, "slurm", now)
    return decision


def gate(fields: dict, config: dict, *, submit=None, preemptible=None, closer=None) -> Outcome:
    """Judge one job. Never raises: gate failures go through the failure policy.

    By default the request goes to the ledger (`submit_in_ledger`, which also reads the team's
    preemptible partitions); tests may pass `submit(request) -> decision` and `preemptible` (a list,
    or team -> list) instead.
    """
    run_id = None
    try:
        if config["on_failure"] not in FAILURE_POLICIES:
            # a typo in the policy must not open the gate: treat it as refuse, and say so
            config = {**config, "on_failure": "refuse",
                      "policy_note": f"unknown TG_ON_GATE_FAILURE {config['on_failure']!r}, using refuse"}
        request, time_to_set, notes = build_request(
            fields, preemptible_partitions=preemptible or [],
            default_partition=config["default_partition"])
        run_id = request.get("run_id")
        if submit is None:
            decision = submit_in_ledger(request, partition=fields.get("partition"),
                                        default_partition=config["default_partition"],
                                        db=config["db"], timeout_s=config["timeout_s"], closer=closer)
        else:
            decision = submit(request)
    except Refusal as exc:
        return Outcome(EXIT_REFUSED, f"training-gate: refused: {exc}")
    except IncompleteRequest as exc:
        return failure(fields, config, f"incomplete request: {exc}", run_id=run_id)
    except Exception as exc:  # locked ledger, unreadable ledger, a bug: the gate failed
        return failure(fields, config, f"{type(exc).__name__}: {exc}", run_id=run_id)
    return outcome_for(decision, time_to_set=time_to_set, notes=notes)


def outcome_for(decision: dict, *, time_to_set=None, notes=()) -> Outcome:
    """The hook's answer to a decision: admit -> accept; defer / reject -> one line, every reason + fix."""
    extra = (" (" + "; ".join(notes) + ")") if notes else ""
    if decision.get("state") == "admit":
        est = decision.get("estimate") or {}
        judged, reserved = est.get("judged_gpu_hours"), decision.get("reserved_gpu_hours")
        msg = (f"training-gate: admitted run {decision.get('run_id')} (team {decision.get('team')}"
               + (f", judged {judged:.2f} GPU-h" if _is_number(judged) else "")
               + (f", reserved {reserved:.2f} GPU-h" if _is_number(reserved) else "") + ")" + extra)
        return Outcome(EXIT_ADMIT, msg, name=decision.get("run_id"), time_min=time_to_set,
                       decision=decision)
    reasons = decision.get("reasons") or []
    parts = [f"[{r.get('code')}] {r.get('message')} -> fix: {r.get('fix')}" for r in reasons]
    word = "deferred" if decision.get("state") == "defer" else "rejected"
    msg = (f"training-gate: {word} run {decision.get('run_id')} (team {decision.get('team')}): "
           + ("; ".join(parts) if parts else "no reason given") + extra)
    return Outcome(EXIT_REFUSED, msg, decision=decision)


def failure(fields: dict, config: dict, why: str, *, run_id=None) -> Outcome:
    """Apply the failure policy to a gate that could not judge the job, and log it."""
    policy = config.get("on_failure")
    accept = policy == "accept-and-flag"
    _flag_log(config, {"action": "accepted-and-flagged" if accept else "refused", "why": why,
                       "run_id": run_id, "policy": policy, "note": config.get("policy_note"),
                       "job": {k: fields.get(k) for k in FIELDS}})
    if accept:
        return Outcome(
            EXIT_FAILED_ACCEPTED,
            f"training-gate: WARNING the gate could not judge this job ({why}); accepted unchecked and "
            "flagged for review (TG_ON_GATE_FAILURE=accept-and-flag)",
            name=run_id, flag=f"training-gate: accepted unchecked: {why}"[:1000])
    return Outcome(
        EXIT_FAILED_REFUSED,
        f"training-gate: refused: the gate could not judge this job ({why}); fix what it names, or if "
        "the ledger is busy try again shortly (TG_ON_GATE_FAILURE=refuse)")


def _flag_log(config: dict, record: dict) -> None:
    path = config.get("flag_log")
    if not path:
        return
    import datetime as _dt
    import json

    from lib.gate.terms import json_default
    record = {"at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **record}
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True, default=json_default) + "\n")
    except OSError as exc:
        print(f"training-gate: cannot write the flag log {path}: {exc}", file=sys.stderr)


# ------------------------------------------------------------------------ command line, server, client

def parse_args(argv: list[str]) -> dict:
    """--key value pairs (dashes -> underscores) into the job description dict. No argparse: faster."""
    fields: dict = {}
    i = 0
    while i < len(argv):
        key = argv[i]
        if not key.startswith("--") or i + 1 >= len(argv):
            raise SystemExit(f"lib.slurm.hook: bad argument {key!r}")
        name = key[2:].replace("-", "_")
        if name not in FIELDS:
            raise SystemExit(f"lib.slurm.hook: unknown field {key!r}")
        value = argv[i + 1]
        fields[name] = value if value != "" else None
        i += 2
    return fields


def _emit(outcome: Outcome) -> int:
    sys.stdout.write("".join(line + "\n" for line in outcome.lines()))
    sys.stdout.flush()
    return outcome.code


def ask_server(socket_path: str, fields: dict, env_config: dict, timeout_s: float):
    """The warm server's Outcome, or None when no server listens (then decide in-process)."""
    from lib.slurm.wire import exchange  # os, sys and _socket only (lib.slurm.wire)
    got = exchange(socket_path, fields, env_config, timeout_s)
    if got is None:
        return None
    code, rest = got
    return Outcome(code, raw_lines=[ln for ln in rest.split("\n") if ln])


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:  # the warm gate server: lib.slurm.server
        from lib.slurm.server import serve

        def opt(name, default=None):
            return argv[argv.index(name) + 1] if name in argv else default
        max_mb = opt("--journal-max-mb")
        serve(opt("--socket", os.environ.get("TG_GATE_SOCKET")), db=opt("--db"),
              journal_max_mb=float(max_mb) if max_mb else None,
              journal_sync=opt("--journal-sync", os.environ.get("TG_GATE_JOURNAL_SYNC") or "FULL").upper(),
              flush_interval_s=float(opt("--flush-interval-s", 0.25)))
        return 0
    fields = parse_args(argv)
    config = config_from_env()
    if config["socket"]:
        try:
            answer = ask_server(config["socket"], fields, config, config["timeout_s"] + 8)
        except Exception as exc:  # the server took the job but did not answer: do not decide twice
            return _emit(failure(fields, config, f"gate server did not answer ({type(exc).__name__}: {exc})"))
        if answer is not None:
            return _emit(answer)
    _cold_imports()
    return _emit(gate(fields, config))


def _cold_imports() -> None:
    """Started with -S (no site): add site-packages the way a normal start would, then decide here."""
    if "duckdb" in sys.modules:
        return
    import site
    if not any(p.endswith("site-packages") for p in sys.path):
        site.main()


if __name__ == "__main__":
    # run as a file (`python -S lib/slurm/hook.py`): import lib from the repo, not from lib/ itself
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path[0] = os.path.dirname(os.path.dirname(here))
    sys.exit(main())
