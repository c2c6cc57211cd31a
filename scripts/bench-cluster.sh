#!/usr/bin/env bash
# Benchmarks a real cluster on this machine: one etcd, three idem-broker processes and
# one idem-coordinator (release builds), then runs `idem bench produce
# --replication-factor 3` against it with any further arguments, e.g.
#
#   scripts/bench-cluster.sh --modes all --duration 10s --rounds 3
#   scripts/bench-cluster.sh --modes exactly-once --rate 20000 --duration 20s
#
# Everything lives in a temporary directory and is stopped and removed on exit. The
# ports (etcd 23790/23800, brokers 19091-19093, coordinator 19301) must be free.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --bins >&2
bin="$(realpath "${CARGO_TARGET_DIR:-target}")/release"
work="$(mktemp -d /tmp/idem-bench-cluster.XXXXXX)"
pids=()
cleanup() {
  if ((${#pids[@]})); then kill "${pids[@]}" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

etcd_url=http://127.0.0.1:23790
etcd --name bench --data-dir "$work/etcd" \
  --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
  --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
  --initial-cluster bench=http://127.0.0.1:23800 >"$work/etcd.log" 2>&1 &
pids+=($!)

# Waits (up to 30 s) until the command succeeds; says which step timed out.
await() {
  local what=$1
  shift
  for _ in $(seq 300); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "bench-cluster: $what did not come up; logs in $work" >&2
  trap - EXIT
  exit 1
}
await etcd curl -fsS "$etcd_url/health"

for id in 1 2 3; do
  IDEM_LOG=warn "$bin/idem-broker" --id "$id" --etcd "$etcd_url" --etcd-prefix /bench \
    --pid-store etcd --listen "127.0.0.1:1909$id" --data-dir "$work/broker-$id" \
    >"$work/broker-$id.log" 2>&1 &
  pids+=($!)
done
"$bin/idem-coordinator" --id 1 --etcd "$etcd_url" --etcd-prefix /bench \
  --bootstrap 127.0.0.1:19091 --listen 127.0.0.1:19301 >"$work/coordinator.log" 2>&1 &
pids+=($!)
for id in 1 2 3; do
  await "broker $id" "$bin/idem" --bootstrap "127.0.0.1:1909$id" topic list
done

"$bin/idem" --bootstrap 127.0.0.1:19091 bench produce --replication-factor 3 "$@"
