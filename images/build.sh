#!/usr/bin/env bash
# Build the images of the container environments, offline: a Debian root file system made with debootstrap is
# imported as the base image local/debian:bookworm, and every Dockerfile here builds FROM it. Online (a
# registry reachable), `BASE=debian:bookworm images/build.sh` builds FROM the registry's image instead and the
# Dockerfiles install their packages with apt.
#
#   images/build.sh                 # base (if its package list changed), then every image
#   images/build.sh terminal        # the base if needed, then local/terminal:latest only
#   REBUILD=1 images/build.sh       # also rebuild the base from scratch
#
# Cached: the base carries the hash of base/packages.txt in a label and is rebuilt only when that changes;
# the Dockerfiles build with Docker's layer cache, so a rebuild that changes nothing takes about a second.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
BASE="${BASE:-local/debian:bookworm}"
SUITE="${SUITE:-bookworm}"
IMAGES=("$@")
if [ ${#IMAGES[@]} -eq 0 ]; then
  IMAGES=(terminal python)
fi

"$HERE/start-dockerd.sh"

mirror() {
  # the first URIs: line of the machine's deb822 sources, else the classic sources.list, else Debian's CDN
  local uri=""
  if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
    uri="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources)"
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri="$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list)"
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

build_base() {
  local packages hash current rootfs
  packages="$(grep -v '^\s*#' "$HERE/base/packages.txt" | grep -v '^\s*$' | sort | paste -sd, -)"
  hash="$(printf '%s %s\n' "$SUITE" "$packages" | sha256sum | cut -c1-16)"
  current="$(docker image inspect --format '{{index .Config.Labels "org.skyrl.recipe"}}' "$BASE" 2>/dev/null || true)"
  if [ "$current" = "$hash" ] && [ -z "${REBUILD:-}" ]; then
    echo "base $BASE is up to date ($hash)"
    return
  fi
  if ! command -v debootstrap >/dev/null 2>&1; then
    echo "debootstrap is not installed (Debian/Ubuntu: apt-get install debootstrap)" >&2
    exit 1
  fi
  rootfs="$(mktemp -d /var/tmp/skyrl-rootfs.XXXXXX)"
  trap 'rm -rf "$rootfs"' EXIT
  echo "debootstrap $SUITE ($packages) from $(mirror)"
  debootstrap --variant=minbase --include="$packages" "$SUITE" "$rootfs" "$(mirror)" >"$rootfs.log" 2>&1 || {
    tail -n 30 "$rootfs.log" >&2
    exit 1
  }
  rm -f "$rootfs.log"
  # no package lists or caches in the image: they are large and stale the day after
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/*
  tar --numeric-owner -C "$rootfs" -c . | docker import \
    --change "LABEL org.skyrl.recipe=$hash" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
  echo "built base $BASE ($hash)"
}

if [ "$BASE" = "local/debian:bookworm" ]; then
  build_base
fi
for name in "${IMAGES[@]}"; do
  if [ ! -f "$HERE/$name/Dockerfile" ]; then
    echo "no image named $name (known: $(cd "$HERE" && ls -d */ | grep -v base | tr -d / | paste -sd' ' -))" >&2
    exit 1
  fi
  # the legacy builder (what docker.io ships) warns that it is deprecated on every build: shown only on failure
  if ! docker build --quiet --build-arg "BASE=$BASE" -t "local/$name:latest" "$HERE/$name" >/dev/null 2>"$HERE/.build-$name.log"; then
    cat "$HERE/.build-$name.log" >&2
    rm -f "$HERE/.build-$name.log"
    exit 1
  fi
  rm -f "$HERE/.build-$name.log"
  echo "built local/$name:latest"
done
