#!/usr/bin/env bash
# Issue 30's benchmark: the confluent-kafka idempotent producer (librdkafka; 1 KiB
# records, linger.ms=5) into idem's Kafka listener, beside `idem bench produce` over
# gRPC (the SDK's exactly-once producer, the same record size and linger), in one run.
#
#   scripts/bench-kafka.sh [--rounds N] [--duration SECONDS] [--partitions P]
#
# Every run gets a fresh `idem dev` (release build; broker and coordinator in one
# process, the default flush policy: an fsync per append with group commit) in a
# temporary directory, so data left by one run never slows the next; the two paths
# alternate which goes first in each round. Both read everything back afterwards
# (idem bench's verifier; timed_produce.py's read_committed consumer) and report
# whether every acknowledged record came back once and in order. The table gives each
# round's records/s and Kafka / gRPC ratio, then the mean, spread and median of the
# ratios. `IDEM_BENCH_JSON=FILE` also writes every run's JSON lines to FILE;
# `IDEM_BENCH_KAFKA_SETTINGS="key=value ..."` adds librdkafka settings to the Kafka
# producer (e.g. `delivery.report.only.error=true`: no Python callback per record).
# As root, the page cache is dropped before each run (a run's writeback otherwise
# lands in the next one; docs/benchmarks.md, "How to read the ratios").
#
# Ports 19191 (gRPC), 19193 (coordinator) and 19194 (Kafka) must be free.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=5 duration=5 partitions=6
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --partitions) partitions=$2; shift 2 ;;
    *) echo "bench-kafka: unknown argument $1 (--rounds N, --duration SECONDS, --partitions P)" >&2; exit 2 ;;
  esac
done

# protoc and a C compiler (jemalloc) for the release build, confluent-kafka for the client.
scripts/install-deps.sh protoc cc kafka-clients >&2
cargo build --release --bin idem >&2
idem="$(realpath "${CARGO_TARGET_DIR:-target}")/release/idem"
python="${IDEM_KAFKA_VENV:-/opt/idem/kafka-clients}/bin/python"
work="$(mktemp -d /tmp/idem-bench-kafka.XXXXXX)"
dev_pid=
stop_dev() {
  if [[ -n "$dev_pid" ]]; then kill "$dev_pid" 2>/dev/null || true; wait "$dev_pid" 2>/dev/null || true; fi
  dev_pid=
  rm -rf "$work/data"
}
trap 'stop_dev; rm -rf "$work"' EXIT

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_dev() {
  if [[ $(id -u) -eq 0 ]]; then sync; echo 1 >/proc/sys/vm/drop_caches; fi
  IDEM_LOG=warn "$idem" dev --data-dir "$work/data" --listen 127.0.0.1:19191 \
    --coordinator-listen 127.0.0.1:19193 --kafka-listen 127.0.0.1:19194 >"$work/dev.log" 2>&1 &
  dev_pid=$!
  for _ in $(seq 300); do
    if listening 19191 && listening 19194; then return 0; fi
    sleep 0.1
  done
  echo "bench-kafka: idem dev did not come up:" >&2
  cat "$work/dev.log" >&2
  exit 1
}

# One JSON line per run: {"path", "round", "records_per_sec", "verified", ...}.
run_grpc() {
  start_dev
  "$idem" --bootstrap 127.0.0.1:19191 bench produce --modes exactly-once \
    --duration "${duration}s" --partitions "$partitions" --linger-ms 5 --json \
    | "$python" -c 'import json,sys; m=json.load(sys.stdin)["modes"][0]
print(json.dumps({"path":"grpc","round":int(sys.argv[1]),"records_per_sec":m["records_per_sec"],"records":m["records"],"verified":m["verified"]}))' "$1"
  stop_dev
}

run_kafka() {
  start_dev
  "$idem" --bootstrap 127.0.0.1:19191 topic create bench-kafka --partitions "$partitions" >/dev/null
  "$python" tests/kafka_clients/timed_produce.py 127.0.0.1:19194 bench-kafka "$partitions" "$duration" 1024 0 ${IDEM_BENCH_KAFKA_SETTINGS:-} \
    | "$python" -c 'import json,sys; m=json.load(sys.stdin); m.update(path="kafka", round=int(sys.argv[1]))
print(json.dumps(m))' "$1"
  stop_dev
}

results="$work/results.jsonl"
# The rounds run in the pipeline's subshell, which has its own dev_pid: it stops its
# idem dev itself when a run fails.
(
  trap stop_dev EXIT
  for round in $(seq "$rounds"); do
    if ((round % 2)); then run_grpc "$round"; run_kafka "$round"; else run_kafka "$round"; run_grpc "$round"; fi
  done
) | tee "$results" >&2
if [[ -n "${IDEM_BENCH_JSON:-}" ]]; then cp "$results" "$IDEM_BENCH_JSON"; fi

"$python" - "$results" "$duration" "$partitions" <<'EOF'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
by_round = {}
for run in runs:
    by_round.setdefault(run["round"], {})[run["path"]] = run
print(f"1 KiB records, {sys.argv[3]} partitions, {sys.argv[2]} s per run, linger 5 ms, idem dev (release)")
print(f"{'round':>5} {'gRPC SDK rec/s':>15} {'Kafka rec/s':>12} {'Kafka/gRPC':>11}  verified (gRPC, Kafka)")
ratios = []
for number, pair in sorted(by_round.items()):
    grpc, kafka = pair["grpc"], pair["kafka"]
    ratio = kafka["records_per_sec"] / grpc["records_per_sec"]
    ratios.append(ratio)
    print(f"{number:>5} {grpc['records_per_sec']:>15,.0f} {kafka['records_per_sec']:>12,.0f} {ratio:>11.3f}  {grpc['verified']}, {kafka['verified']}")
spread = f"{min(ratios):.3f} to {max(ratios):.3f}"
stdev = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
print(f"ratio over {len(ratios)} rounds: mean {statistics.mean(ratios):.3f}, median {statistics.median(ratios):.3f}, "
      f"spread {spread}, standard deviation {stdev:.3f}; goal >= 0.8")
if not all(r["verified"] for r in runs):
    print("bench-kafka: a run's read-back found lost, duplicated or reordered records", file=sys.stderr)
    sys.exit(1)
EOF
