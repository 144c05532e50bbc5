"""The Slurm integration: the submit hook, the warm gate server, the cluster's capacity, the epilog.

The submit hook and the gate server:
- `hook`: the submit hook as Python starts it (`python -S`, from job_submit.lua): the socket client to the gate server, else the in-process judge.
- `wire`: the gate server's wire format (the job fields, the exit codes) and its client.
- `judge`: a job judged: its request, a `JobDecider` to decide it, its time limit and answer, the failure policy (`judge_job` -> `Judged`).
- `flag_log`: the flag log ($TG_FLAG_LOG): one short line per job the failure policy answered, bounded and rotated.
- `comment`: the job description and its --comment as a gate request (judged, rejected or incomplete).
- `limits`: the time limit an admitted job gets (its spend limit, the calibrated wall clock).
- `in_process`: the `JobDecider` without a gate server, in the ledger itself (the hook's cold path).
- `server`: the warm gate server on a Unix socket (`python -m lib.slurm.server`): jobs and `check`/`submit` for the ledgers it serves.
- `reader`: reading callers' messages for the server (whole at once on the worker, else the slow reader).
- `settings`: the settings a caller sends the server, checked before anything is decided.
- `live`: one ledger's live state in the server (`LiveGate`: the facts a decision reads, the warm `JobDecider`).
- `server_line`: the gate's line as the server keeps it in memory (the waiting requests, the plan's inputs from its facts).
- `live_windows`: the cluster's windows in the server (read from Slurm by a thread, written into the ledger when they change).
- `warm`: a gate server's per-team facts read ahead in the background at its start.
- `journal`: the server's journal beside the ledger (every decision durable before it is answered), and moving a stopped server's into the ledger.
- `runouts`: the admit's budget line: the month's budget as the server counts it, the run-out days kept warm.
- `holds`: a deferred job held in Slurm's queue: the hold-or-refuse choice, its message and admin comment, the reconciliation with squeue (pure).
- `queue_keeper`: the server's queue keeper: admits the line's turns through the LiveGate, releases, updates and cancels held jobs.

The cluster's capacity:
- `reservations`: sinfo and scontrol read as the gate's vocabulary (GPUs per node, reservations as capacity windows); runs Slurm's commands.
- `windows_sync`: the ledger's cluster windows kept in step with Slurm's reservations; the `[pools]` proposed from sinfo.

After a job's attempt ends (slurmctld's EpilogSlurmctld):
- `epilog`: `python -m lib.slurm.epilog job | catch-up`, started detached by epilog.sh.
- `aftermath`: a job's ended attempts recorded in the ledger, the recovery decision carried out in Slurm.
- `attempts`: a job's attempts as sacct lists them, and the events the gate records from them.
- `slurm_jobs`: the Slurm commands the epilog runs on one job (squeue, sacct, scontrol).

Beside them: job_submit.lua (slurmctld's Lua submit plugin), epilog.sh, cluster.sh (a single-node test
cluster), training-gate.service (the gate server under systemd), README.md.
"""
