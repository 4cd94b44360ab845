#!/usr/bin/env bash
# How the planner does on OctoPipe's other published profiles under OctoPipe's constraints (TP 1,
# DP 1, micro-batches of one, no optimizer step): the setups of docs/planner.md's chain-move
# table, Jamba-52B's of its zigzag memory fallback ("Partition"), and the four-device ones of
# "OctoPipe's tuner on its other profiles". Each SimPipe profile is made a motley profile by
# scripts/simpipe_profile.py (with the given Nemotron-Nano profile as its reference for
# activation bytes), and planned with
#   motley plan --tensor-parallel 1 --pipeline-parallel P --data-parallel 1
#               --micro-batch-size 1 --global-batch M --no-optimizer-step
# on P one-device nodes with free links (../shared/data/octopipe/h100x4-pp-free.yaml with the
# device count, and H200s where the model's state needs 141 GB devices). "act/20" divides every
# layer's activation bytes by 20, so that memory does not bind. Prints iteration time,
# efficiency against the lower bound, bubble and search time per setup. A benchmark, not a test:
# the 16-device searches run to motley's 8 s budget, so their plans depend on the machine.
#
# Usage: scripts/octopipe-profiles.sh SIMPIPE_DIR [BUILD_DIR]
#   SIMPIPE_DIR: a copy of guojihu-hana/SimPipe (its profiles/ and simpipe/models/hf_configs/);
#   the Llama 3.1 and Nemotron-H shapes come from ../shared/data/hf/ (SHARED overrides it).
set -euo pipefail

if [[ $# -lt 1 || ! -d "$1/profiles" ]]; then
  echo "usage: scripts/octopipe-profiles.sh SIMPIPE_DIR [BUILD_DIR] (SIMPIPE_DIR/profiles/ must exist)" >&2
  exit 2
fi
SIMPIPE=$(cd "$1" && pwd)
MOTLEY="$(cd "${2:-build}" && pwd)/motley"
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${SHARED:-$HERE/../../shared/data}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

CONFIGS=$SIMPIPE/simpipe/models/hf_configs
shape() {
  case $1 in
    llama3-8B) echo "$SHARED/hf/Meta-Llama-3.1-8B.json" ;;
    llama3-70B) echo "$SHARED/hf/Meta-Llama-3.1-70B.json" ;;
    llama3-32B) echo "$CONFIGS/Llama-3-32B.json" ;;
    nemotron-h-47B) echo "$CONFIGS/NemotronH-47B.json" ;;
    nemotron-h-56B) echo "$SHARED/hf/Nemotron-H-56B-Base-8K.json" ;;
    jamba-100B) echo "$CONFIGS/Jamba-100B.json" ;;
    jamba-52B) echo "$CONFIGS/Jamba-Mini-52B.json" ;;
    jamba-20B) echo "$CONFIGS/Jamba-20B.json" ;;
    nemotron-h-4B) echo "$CONFIGS/NemotronH-4B.json" ;;
    nemotron-h-8B) echo "$SHARED/hf/Nemotron-H-8B-Base-8K.json" ;;
  esac
}

# model devices device-type micro-batches activation-divisor [seed]
SETUPS=(
  "llama3-70B 16 H200 32 1" "llama3-70B 16 H200 64 1" "llama3-70B 16 H200 32 20"
  "llama3-70B 16 H200 16 20"
  "nemotron-h-56B 16 H100-SXM 16 1" "nemotron-h-56B 16 H100-SXM 32 1"
  "llama3-32B 8 H200 8 1" "llama3-32B 8 H200 32 1" "nemotron-h-47B 8 H200 16 1"
  "jamba-100B 16 H200 32 1"
  "jamba-52B 8 H200 8 20" "jamba-52B 8 H200 16 20" "jamba-52B 16 H200 16 20"
  "llama3-8B 4 H100-SXM 8 1 1" "llama3-8B 4 H100-SXM 8 1 2" "llama3-8B 4 H100-SXM 8 1 3"
  "llama3-8B 4 H100-SXM 8 1 4"
  "nemotron-h-4B 4 H100-SXM 8 1" "nemotron-h-8B 4 H100-SXM 8 1" "jamba-20B 4 H200 8 1"
  "llama3-8B 4 H100-SXM 8 20"
)

echo "| profile | devices | micro-batches | activations | seed | iteration | of the bound | bubble | search |"
echo "|---|---|---|---|---|---|---|---|---|"
for setup in "${SETUPS[@]}"; do
  read -r model devices type micro divisor seed <<<"$setup"
  seed=${seed:-1}
  profile=$DIR/$model-$divisor.json
  if [[ ! -f $profile ]]; then
    python3 "$HERE/simpipe_profile.py" "$SIMPIPE/profiles/$model.json" "$(shape "$model")" \
      "$SHARED/octopipe/nemotron-nano-v2-9b.simpipe.json" "$profile" >/dev/null
    python3 - "$profile" "$divisor" <<'PY'
import json, sys
path, divisor = sys.argv[1], int(sys.argv[2])
with open(path) as f:
    p = json.load(f)
for layer in p["layers"]:
    layer["activation_bytes"] //= divisor
with open(path, "w") as f:
    json.dump(p, f)
PY
  fi
  cluster=$DIR/$type-$devices.yaml
  sed "s/count: 4/count: $devices/; s/type: H100-SXM/type: $type/; s/name: h100x4-pp-free/name: pp-free-$devices/" \
    "$SHARED/octopipe/h100x4-pp-free.yaml" >"$cluster"
  out=$("$MOTLEY" plan --model "$profile" --cluster "$cluster" --tensor-parallel 1 \
    --pipeline-parallel "$devices" --data-parallel 1 --micro-batch-size 1 --global-batch "$micro" \
    --no-optimizer-step --seed "$seed" --quiet 2>&1 || true)
  first=$(sed -n 2p <<<"$out")
  iteration=$(grep -o '^[0-9.]* m\?s' <<<"$first" || echo "no plan")
  efficiency=$( (grep -o '[0-9.]* of the lower bound' <<<"$first" || true) | cut -d' ' -f1)
  bubble=$( (grep -o 'bubble [0-9.]*%' <<<"$first" || true) | cut -d' ' -f2)
  search=$( (grep -o 'plans in [0-9.]* m\?s' <<<"$out" || true) | head -1 | cut -d' ' -f3-)
  activations=$([[ $divisor == 1 ]] && echo "as estimated" || echo "/ $divisor")
  echo "| $model | $devices $type | $micro | $activations | $seed | $iteration | $efficiency | $bubble | $search |"
done
