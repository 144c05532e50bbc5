#!/usr/bin/env bash
# Training Gate — a single-node Slurm cluster with 8 fake GPUs, accounting and the gate's submit hook.
#
#   lib/slurm/cluster.sh install   apt-get the Debian packages (idempotent; quick when already there)
#   lib/slurm/cluster.sh start     write configs into $TG_SLURM_DIR, start munged, mariadbd, slurmdbd,
#                                  slurmctld, slurmd and the warm gate server; wait until ready (idempotent)
#   lib/slurm/cluster.sh stop      stop what `start` started, by PID
#   lib/slurm/cluster.sh status    PIDs, liveness, sinfo
#   lib/slurm/cluster.sh env       print `export SLURM_CONF=...` for client commands
#   lib/slurm/cluster.sh capacity  print the [pools] tables proposed from this cluster's sinfo (8 GPUs on
#                                  one node in partitions gpu and spot); writes nothing
#
# Settings (environment; written into $TG_SLURM_DIR/etc/job_submit_gate.conf by `start`, which the hook
# reads on every submission, so a later edit of that file takes effect at the next sbatch):
#   TG_SLURM_DIR        state dir (configs, logs, PIDs, fake GPU devices)        default /tmp/tg-slurm
#   GATE_DB             the ledger the hook records decisions in                  default <repo>/data/gate.duckdb
#   TG_PYTHON           absolute python interpreter for the hook                  default the python3 on PATH, resolved
#   TG_REPO             the Training Gate checkout the hook imports               default this script's repo
#   TG_ON_GATE_FAILURE  refuse | accept-and-flag (when the gate itself fails)     default refuse
#   TG_GATE_TIMEOUT_S   how long the hook waits for a locked ledger              default 5
#   TG_GATE_SERVER      1: start a warm gate server (fast path), 0: cold Python per sbatch   default 1
#   TG_WINDOWS_INTERVAL_S  seconds between the gate server's reads of the reservations (0: never)  default 30
#   TG_ON_DEFER         hold | refuse: a deferral only time cures is held in Slurm's queue, or refused  default hold
#   TG_QUEUE_INTERVAL_S seconds between the gate server's queue passes (admit, release held jobs; 0: never)  default 30
#   TG_TEAMS_FILE       the teams file (accounts; `capacity`'s preemptible partitions)  default <repo>/data/teams.toml
#   TG_EPILOG_TIMEOUT_S how long the gate's epilog waits for Slurm and the ledger   default 120
#   TG_CRED_EXPIRE_S    seconds a requeued job waits before it may start again    default 30 (Slurm: 120)
#
# Preemption: partition `spot` (PriorityTier=1, PreemptMode=REQUEUE) is preempted by jobs of `gpu`
# (PriorityTier=2, the default partition): PreemptType=preempt/partition_prio, and JobRequeue=1 so
# every batch job may be requeued. EpilogSlurmctld is lib/slurm/epilog.sh (as epilog_slurmctld.sh
# next to slurm.conf): after every job's end, preemption and requeue included, it hands the job to
# `python -m lib.slurm.epilog`, which records the interruption and the recovery decision and holds a
# job the decision ends. A changed slurm.conf restarts slurmctld and slurmd at the next `start`.
#
# This is a TEST cluster: SlurmUser=root and SlurmdUser=root, so the hook (which runs inside slurmctld as
# SlurmUser) can read the repo and write the ledger. On a real cluster run slurmctld as `slurm` and give
# that user read access to the repo and write access to the ledger file and its folder.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DEFAULT="$(cd "$HERE/../.." && pwd)"
DIR="${TG_SLURM_DIR:-/tmp/tg-slurm}"
ETC="$DIR/etc"; RUN="$DIR/run"; LOG="$DIR/log"; SPOOL="$DIR/spool"; DEV="$DIR/dev"
CLUSTER_NAME="${TG_SLURM_CLUSTER:-tg}"
DB_NAME="tg_slurm_acct"; DB_USER="tg_slurm"; DB_PASS="tg_slurm_pw"
# lua-socket: the hook talks to the warm gate server over its Unix socket without starting a process
PACKAGES=(slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins slurmdbd mariadb-server lua-socket)
export SLURM_CONF="$ETC/slurm.conf"

log() { printf 'cluster.sh: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

have_all() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v slurmdbd >/dev/null &&
  command -v sbatch >/dev/null && command -v munged >/dev/null && command -v mariadbd >/dev/null &&
  ls /usr/lib/*/slurm-wlm/job_submit_lua.so >/dev/null 2>&1 &&
  ls /usr/lib/*/lua/5.1/socket/unix.so >/dev/null 2>&1
}

cmd_install() {
  if have_all; then log "Slurm, munge and MariaDB already installed"; return 0; fi
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >"${TMPDIR:-/tmp}/tg-slurm-apt.log" 2>&1; then
    log "apt-get install failed; running apt-get update once and retrying"
    apt-get update -q >>"${TMPDIR:-/tmp}/tg-slurm-apt.log" 2>&1 || true
    apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >>"${TMPDIR:-/tmp}/tg-slurm-apt.log" 2>&1 ||
      die "apt-get install failed (see ${TMPDIR:-/tmp}/tg-slurm-apt.log)"
  fi
  have_all || die "packages installed but a daemon or job_submit_lua.so is missing"
  log "installed: $(slurmctld -V)"
}

# alive = the PID in the file runs AND is still that daemon (a stale file from an earlier boot may name
# a PID that now belongs to something else)
pid_alive() {
  local pid want
  [[ -f "$RUN/$1.pid" ]] || return 1
  pid="$(cat "$RUN/$1.pid")"
  kill -0 "$pid" 2>/dev/null || return 1
  case "$1" in gate-server) want="lib.slurm.server" ;; *) want="$1" ;; esac
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$want"
}

# pid_gone NAME: the process in NAME's PID file has ended. Only for a daemon just spawned: its command
# line may not name the daemon yet (before nohup's exec it is this script's), so pid_alive could say
# it died when it is still starting; a fresh PID cannot have been reused.
pid_gone() {
  [[ -f "$RUN/$1.pid" ]] && ! kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null
}

# wait_for NAME TIMEOUT_S CMD...: poll CMD until it succeeds; fail with the daemon's log tail.
wait_for() {
  local name="$1" timeout_s="$2"; shift 2
  local deadline=$((SECONDS + timeout_s))
  until "$@" >/dev/null 2>&1; do
    if pid_gone "$name"; then
      tail -n 20 "$LOG/$name.log" >&2 2>/dev/null || true
      die "$name exited during start-up (log: $LOG/$name.log)"
    fi
    (( SECONDS < deadline )) || { tail -n 20 "$LOG/$name.log" >&2 2>/dev/null || true; die "$name not ready after ${timeout_s}s"; }
    sleep 0.2
  done
}

# spawn NAME CMD...: run CMD in the foreground mode of the daemon, in the background, keep its PID.
spawn() {
  local name="$1"; shift
  if pid_alive "$name"; then log "$name already running (pid $(cat "$RUN/$name.pid"))"; return 0; fi
  nohup "$@" >>"$LOG/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
}

python_abs() {
  local py="${TG_PYTHON:-}"
  if [[ -z "$py" ]]; then py="$(command -v python3 || command -v python)"; fi
  # resolve shims (pyenv) to the real interpreter: the hook must not depend on PATH or shell init
  "$py" -c 'import sys; print(sys.executable)'
}

# install_copy SRC DEST MODE SED: SRC edited by SED (pointing it at this cluster's hook config), written
# to DEST only when it changed (slurmctld reloads job_submit.lua by its mtime)
install_copy() {
  sed "$4" "$1" >"$2.new"
  chmod "$3" "$2.new"
  if cmp -s "$2.new" "$2"; then rm -f "$2.new"; else mv "$2.new" "$2"; fi
}

write_configs() {
  mkdir -p "$ETC" "$RUN" "$LOG" "$SPOOL/ctld" "$SPOOL/d" "$SPOOL/epilog" "$DEV"
  local i
  for i in 0 1 2 3 4 5 6 7; do [[ -e "$DEV/nvidia$i" ]] || mknod "$DEV/nvidia$i" c 1 3; done
  local node_line
  node_line="$(slurmd -C | head -n 1 | sed -E 's/^NodeName=[^ ]+/NodeName=localhost NodeAddr=127.0.0.1/')"
  cat >"$ETC/slurm.conf.new" <<CONF
# written by lib/slurm/cluster.sh start — a single-node TEST cluster (SlurmUser=root, see cluster.sh)
ClusterName=$CLUSTER_NAME
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=$RUN/slurmctld.daemon.pid
SlurmdPidFile=$RUN/slurmd.daemon.pid
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/d
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
JobSubmitPlugins=lua
# the gate's hook may wait for a locked ledger: give sbatch's RPC room so it never times out first
MessageTimeout=30
# preemption: jobs in gpu (the higher PriorityTier) requeue jobs in spot; every batch job requeueable
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobRequeue=1
# a requeued job may start again after this many seconds (Slurm's default 120)
AuthInfo=cred_expire=${TG_CRED_EXPIRE_S:-30}
# SIGTERM at the time limit, SIGKILL this many seconds later (Slurm's default)
KillWait=30
# the gate's epilog: every job's end, preemption and requeue included (lib/slurm/epilog.sh)
EpilogSlurmctld=$ETC/epilog_slurmctld.sh
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=300
$node_line Gres=gpu:8 State=UNKNOWN
PartitionName=gpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
PartitionName=spot Nodes=localhost Default=NO MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE
CONF
  if cmp -s "$ETC/slurm.conf.new" "$ETC/slurm.conf"; then rm -f "$ETC/slurm.conf.new"
  else
    mv "$ETC/slurm.conf.new" "$ETC/slurm.conf"
    if pid_alive slurmctld; then log "slurm.conf changed: restarting slurmctld and slurmd"; stop_one slurmd; stop_one slurmctld; fi
  fi
  cat >"$ETC/gres.conf" <<CONF
AutoDetect=off
Name=gpu File=$DEV/nvidia[0-7]
CONF
  cat >"$ETC/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.daemon.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=$DB_NAME
CONF
  chown root:root "$ETC/slurmdbd.conf"; chmod 600 "$ETC/slurmdbd.conf"
  # the hook and the epilog: copied next to slurm.conf (Slurm looks for the hook there)
  install_copy "$HERE/job_submit.lua" "$ETC/job_submit.lua" 644 \
    "s|^local HOOK_CONF = .*|local HOOK_CONF = \"$ETC/job_submit_gate.conf\"|"
  install_copy "$HERE/epilog.sh" "$ETC/epilog_slurmctld.sh" 755 "s|^HOOK_CONF=.*|HOOK_CONF='$ETC/job_submit_gate.conf'|"
  local repo="${TG_REPO:-$REPO_DEFAULT}"
  cat >"$ETC/job_submit_gate.conf" <<CONF
# read by job_submit.lua on every submission (KEY=VALUE, no quotes); written by cluster.sh start
TG_PYTHON=$(python_abs)
TG_REPO=$repo
GATE_DB=${GATE_DB:-$repo/data/gate.duckdb}
TG_ON_GATE_FAILURE=${TG_ON_GATE_FAILURE:-refuse}
TG_ON_DEFER=${TG_ON_DEFER:-hold}
TG_GATE_TIMEOUT_S=${TG_GATE_TIMEOUT_S:-5}
TG_GATE_SOCKET=$RUN/gate.sock
TG_HOOK_LOG=$LOG/gate-hook.log
TG_FLAG_LOG=$LOG/gate-flags.jsonl
TG_DEFAULT_PARTITION=gpu
TG_PYCACHE=$DIR/pycache
# the gate's epilog (lib/slurm/epilog.sh, lib/slurm/epilog.py)
TG_EPILOG_SPOOL=$SPOOL/epilog
TG_EPILOG_LOG=$LOG/gate-epilog.log
TG_EPILOG_TIMEOUT_S=${TG_EPILOG_TIMEOUT_S:-120}
TG_SLURM_CONF=$ETC/slurm.conf
CONF
  # client commands find the cluster without SLURM_CONF when /etc/slurm has no config of its own
  mkdir -p /etc/slurm
  if [[ ! -e /etc/slurm/slurm.conf || -L /etc/slurm/slurm.conf ]]; then ln -sfn "$ETC/slurm.conf" /etc/slurm/slurm.conf; fi
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then log "munged already answering"; return 0; fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  if [[ ! -s /etc/munge/munge.key ]]; then
    if command -v mungekey >/dev/null; then mungekey --create --force >/dev/null 2>&1 || true; fi
    [[ -s /etc/munge/munge.key ]] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
  fi
  chown -R munge:munge /run/munge /etc/munge /var/log/munge /var/lib/munge
  chmod 700 /etc/munge; chmod 400 /etc/munge/munge.key; chmod 755 /run/munge
  spawn munged setpriv --reuid=munge --regid=munge --init-groups munged -F
  wait_for munged 15 bash -c 'munge -n | unmunge'
}

start_mariadb() {
  if mariadb-admin ping >/dev/null 2>&1; then log "mariadbd already answering"
  else
    mkdir -p /run/mysqld; chown mysql:mysql /run/mysqld
    if [[ ! -d /var/lib/mysql/mysql ]]; then
      mariadb-install-db --user=mysql --datadir=/var/lib/mysql >>"$LOG/mariadbd.log" 2>&1
    fi
    spawn mariadbd mariadbd --user=mysql --bind-address=127.0.0.1
    wait_for mariadbd 60 mariadb-admin ping
  fi
  mariadb -e "CREATE DATABASE IF NOT EXISTS $DB_NAME;
    CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
    CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
    GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';
    GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'127.0.0.1';"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_gate_server() {
  [[ "${TG_GATE_SERVER:-1}" == 1 ]] || { log "gate server disabled (TG_GATE_SERVER=0): cold Python per sbatch"; return 0; }
  local py repo
  py="$(sed -n 's/^TG_PYTHON=//p' "$ETC/job_submit_gate.conf")"
  repo="$(sed -n 's/^TG_REPO=//p' "$ETC/job_submit_gate.conf")"
  # a server older than the code it serves is restarted (it imported lib/ once, at its start)
  if pid_alive gate-server && { [[ "$(cat "$RUN/gate-server.cmd" 2>/dev/null)" != "$py $repo" ]] ||
       [[ -n "$(find "$repo/lib" -name '*.py' -newer "$RUN/gate-server.pid" -print -quit)" ]]; }; then
    log "gate server older than lib/ or started for another repo/python: restarting it"; stop_one gate-server
  fi
  if ! pid_alive gate-server; then rm -f "$RUN/gate.sock"; fi
  # the flag log is the server's own (it never writes where a caller says): the hook config's one
  (cd "$repo" && unset PYTHONDONTWRITEBYTECODE && PYTHONPYCACHEPREFIX="$DIR/pycache" PYTHONPATH="$repo" \
     TG_FLAG_LOG="$LOG/gate-flags.jsonl" spawn gate-server "$py" -m lib.slurm.server --socket "$RUN/gate.sock")
  echo "$py $repo" >"$RUN/gate-server.cmd"
  wait_for gate-server 30 test -S "$RUN/gate.sock"
}

# What the gate's epilog could not record while the gate was down (its spool): recorded now.
epilog_catch_up() {
  compgen -G "$SPOOL/epilog/*.*" >/dev/null || return 0
  local conf="$ETC/job_submit_gate.conf" py repo
  py="$(sed -n 's/^TG_PYTHON=//p' "$conf")"; repo="$(sed -n 's/^TG_REPO=//p' "$conf")"
  if (cd "$repo" && env PYTHONPATH="$repo" GATE_DB="$(sed -n 's/^GATE_DB=//p' "$conf")" \
        TG_GATE_SOCKET="$RUN/gate.sock" TG_EPILOG_SPOOL="$SPOOL/epilog" TG_EPILOG_TIMEOUT_S=30 \
        timeout 300 "$py" -m lib.slurm.epilog catch-up >>"$LOG/gate-epilog.log" 2>&1); then
    log "epilog catch-up: the spool is empty"
  else
    log "epilog catch-up left jobs in $SPOOL/epilog (see $LOG/gate-epilog.log)"
  fi
}

# One Slurm account per team of data/teams.toml (user root in each): without an association slurmctld
# replaces --account=TEAM by the user's default account, and sacct would name the wrong team.
sync_accounts() {
  local repo teams existing missing t
  repo="$(sed -n 's/^TG_REPO=//p' "$ETC/job_submit_gate.conf")"
  teams="$(sed -n -E 's/^\[teams\.([A-Za-z0-9_.-]+)\].*/\1/p' "${TG_TEAMS_FILE:-$repo/data/teams.toml}" 2>/dev/null | tr '\n' ' ')"
  teams="$teams ${TG_SLURM_EXTRA_ACCOUNTS:-}"
  [[ -n "${teams// }" ]] || { log "no teams found for Slurm accounts"; return 0; }
  existing=" $(timeout 10 sacctmgr -n -P list assoc cluster="$CLUSTER_NAME" user=root format=account 2>/dev/null | tr '\n' ' ') "
  missing=""; for t in $teams; do [[ "$existing" == *" $t "* ]] || missing="$missing,$t"; done
  missing="${missing#,}"
  [[ -n "$missing" ]] || return 0
  timeout 20 sacctmgr -i add account "$missing" cluster="$CLUSTER_NAME" >/dev/null
  timeout 20 sacctmgr -i add user root account="$missing" cluster="$CLUSTER_NAME" >/dev/null
  log "Slurm accounts added: $missing"
}

cmd_start() {
  have_all || die "Slurm is not installed: run lib/slurm/cluster.sh install"
  mkdir -p "$RUN" "$LOG"
  write_configs
  start_munge
  start_mariadb
  spawn slurmdbd slurmdbd -D
  wait_for slurmdbd 30 port_open 6819
  spawn slurmctld slurmctld -D -i
  wait_for slurmctld 30 timeout 5 scontrol ping
  sync_accounts
  spawn slurmd slurmd -D -N localhost
  wait_for slurmd 30 bash -c "timeout 5 sinfo -h -N -o '%t' | grep -Eq '^(idle|mix|alloc)'"
  start_gate_server
  epilog_catch_up
  log "ready: $(timeout 5 sinfo -h -o '%P %a %D %t %G' | tr '\n' ';')"
  echo "export SLURM_CONF=$SLURM_CONF"
}

stop_one() {
  local name="$1" pid
  [[ -f "$RUN/$name.pid" ]] || return 0
  pid="$(cat "$RUN/$name.pid")"
  if pid_alive "$name"; then
    kill "$pid" 2>/dev/null || true
    local i; for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then log "$name (pid $pid) ignored SIGTERM: SIGKILL"; kill -9 "$pid" 2>/dev/null || true; fi
    log "stopped $name (pid $pid)"
  fi
  rm -f "$RUN/$name.pid"
}

cmd_stop() {
  # reverse order; only the daemons this script started (PID files in $RUN)
  local n; for n in gate-server slurmd slurmctld slurmdbd mariadbd munged; do stop_one "$n"; done
  rm -f "$RUN/gate.sock"
}

cmd_status() {
  local n rc=0
  for n in munged mariadbd slurmdbd slurmctld slurmd gate-server; do
    if pid_alive "$n"; then printf '%-12s running  pid %s\n' "$n" "$(cat "$RUN/$n.pid")"
    elif [[ -f "$RUN/$n.pid" ]]; then printf '%-12s DEAD     pid %s (log %s)\n' "$n" "$(cat "$RUN/$n.pid")" "$LOG/$n.log"; rc=1
    else printf '%-12s not started by cluster.sh\n' "$n"; fi
  done
  if command -v sinfo >/dev/null && [[ -f "$SLURM_CONF" ]]; then timeout 5 sinfo -o '%P %a %D %t %G' || rc=1; fi
  return $rc
}

# The [pools] proposal from sinfo (python -m lib teams --from-slurm): review it, then add it to the teams file.
cmd_capacity() {
  local repo="${TG_REPO:-$REPO_DEFAULT}" file=()
  [[ -n "${TG_TEAMS_FILE:-}" ]] && file=(--file "$TG_TEAMS_FILE")
  (cd "$repo" && PYTHONPATH="$repo" "$(python_abs)" -m lib teams --from-slurm "${file[@]}")
}

case "${1:-}" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  restart) cmd_stop; cmd_start ;;
  status) cmd_status ;;
  env) echo "export SLURM_CONF=$SLURM_CONF" ;;
  capacity) cmd_capacity ;;
  *) echo "usage: $0 install|start|stop|restart|status|env|capacity" >&2; exit 2 ;;
esac
