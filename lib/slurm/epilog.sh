#!/bin/sh
# Training Gate: slurmctld's EpilogSlurmctld (slurm.conf `EpilogSlurmctld=<this file>`).
#
# slurmctld runs it as SlurmUser on the controller whenever an attempt of a job ends, a preemption or
# a requeue included, with the job's ID, name, comment and restart count in its environment (Slurm
# 22.05 gives no job state there, and no search path). A job with a comment (a gated job carries its
# request there) is written into the spool, `<spool>/<job ID>.<restart count>` holding its name, then
# `python -m lib.slurm.epilog job` takes it over in a session of its own: this script returns at once,
# so no job's end waits for the gate, and what the worker cannot finish stays in the spool for
# `python -m lib.slurm.epilog catch-up`. It always exits 0: a failing EpilogSlurmctld would only
# make slurmctld log an error for the job.
#
# Settings: the submit hook's KEY=VALUE file (TG_PYTHON, TG_REPO, GATE_DB, TG_GATE_SOCKET, TG_PYCACHE)
# and TG_EPILOG_SPOOL, TG_EPILOG_LOG, TG_EPILOG_TIMEOUT_S, TG_SLURM_CONF.
HOOK_CONF=/tmp/tg-slurm/etc/job_submit_gate.conf   # rewritten by cluster.sh start
PATH=/usr/local/bin:/usr/bin:/bin
export PATH

case "$SLURM_JOB_ID" in ''|*[!0-9]*) exit 0 ;; esac
[ -n "$SLURM_JOB_COMMENT" ] || exit 0
[ -r "$HOOK_CONF" ] || exit 0
setting() { sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*//p" "$HOOK_CONF" | tail -n 1; }

restarts="${SLURM_JOB_RESTART_COUNT:-0}"
case "$restarts" in ''|*[!0-9]*) restarts=0 ;; esac
spool="$(setting TG_EPILOG_SPOOL)"
log="$(setting TG_EPILOG_LOG)"
[ -n "$log" ] || log=/dev/null
if [ -n "$spool" ]; then
  mkdir -p "$spool" 2>/dev/null
  printf '%s\n' "$SLURM_JOB_NAME" >"$spool/$SLURM_JOB_ID.$restarts" 2>>"$log"
fi

py="$(setting TG_PYTHON)"
repo="$(setting TG_REPO)"
[ -x "$py" ] && [ -d "$repo" ] || { echo "epilog.sh: job $SLURM_JOB_ID: TG_PYTHON or TG_REPO unusable; left in the spool" >>"$log"; exit 0; }
cd "$repo" || exit 0
set -- PATH="$PATH" HOME=/ TZ=UTC PYTHONPATH="$repo" TG_EPILOG_SPOOL="$spool"
for key in GATE_DB TG_GATE_SOCKET TG_EPILOG_TIMEOUT_S; do
  value="$(setting "$key")"; [ -n "$value" ] && set -- "$@" "$key=$value"
done
value="$(setting TG_SLURM_CONF)"; [ -n "$value" ] && set -- "$@" "SLURM_CONF=$value"
value="$(setting TG_PYCACHE)"; [ -n "$value" ] && set -- "$@" "PYTHONPYCACHEPREFIX=$value"
# slurmctld kills this script's process group once it exits: the worker starts in a session of its
# own (setsid runs in the foreground, so it has left the group before this script goes on), from a
# shell that leaves it running in the background and returns at once
setsid sh -c 'log="$1"; shift; "$@" </dev/null >>"$log" 2>&1 &' epilog-worker "$log" \
  env -i "$@" "$py" -m lib.slurm.epilog job "$SLURM_JOB_ID" --restarts "$restarts" </dev/null >/dev/null 2>&1
exit 0
