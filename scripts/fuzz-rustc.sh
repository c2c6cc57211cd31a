#!/usr/bin/env bash
# RUSTC_WRAPPER of scripts/fuzz.sh: compiles idem's crates and the fuzz targets with
# the coverage instrumentation in RUSTFLAGS, and every crate from the registry without
# it. The targets fuzz idem's decoders; instrumenting tokio, tonic, rustls and the
# other ~170 dependencies made the stage's cold build 8.5 minutes of a 30-minute CI
# budget, and coverage inside them only steers the fuzzer toward their code.
set -euo pipefail
rustc="$1"; shift
repo="$(cd "$(dirname "$0")/.." && pwd)"
# The crate's root file: relative for the fuzz crate itself, absolute for the rest; a
# dependency's lies outside the repository (in CARGO_HOME's registry or git checkouts).
dependency=0
for arg in "$@"; do
  case "$arg" in
    "$repo"/*.rs) break ;;
    /*.rs) dependency=1; break ;;
  esac
done
if [ "$dependency" -eq 0 ]; then exec "$rustc" "$@"; fi
args=()
for arg in "$@"; do
  case "$arg" in
    -Cpasses=sancov-module|-Cllvm-args=-sanitizer-coverage-*|-Cllvm-args=-simplifycfg-branch-fold-threshold=0) ;;
    *) args+=("$arg") ;;
  esac
done
exec "$rustc" "${args[@]}"
