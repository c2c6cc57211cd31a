#!/usr/bin/env bash
# The one test command (README, .ci/run): installs what the tests need, builds every
# binary the tests start as real processes, then runs every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh protoc etcd
cargo build --workspace --bins
cargo test --workspace --no-fail-fast "$@"
