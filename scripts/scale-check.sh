#!/usr/bin/env bash
# How simulating a plan grows with the cluster and the micro-batches: whole `motley simulate
# --plan` runs (parse, validate, simulate, print) on clusters of half H100, half A100 nodes of
# eight devices with a NIC per device, Llama-3-8B in 1F1B pipelines of 8 stages at TP 1 (or
# TP 2 with selective recompute where activations would not fit), every replica of the same
# hardware identical. Prints a markdown table of wall time and peak resident memory (bench/SCALE.md
# keeps a run's figures).
# Usage: scripts/scale-check.sh [BUILD_DIR] [DEVICES...]   (default: build, 1024 4096 16384 65536)
set -euo pipefail
build="${1:-build}"
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1024 4096 16384 65536)
motley="$build/motley"
[ -x "$motley" ] || { echo "scale-check: no $motley; build first" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cluster() {  # devices -> a cluster file
  local devices=$1 nodes=$(($1 / 8))
  local h100=$(((nodes + 1) / 2)) a100=$((nodes - (nodes + 1) / 2))
  cat > "$work/c$devices.yaml" <<EOF
name: scale-$devices
network: {kind: infiniband, bandwidth_GBps: 50, latency_us: 2}
nodes:
  - name: h100
    count: $h100
    devices: {type: H100-SXM, count: 8}
    nic: {bandwidth_GBps: 50, count: 8}
  - name: a100
    count: $a100
    devices: {type: A100-80GB, count: 8}
    nic: {bandwidth_GBps: 25, count: 8}
EOF
}

echo "| devices | replicas | micro-batches per replica | actions in the plan | plan file | tasks simulated | wall s | peak memory MiB |"
echo "|---|---|---|---|---|---|---|---|"
for devices in "${sizes[@]}"; do
  cluster "$devices"
  for m in 16 64 256; do
    # Plans of more than 8 million actions make plan files past a hundred megabytes: skipped.
    if [ $((devices / 16 * 8 * m * 2)) -gt 8388608 ]; then
      echo "| $devices | $((devices / 16)) | $m | $((devices / 16 * 8 * m * 2)) | (skipped) | | | |"
      continue
    fi
    plan="$work/p$devices-$m.json"
    "$motley" simulate --model llama-3-8b --cluster "$work/c$devices.yaml" --schedule 1f1b \
      --pipeline-parallel 8 --tensor-parallel 2 --recompute selective --micro-batches "$m" \
      --out "$plan" > /dev/null
    /usr/bin/time -f "%e %M" -o "$work/time" "$motley" simulate --plan "$plan" --json \
      > "$work/out.json"
    read -r wall kib < "$work/time"
    read -r replicas tasks < <(python3 -c "
import json, sys
r = json.load(open('$work/out.json'))
print(r['replicas'], r['tasks'])")
    actions=$((replicas * 8 * m * 2))
    size=$(du -m "$plan" | cut -f1)
    echo "| $devices | $replicas | $m | $actions | ${size} MB | $tasks | $wall | $((kib / 1024)) |"
    rm -f "$plan"
  done
done
