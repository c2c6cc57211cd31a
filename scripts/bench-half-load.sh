#!/usr/bin/env bash
# The produce-latency target in one command (docs/benchmarks-history.md, "(c)"): measures the
# replication factor 3 exactly-once peak on this machine (a fresh cluster per round),
# then runs the given modes at half of it and prints their latency table, e.g.
#
#   scripts/bench-half-load.sh
#   IDEM_FLUSH=never scripts/bench-half-load.sh --rounds 5
#   scripts/bench-half-load.sh --modes exactly-once -- --linger-ms 1
#
# Options: --rounds N (default 3, for both the peak and the half-load runs), --modes
# LIST (default exactly-once,at-least-once-unordered,transactional); anything after
# `--` goes to every half-load `idem bench produce`. The brokers' environment
# (IDEM_FLUSH, IDEM_BENCH_LOGS, ...) applies to both steps, as in bench-cluster.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
modes=exactly-once,at-least-once-unordered,transactional
while (($#)); do
  case "$1" in
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --modes) modes=${2:?--modes needs a list}; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: $0 [--rounds N] [--modes LIST] [-- PRODUCE_ARGS...]" >&2; exit 2 ;;
  esac
done

peak_json=$(IDEM_BENCH_JSON=1 scripts/bench-cluster.sh --fresh "$rounds" exactly-once --duration 2s)
peak=$(grep -m1 '"records_per_sec"' <<<"$peak_json" | sed -E 's/.*: *([0-9]+).*/\1/')
if [[ ! "$peak" =~ ^[0-9]+$ ]] || ((peak == 0)); then
  echo "bench-half-load: no exactly-once rate in the peak run:" >&2
  echo "$peak_json" >&2
  exit 1
fi
rate=$((peak / 2))
echo "exactly-once peak (median of $rounds rounds): $peak records/s; half load: $rate records/s"
scripts/bench-cluster.sh --fresh "$rounds" "$modes" --rate "$rate" --duration 4s "$@"
