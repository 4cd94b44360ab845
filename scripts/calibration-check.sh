#!/usr/bin/env bash
# The cost model against Korthikanti et al. 2022 (arXiv 2205.05198): the eight end-to-end runs
# of a calibration-cases/1 file (Tables 3 and 5, as in ../shared/data/calibration/cases.json)
# and the per-layer times of their Table 4 (one 22B layer, TP 8, micro-batch 4, forward and
# backward under five variants), which this script writes as layer cases next to the run cases.
# It prints the stack as built in and with the literature values of its GEMM and memory-bound
# rates (1.0 and 0.8) against both, then fits gemm_efficiency and memory_efficiency to runs alone
# and to runs and layers together, and how each fit does on the other set, and last, leaving
# each run out of the joint fit in turn, how well a fit predicts a run it has not seen. The
# built-in megatron-lm-2022 stack carries the joint fit (docs/calibration.md). A benchmark, not
# a test.
#
# Usage: scripts/calibration-check.sh [BUILD_DIR] [CASES_JSON]
#   (defaults: build, ../shared/data/calibration/cases.json from the repository root)
# Environment: STACK (default megatron-lm-2022), FIT (default gemm_efficiency,memory_efficiency),
# KEEP (a directory to keep the layer cases and the calibrations in).
set -euo pipefail

BUILD=${1:-build}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CASES=$(realpath "${2:-$ROOT/../shared/data/calibration/cases.json}")
MOTLEY="$(cd "$BUILD" && pwd)/motley"
STACK=${STACK:-megatron-lm-2022}
FIT=${FIT:-gemm_efficiency,memory_efficiency}
DIR=${KEEP:-$(mktemp -d)}
mkdir -p "$DIR"
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$DIR"' EXIT
DATA=$(dirname "$CASES")

# Table 4: one layer of the 22B model (h 6144, 64 heads, s 2048, b 4) at TP 8, ms.
python3 - "$DATA" "$DIR/layers.json" <<'PY'
import json, os, sys
data, out = sys.argv[1:]
ROWS = [  # variant, recompute, sequence parallel, forward ms, backward ms
    ("baseline", "none", False, 7.7, 11.9),
    ("sequence-parallel", "none", True, 7.2, 11.8),
    ("full-recompute", "full", False, 7.7, 19.5),
    ("selective-recompute", "selective", False, 7.7, 13.2),
    ("selective-sequence-parallel", "selective", True, 7.2, 13.1),
]
cases = []
for name, recompute, sp, fwd, bwd in ROWS:
    for metric, ms in (("layer_forward_s", fwd), ("layer_backward_s", bwd)):
        cases.append({
            "id": f"korthikanti22-t4-{name}-{metric.split('_')[1]}",
            "model": os.path.join(data, "models/gpt-22b.json"),
            "cluster": os.path.join(data, "clusters/dgx-a100-x1.yaml"),
            "layer": "layers.0", "tp": 8, "micro_batch_size": 4, "seq_len": 2048,
            "recompute": recompute, "sequence_parallel": sp, "metric": metric,
            "published": ms / 1000,
            "source": "Korthikanti et al. 2022, arXiv 2205.05198, Table 4"})
json.dump({"format": "calibration-cases/1",
           "about": "Per-layer times of one GPT-22B layer at TP 8 (Korthikanti et al. 2022)",
           "cases": cases}, open(out, "w"), indent=1)
PY

summary() { grep -E "^mean" || true; }
echo "== $STACK as built in"
echo -n "runs:   "; "$MOTLEY" calibrate --cases "$CASES" --stack "$STACK" | summary
echo -n "layers: "; "$MOTLEY" calibrate --cases "$DIR/layers.json" --stack "$STACK" | summary

echo "== $STACK with the literature values (gemm_efficiency 1.0, memory_efficiency 0.8)"
cat >"$DIR/literature.json" <<JSON
{"format": "motley.calibration/1", "base": "$STACK",
 "stack": {"name": "$STACK", "gemm_efficiency": 1.0, "memory_efficiency": 0.8}}
JSON
echo -n "runs:   "; "$MOTLEY" calibrate --cases "$CASES" --calibration "$DIR/literature.json" | summary
echo -n "layers: "; "$MOTLEY" calibrate --cases "$DIR/layers.json" --calibration "$DIR/literature.json" | summary

echo "== fitted to the runs ($FIT)"
"$MOTLEY" calibrate --cases "$CASES" --stack "$STACK" --fit "$FIT" --out "$DIR/runs.json" \
  | grep -E "^mean|^  [a-z_]+ "
echo -n "layers under it: "; "$MOTLEY" calibrate --cases "$DIR/layers.json" --calibration "$DIR/runs.json" | summary

echo "== fitted to the runs and the layers together"
"$MOTLEY" calibrate --cases "$CASES" "$DIR/layers.json" --stack "$STACK" --fit "$FIT" \
  --out "$DIR/runs-and-layers.json" | grep -E "^mean|^  [a-z_]+ "
echo -n "runs under it:   "; "$MOTLEY" calibrate --cases "$CASES" --calibration "$DIR/runs-and-layers.json" | summary
echo -n "layers under it: "; "$MOTLEY" calibrate --cases "$DIR/layers.json" --calibration "$DIR/runs-and-layers.json" | summary

# Leave one out: fit to the runs and the layers without one run, then price that run with the
# fit, for every run: how far the fitted stack predicts a run it was not fitted to.
echo "== leave one run out (fitted to the other runs and the layers, run priced under that fit)"
python3 - "$CASES" "$DIR" <<'PY'
import json, os, sys
cases_path, out = sys.argv[1:]
data = os.path.dirname(cases_path)
doc = json.load(open(cases_path))
def absolute(c):
    c = dict(c)
    for key in ("model", "cluster"):
        c[key] = os.path.join(data, c[key])
    return c
for i, held in enumerate(doc["cases"]):
    for name, cases in ((f"train-{i}.json", [c for c in doc["cases"] if c is not held]),
                        (f"held-{i}.json", [held])):
        json.dump(dict(doc, cases=[absolute(c) for c in cases]),
                  open(os.path.join(out, name), "w"), indent=1)
PY
runs=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['cases']))" "$CASES")
for ((i = 0; i < runs; i++)); do
  "$MOTLEY" calibrate --cases "$DIR/train-$i.json" "$DIR/layers.json" --stack "$STACK" \
    --fit "$FIT" --out "$DIR/loo-$i.json" >/dev/null
  "$MOTLEY" calibrate --cases "$DIR/held-$i.json" --calibration "$DIR/loo-$i.json" --json \
    >"$DIR/loo-result-$i.json"
done
python3 - "$DIR" "$runs" <<'PY'
import json, os, sys
out, runs = sys.argv[1], int(sys.argv[2])
errors = []
for i in range(runs):
    fit = json.load(open(os.path.join(out, f"loo-{i}.json")))["stack"]
    case = json.load(open(os.path.join(out, f"loo-result-{i}.json")))["cases"][0]
    errors.append(abs(case["error_pct"]))
    print(f"{case['id']:34} measured {case['measured_s']:8.3f} s  predicted "
          f"{case['predicted_s']:8.3f} s  {case['error_pct']:+6.1f}%  (gemm_efficiency "
          f"{fit['gemm_efficiency']:.3f}, memory_efficiency {fit['memory_efficiency']:.3f})")
print(f"held-out runs: mean |error| {sum(errors) / len(errors):.1f}%, max {max(errors):.1f}%")
PY
