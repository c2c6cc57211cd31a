#!/usr/bin/env bash
# A chaos soak (issue 23): a randomized workload against a real cluster (etcd, 3
# brokers, 2 coordinators) while a seeded nemesis kills, pauses and cuts processes off
# from etcd or tears a broker's logs (with --nemesis split: splits a lab network of
# namespaces between them, as root), then the history checker's verdict. The report (history, nemesis log,
# verdict.json, summary.txt, server logs) goes to target/debug/chaos-reports/ or
# $IDEM_CHAOS_REPORTS. etcd-member and split need a 3-member etcd, partition and
# isolate a single linked one: never mix the two groups.
# With --containers: the compose cluster (deploy/compose.yaml) from images built with
# the debug binaries, the same workload and checker from this host, and the container
# nemesis (leaders killed, brokers paused and disconnected, etcd members and
# transactional ids' coordinators killed, rolling restarts); docs/deploy.md, "Chaos on
# containers". The images are tagged $IDEM_TEST_IMAGE_TAG (default test).
#
#   scripts/chaos.sh [--duration 10m] [--seed N] [--nemesis kill,pause,partition,isolate,etcd,etcd-member,torn,split]
#   scripts/chaos.sh --containers [--duration 10m] [--seed N]
set -euo pipefail
cd "$(dirname "$0")/.."

duration=600 seed=42 nemesis=kill,pause,partition,isolate,etcd,torn containers=0 nemesis_given=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --duration) [[ $# -ge 2 ]] || { echo "--duration needs a value (600, 90s, 10m)" >&2; exit 2; }
                value="$2"
                case "$value" in
                  *m) duration=$(( ${value%m} * 60 )) ;;
                  *s) duration=${value%s} ;;
                  *)  duration=$value ;;
                esac
                shift 2 ;;
    --seed) [[ $# -ge 2 ]] || { echo "--seed needs a value" >&2; exit 2; }
            seed="$2"; shift 2 ;;
    --nemesis) [[ $# -ge 2 ]] || { echo "--nemesis needs a value (kill,pause,partition,isolate,etcd,etcd-member,torn,split)" >&2; exit 2; }
               nemesis="$2"; nemesis_given=1; shift 2 ;;
    --containers) containers=1; shift ;;
    *) echo "unknown option $1; usage: $0 [--duration 10m] [--seed N] [--nemesis kill,pause,partition,isolate,etcd,etcd-member,torn,split] | --containers [--duration 10m] [--seed N]" >&2; exit 2 ;;
  esac
done
[[ "$duration" =~ ^[0-9]+$ ]] || { echo "--duration: not a number of seconds: $duration" >&2; exit 2; }

if [[ "$containers" == 1 ]]; then
  [[ "$nemesis_given" == 0 ]] || { echo "--nemesis names process faults; --containers has its own nemesis" >&2; exit 2; }
  scripts/install-deps.sh protoc compose
  cargo build --workspace --bins --no-default-features
  export IDEM_TEST_IMAGE_TAG="${IDEM_TEST_IMAGE_TAG:-test}"
  deploy/build-images.sh --profile dev --tag "$IDEM_TEST_IMAGE_TAG"
  IDEM_CHAOS_DURATION="$duration" IDEM_CHAOS_SEED="$seed" \
    exec cargo test -p idem-tests --no-default-features --test container_chaos soak -- --ignored --nocapture
fi

scripts/install-deps.sh protoc etcd cc script netns
# Built as the test command builds (without jemalloc): one build serves both.
cargo build --workspace --bins --no-default-features
export IDEM_BROKER_BIN="$(realpath "${CARGO_TARGET_DIR:-target}")/debug/idem-broker"
IDEM_CHAOS_DURATION="$duration" IDEM_CHAOS_SEED="$seed" IDEM_CHAOS_NEMESIS="$nemesis" \
  cargo test -p idem-tests --no-default-features --test chaos_runs soak -- --ignored --nocapture
