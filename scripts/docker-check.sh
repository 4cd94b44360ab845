#!/usr/bin/env bash
# Builds the Dockerfile and runs the image (docs/exports.md, "The container"): `motley plan` in
# the container, and a two-rank training run of tiny-llama under `motley launch` in it whose
# losses must equal those of the same plan run by the host's build.
# A check for a developer's machine, not a test: it needs root, installs Debian's docker.io (and
# debootstrap) when missing, starts dockerd when none runs, and — where no registry can be
# reached — makes the `debian:12` base image from a debootstrap of bookworm (minbase) when there
# is none. The image is tagged motley:check.
#
# Usage: scripts/docker-check.sh [BUILD_DIR]   (default: build; the host's build to compare with)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
MOTLEY="$(cd "$BUILD" && pwd)/motley"
# shellcheck source=scripts/launch-losses.sh
source "$ROOT/scripts/launch-losses.sh"
[[ $(id -u) == 0 ]] || { echo "docker-check: needs root (it may install and start Docker)" >&2; exit 2; }
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  nohup dockerd >"$DIR/dockerd.log" 2>&1 &
  for _ in $(seq 30); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "docker-check: dockerd did not start" >&2; exit 1; }
fi
if ! docker image inspect debian:12 >/dev/null 2>&1 && ! docker pull debian:12 >/dev/null 2>&1; then
  echo "docker-check: no debian:12 image and no registry: making one with debootstrap" >&2
  debootstrap --variant=minbase bookworm "$DIR/rootfs" http://deb.debian.org/debian >/dev/null
  tar -C "$DIR/rootfs" -c . | docker import - debian:12 >/dev/null
fi

# The committed tree, as a fresh clone would have it.
git -C "$ROOT" archive --format=tar HEAD | tar -x -C "$DIR" --one-top-level=tree
start=$(date +%s)
docker build -t motley:check "$DIR/tree" >"$DIR/build.log" 2>&1 || {
  tail -30 "$DIR/build.log" >&2
  exit 1
}
echo "docker-check: built motley:check in $(($(date +%s) - start)) s," \
  "$(docker image inspect motley:check --format '{{.Size}}' | awk '{printf "%.2f GB", $1 / 1e9}')"

docker run --rm motley:check plan --model llama-3-8b --cluster h100x16 --quiet | sed -n 1,3p

"$MOTLEY" simulate --model tiny-llama --cluster "$ROOT/bench/fidelity/cpu-local-2.yaml" \
  --schedule 1f1b --stages 2 --micro-batches 4 --out "$DIR/plan.json" >/dev/null
docker run --rm -v "$DIR:/work" motley:check launch --nproc 2 -- run --plan plan.json --steps 3 \
  >"$DIR/container.out" 2>&1
expect_launch_losses "docker-check: two ranks in the container" "$DIR/plan.json" 3 \
  "$DIR/container.out"
