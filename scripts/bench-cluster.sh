#!/usr/bin/env bash
# Benchmarks a real cluster on this machine: one etcd, three idem-broker processes and
# one idem-coordinator (release builds), then runs `idem bench produce
# --replication-factor 3` against it with any further arguments, e.g.
#
#   scripts/bench-cluster.sh --modes all --duration 10s --rounds 3
#   scripts/bench-cluster.sh --modes exactly-once --rate 20000 --duration 20s
#
# With `--fresh ROUNDS MODES` first, every run gets a cluster of its own (topics left by
# earlier runs cost the brokers CPU: one follower fetch loop per partition), and
# `idem bench report` combines the runs as rounds of one:
#
#   scripts/bench-cluster.sh --fresh 3 all --duration 2s
#
# The brokers take their settings from the environment too, e.g. `IDEM_FLUSH=never`
# (leave flushing to the OS, like Kafka's default) instead of an fsync per append.
# `IDEM_BENCH_JSON=1` prints the `--fresh` report as JSON instead of a table.
# `IDEM_BENCH_LOGS=DIR` keeps every broker's and the coordinator's log in DIR (appended
# across runs), logged at `IDEM_BENCH_LOG` (default warn);
# `IDEM_BENCH_LOG=warn,idem_broker::partition=debug` logs the timing of every produce,
# which `scripts/produce-timing.sh` summarises, and `idem_coordinator::core=debug` the
# coordinator's appends and markers, which `scripts/txn-timing.sh` summarises.
#
# Everything lives in a temporary directory and is stopped and removed on exit. The
# ports (etcd 23790/23800, brokers 19091-19093, coordinator 19301) must be free.
set -euo pipefail
cd "$(dirname "$0")/.."

# etcd (and protoc, which the release build needs) when missing, as the test command does.
scripts/install-deps.sh protoc etcd cc >&2
cargo build --release --bins >&2
bin="$(realpath "${CARGO_TARGET_DIR:-target}")/release"
work="$(mktemp -d /tmp/idem-bench-cluster.XXXXXX)"
pids=()
stop_cluster() {
  if ((${#pids[@]})); then kill "${pids[@]}" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  pids=()
  if [[ -n "${IDEM_BENCH_LOGS:-}" ]]; then
    mkdir -p "$IDEM_BENCH_LOGS"
    for name in broker-1 broker-2 broker-3 coordinator; do
      if [[ -f "$work/$name.log" ]]; then
        cat "$work/$name.log" >>"$IDEM_BENCH_LOGS/$name.log"
        rm -f "$work/$name.log"
      fi
    done
  fi
  rm -rf "$work/cluster"
}
trap 'stop_cluster; rm -rf "$work"' EXIT

# Whether something accepts TCP connections on 127.0.0.1:$1 (bash only, no curl needed).
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

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

start_cluster() {
  local dir="$work/cluster" etcd_url=http://127.0.0.1:23790
  mkdir -p "$dir"
  etcd --name bench --data-dir "$dir/etcd" \
    --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
    --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
    --initial-cluster bench=http://127.0.0.1:23800 >"$work/etcd.log" 2>&1 &
  pids+=($!)
  await etcd listening 23790
  for id in 1 2 3; do
    IDEM_LOG="${IDEM_BENCH_LOG:-warn}" "$bin/idem-broker" --id "$id" --etcd "$etcd_url" --etcd-prefix /bench \
      --pid-store etcd --listen "127.0.0.1:1909$id" --data-dir "$dir/broker-$id" \
      >"$work/broker-$id.log" 2>&1 &
    pids+=($!)
  done
  IDEM_LOG="${IDEM_BENCH_LOG:-warn}" "$bin/idem-coordinator" --id 1 --etcd "$etcd_url" --etcd-prefix /bench \
    --bootstrap 127.0.0.1:19091 --listen 127.0.0.1:19301 >"$work/coordinator.log" 2>&1 &
  pids+=($!)
  for id in 1 2 3; do
    await "broker $id" "$bin/idem" --bootstrap "127.0.0.1:1909$id" topic list
  done
}

if [[ "${1:-}" != "--fresh" ]]; then
  start_cluster
  "$bin/idem" --bootstrap 127.0.0.1:19091 bench produce --replication-factor 3 "$@"
  exit 0
fi

rounds=$2
modes=$3
shift 3
if [[ "$modes" == all ]]; then
  modes=at-most-once,at-least-once,at-least-once-unordered,exactly-once,transactional
fi
runs=()
for round in $(seq "$rounds"); do
  for mode in ${modes//,/ }; do
    start_cluster
    out="$work/round-$round-$mode.json"
    echo "bench-cluster: round $round, $mode" >&2
    "$bin/idem" --bootstrap 127.0.0.1:19091 bench produce --replication-factor 3 \
      --modes "$mode" --json "$@" >"$out"
    runs+=("$out")
    stop_cluster
  done
done
header="idem bench produce, replication factor 3, a fresh cluster per run, $rounds round(s): $*"
if [[ -n "${IDEM_BENCH_JSON:-}" ]]; then echo "$header" >&2; else echo "$header"; fi
"$bin/idem" bench report ${IDEM_BENCH_JSON:+--json} "${runs[@]}"
