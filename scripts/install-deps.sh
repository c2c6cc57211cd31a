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
# Usage: scripts/install-deps.sh protoc [etcd] [cc] [script] [netns] [postgres]
set -euo pipefail

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

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
    *) echo "install-deps: unknown dependency $need" >&2; exit 2 ;;
  esac
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
