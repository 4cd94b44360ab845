#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy's checks, warnings as errors) over motley's library and program
# sources, with the flags compile_commands.json in BUILD_DIR compiles them with; fails listing
# the findings. Each target's sources are checked together as one translation unit that
# includes them all, so the heavy headers (the standard library, fmt, JSON, CLI11) are parsed
# once per target instead of once per file: that is what makes the check cheap enough for the
# test command. It also means two sources of one target cannot both define an internal name
# (a helper in an anonymous namespace); such a name is a duplicate to share or rename.
# Left out: tests and their helpers (checked by running them) and the targets that include
# libtorch (motley_exec, its test helpers, motley-run, motley_profile, motley-profile), whose
# 1.13 headers Debian 12's clang (14) cannot parse against GCC 12's standard library;
# -Wall -Wextra -Werror covers those.
# Usage: scripts/check-tidy.sh BUILD_DIR [CLANG_TIDY]
set -euo pipefail
build=${1:?usage: check-tidy.sh BUILD_DIR [CLANG_TIDY]}
tidy=${2:-clang-tidy}
root="$(cd "$(dirname "$0")/.." && pwd)"
db="$build/compile_commands.json"
command -v "$tidy" >/dev/null ||
  { echo "check-tidy: no $tidy (scripts/setup.sh installs clang-tidy)" >&2; exit 1; }
[ -f "$db" ] ||
  { echo "check-tidy: no $db (configure with CMAKE_EXPORT_COMPILE_COMMANDS)" >&2; exit 1; }
out=$(mktemp -d)
tab=$'\t'
trap 'rm -rf "$out"' EXIT

# One line per source: target, file, the compiler's flags without the compiler, -o and -c.
# Each entry's "command" line comes before its "file" line. A unity build's entry names the
# generated unity_N_cxx.cxx, whose #include lines name the sources it compiles: those are
# listed instead, so that unity targets are checked as thoroughly as the others.
awk -F'"' -v root="$root" '
  $2 == "command" {
    cmd = $0; sub(/^ *"command": "/, "", cmd); sub(/",? *$/, "", cmd)
    target = ""
    if (match(cmd, /CMakeFiles\/[^ \/]+\.dir\//)) target = substr(cmd, RSTART + 11, RLENGTH - 16)
    n = split(cmd, w, " "); flags = ""
    for (i = 2; i <= n; ++i) {
      if (w[i] == "-o" || w[i] == "-c") { ++i; continue }
      flags = flags " " w[i]
    }
  }
  $2 == "file" && $4 ~ /\/Unity\/unity_[0-9]+_cxx\.cxx$/ {
    unity = $4
    while ((getline line < unity) > 0) {
      if (split(line, part, "\"") >= 2 && line ~ /^#include "/) print target "\t" part[2] "\t" flags
    }
    close(unity)
    next
  }
  $2 == "file" { print target "\t" $4 "\t" flags }' "$db" |
  grep -E "^[^$tab]+$tab$root/(src|bench|fuzz)/" |
  grep -vE "_test\.cc$tab|/(test_plans|test_util|report_fixture)\.cc$tab" |
  grep -vE "^(motley_exec|motley_exec_testing|motley_exec_test_plans|motley-run|motley_profile|motley-profile|[a-z_]+_test)$tab" |
  sort -u >"$out/sources"
[ -s "$out/sources" ] || { echo "check-tidy: no sources in $db" >&2; exit 1; }

# One translation unit per target.
cut -f1 "$out/sources" | sort -u >"$out/targets"
while read -r target; do
  awk -F'\t' -v t="$target" '$1 == t { print "#include \"" $2 "\"" }' "$out/sources" \
    >"$out/$target.cc"
  awk -F'\t' -v t="$target" '$1 == t { print $3; exit }' "$out/sources" >"$out/$target.flags"
done <"$out/targets"

# As many at once as there are cores; a target's findings go to a file of its own.
export tidy root out
xargs -P "$(nproc)" -I{} sh -c '
  # shellcheck disable=SC2046
  "$tidy" --quiet --config-file="$root/.clang-tidy" \
    --header-filter="^$root/(include/motley|src|bench|fuzz)/" "$out/{}.cc" \
    -- $(cat "$out/{}.flags") >"$out/{}.log" 2>&1 || mv "$out/{}.log" "$out/{}.bad"
' <"$out/targets" || true
bad=("$out"/*.bad)
if [ -e "${bad[0]}" ]; then
  cat "${bad[@]}" | grep -v '^[0-9]* warnings\? generated\.$' >&2
  echo "clang-tidy: findings in ${#bad[@]} of $(wc -l <"$out/targets") targets" >&2
  exit 1
fi
echo "clang-tidy: $(wc -l <"$out/sources") files of $(wc -l <"$out/targets") targets ok"
