#!/usr/bin/env bash
# Runs `motley export slurm`'s batch script under a real Slurm on this machine (docs/exports.md,
# "Slurm batch script"): a one-node cluster whose two "GPUs" are GRES entries backed by
# placeholder device files, a two-rank plan of tiny-llama on two T4-typed CPU ranks, the script
# submitted with sbatch, and its losses compared with `motley launch --nproc 2` on the same plan.
# A check for a developer's machine, not a test: it needs root, installs Debian's slurm-wlm and
# munge when they are missing, writes /etc/slurm/slurm.conf and gres.conf (the old ones are kept
# as *.motley-saved), and starts munged, slurmctld and slurmd, stopping the last two at the end.
#
# Usage: scripts/slurm-check.sh [BUILD_DIR]   (default: build)
set -euo pipefail

BUILD=${1:-build}
MOTLEY="$(cd "$BUILD" && pwd)/motley"
[[ $(id -u) == 0 ]] || { echo "slurm-check: needs root (it configures and starts Slurm)" >&2; exit 2; }
DIR=$(mktemp -d)
HOST=$(hostname -s)
cleanup() {
  pkill -x slurmd 2>/dev/null || true
  pkill -x slurmctld 2>/dev/null || true
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
mkdir -p "$DIR/state" "$DIR/spool"
cat >/etc/slurm/slurm.conf <<EOF
ClusterName=motley-check
SlurmctldHost=$HOST
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MpiDefault=none
NodeName=$HOST CPUs=$(nproc) Gres=gpu:t4:2 State=UNKNOWN
PartitionName=check Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
# Two GRES "GPUs" of type t4: Slurm counts the entries; the device files are placeholders.
cat >/etc/slurm/gres.conf <<EOF
AutoDetect=off
NodeName=$HOST Name=gpu Type=t4 File=/dev/tty1
NodeName=$HOST Name=gpu Type=t4 File=/dev/tty2
EOF
pkill -x slurmd 2>/dev/null || true
pkill -x slurmctld 2>/dev/null || true
sleep 1
/usr/sbin/slurmctld -c
/usr/sbin/slurmd
for _ in $(seq 30); do sinfo -h -o %T 2>/dev/null | grep -qx idle && break; sleep 1; done
sinfo -h -o %T | grep -qx idle || { echo "slurm-check: the node did not come up:" >&2; tail "$DIR/slurmctld.log" >&2; exit 1; }

cat >"$DIR/cpu2.yaml" <<'YAML'
name: cpu-local-2
nodes:
  - name: localhost
    devices: {type: T4, count: 2}
    interconnect: {kind: pcie}
    pcie: {bandwidth_GBps: 2, latency_us: 30}
YAML
"$MOTLEY" simulate --model tiny-llama --cluster "$DIR/cpu2.yaml" --schedule 1f1b --stages 2 \
  --micro-batches 4 --out "$DIR/plan.json" >/dev/null
"$MOTLEY" export slurm --plan "$DIR/plan.json" --gres T4=t4 --out "$DIR/job.sbatch" \
  -- run --plan "$DIR/plan.json" --steps 3 >/dev/null
job=$(MOTLEY="$MOTLEY" sbatch --parsable --output="$DIR/job.out" --chdir="$DIR" "$DIR/job.sbatch")
for _ in $(seq 120); do
  state=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED || $state == TIMEOUT ]] && break
  sleep 1
done
echo "slurm-check: job $job $state"
cat "$DIR/job.out"
[[ $state == COMPLETED ]] || exit 1

# "step N loss X" of every rank, one line per step.
losses() { sed -n 's/.*step *\([0-9]*\) *loss \([0-9.]*\).*/\1 \2/p' | sort -u; }
want=$("$MOTLEY" launch --nproc 2 -- run --plan "$DIR/plan.json" --steps 3 2>&1 | losses)
got=$(losses <"$DIR/job.out")
if [[ -n $got && $got == "$want" ]]; then
  echo "slurm-check: the job's losses equal motley launch's on the same plan:"
  echo "$got"
else
  echo "slurm-check: the job's losses differ from motley launch's:" >&2
  diff <(echo "$got") <(echo "$want") >&2 || true
  exit 1
fi
