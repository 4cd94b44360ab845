#!/usr/bin/env bash
# Installs the Debian 12 packages motley builds and tests with. Idempotent: when every
# package is already present it prints nothing and touches nothing. Never removes packages.
# With --tests it also installs the test-only npm package the Kubernetes manifests' schema
# check uses (tests/k8s), and npm itself when it is missing.
set -euo pipefail
with_tests=""
case "${1:-}" in
  --tests) with_tests=1 ;;
  "") ;;
  *) echo "setup: unknown option '$1'; the only one is --tests" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake git clang-format clang-tidy clang libclang-rt-14-dev
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
# The test-only schema validator of the Kubernetes manifests (tests/k8s), from npm: no Debian
# package carries the Kubernetes API schemas. Needs node and npm (Debian's, or a newer node's).
k8s_tests="$(cd "$(dirname "$0")/.." && pwd)/tests/k8s"
install_k8s_validator() {
  [ -n "$with_tests" ] || return 0
  [ -d "$k8s_tests/node_modules/kubernetes-models" ] && return 0
  command -v npm >/dev/null || return 0
  echo "setup: installing the test-only npm package kubernetes-models into tests/k8s" >&2
  (cd "$k8s_tests" && npm install --no-audit --no-fund --silent --loglevel=error >/dev/null) ||
    echo "setup: npm install failed: the k8s_schema_check test will fail until it succeeds" >&2
}
if [ -n "$with_tests" ] && ! command -v npm >/dev/null &&
    ! dpkg-query -W -f='${Status}' npm 2>/dev/null | grep -q "install ok installed"; then
  missing_npm=1
fi
if [ ${#missing[@]} -eq 0 ] && [ -z "${missing_npm:-}" ]; then
  install_k8s_validator
  exit 0
fi
[ -n "${missing_npm:-}" ] && missing+=(npm)

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: need root to install: ${missing[*]}" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_k8s_validator
