#!/usr/bin/env bash
# Regenerates go.mod's replace lines from Kubernetes' own go.mod.
#
# k8s.io/kubernetes is not meant to be imported as a module: its go.mod
# replaces every staging module (k8s.io/api, k8s.io/client-go, ...) with a
# folder inside its own tree, and those replaces do not apply to a module
# that requires it. Each staging module is published on its own as
# v0.MINOR.PATCH for Kubernetes v1.MINOR.PATCH, so every `./staging/...`
# replace in Kubernetes' go.mod becomes a replace to that version here.
#
# Run it after changing the k8s.io/kubernetes version in go.mod, then
# `go mod tidy`. With an argument it works on that module folder instead
# (relative to e2e/, e.g. `e2e/sync-replace.sh v1.28`).
set -euo pipefail
cd "$(dirname "$0")"
cd "${1:-.}"

kube=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
staging=v0.${kube#v1.}
gomod=$(go mod download -json "k8s.io/kubernetes@$kube" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[ -s "$gomod" ] || { echo "sync-replace: no go.mod for k8s.io/kubernetes@$kube" >&2; exit 1; }

# Drop the replaces this script wrote before, then add the current ones.
for old in $(go mod edit -json | sed -nE 's/^\t+"Path": "(k8s\.io\/[^"]*)",?$/\1/p' | sort -u); do
  go mod edit -dropreplace="$old" 2>/dev/null || true
done
count=0
while read -r path; do
  go mod edit -replace="$path=$path@$staging"
  count=$((count + 1))
done < <(awk '/=> \.\/staging\/src\// { print $1 }' "$gomod")
echo "sync-replace: $count staging modules pinned to $staging (Kubernetes $kube)"
