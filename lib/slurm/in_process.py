"""A Slurm job judged in this process, without a gate server: the submit hook's cold path.

`InProcessDecider` is the `lib.slurm.judge.JobDecider` over the ledger itself: what a stopped gate
server journaled goes into the ledger first (lib.slurm.journal.drain_left_over_journal), then
`lib.ledger.deciding.submit_request(origin="slurm")` decides and records, as `python -m lib submit`
does: the decider lock, the writer turn and one write transaction, in which the team's policy
completes the request (its capacity), so the ledger is opened once. Against the authority the
cluster names, when it names one (lib.authority.settings). The decision is in the ledger when it
returns: nothing to settle.

`judge_in_process(fields, config)`: the hook's cold path (lib.slurm.hook.main), `judge_job` with it.
"""
from __future__ import annotations

from datetime import datetime

from lib.authority.settings import configured_authority
from lib.gate.contracts import Policy, Request
from lib.ledger.deciding import submit_request
from lib.slurm.journal import drain_left_over_journal
from lib.slurm.judge import Caller, Decided, Judged, Prepare, judge_job


class InProcessDecider:
    """Decides a job's request in the ledger `db` (None: $GATE_DB or the default), waiting at most
    `timeout_s` seconds for it (then LedgerLocked: a gate failure)."""

    def __init__(self, db=None, *, timeout_s: float = 5.0):
        self.db, self.timeout_s = db, timeout_s

    def decide_job(self, request: Request, *, now: datetime, prepare: Prepare, actor: str | None = None,
                   caller: Caller = (None, None)) -> Decided:
        """lib.slurm.judge.JobDecider.decide_job. `caller` is not recorded: the ledger's decision row
        names its `actor`, and no other process relayed the job."""
        drain_left_over_journal(self.db, timeout_s=self.timeout_s)  # what a stopped gate server answered comes first
        seen: dict = {}

        def completed(req: Request, policy: Policy | None) -> Request:
            seen["request"], seen["policy"] = prepare(req, policy), policy
            return seen["request"]

        decision = submit_request(request, db=self.db, origin="slurm", now=now, timeout_s=self.timeout_s,
                                  actor=actor, prepare=completed, authority=configured_authority())
        return Decided(decision, seen.get("request", request), seen.get("policy"), None)

    def settle(self, seq: int | None, answered: bool) -> None:
        """Nothing to settle: the decision was recorded in its own transaction."""


def judge_in_process(fields: dict, config: dict) -> Judged:
    """`judge_job` with an InProcessDecider on config's "db" and "timeout_s" (lib.slurm.hook.config_from_env)."""
    return judge_job(fields, config, InProcessDecider(config["db"], timeout_s=config["timeout_s"]))
