#!/usr/bin/env bash
# Builds the Dockerfile and runs motley in the image, with no container registry: the base image
# `debian:12` is made by debootstrap from Debian's package mirror and stored under that name,
# and the image is built and run by buildah (chroot isolation, vfs storage), both Debian
# packages. The build context is the committed tree (git archive HEAD), as a clone has it.
# Checks, in the image: `motley plan` on a preset, and two ranks training a pipeline plan under
# `motley launch` (Gloo, libtorch). A check to run by hand (root, several minutes, about 3 GB
# of disk), not part of the tests.
#
# Usage: scripts/container-check.sh [WORK_DIR]   (default: a temporary directory, removed)
# Needs: root, buildah and debootstrap (apt-get install buildah debootstrap), network access
# to deb.debian.org.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK=${1:-$(mktemp -d)}
[[ -n "${1:-}" ]] || trap 'rm -rf "$WORK"' EXIT
for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || { echo "container-check: $tool is not installed" >&2; exit 2; }
done
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
b() { buildah --storage-driver vfs "$@"; }

if ! b inspect --type image docker.io/library/debian:12 >/dev/null 2>&1; then
  debootstrap --variant=minbase bookworm "$WORK/rootfs" http://deb.debian.org/debian >/dev/null
  ctr=$(b from scratch)
  cp -a "$WORK/rootfs/." "$(b mount "$ctr")/"
  b umount "$ctr" >/dev/null
  b commit -q "$ctr" docker.io/library/debian:12 >/dev/null
  b rm "$ctr" >/dev/null
fi

mkdir -p "$WORK/context"
git -C "$ROOT" archive --format=tar HEAD | tar -x -C "$WORK/context"
time b bud --isolation chroot --pull-never --layers -q -t localhost/motley:check "$WORK/context"

ctr=$(b from localhost/motley:check)
trap 'b rm "$ctr" >/dev/null; [[ -n "${1:-}" ]] || rm -rf "$WORK"' EXIT
echo "== motley plan in the image"
plan=$(b run "$ctr" -- motley plan --model llama-3-8b --cluster h100x16 --max-plans 200)
printf '%s\n' "$plan" | head -3
echo "== two ranks training in the image"
b run "$ctr" -- motley launch --nproc 2 -- run \
  --plan /opt/motley/tests/data/fidelity/pp2-1f1b-tiny-llama.json --steps 3 | tail -4
