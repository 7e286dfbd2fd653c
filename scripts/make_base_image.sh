#!/usr/bin/env bash
# The local Debian base image for CPU image builds (container registries are unreachable here).
# debootstrap --variant=minbase bookworm -> tarball kept in the build cache (scripts/cache.sh)
# -> `docker import`.
# Usage: DOCKER_HOST=unix://... bash scripts/make_base_image.sh [TAG]   (default local/bookworm:base)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cache.sh
tag=${1:-local/bookworm:base}
# The Debian archive the host's apt reads (deb822 or one-line sources), unless DEBIAN_MIRROR names one.
host_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -n -e 's/^URIs: *\([^ ]*\).*/\1/p' -e 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\).*/\2/p' "$f"
  done | grep -v -- '-security' | head -1 || true
}
mirror=${DEBIAN_MIRROR:-$(host_mirror)}
docker_bin=${DOCKER:-/usr/bin/docker}
cache=$BUILD_CACHE/images
tarball="$cache/bookworm-minbase.tar"
mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null || { echo "make_base_image: debootstrap is missing (apt-get install -y debootstrap)" >&2; exit 1; }
  [ -n "$mirror" ] || { echo "make_base_image: no Debian archive in the host's apt sources; set DEBIAN_MIRROR" >&2; exit 1; }
  rootfs=$(mktemp -d "$cache/rootfs.XXXX")
  echo "==> debootstrap --variant=minbase bookworm (about 1 minute)"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 \
    || { tail -20 "$cache/debootstrap.log" >&2; rm -rf "$rootfs"; exit 1; }
  # The same apt source a Debian image from a registry would have, and no cached package lists.
  echo "deb $mirror bookworm main" > "$rootfs/etc/apt/sources.list"
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  rm -rf "$rootfs"
fi
if ! "$docker_bin" image inspect "$tag" >/dev/null 2>&1; then
  "$docker_bin" import "$tarball" "$tag" >/dev/null
fi
echo "$tag"
