#!/usr/bin/env bash
# slurm_cluster.sh start|stop STATE_DIR [NODES]
#   start: a throwaway Slurm cluster on this machine: munged, slurmctld, and NODES (default 3) slurmd, each node in its
#          own network and UTS namespace (host name node<i>, address 10.<a>.<b>.1<i> on a bridge), all in one
#          partition "gpu" with the feature peerlab_gate; node1 has the lowest weight (jobs go there first). Runs as
#          root (namespaces, daemons). The health check, prolog and epilog are what $SLURM_CLUSTER_HEALTHCHECK,
#          $SLURM_CLUSTER_PROLOG and $SLURM_CLUSTER_EPILOG name (none when unset); the health check runs when a
#          slurmd starts and every $SLURM_CLUSTER_HEALTHCHECK_INTERVAL seconds (default 3600); PrologEpilogTimeout is
#          $SLURM_CLUSTER_PROLOG_TIMEOUT (300). Writes STATE_DIR/env
#          (export SLURM_CONF=...) once every node has registered. Where the cluster cannot start (not root, no Slurm
#          or munge, no namespaces) it writes STATE_DIR/skip with the reason and exits 0, so the test skips and says why.
#          SLURM_CLUSTER_NET=10.a.b chooses the bridge's network (default: a random one; the host is 10.a.b.1).
#          SLURM_CLUSTER_NODENAMES="8=rack2-gpu08 ..." gives node<i> (its host name) that Slurm NodeName instead.
#          With SLURM_CLUSTER_LOCAL=1 the cluster is this machine alone: one node named after the host, at 127.0.0.1, no
#          namespaces (a GPU machine: ci/slurm_gpu.sh); SLURM_CLUSTER_GPUS=N then gives it N GPUs as gres
#          (/dev/nvidia0 ... /dev/nvidia<N-1>), so that jobs can ask for some of them (--gres=gpu:1).
#   stop:  ends every process it started (by pid: the daemons and whatever runs in the nodes' namespaces), removes the
#          namespaces, the bridge and STATE_DIR's cluster files. Safe to call more than once, and after a failed start.
set -u
cmd=${1:-} state=${2:-} count=${3:-3}
if [ -z "$cmd" ] || [ -z "$state" ]; then
  echo "usage: $0 start|stop STATE_DIR [NODES]" >&2
  exit 2
fi
mkdir -p "$state"
state="$(cd "$state" && pwd)"

skip() {
  echo "$*" | tee "$state/skip"
  exit 0
}

# Ends one process started here, by pid: TERM, then KILL after 5 s.
end_pid() {
  local pid="$1" i
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for i in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null
}

stop() {
  [ -f "$state/cluster" ] || return 0
  # shellcheck source=/dev/null
  source "$state/cluster"
  local i ns pid
  [ "$LOCAL" = 1 ] && [ -f "$state/slurmd.$(hostname -s).pid" ] && end_pid "$(cat "$state/slurmd.$(hostname -s).pid")"
  for i in $(seq "$NODES"); do
    [ "$LOCAL" = 1 ] && break
    ns="${NS_PREFIX}$i"
    # Everything in the node's network namespace was started through this script: slurmd, its steps, the jobs.
    if [ -e "/run/netns/$ns" ]; then
      for pid in $(ip netns pids "$ns" 2>/dev/null); do end_pid "$pid"; done
    fi
    [ -f "$state/slurmd.node$i.pid" ] && end_pid "$(cat "$state/slurmd.node$i.pid")"
  done
  [ -f "$state/slurmctld.pid" ] && end_pid "$(cat "$state/slurmctld.pid")"
  [ -f "$state/munged.pid" ] && end_pid "$(cat "$state/munged.pid")"
  if [ "$LOCAL" != 1 ]; then
    for i in $(seq "$NODES"); do
      ip netns del "${NS_PREFIX}$i" 2>/dev/null
    done
    ip link del "$BRIDGE" 2>/dev/null
  fi
  rm -rf "$state/ctld" "$state/spool" "$state/munge" "$state/cluster" "$state/env" "$state"/*.pid
  echo "stopped"
}

case "$cmd" in
stop)
  stop
  exit 0
  ;;
start) ;;
*)
  echo "usage: $0 start|stop STATE_DIR [NODES]" >&2
  exit 2
  ;;
esac

rm -f "$state/skip" "$state/env"
LOCAL="${SLURM_CLUSTER_LOCAL:-0}"
[ "$(id -u)" -eq 0 ] || skip "not root: the cluster runs its daemons as root (and needs network namespaces)"
tools=(munged slurmctld slurmd scontrol sinfo timeout)
[ "$LOCAL" = 1 ] || tools+=(ip unshare nsenter)
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || skip "$tool not found (apt-get install slurm-wlm munge iproute2)"
done
# The Slurm NodeName of node<i>: node<i>, or what SLURM_CLUSTER_NODENAMES gives it.
nodename() {
  local pair
  for pair in ${SLURM_CLUSTER_NODENAMES:-}; do
    [ "${pair%%=*}" = "$1" ] && { echo "${pair#*=}"; return; }
  done
  echo "node$1"
}
id="$(printf '%04x' $((RANDOM % 65536)))"
NS_PREFIX="pls${id}n" BRIDGE="plsbr$id" NODES="$count"
net="${SLURM_CLUSTER_NET:-10.$((200 + RANDOM % 50)).$((RANDOM % 250))}"
[ "$LOCAL" = 1 ] && NODES=1
cat >"$state/cluster" <<EOF
NS_PREFIX=$NS_PREFIX
BRIDGE=$BRIDGE
NODES=$NODES
NET=$net
LOCAL=$LOCAL
EOF
if [ "$LOCAL" != 1 ] && ! ip netns add "${NS_PREFIX}probe" 2>"$state/netns.err"; then
  stop >/dev/null
  skip "cannot create a network namespace ($(head -n 1 "$state/netns.err")): run as root with CAP_SYS_ADMIN"
fi
[ "$LOCAL" = 1 ] || ip netns del "${NS_PREFIX}probe"

failed() {
  echo "$*" | tee "$state/skip"
  for f in "$state"/log/*.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 15 "$f"; }
  done
  stop >/dev/null
  exit 0
}

mkdir -p "$state/ctld" "$state/spool" "$state/log" "$state/munge"
chmod 700 "$state/munge"
dd if=/dev/urandom of="$state/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$state/munge/munge.key"
munged --force --socket="$state/munge/munge.sock" --key-file="$state/munge/munge.key" \
  --pid-file="$state/munged.pid" --log-file="$state/log/munged.log" --seed-file="$state/munge/munge.seed" ||
  failed "munged did not start"

if [ "$LOCAL" != 1 ]; then
  ip link add "$BRIDGE" type bridge || failed "cannot create bridge $BRIDGE"
  ip addr add "$net.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
fi
for i in $(seq "$NODES"); do
  [ "$LOCAL" = 1 ] && break
  ns="${NS_PREFIX}$i"
  mkdir -p "$state/spool/node$i"
  ip netns add "$ns" || failed "cannot create network namespace $ns"
  ip link add "plsv${id}$i" type veth peer name eth0 netns "$ns" || failed "cannot create a veth pair for $ns"
  ip link set "plsv${id}$i" master "$BRIDGE" up
  ip -n "$ns" addr add "$net.1$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done

# slurmctld's port: one no socket of this network namespace holds (/proc/net/tcp*, no python: a GPU image may lack it).
ctld_port=""
for _ in $(seq 200); do
  p=$((20000 + RANDOM % 30000))
  grep -qi ":$(printf '%04X' "$p") " /proc/net/tcp /proc/net/tcp6 2>/dev/null || { ctld_port=$p; break; }
done
[ -n "$ctld_port" ] || failed "no free port for slurmctld"
conf="$state/slurm.conf"
{
  echo "ClusterName=peerlabtest"
  if [ "$LOCAL" = 1 ]; then
    echo "SlurmctldHost=$(hostname -s)(127.0.0.1)"
  else
    echo "SlurmctldHost=ctl($net.1)"
  fi
  echo "SlurmctldPort=$ctld_port"
  echo "SlurmdPort=6818"
  echo "SlurmUser=root"
  echo "SlurmdUser=root"
  echo "AuthType=auth/munge"
  # A requeued job waits cred_expire seconds before it may start again (120 by default).
  echo "AuthInfo=socket=$state/munge/munge.sock,cred_expire=10"
  echo "CryptoType=crypto/munge"
  echo "StateSaveLocation=$state/ctld"
  echo "SlurmdSpoolDir=$state/spool/%n"
  echo "SlurmctldPidFile=$state/slurmctld.pid"
  echo "SlurmdPidFile=$state/slurmd.%n.pid"
  echo "SlurmctldLogFile=$state/log/slurmctld.log"
  echo "SlurmdLogFile=$state/log/slurmd.%n.log"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "AccountingStorageType=accounting_storage/none"
  echo "JobCompType=jobcomp/none"
  echo "MpiDefault=none"
  echo "SchedulerType=sched/backfill"
  echo "SchedulerParameters=nohold_on_prolog_fail"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_CPU"
  echo "ReturnToService=2"
  echo "SlurmdTimeout=60"
  echo "MinJobAge=3600"
  if [ -n "${SLURM_CLUSTER_HEALTHCHECK:-}" ]; then
    echo "HealthCheckProgram=$SLURM_CLUSTER_HEALTHCHECK"
    echo "HealthCheckInterval=${SLURM_CLUSTER_HEALTHCHECK_INTERVAL:-3600}"
    echo "HealthCheckNodeState=ANY"
  fi
  [ -n "${SLURM_CLUSTER_PROLOG:-}" ] && echo "Prolog=$SLURM_CLUSTER_PROLOG"
  [ -n "${SLURM_CLUSTER_EPILOG:-}" ] && echo "Epilog=$SLURM_CLUSTER_EPILOG"
  [ "$LOCAL" = 1 ] && [ "${SLURM_CLUSTER_GPUS:-0}" -gt 0 ] && echo "GresTypes=gpu"
  echo "PrologFlags=Alloc"
  echo "PrologEpilogTimeout=${SLURM_CLUSTER_PROLOG_TIMEOUT:-300}"
  if [ "$LOCAL" = 1 ]; then
    gres=""
    if [ "${SLURM_CLUSTER_GPUS:-0}" -gt 0 ]; then
      gres=" Gres=gpu:$SLURM_CLUSTER_GPUS"
      echo "Name=gpu File=/dev/nvidia[0-$((SLURM_CLUSTER_GPUS - 1))]" >"$state/gres.conf"
    fi
    echo "NodeName=$(hostname -s) NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=100 Features=peerlab_gate$gres" \
      "State=UNKNOWN"
    echo "PartitionName=gpu Nodes=$(hostname -s) Default=YES MaxTime=INFINITE State=UP"
  else
    names=""
    for i in $(seq "$NODES"); do
      echo "NodeName=$(nodename "$i") NodeHostname=node$i NodeAddr=$net.1$i CPUs=1 RealMemory=100" \
        "Features=peerlab_gate Weight=$i State=UNKNOWN"
      names="${names:+$names,}$(nodename "$i")"
    done
    echo "PartitionName=gpu Nodes=$names Default=YES MaxTime=INFINITE State=UP"
  fi
} >"$conf"
echo "export SLURM_CONF=$conf" >"$state/env.pending"
export SLURM_CONF="$conf"

# slurmd starts a cgroup plugin whatever the other plugins are: by default the one for the cgroup version it finds
# (autodetect; fails where /sys/fs/cgroup is absent, and cgroup/v2 without systemd or with a read-only cgroupfs in a
# container). Slurm 24.05 and later can leave cgroups alone (disabled); 23.x gets cgroup/v1, whose start touches no
# cgroup (proctrack/linuxproc and task/none never use it); 22.05 keeps autodetect.
slurm_version="$(slurmd -V 2>/dev/null | awk '{split($2, v, "."); print v[1] * 100 + v[2]}')"
if [ "${slurm_version:-0}" -ge 2405 ]; then
  echo "CgroupPlugin=disabled" >"$state/cgroup.conf"
elif [ "${slurm_version:-0}" -ge 2302 ]; then
  echo "CgroupPlugin=cgroup/v1" >"$state/cgroup.conf"
fi
if [ "$LOCAL" = 1 ]; then
  slurmctld -f "$conf" || failed "slurmctld did not start"
  mkdir -p "$state/spool/$(hostname -s)"
  slurmd -f "$conf" || failed "slurmd did not start"
else
  unshare --uts sh -c "hostname ctl && exec slurmctld -f '$conf'" || failed "slurmctld did not start"
fi
for i in $(seq "$NODES"); do
  [ "$LOCAL" = 1 ] && break
  nsenter --net="/run/netns/${NS_PREFIX}$i" unshare --uts sh -c \
    "hostname node$i && exec slurmd -f '$conf' -N '$(nodename "$i")'" ||
    failed "slurmd of node$i did not start"
done
# Every node registered (its state known and responding), within 60 s; a daemon that exits ends the wait at once.
# alive PIDFILE: false only once the daemon wrote its pid and that process is gone.
alive() {
  local pid
  pid="$(cat "$1" 2>/dev/null)"
  [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null
}
deadline=$((SECONDS + 60))
while [ "$SECONDS" -lt "$deadline" ]; do
  alive "$state/slurmctld.pid" || failed "slurmctld exited"
  if [ "$LOCAL" = 1 ]; then
    alive "$state/slurmd.$(hostname -s).pid" || failed "slurmd exited"
  fi
  states="$(timeout 10 scontrol show node -o 2>/dev/null |
    sed -n 's/^NodeName=\([^ ]*\) .* State=\([^ ]*\) .*/\1 \2/p')"
  if [ "$(echo "$states" | grep -c .)" -eq "$NODES" ] && ! echo "$states" | grep -qE 'UNKNOWN|NOT_RESPONDING|DOWN'; then
    mv "$state/env.pending" "$state/env"
    echo "Slurm cluster: slurmctld on $([ "$LOCAL" = 1 ] && echo 127.0.0.1 || echo "$net.1"):$ctld_port, $NODES nodes"
    echo "$states"
    exit 0
  fi
  sleep 0.5
done
failed "the nodes did not register within 60 s: $(timeout 10 sinfo -h -N -o '%N %T' 2>&1 | tr '\n' ' ')"
