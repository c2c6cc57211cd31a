#!/usr/bin/env bash
# Builds the two images idem runs from, with no container registry: `idem` (the release
# binaries idem-broker, idem-coordinator, idem) and `idem-etcd` (etcd from Debian's
# etcd-server package), each `FROM scratch` plus a root filesystem this script
# assembles: the binaries, exactly the shared libraries `ldd` names, /etc/passwd and
# /etc/group with a non-root user, an empty data directory it owns, and /tmp.
#
#   deploy/build-images.sh [--tag TAG] [--profile release|dev]
#
# Tags: TAG, or the workspace version and `latest` (what deploy/compose.yaml runs by
# default). Profile: `release` (the default: what users run) or `dev`, the debug
# binaries the test command has already built, stripped of their debug info: the
# container tests run those, so CI does not spend 11 minutes on a release build.
#
# Prints each image's name and size. Needs docker, cargo, and apt-get for the
# etcd-server package (downloaded, not installed).
set -euo pipefail
cd "$(dirname "$0")/.."

tag=""
profile="release"
usage="usage: $0 [--tag TAG] [--profile release|dev]"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) [[ $# -ge 2 ]] || { echo "--tag needs a value; $usage" >&2; exit 2; }
           tag="$2"; shift 2 ;;
    --profile) [[ $# -ge 2 ]] || { echo "--profile needs a value; $usage" >&2; exit 2; }
               profile="$2"; shift 2 ;;
    *) echo "unknown option $1; $usage" >&2; exit 2 ;;
  esac
done
# dev: exactly the test command's build (same targets, so the same feature
# unification): a no-op after it, where `--bins` alone would rebuild half the
# workspace with other features and replace the binaries the tests run.
case "$profile" in
  release) cargo_flags=(--release --bins); bin_dir=release ;;
  dev) cargo_flags=(--workspace --bins --examples --no-default-features); bin_dir=debug ;;
  *) echo "unknown profile $profile; $usage" >&2; exit 2 ;;
esac

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
[[ -n "$version" ]] || { echo "no workspace version in Cargo.toml" >&2; exit 1; }
tags=("${tag:-$version}")
[[ -n "$tag" ]] || tags+=(latest)
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
target="$(realpath "${CARGO_TARGET_DIR:-target}")"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Copies each binary, stripped, into $root/usr/local/bin and every shared library it
# loads to the same path in $root (symlinks resolved, so the loader's path exists as a
# file).
add_binaries() {
  local root="$1"; shift
  local bin lib
  for bin in "$@"; do
    install -D -m 0755 "$bin" "$root/usr/local/bin/$(basename "$bin")"
    strip "$root/usr/local/bin/$(basename "$bin")"
    while read -r lib; do
      [[ -n "$lib" ]] || continue
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
    done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
  done
}

# A non-root user and group and a world-writable /tmp in the root filesystem; its data
# directory is the empty `home/` beside it, which the Dockerfile copies with
# `--chown` (COPY makes everything else root's, and a scratch image has no RUN).
add_user() {
  local root="$1" name="$2" id="$3" home="$4"
  mkdir -p "$root/etc" "$root/tmp" "$(dirname "$root")/home"
  echo "$name:x:$id:$id:$name:$home:/sbin/nologin" > "$root/etc/passwd"
  echo "$name:x:$id:" > "$root/etc/group"
  chmod 1777 "$root/tmp"
}

size_of() { docker image inspect --format '{{.Size}}' "$1" | awk '{printf "%.1f MB", $1 / 1000000}'; }

# `-t idem:a -t idem:b` for every tag.
tag_flags() { local t; for t in "${tags[@]}"; do printf -- '-t\n%s:%s\n' "$1" "$t"; done; }

echo "building the $profile binaries"
cargo build "${cargo_flags[@]}"
idem_root="$work/idem/rootfs"
add_binaries "$idem_root" "$target/$bin_dir/idem-broker" "$target/$bin_dir/idem-coordinator" "$target/$bin_dir/idem"
add_user "$idem_root" idem 10001 /data
cp deploy/docker/idem.Dockerfile "$work/idem/Dockerfile"
mapfile -t idem_tags < <(tag_flags idem)
docker build --quiet --build-arg VERSION="$version" --build-arg COMMIT="$commit" \
  --build-arg PROFILE="$profile" "${idem_tags[@]}" "$work/idem" > /dev/null
echo "idem:${tags[0]} $(size_of "idem:${tags[0]}") ($profile, commit $commit; tags ${tags[*]})"

echo "fetching Debian's etcd-server and etcd-client packages"
# A fresh machine (or a container image) may have no package lists yet: fetch them
# once and try again rather than fail.
(cd "$work" && { apt-get download etcd-server etcd-client > /dev/null 2>&1 ||
  { apt-get update -qq && apt-get download etcd-server etcd-client > /dev/null; }; })
deb="$(ls "$work"/etcd-server_*.deb)"
etcd_version="$(dpkg-deb -f "$deb" Version)"
dpkg-deb -x "$deb" "$work/etcd-pkg"
dpkg-deb -x "$(ls "$work"/etcd-client_*.deb)" "$work/etcd-pkg"
etcd_root="$work/etcd/rootfs"
# etcdctl beside etcd: the image has no shell, and `etcdctl endpoint health` is its
# health check.
add_binaries "$etcd_root" "$work/etcd-pkg/usr/bin/etcd" "$work/etcd-pkg/usr/bin/etcdctl"
add_user "$etcd_root" etcd 10002 /var/lib/etcd
cp deploy/docker/etcd.Dockerfile "$work/etcd/Dockerfile"
mapfile -t etcd_tags < <(tag_flags idem-etcd)
docker build --quiet --build-arg VERSION="$etcd_version" "${etcd_tags[@]}" "$work/etcd" > /dev/null
echo "idem-etcd:${tags[0]} $(size_of "idem-etcd:${tags[0]}") (etcd-server $etcd_version)"
