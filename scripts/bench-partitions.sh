#!/usr/bin/env bash
# Exactly-once producer throughput against the partition count (issue 22), in one
# command: `idem bench produce --embedded` (a fresh in-process idem dev per run) at 6,
# 60 and 600 partitions, round-robin for N rounds, each round starting one count later
# so the machine's drift hits every count alike. Prints every run (throughput, the
# read-back consumer's throughput, the broker's peak memory) and, per round, the
# ratios 60/6 and 600/6 with their mean, spread and count, e.g.
#
#   scripts/bench-partitions.sh
#   scripts/bench-partitions.sh --rounds 5 --duration 3s
#   scripts/bench-partitions.sh --counts "6 600" -- --linger-ms 20
#
# Options: --rounds N (default 3), --duration D (default 2s), --counts "A B C" (default
# "6 60 600"; the first is the base of the ratios), --keep DIR (keep every run's JSON in
# DIR), --drop-caches (root: drop the page cache before every run, see
# docs/benchmarks-history.md, "How to read the ratios"), --dev (instead of --embedded, a fresh
# `idem dev` process per run on 127.0.0.1:19592/19593, so that the memory reported is
# the broker's alone: in-process it includes the bench's producer and consumer);
# anything after `--` goes to every `idem bench produce`. The goal is 600/6 >= 0.7
# (IDEM_BENCH_GOAL overrides it).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
duration=2s
counts="6 60 600"
keep=""
drop_caches=false
dev=false
while (($#)); do
  case "$1" in
    --rounds) rounds=${2:?--rounds needs a number}; shift 2 ;;
    --duration) duration=${2:?--duration needs a duration}; shift 2 ;;
    --counts) counts=${2:?--counts needs a list}; shift 2 ;;
    --keep) keep=${2:?--keep needs a directory}; shift 2 ;;
    --drop-caches) drop_caches=true; shift ;;
    --dev) dev=true; shift ;;
    --) shift; break ;;
    *) echo "usage: $0 [--rounds N] [--duration D] [--counts \"6 60 600\"] [--keep DIR] [--drop-caches] [--dev] [-- PRODUCE_ARGS...]" >&2; exit 2 ;;
  esac
done
read -r -a count_list <<<"$counts"
((${#count_list[@]} >= 1)) || { echo "bench-partitions: --counts is empty" >&2; exit 2; }
command -v jq >/dev/null || { echo "bench-partitions: needs jq" >&2; exit 1; }

scripts/install-deps.sh protoc cc >&2
cargo build --release --bin idem >&2
idem="$(realpath "${CARGO_TARGET_DIR:-target}")/release/idem"
out=${keep:-$(mktemp -d /tmp/idem-bench-partitions.XXXXXX)}
mkdir -p "$out"

dev_pid=""
stop_dev() {
  if [[ -n "$dev_pid" ]]; then kill "$dev_pid" 2>/dev/null || true; wait "$dev_pid" 2>/dev/null || true; fi
  dev_pid=""
  rm -rf "$out/dev-data"
}
trap 'stop_dev; [[ -n "$keep" ]] || rm -rf "$out"' EXIT
# Whether something accepts TCP connections on 127.0.0.1:$1 (bash only).
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Starts a fresh `idem dev`; sets `target` to the flags that point the bench at it.
start_dev() {
  "$idem" dev --data-dir "$out/dev-data" --listen 127.0.0.1:19592 \
    --coordinator-listen 127.0.0.1:19593 --kafka-listen 127.0.0.1:0 >"$out/dev.log" 2>&1 &
  dev_pid=$!
  for _ in $(seq 300); do
    if listening 19592 && listening 19593; then
      target=(--bootstrap 127.0.0.1:19592 --broker-pid "$dev_pid")
      return 0
    fi
    sleep 0.1
  done
  echo "bench-partitions: idem dev did not start in 30 s:" >&2
  cat "$out/dev.log" >&2
  return 1
}

n=${#count_list[@]}
where=$($dev && echo "a fresh idem dev process per run" || echo "--embedded")
echo "idem bench produce --modes exactly-once --duration $duration $*, $where; counts: ${count_list[*]}; $rounds rounds"
for ((round = 1; round <= rounds; round++)); do
  for ((i = 0; i < n; i++)); do
    partitions=${count_list[$(((i + round - 1) % n))]}
    if $drop_caches; then sync; echo 1 >/proc/sys/vm/drop_caches; fi
    file="$out/round-$round-partitions-$partitions.json"
    target=(--embedded)
    if $dev; then start_dev; fi
    if ! "$idem" bench produce "${target[@]}" --modes exactly-once --partitions "$partitions" \
      --duration "$duration" --json "$@" >"$file"; then
      echo "bench-partitions: round $round, $partitions partitions failed (above)" >&2
      exit 1
    fi
    stop_dev
    jq -r --argjson round "$round" --argjson partitions "$partitions" '.modes[0] |
      "round \($round)  \($partitions) partitions: \(.records_per_sec | floor) records/s, \(.mb_per_sec * 10 | floor / 10) MB/s, p99 \(.p99_ms * 100 | floor / 100) ms; read back \(.read_records_per_sec // 0 | floor) records/s (\(.read_mb_per_sec // 0 | . * 10 | floor / 10) MB/s); peak RSS \(.broker_memory.rss_peak_mib // 0 | floor) MiB (from \(.broker_memory.rss_start_mib // 0 | floor)); verified \(.verified)"' "$file"
  done
done

# The summary: each count's median run, then the per-round ratios to the first count.
jq -s -r --arg counts "${count_list[*]}" --argjson goal "${IDEM_BENCH_GOAL:-0.7}" '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor]
    else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def mean: add / length;
  def sd: if length < 2 then 0 else mean as $m | map((. - $m) * (. - $m)) | add / (length - 1) | sqrt end;
  def f($d): . * pow(10; $d) | round / pow(10; $d);
  def pad($w): tostring | " " * ([$w - length, 0] | max) + .;
  def col($r; path; $d; $w): [$r[] | path // 0] | median | f($d) | pad($w);
  ($counts | split(" ") | map(tonumber)) as $cs
  | map({round, partitions} + .doc.modes[0]) as $runs
  | "\nmedian of \($runs | map(.round) | unique | length) rounds per count:",
    "partitions  records/s    MB/s  p99 ms  read rec/s  read MB/s  peak RSS MiB  verified",
    ($cs[] as $p | [$runs[] | select(.partitions == $p)] as $r
      | "\($p | pad(10))  \(col($r; .records_per_sec; 0; 9))  \(col($r; .mb_per_sec; 1; 6))  \(col($r; .p99_ms; 2; 6))  \(col($r; .read_records_per_sec; 0; 10))  \(col($r; .read_mb_per_sec; 1; 9))  \(col($r; .broker_memory.rss_peak_mib; 0; 12))  \($r | all(.verified == true))"),
    "",
    ($cs[1:][] as $p
      | [$runs | group_by(.round)[]
          | ([.[] | select(.partitions == $cs[0])][0].records_per_sec) as $base
          | ([.[] | select(.partitions == $p)][0].records_per_sec) as $x
          | select($base != null and $x != null and $base > 0) | $x / $base] as $ratios
      | "\($p)/\($cs[0]) per round: \($ratios | map(f(3)) | join(", ")); mean \($ratios | mean | f(3)), min \($ratios | min | f(3)), max \($ratios | max | f(3)), sd \($ratios | sd | f(3)), n \($ratios | length)"
        + (if $p == ($cs | max) then "; goal >= \($goal): \(if ($ratios | mean) >= $goal then "met" else "NOT met" end) (on the mean)" else "" end))
' < <(for file in "$out"/round-*.json; do
  name=${file##*/}
  [[ $name =~ ^round-([0-9]+)-partitions-([0-9]+)\.json$ ]] || continue
  jq -c --argjson round "${BASH_REMATCH[1]}" --argjson partitions "${BASH_REMATCH[2]}" \
    '{round: $round, partitions: $partitions, doc: .}' "$file"
done)
