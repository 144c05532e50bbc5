"""A Slurm job judged by the gate: `judge_job(fields, config, decider) -> Judged`.

Everything about the job happens here, once, whoever decides: its description and --comment become
a gate request (lib.slurm.comment.build_request), the team's policy completes its capacity (its
preemptible_partitions), a `JobDecider` decides and records it, and the answer is built: the exit
code, one readable line for the user, the run ID the job is renamed to, the time limit to set
(lib.slurm.limits), the admin flag. Two deciders take the same calls:

- the warm gate server's `lib.slurm.live.LiveGate` (lib.slurm.server): from live state in memory,
  journaled before the answer; the server settles the journal entry (`Judged.seq`) once the answer
  went out;
- `lib.slurm.in_process.InProcessDecider`, when no gate server runs (the hook's cold path): through
  `lib.ledger.deciding.submit_request(origin="slurm")`, the write path `python -m lib submit` takes,
  in one write transaction; nothing to settle.

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

Failure policy (config "on_failure", from TG_ON_GATE_FAILURE): when the gate cannot judge a job — the
ledger stays locked past the timeout, the gate crashes, or the job brings an incomplete request
(above) — `refuse` (default) refuses it with the reason; `accept-and-flag` lets it through, sets its
admin comment, tells the user, and appends a JSON line to the flag log (config "flag_log"). A request
that the gate judges (defer, or reject as invalid) is always refused.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Callable, Protocol, runtime_checkable

from lib.gate.admission import reject
from lib.gate.contracts import Decision, Policy, Request
from lib.gate.reasons import WARNING_NOTES, note_text, notes_of
from lib.gate.request import run_id_problem
from lib.gate.terms import naive_utc, utcnow
from lib.slurm.comment import (IncompleteRequest, Refusal, Rejected, _is_number, build_request, capacity_for,
                               job_actor, runtime_hours)
from lib.slurm import flag_log
from lib.slurm.limits import admitted_time_limit
from lib.slurm.wire import EXIT_ACCEPTED, EXIT_FAILED_ACCEPTED, EXIT_FAILED_REFUSED, EXIT_REFUSED

FAILURE_POLICIES = ("refuse", "accept-and-flag")

Prepare = Callable[[Request, Policy | None], Request]   # (request, the team's policy or None) -> the request to decide
Caller = tuple[int | None, int | None]                   # a socket peer's (uid, pid); (None, None): none


@dataclass(frozen=True)
class Decided:
    """What a JobDecider gives back for one request."""
    decision: Decision
    request: Request          # the request decided and recorded (as `prepare` completed it)
    policy: Policy | None     # the team's policy the decision read; None for an unknown team
    seq: int | None           # the decider's journal entry, to settle once the answer is out; None: nothing to settle


@runtime_checkable
class JobDecider(Protocol):
    """Who decides and records a Slurm job's request for `judge_job`: the warm gate server's
    `lib.slurm.live.LiveGate`, or `lib.slurm.in_process.InProcessDecider` without a server
    (tests/test_job_decider.py holds both to this list)."""

    def decide_job(self, request: Request, *, now: datetime, prepare: Prepare, actor: str | None = None,
                   caller: Caller = (None, None)) -> Decided:
        """Complete the request with `prepare(request, the team's policy or None)`, then decide and
        record it at `now` (naive UTC) with origin "slurm". `actor`: who submitted the job (the
        ledger's actor text); `caller`: the process that relayed it (a socket peer), when one did.
        Raises when it cannot decide (a locked ledger, a full disk, ...): a gate failure."""

    def settle(self, seq: int | None, answered: bool) -> None:
        """The answer for decision `seq` (Decided.seq) went out (or not: then it is undone)."""


@dataclass(frozen=True)
class Judged:
    """A job's answer: its exit code (lib.slurm.wire.EXIT_*) and what the hook's protocol lines say
    (`lines()`), with what was decided, for the caller that goes on from here (the gate server)."""
    code: int
    msg: str = ""                   # one readable line for the user
    name: str | None = None         # the run ID: becomes the job's name
    time_min: int | None = None     # minutes: becomes the job's time limit; None leaves the job's
    flag: str | None = None         # the admin comment of a job accepted unchecked
    decision: Decision | None = None    # None when nothing was decided (a refusal, a gate failure)
    request: Request | None = None      # the request the decider decided; None when none did
    seq: int | None = None              # the decider's journal entry to settle (Decided.seq)
    budget: str | None = None       # the admit's budget line (the warm server adds it: lib.slurm.runouts)
    hold: str | None = None         # a held job's admin comment (the warm server's, lib.slurm.holds)

    def lines(self) -> list[str]:
        """MSG <message> [MSG <budget line>] [NAME <run id>] [TIME <minutes>] [FLAG <admin comment>]
        [HOLD <a held job's admin comment>]."""
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
        if self.hold:
            out.append("HOLD " + _one_line(self.hold))
        return out


def _one_line(text) -> str:
    return " ".join(str(text).split())


def judge_job(fields: dict, config: dict, decider: JobDecider, *, now: datetime | None = None,
              caller: Caller = (None, None)) -> Judged:
    """Judge one job (`fields`: its description, lib.slurm.wire.JOB_FIELDS) with `decider`. Never raises:
    gate failures go through the failure policy (module docstring). `config`: on_failure,
    default_partition, flag_log (lib.slurm.hook.config_from_env). `now`: the decision's time (naive
    UTC), else now in whole seconds; `caller`: handed to the decider."""
    run_id = decided = None
    try:
        if config["on_failure"] not in FAILURE_POLICIES:
            # a typo in the policy must not open the gate: treat it as refuse, and say so
            config = {**config, "on_failure": "refuse",
                      "policy_note": f"unknown TG_ON_GATE_FAILURE {config['on_failure']!r}, using refuse"}
        request, time_to_set, notes = build_request(fields, default_partition=config["default_partition"])
        # a run ID only when it is one (a failure may rename the job after it)
        run_id = request["run_id"] if run_id_problem(request.get("run_id")) is None else None

        def with_capacity(req: Request, policy: Policy | None) -> Request:
            preemptible = (policy or {}).get("preemptible_partitions")
            return {**req, "capacity": capacity_for(fields.get("partition"), preemptible, config["default_partition"])}

        # whole seconds, like Slurm's own times: the reservation then never starts after the job's
        # Start as sacct reports it (a job admitted and started within one second)
        decided = decider.decide_job(request, now=naive_utc(now) or utcnow().replace(microsecond=0),
                                     prepare=with_capacity, actor=job_actor(fields), caller=caller)
        limit = None
        if decided.decision.get("state") == "admit":
            asked = runtime_hours(fields.get("time_limit"))
            limit = admitted_time_limit(decided.request, decided.decision, decided.policy or {},
                                        round(asked * 60) if asked is not None else time_to_set)
    except Refusal as exc:
        return Judged(EXIT_REFUSED, f"training-gate: refused: {exc}")
    except Rejected as exc:  # invalid before any decision: a reject (nothing recorded), never a failure
        named = {k: (fields.get(f) or "").strip() or None for k, f in (("run_id", "name"), ("team", "account"))}
        return judged_for(reject(named, exc.problems))
    except IncompleteRequest as exc:
        return failure(fields, config, f"incomplete request: {exc}", run_id=run_id)
    except Exception as exc:  # locked ledger, unreadable ledger, a bug: the gate failed
        # a decision already journaled is still settled by the caller, as an answered one
        return replace(failure(fields, config, f"{type(exc).__name__}: {exc}", run_id=run_id),
                       seq=decided.seq if decided is not None else None)
    return replace(judged_for(decided.decision, time_to_set=time_to_set, notes=notes, limit=limit),
                   request=decided.request, seq=decided.seq)


def judged_for(decision: Decision, *, time_to_set=None, notes=(), limit: dict | None = None) -> Judged:
    """The answer to a decision: admit -> accept; defer / reject -> one line, every reason + fix.
    Either way the line ends with the job description's `notes` and then the decision's own notes
    (each with its code and fix; a wall clock above the time limit as a WARNING). An admitted job's
    time limit (minutes): `limit` (lib.slurm.limits.admitted_time_limit) when it sets one, else
    `time_to_set` (the comment's runtime for a job without --time); its text ends the admit line."""
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
        return Judged(EXIT_ACCEPTED, msg, name=decision.get("run_id"), time_min=time_to_set, decision=decision)
    reasons = decision.get("reasons") or []
    parts = [f"[{r.get('code')}] {r.get('message')} -> fix: {r.get('fix')}" for r in reasons]
    word = "deferred" if decision.get("state") == "defer" else "rejected"
    msg = (f"training-gate: {word} run {decision.get('run_id')} (team {decision.get('team')}): "
           + ("; ".join(parts) if parts else "no reason given") + extra)
    return Judged(EXIT_REFUSED, msg, decision=decision)


def failure(fields: dict, config: dict, why: str, *, run_id=None) -> Judged:
    """Apply the failure policy to a gate that could not judge the job, and log it (config
    "on_failure", "flag_log", "policy_note")."""
    policy = config.get("on_failure")
    accept = policy == "accept-and-flag"
    if run_id is None:   # failed before the request was read (a ledger it could not open): the job's own
        run_id = _run_id_of(fields, config)
    _flag_log(config, {"action": "accepted-and-flagged" if accept else "refused", "why": why,
                       "run_id": run_id, "policy": policy, "note": config.get("policy_note"),
                       "job": fields})   # the flag log keeps the identifying fields, clipped
    if accept:
        return Judged(
            EXIT_FAILED_ACCEPTED,
            f"training-gate: WARNING the gate could not judge this job ({why}); accepted unchecked and "
            "flagged for review (TG_ON_GATE_FAILURE=accept-and-flag)",
            name=run_id, flag=f"training-gate: accepted unchecked: {why}"[:1000])
    return Judged(
        EXIT_FAILED_REFUSED,
        f"training-gate: refused: the gate could not judge this job ({why}); fix what it names, or if "
        "the ledger is busy try again shortly (TG_ON_GATE_FAILURE=refuse)")


def _run_id_of(fields: dict, config: dict) -> str | None:
    """The run ID the job names (its comment's request, or its name), for the flag log; None when
    the job names none a run ID may be."""
    try:
        request, _, _ = build_request(fields, default_partition=config.get("default_partition"))
    except Exception:   # a job the gate cannot read at all: the log line says so without a run ID
        return None
    return request["run_id"] if run_id_problem(request.get("run_id")) is None else None


def _flag_log(config: dict, record: dict) -> None:
    """One short line in the flag log, bounded and rotated (lib.slurm.flag_log)."""
    if config.get("flag_log"):
        flag_log.append(config["flag_log"], record)
