# shellcheck shell=bash
# Shared by the checks that price published runs (h100-range.sh, a100-published-check.sh,
# h100-fp8-check.sh, h100-nemo-fp8-check.sh, bloom-check.sh), sourced once the caller has set
# STACK (its default stack). Sets BUILD (the caller's first argument, default build), MOTLEY
# (the binary in it), HERE (scripts/), DIR (KEEP, or a temporary directory removed on exit) and
# PRICE (--calibration CALIBRATION where that is set, else --stack STACK).
BUILD=${1:-build}
MOTLEY="$(cd "$BUILD" && pwd)/motley"
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${KEEP:-$(mktemp -d)}
mkdir -p "$DIR"
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$DIR"' EXIT

if [[ -n "${CALIBRATION:-}" ]]; then
  PRICE=(--calibration "$CALIBRATION")
else
  PRICE=(--stack "$STACK")
fi
