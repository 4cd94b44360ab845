#!/usr/bin/env bash
# The simulator's fidelity on this CPU (docs/fidelity.md): profiles a small model's layers here,
# makes six 2-rank plans of it, runs `motley fidelity --json` on each and prints predicted,
# measured and error per plan, the mean and largest |error|, and whether the simulator ranks
# the plans as the measurement does. A benchmark, not a test: its figures depend on the machine
# and on what else runs on it.
#
# Usage: scripts/fidelity-check.sh [BUILD_DIR]   (default: build)
# Environment: ROUNDS (default 3: each round profiles the layers and runs every plan once; the
# figures are medians over the rounds), MODEL (default bench/fidelity/small-llama: a
# 4-million-parameter Llama, hidden 256, 4 blocks, 256 tokens, whose blocks take 7.6-13.4 ms
# per action on one core; tiny-llama's take under 1 ms, mostly per-operator overhead and the
# scheduler's noise), STEPS (fidelity steps per plan, default 8), WARMUP
# (default 2), PROFILE_STEPS (default 6), MICRO_BATCHES (per replica, default 8), KEEP (a
# directory to keep the files in; default a temporary one), PROFILE (a profile of MODEL to use
# instead of making one, e.g. from `motley profile layers`; its measured_on must be the
# cluster's device type, else its times are scaled by the ratio of peak rates), CLUSTER (the
# two-device cluster file to plan on instead of the one below, e.g. with measured links),
# MEASURE_LINKS=1 (first run `motley profile comm` over two local ranks, point to point and
# all-reduce, and plan on the cluster with that links file: the pair fits and Gloo's measured
# all-reduce over the two devices; not with CLUSTER).
#
# The profile (unless PROFILE gives one), from the executor itself: a plan whose stages are
# the model's layers one each, all on one device (interleaved 1 x L), is run by two `motley run
# --trace` processes at once, so that the layers are timed with two cores busy as in the
# 2-rank plans compared (and without the gradient sums a data-parallel run would post during
# W): first with its backwards split into B and W, then fused. Each layer's F, B, W and fused
# backward time is the median of its actions' compute time (from their inputs' arrival) over
# both processes after the warm-up.
# The device catalog has no CPU entry, so the two-device cluster names its devices T4 and the
# profile is stamped measured_on T4: the times are then used as they are, unscaled. Links are
# as that cluster states them (PCIe at 2 GB/s, 30 us) unless MEASURE_LINKS or CLUSTER says
# otherwise.
set -euo pipefail

BUILD=${1:-build}
MOTLEY="$(cd "$BUILD" && pwd)/motley"
MODEL=${MODEL:-$(cd "$(dirname "$0")/.." && pwd)/bench/fidelity/small-llama/config.json}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-2}
PROFILE_STEPS=${PROFILE_STEPS:-6}
ROUNDS=${ROUNDS:-3}
MB=${MICRO_BATCHES:-8}
if [[ -n "${KEEP:-}" ]]; then
  DIR=$KEEP
  mkdir -p "$DIR"
else
  DIR=$(mktemp -d)
  trap 'rm -rf "$DIR"' EXIT
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# What else runs here decides the noise: say how loaded the machine was, before and after.
load() { echo "$(getconf _NPROCESSORS_ONLN) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"; }
LOAD_BEFORE=$(load)

cat >"$DIR/cpu1.yaml" <<'YAML'
name: cpu-local-1
nodes:
  - name: localhost
    devices: {type: T4, count: 1}
YAML
cp "$(cd "$(dirname "$0")/.." && pwd)/bench/fidelity/cpu-local-2.yaml" "$DIR/cpu2.yaml"

if [[ -n "${CLUSTER:-}" ]]; then cp "$CLUSTER" "$DIR/cpu2.yaml"; fi
if [[ -n "${MEASURE_LINKS:-}" ]]; then
  [[ -z "${CLUSTER:-}" ]] || { echo "fidelity-check: MEASURE_LINKS and CLUSTER exclude each other" >&2; exit 2; }
  "$MOTLEY" launch --nproc 2 -- profile comm --sizes 1K:16M --factor 4 --iters 20 --warmup 3 \
    --ops p2p,all_reduce --out "$DIR/links.yaml" >"$DIR/links.txt" 2>&1
  sed -i '1a measured_links: links.yaml' "$DIR/cpu2.yaml"
fi

# --- The profile: every layer its own stage on one device, two such runs at once. ---
# make_profile OUT: writes the profile to OUT (its traces beside it).
make_profile() {
local out=$1 tag
tag=$(basename "$out" .json)
if [[ -n "${PROFILE:-}" ]]; then
  cp "$PROFILE" "$out"
  return
fi
LAYERS=$("$MOTLEY" model show "$MODEL" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["layers"]))')
"$MOTLEY" simulate --model "$MODEL" --cluster "$DIR/cpu1.yaml" --schedule interleaved --stages 1 \
  --virtual-stages "$LAYERS" --micro-batches 4 --out "$DIR/profile-plan.json" >/dev/null
python3 - "$DIR/profile-plan.json" <<'PY'
import json, re, sys
path = sys.argv[1]
plan = json.load(open(path))
for replica in plan["replicas"]:
    for group in replica["groups"]:
        if "actions" not in group:
            continue  # a replica with same_actions_as: its groups take the split lists too
        split = []
        for a in group["actions"].split():
            m = re.fullmatch(r"(\d+)B(\d+)", a)
            split += [f"{m[1]}I{m[2]}", f"{m[1]}W{m[2]}"] if m else [a]
        group["actions"] = " ".join(split)
plan["schedule"] = "profile (interleaved 1 x L, B split into I and W)"
json.dump(plan, open(path.replace(".json", "-split.json"), "w"), indent=1)
PY
# The split plan times F, B and W; the plan as made (fused backwards) times the fused backward.
for kind in split fused; do
  plan="$DIR/profile-plan.json"
  [[ $kind == split ]] && plan="$DIR/profile-plan-split.json"
  for copy in 0 1; do
    "$MOTLEY" run --plan "$plan" --steps "$PROFILE_STEPS" --threads 1 \
      --trace "$DIR/$tag-trace.$kind.$copy.json" >/dev/null &
  done
  wait
done
"$MOTLEY" model show "$MODEL" --json >"$DIR/model.json"
python3 - "$DIR/model.json" "$WARMUP" "$out" "$DIR/$tag"-trace.*.?.json <<'PY'
import json, statistics, sys
model, warmup, out = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3]
times = {}  # (stage, cat) -> [seconds]
steps = []  # the whole model's optimizer step, per step after the warm-up
for path in sys.argv[4:]:
    trace = json.load(open(path))
    first = trace["otherData"]["first_step"]
    for e in trace["traceEvents"]:
        a = e.get("args", {})
        if e.get("ph") == "X" and e.get("name") == "optimizer" and a["step"] - first >= warmup:
            steps.append(e["dur"] * 1e-6)
        if e.get("ph") != "X" or "stage" not in a or e["name"].startswith("wait for"):
            continue
        if a["step"] - first < warmup:
            continue
        times.setdefault((a["stage"], e["cat"]), []).append(e["dur"] * 1e-6)
med = lambda s, c: statistics.median(times.get((s, c), [0.0]))
# The step is the whole model's; each layer gets the share of its parameters.
params = sum(l["stored_params"] for l in model["layers"])
step = statistics.median(steps) if steps else 0.0
layers = []
for i, l in enumerate(model["layers"]):
    layers.append({"name": l["name"], "forward_s": med(i, "F"),
                   "backward_input_s": med(i, "B (input grad)"),
                   "backward_weight_s": med(i, "W (weight grad)"),
                   "backward_s": med(i, "B (fused)"),
                   "optimizer_s": step * l["stored_params"] / params,
                   "param_bytes": 4 * l["stored_params"],
                   "activation_bytes": l["activation_bytes"]["none"],
                   "output_bytes": l["output_bytes"]})
# W is the executor's: the weight products' gradients from what B left (weights_only, the
# default; docs/model-format.md).
json.dump({"format": "motley.profile/2", "name": model["name"] + "-cpu", "measured_on": "T4",
           "seq_len": model["seq_len"], "micro_batch_size": model["micro_batch_size"],
           "dtype": "fp32", "layers": layers}, open(out, "w"), indent=1)
PY
}

# --- Six 2-rank plans. ---
sim() { "$MOTLEY" simulate --model "$MODEL" --cluster "$DIR/cpu2.yaml" "$@" >/dev/null; }
sim --schedule 1f1b --stages 1 --micro-batches "$MB" --out "$DIR/dp2.json"
sim --schedule 1f1b --stages 2 --micro-batches "$MB" --out "$DIR/pp2-1f1b.json"
sim --schedule zb-h1 --stages 2 --micro-batches "$MB" --out "$DIR/pp2-zb-h1.json"
sim --schedule interleaved --stages 2 --micro-batches "$MB" --out "$DIR/pp2-interleaved.json"
"$MOTLEY" plan --model "$MODEL" --cluster "$DIR/cpu2.yaml" --global-batch "$MB" \
  --micro-batch-size 1 --max-plans 400 --threads 1 --quiet --out "$DIR/adaptive.json" >/dev/null
# Uneven replicas: DP 2 with its micro-batches split 5 : 3 instead of evenly.
python3 - "$DIR/dp2.json" "$DIR/dp2-uneven.json" "$MB" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
n = sum(r["micro_batches"] for r in plan["replicas"])
counts = [n - n * 3 // 8, n * 3 // 8]
for replica, count in zip(plan["replicas"], counts):
    replica["micro_batches"] = count
    replica.pop("same_actions_as", None)  # each replica now lists its own actions
    for group in replica["groups"]:
        group["actions"] = " ".join(f"0F{m} 0B{m}" for m in range(count))
plan["schedule"] = f"1f1b, replicas {counts[0]}:{counts[1]}"
json.dump(plan, open(sys.argv[2], "w"), indent=1)
PY

echo "$MODEL, $ROUNDS rounds of $STEPS steps per plan ($WARMUP dropped as warm-up); before: $LOAD_BEFORE"
PLANS=(dp2 pp2-1f1b pp2-zb-h1 pp2-interleaved adaptive dp2-uneven)
# Each round profiles the layers again and measures every plan once, so a slow stretch of the
# machine touches the profile and the plans of one round alike; the figures are the medians
# over the rounds.
for ((r = 0; r < ROUNDS; ++r)); do
  make_profile "$DIR/profile.$r.json"
  for p in "${PLANS[@]}"; do
    "$MOTLEY" fidelity --plan "$DIR/$p.json" --profile "$DIR/profile.$r.json" --steps "$STEPS" \
      --warmup "$WARMUP" --json >"$DIR/$p.fidelity.$r.json"
  done
done

python3 - "$DIR" "$ROUNDS" "${PLANS[@]}" <<'PY'
import json, statistics, sys
d, rounds, plans = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = statistics.median
rows = []
for p in plans:
    reports = [json.load(open(f"{d}/{p}.fidelity.{r}.json")) for r in range(rounds)]
    pred = med(r["predicted_s"] for r in reports)
    meas = med(r["measured_s"] for r in reports)
    # Per kind, the medians over the rounds; the kind whose gap is the largest.
    gaps = {}
    for k in reports[0]["kinds"]:
        name = k["name"]
        ks = [next(x for x in r["kinds"] if x["name"] == name) for r in reports]
        if med(x["measured_s"] for x in ks) > 0:
            gaps[name] = med(x["predicted_s"] for x in ks) - med(x["measured_s"] for x in ks)
    worst = max(gaps, key=lambda n: abs(gaps[n]))
    spread = med(100 * (r["measured_max_s"] - r["measured_min_s"]) / r["measured_s"]
                 for r in reports)
    ms = [r["measured_s"] for r in reports]
    across = 100 * (max(ms) - min(ms)) / meas
    rows.append((p, reports[0]["schedule"], pred, meas, 100 * (pred - meas) / meas, worst,
                 gaps[worst], spread, across))
print(f"{'plan':16} {'schedule':22} {'predicted':>11} {'measured':>11} {'error':>8} {'spread':>7}"
      f" {'rounds':>7}  largest gap (kind, pred - meas)")
for p, s, pr, me, e, wn, wd, sp, ac in rows:
    print(f"{p:16} {s[:22]:22} {pr*1e3:9.3f}ms {me*1e3:9.3f}ms {e:+7.1f}% {sp:6.1f}% {ac:6.1f}%"
          f"  {wn} {wd*1e3:+.3f} ms")
print(f"(medians over {rounds} rounds; spread: the measured iterations' range after the warm-up "
      "within a round, relative to their median, the median over the rounds; rounds: the range "
      "of the rounds' measured medians, relative to their median)")
errs = [abs(r[4]) for r in rows]
print(f"mean |error| {sum(errs)/len(errs):.1f}%   max |error| {max(errs):.1f}%   (goal: mean <= 5%, max <= 10%)")
by_pred = [r[0] for r in sorted(rows, key=lambda r: r[2])]
by_meas = [r[0] for r in sorted(rows, key=lambda r: r[3])]
print("predicted ranking (fastest first):", " < ".join(by_pred))
print("measured ranking  (fastest first):", " < ".join(by_meas))
print("rankings equal:", "yes" if by_pred == by_meas else "no")
PY
echo "after: $(load)"
