#!/usr/bin/env bash
# The one test command (README, .ci/run): installs what the tests need, builds every
# binary the tests start as real processes, then runs every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh protoc etcd cc script netns postgres compose kubernetes-validate kafka-clients fuzz
# No two files may import each other (see the script); cheap, so it runs first.
scripts/import-cycles.sh
# Without the default `jemalloc` feature: the tests do not measure the allocator, and
# jemalloc's C build is 3 minutes of a cold build on 2 cores. Release builds keep it.
cargo build --workspace --bins --examples --no-default-features
# The container tests (compose_walkthrough, container_chaos) run the images of these binaries:
# the debug build, stripped (a release build would add 11 minutes on 2 cores).
deploy/build-images.sh --profile dev --tag test
# The coordinator crate cannot depend on the broker crate; its solo smoke test runs the
# broker binary built above.
export IDEM_BROKER_BIN="$(realpath "${CARGO_TARGET_DIR:-target}")/debug/idem-broker"
# Every decoder's fuzz target for a bounded time (docs/reliability.md, "Fuzzing"); a crash
# fails the run before the tests, with the input left under fuzz/artifacts/. 5 s each in
# the suite, built `--quick` (dependencies unoptimised: a cold build of ~3 minutes on 2
# cores instead of 8.5); longer runs: scripts/fuzz.sh --time 3600 TARGET.
IDEM_FUZZ_SECONDS="${IDEM_FUZZ_SECONDS:-5}" scripts/fuzz.sh --quick
cargo test --workspace --no-default-features --no-fail-fast "$@"
