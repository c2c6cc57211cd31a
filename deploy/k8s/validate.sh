#!/usr/bin/env bash
# Validates the Kubernetes manifests offline (no cluster, no kubectl): renders the
# kustomization and checks every document against the API schemas of each Kubernetes
# version below with kubernetes-validate --strict (unknown fields are errors).
#
# Rendering: kustomization.yaml here lists plain files and sets a namespace, nothing
# else, so `kubectl apply -k` renders the concatenation of those files with
# metadata.namespace set; this script does exactly that (and refuses a kustomization
# using anything more, which it could not render faithfully).
#
# Usage: deploy/k8s/validate.sh [DIR]    (DIR: a copy of deploy/k8s; default: here)
# Needs: scripts/install-deps.sh kubernetes-validate (pinned there; brings PyYAML).
set -euo pipefail

dir="${1:-$(dirname "$0")}"
# 1.28: the oldest the manifests support (the pod-index label); 1.30: a current one.
versions=(1.28.0 1.30.0)

command -v kubernetes-validate >/dev/null 2>&1 || {
  echo "validate.sh: kubernetes-validate not found; run scripts/install-deps.sh kubernetes-validate" >&2
  exit 2
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
rendered="$work/kustomization-rendered.yaml"

python3 - "$dir" "$rendered" <<'PY'
import os, sys, yaml

directory, out = sys.argv[1], sys.argv[2]
with open(os.path.join(directory, "kustomization.yaml")) as f:
    kustomization = yaml.safe_load(f)
# Fields this script applies itself (namespace, resources) or that change no
# document's validity (images: `kustomize edit set image` for a registry).
handled = {"apiVersion", "kind", "namespace", "resources", "images"}
extra = set(kustomization) - handled
if extra:
    sys.exit(f"validate.sh: kustomization.yaml uses {sorted(extra)}: only "
             f"{sorted(handled)} can be rendered without kustomize")
namespace = kustomization.get("namespace")
documents, seen = [], set()
for resource in kustomization.get("resources") or []:
    path = os.path.join(directory, resource)
    if not os.path.isfile(path):
        sys.exit(f"validate.sh: resource {resource} is not a file in {directory}")
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if doc is None:
                continue
            identity = (doc.get("apiVersion"), doc.get("kind"), (doc.get("metadata") or {}).get("name"))
            if identity in seen:
                sys.exit(f"validate.sh: {identity} is defined twice")
            seen.add(identity)
            if namespace and doc.get("kind") != "Namespace":
                doc.setdefault("metadata", {})["namespace"] = namespace
            documents.append(doc)
if not documents:
    sys.exit("validate.sh: the kustomization renders no document")
with open(out, "w") as f:
    yaml.safe_dump_all(documents, f, sort_keys=False)
print(f"rendered {len(documents)} documents from {len(kustomization['resources'])} files")
PY

for version in "${versions[@]}"; do
  kubernetes-validate --strict --quiet -k "$version" "$rendered"
  echo "valid against Kubernetes $version (strict)"
done
