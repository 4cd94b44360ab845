#!/usr/bin/env bash
# Runs `motley export slurm`'s batch scripts under a real Slurm on this machine (docs/exports.md,
# "Slurm batch script"): three emulated nodes (slurmd -N, on this host) whose "GPUs" are GRES
# entries backed by placeholder device files — n0 with two t4, n1 with one t4, n2 with one a10 —
# and two plans of tiny-llama on CPU ranks: two T4 ranks on one node (a plain job) and a T4 node
# followed by an A10 node (a heterogeneous job of two components). Each script is submitted with
# sbatch and its losses compared with `motley launch --nproc 2` on the same plan.
# A check for a developer's machine, not a test: it needs root, installs Debian's slurm-wlm and
# munge when they are missing, writes /etc/slurm/slurm.conf and gres.conf (the old ones are kept
# as *.motley-saved), adds n0, n1 and n2 to /etc/hosts while it runs (the scripts' MASTER_ADDR is
# a node name), and starts munged, slurmctld and three slurmd, stopping the last four at the end.
#
# Usage: scripts/slurm-check.sh [BUILD_DIR]   (default: build)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
MOTLEY="$(cd "$BUILD" && pwd)/motley"
# shellcheck source=scripts/launch-losses.sh
source "$ROOT/scripts/launch-losses.sh"
[[ $(id -u) == 0 ]] || { echo "slurm-check: needs root (it configures and starts Slurm)" >&2; exit 2; }
DIR=$(mktemp -d)
HOST=$(hostname -s)
HOSTS_MARK="# motley slurm-check"
cleanup() {
  pkill -x slurmd 2>/dev/null || true
  pkill -x slurmctld 2>/dev/null || true
  sed -i "/$HOSTS_MARK\$/d" /etc/hosts
  rm -rf "$DIR"
}
trap cleanup EXIT

if ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null
fi
mkdir -p /etc/munge /run/munge
[[ -s /etc/munge/munge.key ]] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
chown munge:munge /etc/munge/munge.key /run/munge
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged

for f in slurm.conf gres.conf; do
  [[ -f /etc/slurm/$f && ! -f /etc/slurm/$f.motley-saved ]] && cp "/etc/slurm/$f" "/etc/slurm/$f.motley-saved"
done
for node in n0 n1 n2; do
  mkdir -p "$DIR/spool/$node"
  echo "127.0.0.1 $node $HOSTS_MARK" >>/etc/hosts
done
mkdir -p "$DIR/state"
cat >/etc/slurm/slurm.conf <<CONF
ClusterName=motley-check
SlurmctldHost=$HOST
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.%n.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MpiDefault=none
NodeName=n0 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=17001 CPUs=2 Gres=gpu:t4:2 State=UNKNOWN
NodeName=n1 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=17002 CPUs=2 Gres=gpu:t4:1 State=UNKNOWN
NodeName=n2 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=17003 CPUs=2 Gres=gpu:a10:1 State=UNKNOWN
PartitionName=check Nodes=n0,n1,n2 Default=YES MaxTime=INFINITE State=UP
CONF
# The GRES "GPUs": Slurm counts the entries; the device files are placeholders.
cat >/etc/slurm/gres.conf <<'CONF'
AutoDetect=off
NodeName=n0 Name=gpu Type=t4 File=/dev/tty1
NodeName=n0 Name=gpu Type=t4 File=/dev/tty2
NodeName=n1 Name=gpu Type=t4 File=/dev/tty3
NodeName=n2 Name=gpu Type=a10 File=/dev/tty4
CONF
pkill -x slurmd 2>/dev/null || true
pkill -x slurmctld 2>/dev/null || true
sleep 1
/usr/sbin/slurmctld -c
for node in n0 n1 n2; do /usr/sbin/slurmd -N "$node"; done
for _ in $(seq 30); do [[ $(sinfo -h -o %T | sort -u) == idle ]] && break; sleep 1; done
[[ $(sinfo -h -o %T | sort -u) == idle ]] || {
  echo "slurm-check: the nodes did not come up:" >&2
  sinfo >&2
  tail "$DIR/slurmctld.log" >&2
  exit 1
}

# check NAME CLUSTER_YAML EXPORT_OPTIONS...: a two-stage 1F1B plan of tiny-llama on the cluster,
# exported, submitted, and its losses compared with motley launch's.
check() {
  local name=$1 cluster=$2
  shift 2
  local plan="$DIR/$name.json" job state=""
  "$MOTLEY" simulate --model tiny-llama --cluster "$cluster" --schedule 1f1b --stages 2 \
    --micro-batches 4 --out "$plan" >/dev/null
  "$MOTLEY" export slurm --plan "$plan" "$@" --out "$DIR/$name.sbatch" \
    -- run --plan "$plan" --steps 3 >/dev/null
  job=$(MOTLEY="$MOTLEY" sbatch --parsable --output="$DIR/$name.out" --chdir="$DIR" \
    "$DIR/$name.sbatch")
  job=${job%%;*}
  # Every component's state, once none is pending or running.
  for _ in $(seq 120); do
    state=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' |
      sort -u | tr '\n' ' ')
    [[ -n $state && ! $state =~ PENDING|RUNNING|COMPLETING|CONFIGURING ]] && break
    sleep 1
  done
  echo "slurm-check: $name: job $job: $state(nodes $(scontrol show job "$job" |
    sed -n 's/^ *NodeList=\(.*\)/\1/p' | tr '\n' ' '))"
  cat "$DIR/$name.out"
  [[ $state == "COMPLETED " ]] || exit 1
  expect_launch_losses "slurm-check: $name: the job" "$plan" 3 "$DIR/$name.out"
}

cat >"$DIR/two-types.yaml" <<'YAML'
name: cpu-two-types
network: {kind: ethernet, bandwidth_GBps: 2, latency_us: 30}
nodes:
  - name: t4-node
    devices: {type: T4, count: 1}
  - name: a10-node
    devices: {type: A10, count: 1}
YAML
check plain "$ROOT/bench/fidelity/cpu-local-2.yaml" --gres T4=t4
check heterogeneous "$DIR/two-types.yaml" --gres T4=t4 --gres A10=a10
