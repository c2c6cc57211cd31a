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
#   kubernetes-validate -> the PyPI package, pinned (deploy/k8s/validate.sh checks the
#             manifests offline against the API schemas it ships, 1.25 to 1.37)
# Usage: scripts/install-deps.sh protoc [etcd] [cc] [script] [netns] [postgres]
#        [kubernetes-validate]
set -euo pipefail

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

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

missing=()
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
    kubernetes-validate) kubernetes_validate ;;
    *) echo "install-deps: unknown dependency $need" >&2; exit 2 ;;
  esac
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
