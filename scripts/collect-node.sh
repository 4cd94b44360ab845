#!/usr/bin/env bash
# Records what `motley detect` reads on this node into DIR, so that the node can be described
# elsewhere with `motley detect --from DIR` (docs/cluster-format.md, "motley detect"): the
# hostname, nvidia-smi's GPU query and topology, rocm-smi's product, memory and topology, lspci -nn,
# /proc/cpuinfo and /proc/meminfo, and the speeds, rates and states of the physical NICs and
# InfiniBand ports. Tools that are absent are skipped. Needs nothing of motley.
#
# Usage: scripts/collect-node.sh DIR
set -euo pipefail
DIR=${1:?usage: collect-node.sh DIR}
mkdir -p "$DIR/proc" "$DIR/sys/class/net" "$DIR/sys/class/infiniband"
hostname > "$DIR/hostname"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits \
    > "$DIR/nvidia-smi.txt" || true
  nvidia-smi topo -m > "$DIR/nvidia-smi-topo.txt" || true
fi
if command -v rocm-smi > /dev/null; then
  rocm-smi --showproductname --showmeminfo vram > "$DIR/rocm-smi.txt" || true
  rocm-smi --showtopo > "$DIR/rocm-smi-topo.txt" || true
fi
if command -v lspci > /dev/null; then lspci -nn > "$DIR/lspci.txt" || true; fi
cp /proc/cpuinfo /proc/meminfo "$DIR/proc/"
for nic in /sys/class/net/*; do
  [[ -e "$nic/device" ]] || continue  # physical interfaces only
  mkdir -p "$DIR/sys/class/net/${nic##*/}"
  cat "$nic/speed" > "$DIR/sys/class/net/${nic##*/}/speed" 2> /dev/null || echo -1 \
    > "$DIR/sys/class/net/${nic##*/}/speed"
done
for port in /sys/class/infiniband/*/ports/*; do
  [[ -d "$port" ]] || continue
  out="$DIR/sys/class/infiniband/${port#/sys/class/infiniband/}"
  mkdir -p "$out"
  cat "$port/rate" > "$out/rate" || true
  cat "$port/state" > "$out/state" || true
done
echo "recorded $(hostname) in $DIR; describe it with: motley detect --from $DIR"
