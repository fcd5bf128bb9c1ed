#!/usr/bin/env bash
# scripts/setup_slurm.sh: a real single-node Slurm on this machine, for the system tests
# (tests/system/test_slurm_job.py) and for trying job_scripts/slurm/train.sbatch by hand.
#
#   scripts/setup_slurm.sh start DIR   writes DIR/slurm.conf (auth/none, this host as the one
#                                      node with its real CPUs, as `slurmd -C` reports them),
#                                      starts slurmctld and slurmd as daemons with it, waits
#                                      until the node is idle, and prints the line to use it:
#                                      export SLURM_CONF=DIR/slurm.conf
#   scripts/setup_slurm.sh stop DIR    stops the daemons started for DIR (and only those)
#
# Needs root (slurmd starts jobs as their user) and Debian's slurm-wlm (scripts/setup.sh
# installs it). Nothing outside DIR is written: state, spool, logs and pid files live there.
# Ports: ZT_SLURMCTLD_PORT and ZT_SLURMD_PORT (default 16817 and 16818, not Slurm's 6817/6818,
# so a real Slurm on the machine is left alone).
set -euo pipefail

usage() {
  echo "usage: scripts/setup_slurm.sh start|stop DIR" >&2
  exit 2
}
[[ $# -eq 2 ]] || usage
action="$1"
mkdir -p "$2"
DIR="$(cd "$2" && pwd)"
CONF="$DIR/slurm.conf"

say() { printf '[setup_slurm] %s\n' "$*"; }
die() { printf 'scripts/setup_slurm.sh: %s\n' "$*" >&2; exit 1; }

# Stops the daemon whose pid file is $1, waiting up to 10 s for it to go.
stop_daemon() {
  local pidfile="$1" pid
  [[ -s "$pidfile" ]] || return 0
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    say "stopping $(basename "$pidfile" .pid) (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$pidfile"
}

if [[ "$action" == "stop" ]]; then
  stop_daemon "$DIR/slurmd.pid"
  stop_daemon "$DIR/slurmctld.pid"
  exit 0
fi
[[ "$action" == "start" ]] || usage

[[ "$(id -u)" -eq 0 ]] || die "must run as root (slurmd runs jobs as their submitting user)"
for program in slurmctld slurmd sinfo sbatch; do
  command -v "$program" >/dev/null || die "'$program' not found: install Debian's slurm-wlm (scripts/setup.sh does)"
done
[[ -e "$DIR/slurmctld.pid" ]] && die "$DIR/slurmctld.pid exists: stop that Slurm first (scripts/setup_slurm.sh stop $DIR)"

ctld_port="${ZT_SLURMCTLD_PORT:-16817}"
slurmd_port="${ZT_SLURMD_PORT:-16818}"
node="$(hostname -s)"
# "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105":
# the node line with this machine's real topology.
node_line="$(slurmd -C | head -n 1)"
[[ "$node_line" == NodeName=* ]] || die "'slurmd -C' printed '$node_line', not a NodeName= line"

mkdir -p "$DIR/state" "$DIR/spool"
cat > "$CONF" <<EOF
# Written by scripts/setup_slurm.sh: a one-node test cluster, no munge (auth/none).
ClusterName=zerotune
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
# No cgroups: processes are tracked through /proc, tasks are not confined.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
# Finished jobs stay visible to scontrol for 5 minutes (the tests read their state).
MinJobAge=300
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
say "wrote $CONF"

export SLURM_CONF="$CONF"
# -c: start from an empty state (DIR is new); -i: ignore state it cannot read.
slurmctld -c -i -f "$CONF" || die "slurmctld did not start; see $DIR/slurmctld.log"
slurmd -f "$CONF" || { stop_daemon "$DIR/slurmctld.pid"; die "slurmd did not start; see $DIR/slurmd.log"; }

# The node registers within a few seconds; 60 s covers a loaded machine.
state=""
for _ in $(seq 120); do
  state="$(sinfo -h -n "$node" -o %T 2>/dev/null || true)"
  [[ "$state" == "idle" ]] && break
  sleep 0.5
done
if [[ "$state" != "idle" ]]; then
  tail -n 20 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 || true
  "$0" stop "$DIR"
  die "node $node is '${state:-not registered}', not idle, after 60 s (logs above; conf $CONF)"
fi
say "Slurm is up: node $node idle, slurmctld on port $ctld_port"
echo "export SLURM_CONF=$CONF"
