#!/usr/bin/env bash
# What a transaction boundary costs the producer, read from SDK logs written at
# `idem_client::transactional=debug`: for every committed transaction, the drain (its
# last records acknowledged) and EndTxn (sent to answered); for every
# AddPartitionsToTxn, the call (sent to answered; with `commit_and_begin` the next
# transaction's first call goes out when the commit before it is answered). For example:
#
#   IDEM_LOG=warn,idem_client::transactional=debug target/release/idem bench produce \
#     --embedded --modes transactional --rounds 1 --duration 4s --txn-pipelined 2>txn.log
#   scripts/txn-timing.sh txn.log
#
# Given the coordinator's log too (logged at `idem_coordinator::core=debug`, e.g. kept
# by `IDEM_BENCH_LOGS` in scripts/bench-cluster.sh), it adds the coordinator's
# `__transaction_state` appends and its BEGIN / COMMIT / ABORT marker rounds.
#
# Until the next transaction's partitions have joined, none of its records reaches a
# broker: with `commit_and_begin` the sum of the three medians is about how long
# every partition goes without new data at each boundary.
set -euo pipefail
if (($# == 0)); then
  echo "usage: $0 CLIENT_LOG..." >&2
  exit 2
fi
lines=$(cat "$@" | sed 's/\x1b\[[0-9;]*m//g')
committed=$(grep 'transaction committed' <<<"$lines" || true)
joined=$(grep 'partitions joined the transaction' <<<"$lines" || true)
if [[ -z "$committed" ]]; then
  echo "no 'transaction committed' lines: was the producer logging at idem_client::transactional=debug?" >&2
  exit 1
fi
summary() {
  sort -n | awk -v step="$1" '
    { v[NR] = $1; s += $1 }
    function at(p,  i) { i = int(NR * p); if (i < 1) i = 1; if (i > NR) i = NR; return v[i] / 1000 }
    END { if (NR == 0) { printf "%-10s %8d\n", step, 0; exit }
          printf "%-10s %8d %10.2f %10.2f %10.2f %10.2f\n", step, NR, s / NR / 1000, at(0.5), at(0.9), v[NR] / 1000 }'
}
printf '%-10s %8s %10s %10s %10s %10s\n' step count mean_ms p50_ms p90_ms max_ms
grep -oE 'drain_us=[0-9]+' <<<"$committed" | cut -d= -f2 | summary drain
grep -oE 'end_txn_us=[0-9]+' <<<"$committed" | cut -d= -f2 | summary end_txn
grep -oE 'call_us=[0-9]+' <<<"$joined" | cut -d= -f2 | summary join
# The coordinator's side, when its log is given too (`idem_coordinator::core=debug`):
# every `__transaction_state` append and every round of markers, by kind.
appended=$(grep 'txn log appended' <<<"$lines" || true)
if [[ -n "$appended" ]]; then
  grep -oE ' us=[0-9]+' <<<"$appended" | cut -d= -f2 | summary "log append"
fi
for control in Begin Commit Abort; do
  marked=$(grep 'markers written' <<<"$lines" | grep "control=$control" || true)
  if [[ -n "$marked" ]]; then
    grep -oE ' us=[0-9]+' <<<"$marked" | cut -d= -f2 | summary "$control"
  fi
done
