#!/usr/bin/env bash
# The sanitizer check: builds motley without libtorch (every module but the executor and the
# profiler), its unit tests, the motley binary with its hostile-input tests, and the fuzz
# targets with clang, AddressSanitizer and UndefinedBehaviorSanitizer (at -O0, which halves the
# build; MOTLEY_SANITIZE_OPT=-O1 fuzzes several times faster for long runs), runs the tests,
# then runs each fuzz target over its kept corpus and fuzzes it for SECONDS seconds more.
# MOTLEY_SANITIZE_SCOPE picks how much is built and run:
#   modules (the default, what the test command runs): as above, less the planner tests
#           that repeat searches the others run or judge whole searches on large cases (they
#           run in the ordinary build, which in turn leaves out the unit tests of the modules
#           that run here: MOTLEY_UNIT_TESTS_UNDER_SANITIZERS);
#   all:    also the functional whole-program tests of every command (cli_test), about a
#           minute more;
#   inputs: only the modules that read motley's input files (core, model, cluster, cost, plan,
#           the executor's tensor-free layout) and the fuzz targets, no tests: for fuzzing.
# Any sanitizer report, failed test or fuzz finding fails the check; a finding is left in
# BUILD_DIR/findings/<target>/ to be fixed and added to the corpus (fuzz/README.md).
# Usage: scripts/check-sanitizers.sh BUILD_DIR [SECONDS]   (SECONDS per target, default 10)
set -euo pipefail
build=${1:?usage: check-sanitizers.sh BUILD_DIR [SECONDS]}
seconds=${2:-10}
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs=$(nproc)
command -v clang++ >/dev/null ||
  { echo "check-sanitizers: no clang++ (scripts/setup.sh installs clang)" >&2; exit 1; }

scope=${MOTLEY_SANITIZE_SCOPE:-modules}
case "$scope" in
  modules) inputs_only=OFF tests=ON cli_tests=OFF ;;
  all) inputs_only=OFF tests=ON cli_tests=ON ;;
  inputs) inputs_only=ON tests=OFF cli_tests=OFF ;;
  *) echo "check-sanitizers: MOTLEY_SANITIZE_SCOPE is modules, all or inputs, not '$scope'" >&2
     exit 2 ;;
esac

# LLVM's linker where it is installed (scripts/setup.sh installs it): it links a sanitized test
# program in a fifth of the time GNU ld takes (tune_test: 0.64 s against 3.35 s).
linker=()
if command -v ld.lld >/dev/null; then linker=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld); fi
cmake -S "$root" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=None "${linker[@]}" \
  -DCMAKE_CXX_FLAGS="${MOTLEY_SANITIZE_OPT:--O0} -gline-tables-only" -DMOTLEY_WITH_TORCH=OFF \
  -DMOTLEY_INPUTS_ONLY=$inputs_only -DMOTLEY_SANITIZE=ON \
  -DMOTLEY_BUILD_TESTS=$tests -DMOTLEY_CLI_TESTS=$cli_tests -DMOTLEY_FUZZ=ON -DMOTLEY_BUILD_BENCH=OFF ${MOTLEY_SANITIZE_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$jobs" 2>&1 | grep -vE '^\[ *[0-9]+%\]|^(Consolidate|Scanning|Built target)' || true
cmake --build "$build" -j"$jobs" >/dev/null  # fails the check when the build failed

# Leaks are bugs too; a report of either sanitizer ends the program with an error.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Planner tests that repeat whole searches the other tests run once (over thread counts, and
# against the exhaustive enumeration, with and without deferred baselines, warm starts or
# budgets), or judge the quality of full searches on the large presets (Llama-3-70B, Mixtral)
# and every case, run in the ordinary build, and under the sanitizers only with the functional
# tests (scope all), for time (each of the last five took 7-24 s here, the two searches of 64
# devices with no time budget in AFewLongSequencesOnManyDevicesAreSplit 63 s, and the two of
# 1,024 devices in TheHeadIsSplitOnEveryKeptLayoutBeyondThirtyTwoDevices 635 s, as many in
# TheBestSettingsAreTriedOnTheOtherKeptLayouts); the search's code runs under the sanitizers in
# the other planner tests.
repeats='^(TuneTest\.(AFewLongSequencesOnManyDevicesAreSplit|EvaluationBudgetCutsTheSearchAlikeOnAnyThreads|TheHeadIsSplitOnEveryKeptLayoutBeyondThirtyTwoDevices|TheBestSettingsAreTriedOnTheOtherKeptLayouts|SameSeedGivesTheSamePlanWhateverTheThreads|DefaultSearchIsWithinTwoPercentOfExhaustive|SearchesSequenceParallelismInTensorParallelGroups|FixedExpertParallelismSplitsTheExperts|LowerBoundIsBelowEverySimulatedTime|ReturnsOnlyRunnablePlansThatFitMemory|BaselinesThatOnlyCompareWaitForTheSearchOnceAThirdOfTheBudgetIsSpent|EveryBaselineGivesAValidPlanAndMotleyIsNeverSlower|WarmStartsAreTakenOnlyAsTheSearchCanPriceThem)|Preemption\.BudgetAndDeadlineConstrainEveryPlan|MegatronTunedTest\.NeverSlowerThanTheDefaultLayoutsAndMotleyNeverSlowerThanIt)$'
if [ "$tests" = ON ]; then
  if [ "$scope" = all ]; then
    ctest --test-dir "$build" -j"$jobs" --output-on-failure
  else
    ctest --test-dir "$build" -j"$jobs" --output-on-failure -E "$repeats"
  fi
fi

# Each fuzzer first runs every input of its corpus (the replay, under the sanitizers), then
# mutates them; as many targets at once as there are cores.
targets=$(cd "$build/fuzz" && ls -- *_fuzz | sed 's/_fuzz$//')
mkdir -p "$build/findings"
fuzz_target() {
  local target=$1
  local work="$build/fuzz-corpus/$target"  # new inputs of this run; the kept corpus stays read-only
  local findings="$build/findings/$target"
  rm -f "$build/fuzz-$target.ok"  # written only when the target ran clean
  mkdir -p "$work" "$findings"
  if "$build/fuzz/${target}_fuzz" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$findings/" "$work" "$root/fuzz/corpus/$target" \
      >"$build/fuzz-$target.log" 2>&1; then
    touch "$build/fuzz-$target.ok"
  else
    tail -40 "$build/fuzz-$target.log" >&2
  fi
  local runs
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/fuzz-$target.log")
  echo "fuzz $target: ${runs:-?} inputs in ${seconds} s"
}
for target in $targets; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  fuzz_target "$target" &
done
wait
failed=()
for target in $targets; do
  if [ ! -e "$build/fuzz-$target.ok" ]; then failed+=("$target"); fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "check-sanitizers: fuzz findings for ${failed[*]} in $build/findings/" >&2
  exit 1
fi
