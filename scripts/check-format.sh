#!/usr/bin/env bash
# Fails listing the C++ files that differ from .clang-format's layout.
set -euo pipefail
clang_format=${1:-clang-format}
cd "$(dirname "$0")/.."
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.h' '*.cc')
else
  mapfile -t files < <(find include src tests bench fuzz -name '*.h' -o -name '*.cc' 2>/dev/null)
fi
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if ! "$clang_format" --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "not formatted (run: clang-format -i FILE): ${bad[*]}" >&2
  exit 1
fi
echo "format: ${#files[@]} files ok"
