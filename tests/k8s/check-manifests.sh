#!/usr/bin/env bash
# The k8s_schema_check test: `motley export k8s` on a plan over nodes of one kind (a PyTorchJob)
# and one over mixed spot nodes (a JobSet), and the golden manifests of the example plans
# (examples/plans/*.k8s.expected.txt), each validated by validate.mjs against the Kubernetes
# schemas; then a manifest broken on purpose must be refused, so the check is not vacuous.
# Usage: check-manifests.sh MOTLEY_BINARY
set -euo pipefail
MOTLEY=$1
HERE=$(cd "$(dirname "$0")" && pwd)
if [[ ! -d "$HERE/node_modules/kubernetes-models" ]]; then
  echo "k8s_schema_check: $HERE/node_modules/kubernetes-models is missing; run scripts/setup.sh --tests" >&2
  exit 1
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$MOTLEY" plan --model tiny-llama --cluster h100x16 --quiet --max-plans 100 --out "$WORK/same.json" > /dev/null
"$MOTLEY" plan --model tiny-llama --cluster spot-fleet --quiet --max-plans 100 --out "$WORK/mixed.json" > /dev/null
"$MOTLEY" export k8s --plan "$WORK/same.json" --image reg.example.com/motley:1 --name train \
  --namespace ml --out "$WORK/same.yaml" > /dev/null
"$MOTLEY" export k8s --plan "$WORK/mixed.json" --image reg.example.com/motley:1 \
  --checkpoint-claim ckpt --out "$WORK/mixed.yaml" -- run --plan /etc/motley/plan.json \
  --checkpoint-dir /checkpoints > /dev/null
grep -q '"kind": "PyTorchJob"' "$WORK/same.yaml"
grep -q '"kind": "JobSet"' "$WORK/mixed.yaml"
node "$HERE/validate.mjs" "$WORK/same.yaml"
node "$HERE/validate.mjs" "$WORK/mixed.yaml"
goldens=0
for golden in "$HERE"/../../examples/plans/*.k8s.expected.txt; do
  node "$HERE/validate.mjs" "$golden"
  goldens=$((goldens + 1))
done
if (( goldens == 0 )); then echo "k8s_schema_check: no golden manifests under examples/plans" >&2; exit 1; fi
# A container without an image and a string where the schema has an integer must be refused.
sed -e 's/"image": "reg.example.com\/motley:1",//' -e 's/"nvidia.com\/gpu": 8/"nvidia.com\/gpu": [8]/' \
  "$WORK/same.yaml" > "$WORK/broken.yaml"
if node "$HERE/validate.mjs" "$WORK/broken.yaml" 2> "$WORK/broken.err"; then
  echo "k8s_schema_check: a broken manifest passed" >&2
  exit 1
fi
echo "refused as it should be: $(cat "$WORK/broken.err")"
