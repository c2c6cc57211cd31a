#!/usr/bin/env bash
# Where produce time goes on the brokers: percentiles of each phase of every produce,
# read from broker logs written at `idem_broker::partition=debug` ("produce timing"
# lines; internal topics left out). For example:
#
#   IDEM_BENCH_LOGS=/tmp/logs IDEM_BENCH_LOG=warn,idem_broker::partition=debug \
#     scripts/bench-cluster.sh --fresh 1 exactly-once --rate 55000 --duration 4s
#   scripts/produce-timing.sh /tmp/logs/broker-*.log
#
# Phases, in microseconds: append (validation, any wait for an earlier batch of the
# producer, the write), sync (the leader's fsync), replicate (acks=all: until every
# in-sync follower has the batch), total; then, from the followers' "replica timing"
# lines, each fetched answer's append and fsync on the follower.
set -euo pipefail
if (($# == 0)); then
  echo "usage: $0 BROKER_LOG..." >&2
  exit 2
fi
all=$(cat "$@" | sed 's/\x1b\[[0-9;]*m//g' | grep -v 'topic=__' || true)
lines=$(grep 'produce timing' <<<"$all" || true)
if [[ -z "$lines" ]]; then
  echo "no 'produce timing' lines: were the brokers logging at idem_broker::partition=debug?" >&2
  exit 1
fi

# Prints one row per phase: count and percentiles of VALUES (microseconds, one a line).
row() {
  sort -n <<<"$2" | awk -v phase="$1" '
    { v[NR] = $1 }
    function at(p,  i) { i = int(NR * p); if (i < 1) i = 1; if (i > NR) i = NR; return v[i] / 1000 }
    END { printf "%-18s %8d %10.2f %10.2f %10.2f %10.2f %10.2f\n", phase, NR, at(0.5), at(0.9), at(0.99), at(0.999), v[NR] / 1000 }'
}

printf '%-18s %8s %10s %10s %10s %10s %10s\n' phase count p50_ms p90_ms p99_ms p99.9_ms max_ms
for phase in append sync replicate total; do
  if [[ $phase == total ]]; then
    values=$(sed -E 's/.*append_us=([0-9]+) sync_us=([0-9]+) replicate_us=([0-9]+).*/\1 \2 \3/' <<<"$lines" | awk '{print $1 + $2 + $3}')
  else
    values=$(grep -oE "${phase}_us=[0-9]+" <<<"$lines" | cut -d= -f2)
  fi
  row "$phase" "$values"
done
# The followers' side, one line per fetched answer appended (same debug log).
replica=$(grep 'replica timing' <<<"$all" || true)
if [[ -n "$replica" ]]; then
  for phase in append sync; do
    row "follower $phase" "$(grep -oE "${phase}_us=[0-9]+" <<<"$replica" | cut -d= -f2)"
  done
fi
