#!/usr/bin/env bash
# Fuzzes idem's decoders (fuzz/, docs/operations.md "Fuzzing"): record batches, control
# records, transaction- and group-log records, producer-state snapshots, transaction and
# offset index files. Each target starts from the seeds committed under
# fuzz/corpus/<target>/ plus what earlier runs on this machine found
# ($IDEM_FUZZ_CORPUS/<target>/, default fuzz/target/corpus/), and a crash, a timeout
# (10 s for one input) or an allocation past 2 GiB fails the run and leaves the input
# under fuzz/artifacts/<target>/: reproduce it with `cargo fuzz run -s none <target>
# <file>`, then fix the decoder and keep the input as a unit test of its crate.
#
# Usage: scripts/fuzz.sh [--time SECONDS] [TARGET...]
#   scripts/fuzz.sh                       every target, 15 s each (the CI bound; scripts/test.sh)
#   scripts/fuzz.sh --time 3600 TARGET    the long run of one target
#   scripts/fuzz.sh --list                the targets
# IDEM_FUZZ_SECONDS sets the default time per target.
#
# Stable Rust: cargo-fuzz runs with `--sanitizer none`, the only mode that needs no
# nightly compiler flag (AddressSanitizer is `-Zsanitizer`). The decoders are safe Rust
# (`unsafe_code = "forbid"`), so what AddressSanitizer would add is checks on the
# dependencies' unsafe code; panics, overflows (debug assertions are on), hangs and huge
# allocations are all caught without it.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n 's/^# \{0,1\}//;11,16p' "$0"; }

seconds="${IDEM_FUZZ_SECONDS:-15}"
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time) [ $# -ge 2 ] || { usage >&2; exit 2; }; seconds="$2"; shift 2 ;;
    --time=*) seconds="${1#--time=}"; shift ;;
    --list) list=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
case "$seconds" in
  ''|*[!0-9]*|0) echo "fuzz.sh: --time takes a whole number of seconds > 0, not '$seconds'" >&2; exit 2 ;;
esac

scripts/install-deps.sh protoc cc fuzz
mapfile -t all < <(cargo fuzz list --fuzz-dir fuzz)
if [ "${list:-0}" -eq 1 ]; then printf '%s\n' "${all[@]}"; exit 0; fi
if [ ${#targets[@]} -eq 0 ]; then targets=("${all[@]}"); fi
for target in "${targets[@]}"; do
  printf '%s\n' "${all[@]}" | grep -qx -- "$target" ||
    { echo "fuzz.sh: no target $target; there are: ${all[*]}" >&2; exit 2; }
done

corpus_root="${IDEM_FUZZ_CORPUS:-fuzz/target/corpus}"
# One build for every target, then one run each.
cargo fuzz build --fuzz-dir fuzz --sanitizer none
for target in "${targets[@]}"; do
  mkdir -p "$corpus_root/$target"
  echo "fuzz.sh: $target for ${seconds}s"
  # The first corpus directory takes what the run finds; the committed seeds only feed
  # it. libFuzzer's line per new input is left out (thousands in a run); its summary stays.
  cargo fuzz run --fuzz-dir fuzz --sanitizer none "$target" "$corpus_root/$target" \
    "fuzz/corpus/$target" -- -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 2>&1 | { grep -v '^#[0-9]*[[:space:]]*\(NEW\|REDUCE\|pulse\)' || true; }
done
