#!/usr/bin/env bash
# The one test command (README, .ci/run): installs what the tests need, builds every
# binary the tests start as real processes, then runs every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# etcd-client's build script needs protoc; the etcd-backed tests need a real etcd
# server. Install only what is missing.
missing=()
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
command -v etcd >/dev/null 2>&1 || [ -n "${IDEM_ETCD_BIN:-}" ] || missing+=(etcd-server)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

cargo build --workspace --bins
cargo test --workspace --no-fail-fast "$@"
