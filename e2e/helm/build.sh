#!/usr/bin/env bash
# Builds Helm from this Go module into a cache outside the repository and
# prints the binary's path.
#
#   HELM=$(e2e/helm/build.sh)    # $HELM lint charts/finalizer-guard
#
# Keyed by the pinned version (read from go.mod): a warm run reuses the
# binary, a version bump builds anew. FG_E2E_CACHE moves the cache, as for
# ../build.sh (default: ${XDG_CACHE_HOME:-~/.cache}/finalizer-guard-e2e).
set -euo pipefail
cd "$(dirname "$0")"

helm=$(go list -m -f '{{.Version}}' helm.sh/helm/v3)
cache=${FG_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/finalizer-guard-e2e}
out="$cache/helm-$helm"
if [ -x "$out/helm" ]; then echo "$out/helm"; exit 0; fi

mkdir -p "$out"
# As Helm's own Makefile: its version, and the Kubernetes version that
# `helm template` and `helm lint` assume (.Capabilities.KubeVersion) when no
# cluster is asked, from the client-go it is built with (v0.N.x: 1.N).
client=$(go list -m -f '{{.Version}}' k8s.io/client-go)
minor=${client#v0.}; minor=${minor%%.*}
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
done

echo "building helm $helm" >&2
start=$(date +%s)
CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/helm.tmp" helm.sh/helm/v3/cmd/helm
mv "$out/helm.tmp" "$out/helm"
echo "built helm $helm in $(( $(date +%s) - start )) s into $out" >&2
echo "$out/helm"
