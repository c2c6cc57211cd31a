#!/usr/bin/env bash
# Installs the system packages idem's commands need, only when missing:
#   protoc -> protobuf-compiler (etcd-client's build compiles etcd's protos with it;
#             idem's own protos need no protoc)
#   etcd   -> etcd-server (the tests start real etcd servers)
#   cc     -> gcc and make (tikv-jemalloc-sys builds jemalloc from its C sources)
#   script -> bsdutils (util-linux's `script`: a test gives the bench a terminal)
#   netns  -> iproute2 and nftables (`ip netns`, `nft`: the lab network of the split
#             tests and chaos family; they run as root)
#   postgres -> postgresql (the inbox tests start throwaway PostgreSQL servers from
#             /usr/lib/postgresql/*/bin; `IDEM_PG_BIN` names another bin dir)
#   compose -> Docker Compose v2 (`docker compose ... up --wait`: the compose
#             walkthrough and the container tests); see install_compose below
#   kubernetes-validate -> the PyPI package, pinned (deploy/k8s/validate.sh checks the
#             manifests offline against the API schemas it ships, 1.25 to 1.37)
#   kafka-clients -> kcat (Debian package) and confluent-kafka (PyPI, pinned, in the
#             venv $IDEM_KAFKA_VENV, default /opt/idem/kafka-clients): the third-party
#             Kafka clients the Kafka-listener tests drive (tests/tests/e2e/kafka.rs)
#   fuzz    -> g++: libfuzzer-sys builds libFuzzer from its C++ sources (scripts/fuzz.sh
#             builds and runs the targets with cargo alone; no cargo-fuzz)
# Usage: scripts/install-deps.sh protoc [etcd] [cc] [script] [netns] [postgres]
#        [compose] [kubernetes-validate] [kafka-clients] [fuzz]
set -euo pipefail

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Debian bookworm ships Compose v1 only (docker-compose 1.29: no `--wait`, no
# `start_interval`). Trixie's docker-compose package is Compose v2, a static Go binary
# needing only glibc >= 2.34 (bookworm has 2.36): it is downloaded, pinned, through apt
# with a private package list (signatures checked against Debian's keyring), and only
# its plugin binary is put where the docker CLI looks for plugins; nothing of the
# system's package state changes.
COMPOSE_VERSION=2.26.1-4
install_compose() {
  local work; work="$(mktemp -d)"; chmod 755 "$work"  # readable by apt's _apt user
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    > "$work/sources.list"
  local apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
                  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache")
  echo "installing: Docker Compose v2 ($COMPOSE_VERSION, from Debian trixie's docker-compose)"
  as_root apt-get "${apt_opts[@]}" update -qq
  (cd "$work" && as_root apt-get "${apt_opts[@]}" download -qq "docker-compose=$COMPOSE_VERSION" 2>/dev/null)
  dpkg-deb -x "$work"/docker-compose_*.deb "$work/pkg"
  as_root install -D -m 0755 "$work/pkg/usr/libexec/docker/cli-plugins/docker-compose" \
    /usr/local/lib/docker/cli-plugins/docker-compose
  rm -rf "$work"
  docker compose version
}

# Pinned: a new release may change the schemas (and so what validates).
KUBERNETES_VALIDATE_VERSION=1.37.0

# kubernetes-validate from PyPI with the machine's python3, unless this version is
# already installed (it brings PyYAML, which validate.sh renders with).
kubernetes_validate() {
  local installed
  # `pip show` fails when it is not installed: that is an answer, not an error.
  installed="$(python3 -m pip show kubernetes-validate 2>/dev/null | sed -n 's/^Version: //p' || true)"
  if [ "$installed" = "$KUBERNETES_VALIDATE_VERSION" ] && command -v kubernetes-validate >/dev/null 2>&1; then
    return
  fi
  if ! python3 -m pip --version >/dev/null 2>&1; then
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip
  fi
  echo "installing: kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
  # Debian's own python3 refuses pip installs outside a venv (PEP 668) unless told.
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" ||
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --break-system-packages \
      "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
}

# Pinned: a release bundles its own librdkafka, whose negotiated API versions the
# Kafka-listener tests meet.
CONFLUENT_KAFKA_VERSION=2.16.1
KAFKA_VENV="${IDEM_KAFKA_VENV:-/opt/idem/kafka-clients}"

# confluent-kafka in its own venv (Debian's python3 refuses pip installs outside one,
# PEP 668), unless this version is already there. Wheels bundle librdkafka: no compiler.
confluent_kafka() {
  if [ "$("$KAFKA_VENV/bin/python" -c 'import confluent_kafka; print(confluent_kafka.__version__)' 2>/dev/null || true)" = "$CONFLUENT_KAFKA_VERSION" ]; then
    return
  fi
  echo "installing: confluent-kafka==$CONFLUENT_KAFKA_VERSION into $KAFKA_VENV"
  as_root mkdir -p "$(dirname "$KAFKA_VENV")"
  as_root python3 -m venv "$KAFKA_VENV"
  as_root "$KAFKA_VENV/bin/python" -m pip install -q --disable-pip-version-check \
    "confluent-kafka==$CONFLUENT_KAFKA_VERSION"
}

missing=()
want_compose=0
for need in "$@"; do
  case "$need" in
    protoc) command -v protoc >/dev/null 2>&1 || [ -n "${PROTOC:-}" ] || missing+=(protobuf-compiler) ;;
    etcd) command -v etcd >/dev/null 2>&1 || [ -n "${IDEM_ETCD_BIN:-}" ] || missing+=(etcd-server) ;;
    cc)
      command -v cc >/dev/null 2>&1 || missing+=(gcc)
      command -v make >/dev/null 2>&1 || missing+=(make)
      ;;
    script) command -v script >/dev/null 2>&1 || missing+=(bsdutils) ;;
    netns)
      command -v ip >/dev/null 2>&1 || missing+=(iproute2)
      command -v nft >/dev/null 2>&1 || missing+=(nftables)
      ;;
    postgres)
      [ -n "${IDEM_PG_BIN:-}" ] || compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null ||
        missing+=(postgresql)
      ;;
    compose) docker compose version >/dev/null 2>&1 || want_compose=1 ;;
    kubernetes-validate) kubernetes_validate ;;
    kafka-clients)
      command -v kcat >/dev/null 2>&1 || missing+=(kcat)
      confluent_kafka
      ;;
    fuzz)
      command -v c++ >/dev/null 2>&1 || missing+=(g++)
      ;;
    *) echo "install-deps: unknown dependency $need" >&2; exit 2 ;;
  esac
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
if [ "$want_compose" -eq 1 ]; then
  install_compose
fi
