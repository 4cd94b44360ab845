#!/usr/bin/env bash
# Installs the Debian 12 packages motley builds and tests with. Idempotent: when every
# package is already present it prints nothing and touches nothing. Never removes packages.
# With --tests it also installs what only the tests use: Debian's chromium (the HTML reports'
# browser check), the test-only npm packages of tests/k8s (the Kubernetes schemas) and
# tests/report (playwright-core, which drives that chromium), and npm itself when it is missing.
set -euo pipefail
with_tests=""
case "${1:-}" in
  --tests) with_tests=1 ;;
  "") ;;
  *) echo "setup: unknown option '$1'; the only one is --tests" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake git clang-format clang-tidy clang libclang-rt-14-dev lld
  nlohmann-json3-dev libcli11-dev libfmt-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libtorch-dev libgloo-dev libopenblas0-pthread
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# The test-only npm packages: the Kubernetes API schemas (tests/k8s; no Debian package carries
# them) and playwright-core (tests/report; it drives Debian's chromium, no browser download).
# Needs node and npm (Debian's, or a newer node's).
root="$(cd "$(dirname "$0")/.." && pwd)"
install_npm_tests() {
  [ -n "$with_tests" ] || return 0
  command -v npm >/dev/null || return 0
  local dir package
  for entry in k8s:kubernetes-models report:playwright-core; do
    dir="$root/tests/${entry%%:*}"
    package="${entry#*:}"
    [ -d "$dir/node_modules/$package" ] && continue
    echo "setup: installing the test-only npm package $package into tests/${entry%%:*}" >&2
    (cd "$dir" && npm install --no-audit --no-fund --silent --loglevel=error >/dev/null) ||
      echo "setup: npm install failed in tests/${entry%%:*}: its check will fail until it succeeds" >&2
  done
}
# Debian's chromium for the reports' browser check, with its recommended packages (its fonts
# among them), as the check was verified with.
missing_tests=()
if [ -n "$with_tests" ] &&
    ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed"; then
  missing_tests+=(chromium)
fi
if [ -n "$with_tests" ] && ! command -v npm >/dev/null &&
    ! dpkg-query -W -f='${Status}' npm 2>/dev/null | grep -q "install ok installed"; then
  missing_npm=1
fi
if [ ${#missing[@]} -eq 0 ] && [ ${#missing_tests[@]} -eq 0 ] && [ -z "${missing_npm:-}" ]; then
  install_npm_tests
  exit 0
fi
[ -n "${missing_npm:-}" ] && missing+=(npm)

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: need root to install: ${missing[*]} ${missing_tests[*]}" >&2
  exit 1
fi
echo "setup: installing ${missing[*]} ${missing_tests[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
if [ ${#missing[@]} -gt 0 ]; then
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ${#missing_tests[@]} -gt 0 ]; then
  apt-get install -y -qq "${missing_tests[@]}" >/dev/null
fi
install_npm_tests
