#!/usr/bin/env bash
# Builds the container image of deploy/container/Containerfile with buildah.
#
#   scripts/build-image.sh [--base IMAGE] [--tag IMAGE]
#
# 1. The base image. With --base, that one (say python:3.12-slim, where a registry can be
#    reached). Without it, one made here, since no container registry can be reached on
#    these machines: a Debian bookworm root file system from debootstrap (minbase, with
#    python3, python3-venv and ca-certificates), committed as
#    localhost/runaway-sidecar-base:bookworm. The root file system is cached as a tarball
#    in $CACHE/image/, named by a hash of its recipe; the base image is made again only
#    when buildah's storage lacks it.
# 2. buildah build --format docker (the HEALTHCHECK is a Docker-format field) with chroot
#    isolation, --build-arg BASE=<the base>, tagged localhost/runaway-sidecar:<version>.
# 3. Prints the image's size, entrypoint, command, user and environment.
# `pytest -m image` (tests/deploy/test_image.py) then runs the image.
#
# Environment: STORAGE_DRIVER (default vfs: works in any container or sandbox),
# RUNAWAY_E2E_CACHE (default ~/.cache/runaway-sidecar), DEBIAN_MIRROR (default
# http://deb.debian.org/debian). Needs root (debootstrap, buildah's chroot isolation);
# installs Debian's buildah and debootstrap when they are missing.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${RUNAWAY_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runaway-sidecar}
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
PACKAGES=python3,python3-venv,ca-certificates
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -n1)
BASE=
TAG=localhost/runaway-sidecar:$VERSION
T0=$(date +%s)

say() { printf 'build-image [%4ds] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }

while (($#)); do
  case $1 in
    --base) BASE=$2; shift ;;
    --tag) TAG=$2; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "build-image: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

need() {  # need COMMAND DEBIAN_PACKAGE
  command -v "$1" >/dev/null 2>&1 && return
  say "installing $2"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "$2" >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "$2" >/dev/null; }
}
need buildah buildah
say "$(buildah --version), storage driver $STORAGE_DRIVER"

if [[ -z $BASE ]]; then
  need debootstrap debootstrap
  recipe=$(printf '%s %s %s minbase' "$SUITE" "$PACKAGES" "$MIRROR" | sha256sum | cut -c1-12)
  BASE=localhost/runaway-sidecar-base:$SUITE-$recipe
  tarball=$CACHE/image/rootfs-$SUITE-$recipe.tar
  if buildah inspect --type image "$BASE" >/dev/null 2>&1; then
    say "reusing base image $BASE"
  else
    if [[ ! -s $tarball ]]; then
      say "debootstrap $SUITE ($PACKAGES) from $MIRROR"
      mkdir -p "$CACHE/image"
      rootfs=$(mktemp -d "$CACHE/image/rootfs.XXXXXX")
      trap 'rm -rf "$rootfs"' EXIT
      timeout 1200 debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" \
        >"$CACHE/image/debootstrap.log" 2>&1 || { tail -n 20 "$CACHE/image/debootstrap.log" >&2; exit 1; }
      # Package caches and lists are of no use in an image.
      rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
        "$rootfs"/var/log/* "$rootfs"/tmp/*
      tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" .
      mv "$tarball.tmp" "$tarball"
      rm -rf "$rootfs"
      trap - EXIT
    fi
    say "committing base image $BASE from $tarball"
    ctr=$(buildah from scratch)
    buildah add --quiet "$ctr" "$tarball" / >/dev/null
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --cmd /bin/sh "$ctr"
    buildah commit --quiet --rm "$ctr" "$BASE" >/dev/null
  fi
fi

# pip in the build trusts what pip here trusts: a CA bundle configured for this machine
# (PIP_CERT, or pip's global.cert) is mounted into the build and passed as PIP_CA_BUNDLE.
ca=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
ca_args=()
if [[ -n $ca && -f $ca ]]; then
  ca_args=(--volume "$ca:/run/pip-ca-bundle.crt:ro" --build-arg PIP_CA_BUNDLE=/run/pip-ca-bundle.crt)
  say "pip in the build trusts $ca"
fi
say "building $TAG on $BASE"
timeout 1200 buildah build --quiet --format docker --isolation chroot --layers=false \
  "${ca_args[@]}" --build-arg "BASE=$BASE" -f "$ROOT/deploy/container/Containerfile" \
  -t "$TAG" "$ROOT" >/dev/null
buildah rmi --prune >/dev/null 2>&1 || true  # the image this tag named before, if any
say "built $TAG: $(buildah images --format '{{.Size}}' "$TAG")"
buildah inspect --type image "$TAG" | python3 -c '
import json, sys
c = json.load(sys.stdin)["Docker"]["config"]
for key in ("Entrypoint", "Cmd", "User", "Env", "ExposedPorts", "Healthcheck"):
    print(f"  {key}: {json.dumps(c.get(key))}")' >&2
say "done"
