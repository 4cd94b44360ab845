#!/usr/bin/env bash
# The kill matrix of checkpoint saves, through the real binary: `motley run --steps STEPS
# --checkpoint-every 1` is killed (SIGKILL, through the MOTLEY_TEST_FAULT=save:N hook of a build
# with tests) at its first crash point of writing files, then its second, and so on until a run
# passes every point and completes. After each kill the directory must still hold a
# checkpoint (from the first pointer switch on), and `--resume` must continue from it to step
# STEPS + 1 with the losses of the uninterrupted run, bit for bit. Prints one line per kill and
# a summary. A measurement script, not a test (ctest runs the in-process matrix,
# checkpoint_store_test.cc, and one kill through the binary); it takes two runs per point.
#
# Usage: scripts/checkpoint-kill-matrix.sh [BUILD_DIR]   (default: build)
# Environment: PLAN (default examples/plans/1f1b-4stage.json), STEPS (default 3). Ranks run as
# threads of one process: the hook counts the crash points of a process.
set -euo pipefail

BUILD=${1:-build}
MOTLEY="$(cd "$BUILD" && pwd)/motley"
PLAN=${PLAN:-examples/plans/1f1b-4stage.json}
STEPS=${STEPS:-3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

losses() { jq -c '.losses'; }

# The uninterrupted run, one step further than the killed ones: a run killed after its last
# checkpoint switched still resumes for one step.
total=$((STEPS + 1))
straight=$("$MOTLEY" run --plan "$PLAN" --steps "$total" --json | losses)
echo "uninterrupted losses: $straight"

kills=0 lost=0 wrong=0 none_yet=0
point=1
while true; do
  dir="$WORK/ckpt-$point"
  # In a subshell whose own stderr is dropped, so that the shell's "Killed" notice is not shown.
  set +e
  (MOTLEY_TEST_FAULT="save:$point" "$MOTLEY" run --plan "$PLAN" --steps "$STEPS" \
    --checkpoint-every 1 --checkpoint-dir "$dir" --json > "$WORK/out.json" 2> "$WORK/err.txt") \
    2> /dev/null
  rc=$?
  set -e
  if [ "$rc" -eq 0 ]; then
    echo "crash point $point: not reached; the run completed"
    break
  fi
  if [ "$rc" -ne 137 ]; then
    echo "crash point $point: exit $rc, not a kill: $(head -c 300 "$WORK/err.txt")" >&2
    exit 1
  fi
  kills=$((kills + 1))
  if [ ! -e "$dir/latest" ]; then
    # Killed in the first save, before its pointer switched: there is nothing to lose yet, and
    # the directory must take a fresh run.
    none_yet=$((none_yet + 1))
    first=0
    state="no checkpoint yet; a fresh run"
    resume=()
  else
    first=$(sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p; s/^step-0*$/0/p' "$dir/latest")
    state="resumed from step $first"
    resume=(--resume)
  fi
  set +e
  out=$("$MOTLEY" run --plan "$PLAN" --steps $((total - first)) --checkpoint-dir "$dir" \
    "${resume[@]}" --json 2> "$WORK/err.txt")
  rc=$?
  set -e
  if [ "$rc" -ne 0 ]; then
    lost=$((lost + 1))
    echo "crash point $point: CHECKPOINT LOST ($state): $(head -c 300 "$WORK/err.txt")"
    point=$((point + 1))
    continue
  fi
  got=$(losses <<< "$out")
  want=$(jq -c --argjson f "$first" '.[$f:]' <<< "$straight")
  if [ "$(jq '.first_step' <<< "$out")" = "$first" ] && [ "$got" = "$want" ]; then
    verdict="losses equal"
  else
    wrong=$((wrong + 1))
    verdict="LOSSES DIFFER: $got from step $(jq '.first_step' <<< "$out") against $want"
  fi
  echo "crash point $point: killed; $state; $verdict; then: $(ls -A "$dir" | tr '\n' ' ')"
  point=$((point + 1))
done
echo "summary: $kills kills over $((point - 1)) crash points; killed before any checkpoint:" \
  "$none_yet; checkpoints lost: $lost; resumed runs with other losses: $wrong"
[ "$lost" -eq 0 ] && [ "$wrong" -eq 0 ]
