#!/usr/bin/env bash
# The quickstart (README): installs what the build needs, installs the `idem` and
# `idem-broker` binaries with cargo, and runs `idem dev` (arguments are passed on).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh protoc cc
cargo install --locked --path cli
cargo install --locked --path broker
cargo install --locked --path coordinator
exec "${CARGO_HOME:-$HOME/.cargo}/bin/idem" dev "$@"
