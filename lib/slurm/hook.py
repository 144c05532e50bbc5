"""Slurm's submit hook for the gate: a job description in, the gate's decision out.

`lib/slurm/job_submit.lua` runs it for every job that requests GPUs (imported, so its bytecode is cached;
`python -S lib/slurm/hook.py ARGS` does the same):

    <python> -S -c 'import sys, lib.slurm.hook as h; sys.exit(h.main())' --account A --partition P
             --time-limit MIN --name N --comment C --tres-per-node ... --tres-per-job ... --num-tasks ...

It turns the job description into a gate request (lib.slurm.comment.build_request), decides and records it as
`lib.ledger.deciding.submit_request(origin="slurm")` does (`submit_in_ledger`: the same decision `python -m lib
submit` and the what-if form use, in one write transaction) and answers on stdout with protocol lines the Lua reads, plus an exit code:

    MSG <one readable line for the user>     NAME <run id: becomes the job name>
    MSG <on an admit, from the warm gate server: the team's month budget left and its projected run-out
         day, one line (`budget_text`)>
    TIME <minutes: becomes the job's time limit: the comment's runtime for a job without --time, or a
          lower one from the spend limit or the calibrated wall clock, lib.slurm.limits>
    FLAG <admin comment for a flagged job>
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

What the gate judges, and what is a gate failure:
- judged (exit 0 or 1, whatever the failure policy): a comment that is a JSON object with every
  required field present (or supplied by the job), whatever the fields hold. A value the gate cannot
  take is a `reject` naming the field (exit 1): a wrong type, NaN / Infinity / -Infinity, an integer
  too large for any float ("too large"), text that is not valid Unicode (a lone surrogate, as a
  \\udXXX escape or as bytes that are not UTF-8 inside a JSON string: "must be valid Unicode text"),
  a string longer than its field allows, an unknown field (named, whatever it holds), nested junk;
- rejected before any decision (exit 1, nothing recorded): a comment whose JSON nests deeper than 64
  levels (lib.gate.terms.MAX_JSON_DEPTH), refused before it is parsed; an array job with GPUs;
- an incomplete request, a gate failure (the failure policy below applies): no comment, an @FILE that
  cannot be used (unreadable, not a regular file of the submitter, over 1 MB), text that is not JSON,
  JSON that is not an object, a required field missing or null that the job does not supply.

Failure policy (TG_ON_GATE_FAILURE): when the gate cannot judge a job — the ledger stays locked past
TG_GATE_TIMEOUT_S, the gate crashes, or the job brings an incomplete request (above) — `refuse`
(default) refuses it with the reason; `accept-and-flag` lets it through, sets its admin comment, tells
the user, and appends a JSON line to TG_FLAG_LOG (the warm server's own, when it answers). A request
that the gate judges (defer, or reject as invalid) is always refused.

Speed: Lua starts this with `python -S` (no site .pth processing); the client imports only os, sys
and _socket. When a warm gate server is listening on TG_GATE_SOCKET
(`python -m lib.slurm.server --socket PATH`, started by cluster.sh), the script
only forwards the job description to it; otherwise it decides in-process (imports DuckDB: slower,
same answer). The server decides from live state in memory and journals each decision before it
answers (lib.slurm.live).
"""
from __future__ import annotations

import os
import sys

EXIT_ADMIT, EXIT_REFUSED, EXIT_FAILED_REFUSED, EXIT_FAILED_ACCEPTED = 0, 1, 3, 4
FAILURE_POLICIES = ("refuse", "accept-and-flag")
FIELDS = ("account", "partition", "time_limit", "name", "comment", "user", "uid", "work_dir",
          "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket", "num_tasks",
          "min_nodes", "array")
# the job description -> request step lives in lib.slurm.comment (not imported by the socket client);
# its names are reachable here as before (lib.slurm.hook.build_request, ...), imported on first use
_FROM_COMMENT = frozenset(("COMMENT_HELP", "MAX_REQUEST_FILE_BYTES", "NO_VAL", "REQUIRED", "IncompleteRequest",
                           "Refusal", "Rejected", "build_request", "capacity_for", "gpu_count", "job_gpus",
                           "parse_comment", "runtime_hours"))
FLAG_LOG_FIELD_CHARS = 4096  # a job field's characters the flag log keeps (a comment may be megabytes)


def __getattr__(name):
    if name in _FROM_COMMENT:
        from lib.slurm import comment  # on first use: the socket client (`python -S`) never needs it
        return getattr(comment, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Outcome:
    """What the hook answers: exit code and protocol lines."""

    def __init__(self, code: int, msg: str = "", *, name=None, time_min=None, flag=None,
                 decision=None, raw_lines=None, budget=None):
        self.code, self.msg, self.name, self.time_min, self.flag = code, msg, name, time_min, flag
        self.decision, self.raw_lines, self.budget = decision, raw_lines, budget

    def lines(self) -> list[str]:
        if self.raw_lines is not None:
            return list(self.raw_lines)
        out = []
        if self.msg:
            out.append("MSG " + _one_line(self.msg))
        if self.msg and self.budget:
            out.append("MSG " + _one_line(self.budget))
        if self.name:
            out.append("NAME " + _one_line(self.name))
        if self.time_min is not None:
            out.append(f"TIME {int(self.time_min)}")
        if self.flag:
            out.append("FLAG " + _one_line(self.flag))
        return out


def _one_line(text) -> str:
    return " ".join(str(text).split())


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
                     timeout_s: float = 5.0, actor: str | None = None, policy_out: dict | None = None) -> dict:
    """Decide and record the request in-process, through the write path `python -m lib submit`
    takes (lib.ledger.deciding.submit_request, origin "slurm"): what a stopped gate server
    journaled goes into the ledger first, then the decider lock, the writer turn and one write
    transaction. The capacity is set from the team's preemptible_partitions inside that transaction
    (`prepare`), so the hook opens the ledger once; `policy_out`, when given, receives the team's
    policy read there (for the time limit, lib.slurm.limits)."""
    # here, not at the top: the socket client (`python -S`) imports this module and needs none of it
    from lib.authority.settings import configured_authority
    from lib.gate.terms import utcnow
    from lib.ledger.deciding import submit_request
    from lib.slurm.comment import capacity_for
    from lib.slurm.journal import drain_left_over_journal

    drain_left_over_journal(db, timeout_s=timeout_s)  # what a stopped gate server answered comes first

    def with_capacity(req: dict, policy) -> dict:
        req["capacity"] = capacity_for(partition, (policy or {}).get("preemptible_partitions"), default_partition)
        if policy_out is not None and policy:
            policy_out.update(policy)
        return req

    # whole seconds, like Slurm's own times: the reservation then never starts after the job's Start
    # as sacct reports it (a job admitted and started within one second)
    return submit_request(request, db=db, origin="slurm", now=utcnow().replace(microsecond=0),
                          timeout_s=timeout_s, actor=actor, prepare=with_capacity,
                          authority=configured_authority())


def gate(fields: dict, config: dict, *, submit=None, preemptible=None, policy_of=None) -> Outcome:
    """Judge one job. Never raises: gate failures go through the failure policy.

    By default the request goes to the ledger (`submit_in_ledger`, which also reads the team's
    policy: its preemptible partitions and time-limit keys); the gate server and tests pass
    `submit(request) -> decision`, `preemptible` (a list, or team -> list) and `policy_of` (team ->
    policy or None: the defaults) instead. Which job comments are judged, rejected or a gate failure:
    lib.slurm.comment. An admitted job's time limit: lib.slurm.limits.
    """
    # here, not at the top: the socket client (`python -S`) imports this module and needs none of it
    from lib.gate.request import run_id_problem
    from lib.slurm.comment import IncompleteRequest, Refusal, Rejected, build_request, job_actor, runtime_hours
    from lib.slurm.limits import admitted_time_limit
    run_id = None
    try:
        if config["on_failure"] not in FAILURE_POLICIES:
            # a typo in the policy must not open the gate: treat it as refuse, and say so
            config = {**config, "on_failure": "refuse",
                      "policy_note": f"unknown TG_ON_GATE_FAILURE {config['on_failure']!r}, using refuse"}
        request, time_to_set, notes = build_request(
            fields, preemptible_partitions=preemptible or [],
            default_partition=config["default_partition"])
        # a run ID only when it is one (a failure may rename the job after it)
        run_id = request["run_id"] if run_id_problem(request.get("run_id")) is None else None
        policy: dict = {}
        if submit is None:
            decision = submit_in_ledger(request, partition=fields.get("partition"),
                                        default_partition=config["default_partition"],
                                        db=config["db"], timeout_s=config["timeout_s"], actor=job_actor(fields),
                                        policy_out=policy)
        else:
            decision = submit(request)
            team = request.get("team")
            policy = (policy_of(team) if policy_of is not None and isinstance(team, str) else None) or {}
        limit = None
        if decision.get("state") == "admit":
            asked = runtime_hours(fields.get("time_limit"))
            limit = admitted_time_limit(request, decision, policy,
                                        round(asked * 60) if asked is not None else time_to_set)
    except Refusal as exc:
        return Outcome(EXIT_REFUSED, f"training-gate: refused: {exc}")
    except Rejected as exc:  # invalid before any decision: a reject (nothing recorded), never a failure
        from lib.gate.admission import reject  # not at the top: see `gate`'s imports
        named = {k: (fields.get(f) or "").strip() or None for k, f in (("run_id", "name"), ("team", "account"))}
        return outcome_for(reject(named, exc.problems))
    except IncompleteRequest as exc:
        return failure(fields, config, f"incomplete request: {exc}", run_id=run_id)
    except Exception as exc:  # locked ledger, unreadable ledger, a bug: the gate failed
        return failure(fields, config, f"{type(exc).__name__}: {exc}", run_id=run_id)
    return outcome_for(decision, time_to_set=time_to_set, notes=notes, limit=limit)


def outcome_for(decision: dict, *, time_to_set=None, notes=(), limit: dict | None = None) -> Outcome:
    """The hook's answer to a decision: admit -> accept; defer / reject -> one line, every reason + fix.
    Either way the line ends with the job description's `notes` and then the decision's own notes
    (each with its code and fix; a wall clock above the time limit as a WARNING). An admitted job's
    time limit: `limit` (lib.slurm.limits.admitted_time_limit) when it sets one, else `time_to_set`
    (the comment's runtime for a job without --time); its text ends the admit line."""
    # not at the top: the socket client needs none of it
    from lib.gate.reasons import WARNING_NOTES, note_text, notes_of
    from lib.slurm.comment import _is_number
    said = [*notes, *(("WARNING " if n.get("code") in WARNING_NOTES else "note ") + note_text(n)
                      for n in notes_of(decision))]
    if limit and limit.get("minutes") is not None:
        said.append(limit["text"])
        time_to_set = limit["minutes"]
    extra = (" (" + "; ".join(said) + ")") if said else ""
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


def budget_text(team: str, budget: float, left: float, runout: tuple | None) -> str:
    """The admit's budget line: the team's month budget left (GPU-hours: budget less what ended this
    month and what admitted reservations hold, as the gate counts them) and the burn-down's projected
    run-out day at P50 and P90 (`runout`: (day or None, day or None); None: not known yet)."""
    head = (f"training-gate: team {team} budget this month: {max(left, 0.0):,.1f} of {budget:,.1f} GPU-h left"
            + (f" ({-left:,.1f} GPU-h over)" if left < 0 else ""))
    if runout is None:
        return head + "; projected run-out: not known yet (the burn-down is being computed)"
    p50, p90 = runout
    if p50 is None and p90 is None:
        return head + "; not projected to run out this month (P50 and P90)"
    days = [f"{d:%b %d} at {q}" for q, d in (("P50", p50), ("P90", p90)) if d is not None]
    return (head + "; projected to run out " + ", ".join(days)
            + ("" if p50 is not None else " (not at P50)"))


def failure(fields: dict, config: dict, why: str, *, run_id=None) -> Outcome:
    """Apply the failure policy to a gate that could not judge the job, and log it."""
    policy = config.get("on_failure")
    accept = policy == "accept-and-flag"
    _flag_log(config, {"action": "accepted-and-flagged" if accept else "refused", "why": why,
                       "run_id": run_id, "policy": policy, "note": config.get("policy_note"),
                       "job": {k: _clipped(fields.get(k)) for k in FIELDS}})
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


def _clipped(value):
    if isinstance(value, str) and len(value) > FLAG_LOG_FIELD_CHARS:
        return f"{value[:FLAG_LOG_FIELD_CHARS]}... ({len(value)} characters)"
    return value


def _flag_log(config: dict, record: dict) -> None:
    path = config.get("flag_log")
    if not path:
        return
    # here, not at the top: the socket client (`python -S`) logs only when the server does not answer
    import datetime as _dt

    from lib.gate.terms import json_text
    record = {"at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **record}
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json_text(record, sort_keys=True) + "\n")  # any text: lone surrogates as \\u escapes
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
    from lib.slurm.wire import exchange  # _socket and time only (lib.slurm.wire)
    got = exchange(socket_path, fields, env_config, timeout_s)
    if got is None:
        return None
    code, rest = got
    return Outcome(code, raw_lines=[ln for ln in rest.split("\n") if ln])


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        # the older way to start the warm gate server: this process becomes `python -m
        # lib.slurm.server` (no import of it here: the server imports this module)
        os.execv(sys.executable, [sys.executable, "-m", "lib.slurm.server", *argv[1:]])
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
    import site  # only now: the hook starts with -S and needs site-packages only to decide here
    if not any(p.endswith("site-packages") for p in sys.path):
        site.main()


if __name__ == "__main__":
    # run as a file (`python -S lib/slurm/hook.py`): import lib from the repo, not from lib/ itself
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path[0] = os.path.dirname(os.path.dirname(here))
    sys.exit(main())
