#!/usr/bin/env bash
# Regenerates bench/RESULTS.md: builds the tune_cases tool and runs every case of bench/cases/
# with motley and all baselines. Usage: scripts/bench-results.sh [BUILD_DIR] [-- tool options]
# (tool options: --only NAME, --budget SECONDS, --no-scaling). Takes about half a minute on two
# cores.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build-bench}"
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMOTLEY_BUILD_BENCH=ON >/dev/null
cmake --build "$build" --target tune_cases -j "$(nproc)" >/dev/null
cd "$root"
"$build/bench/tune_cases" --cases bench/cases --out bench/RESULTS.md "$@"
