#!/usr/bin/env bash
# Fuzzes idem's decoders (fuzz/, docs/operations.md "Fuzzing"): record batches, control
# records, transaction- and group-log records, producer-state snapshots, transaction and
# offset index files. Each target starts from the seeds committed under
# fuzz/corpus/<target>/ plus what earlier runs on this machine found
# ($IDEM_FUZZ_CORPUS/<target>/, default fuzz/target/corpus/), and a crash, a timeout
# (10 s for one input) or an allocation past 2 GiB fails the run and leaves the input
# under fuzz/artifacts/<target>/: reproduce it with `fuzz/target/<host triple>/<profile>/<target>
# <file>`, then fix the decoder and keep the input as a unit test of its crate.
#
# Usage: scripts/fuzz.sh [--time SECONDS] [--quick] [TARGET...]
#   scripts/fuzz.sh                       every target, 15 s each
#   scripts/fuzz.sh --quick               dependencies unoptimised (scripts/test.sh, 5 s each)
#   scripts/fuzz.sh --time 3600 TARGET    the long run of one target
#   scripts/fuzz.sh --list                the targets
# IDEM_FUZZ_SECONDS sets the default time per target.
#
# Stable Rust, and no cargo-fuzz: the script builds the targets with cargo and the
# flags cargo-fuzz 0.13 passes for `--sanitizer none` (coverage instrumentation through
# LLVM's SanitizerCoverage, `--cfg fuzzing`, debug assertions, so overflow checks), then
# runs each libFuzzer binary itself. Installing cargo-fuzz cost CI 4 min 50 s of a
# 30-minute budget for what is one `cargo build` and one exec. AddressSanitizer would
# need a nightly `-Zsanitizer`; the decoders are safe Rust (`unsafe_code = "forbid"`),
# so what it would add is checks on the dependencies' unsafe code; panics, overflows,
# hangs and huge allocations are all caught without it.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n 's/^# \{0,1\}//;11,17p' "$0"; }

seconds="${IDEM_FUZZ_SECONDS:-15}"
profile=release
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time) [ $# -ge 2 ] || { usage >&2; exit 2; }; seconds="$2"; shift 2 ;;
    --time=*) seconds="${1#--time=}"; shift ;;
    --list) list=1; shift ;;
    --quick) profile=quick; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
case "$seconds" in
  ''|*[!0-9]*|0) echo "fuzz.sh: --time takes a whole number of seconds > 0, not '$seconds'" >&2; exit 2 ;;
esac

scripts/install-deps.sh protoc cc fuzz
mapfile -t all < <(sed -n 's/^path = "fuzz_targets\/\(.*\)\.rs"$/\1/p' fuzz/Cargo.toml)
if [ "${list:-0}" -eq 1 ]; then printf '%s\n' "${all[@]}"; exit 0; fi
if [ ${#targets[@]} -eq 0 ]; then targets=("${all[@]}"); fi
for target in "${targets[@]}"; do
  printf '%s\n' "${all[@]}" | grep -qx -- "$target" ||
    { echo "fuzz.sh: no target $target; there are: ${all[*]}" >&2; exit 2; }
done

# cargo-fuzz's `build --sanitizer none` (src/project.rs, `fn cargo`), flag for flag: a
# `--target` build, so the flags reach the targets but not build scripts; the profiles
# are in fuzz/Cargo.toml (`release`: cargo-fuzz's; `quick`: dependencies unoptimised).
# The wrapper leaves the registry's crates uninstrumented (see it for why).
triple="$(rustc -vV | sed -n 's/^host: //p')"
fuzz_flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
fuzz_flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
fuzz_flags+=" -Cllvm-args=-sanitizer-coverage-pc-table"
fuzz_flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
fuzz_flags+=" -Cllvm-args=-simplifycfg-branch-fold-threshold=0"
fuzz_flags+=" -Cllvm-args=-sanitizer-coverage-stack-depth -Cdebug-assertions"
# One build for every target, then one run each.
RUSTC_WRAPPER="$PWD/scripts/fuzz-rustc.sh" RUSTFLAGS="$fuzz_flags ${RUSTFLAGS:-}" cargo build --manifest-path fuzz/Cargo.toml \
  --target "$triple" --profile "$profile" --bins
bin_dir="fuzz/target/$triple/$profile"
corpus_root="${IDEM_FUZZ_CORPUS:-fuzz/target/corpus}"
for target in "${targets[@]}"; do
  mkdir -p "$corpus_root/$target" "fuzz/artifacts/$target"
  echo "fuzz.sh: $target for ${seconds}s"
  # The first corpus directory takes what the run finds; the committed seeds only feed
  # it. libFuzzer's line per new input is left out (thousands in a run); its summary stays.
  "$bin_dir/$target" -artifact_prefix="fuzz/artifacts/$target/" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$corpus_root/$target" \
    "fuzz/corpus/$target" 2>&1 | { grep -v '^#[0-9]*[[:space:]]*\(NEW\|REDUCE\|pulse\)' || true; }
done
