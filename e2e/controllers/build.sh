#!/usr/bin/env bash
# Builds a controller nobody in this project wrote, from the upstream Go
# module pinned in e2e/controllers/NAME/go.mod, into a cache outside the
# repository, and prints the folder that holds it:
#
#   DIR=$(e2e/controllers/build.sh source-controller)
#   # $DIR/source-controller   the binary (Flux's source-controller)
#   # $DIR/crds/*.yaml         its CRDs, from the module (config/crd/bases)
#   # $DIR/rbac/role.yaml      its ClusterRole, from the module (config/rbac)
#
#   DIR=$(e2e/controllers/build.sh kustomize-controller)   # Flux's kustomize-controller, the same way
#   # $DIR/rbac/cluster_role_binding.yaml   also: the cluster-admin binding Flux installs it with
#   DIR=$(e2e/controllers/build.sh cluster-api)   # Cluster API's core manager, the same way
#   e2e/controllers/build.sh all                  # all three, one after the other
#
# tests/e2e/controllers.rs and tests/e2e/gitops.rs run them as processes
# against the real control plane of e2e/cluster.sh. Keyed by the pinned version, as ../helm/build.sh:
# a warm run reuses the folder, a version bump builds anew. FG_E2E_CACHE
# moves the cache (default: ${XDG_CACHE_HOME:-~/.cache}/finalizer-guard-e2e).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${FG_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/finalizer-guard-e2e}

name=${1:-}
case "$name" in
  source-controller)
    module=github.com/fluxcd/source-controller
    package=$module
    crds=(source.toolkit.fluxcd.io_gitrepositories source.toolkit.fluxcd.io_helmrepositories
          source.toolkit.fluxcd.io_ocirepositories source.toolkit.fluxcd.io_helmcharts
          source.toolkit.fluxcd.io_buckets source.toolkit.fluxcd.io_externalartifacts)
    ;;
  kustomize-controller)
    module=github.com/fluxcd/kustomize-controller
    package=$module
    crds=(kustomize.toolkit.fluxcd.io_kustomizations)
    ;;
  cluster-api)
    module=sigs.k8s.io/cluster-api
    package=$module
    crds=(cluster.x-k8s.io_clusters cluster.x-k8s.io_clusterclasses cluster.x-k8s.io_machines
          cluster.x-k8s.io_machinesets cluster.x-k8s.io_machinedeployments cluster.x-k8s.io_machinepools
          cluster.x-k8s.io_machinehealthchecks cluster.x-k8s.io_machinedrainrules
          addons.cluster.x-k8s.io_clusterresourcesets addons.cluster.x-k8s.io_clusterresourcesetbindings
          ipam.cluster.x-k8s.io_ipaddresses ipam.cluster.x-k8s.io_ipaddressclaims
          runtime.cluster.x-k8s.io_extensionconfigs)
    ;;
  all)
    for each in source-controller kustomize-controller cluster-api; do "$0" "$each"; done
    exit 0
    ;;
  *)
    echo "usage: $0 source-controller|kustomize-controller|cluster-api|all" >&2
    exit 2
    ;;
esac

cd "$here/$name"
version=$(go list -m -f '{{.Version}}' "$module")
out="$cache/$name-$version"
if [ -x "$out/$name" ] && [ -f "$out/rbac/role.yaml" ]; then echo "$out"; exit 0; fi
mkdir -p "$out"

# What the upstream release puts in the binary, where it says so.
ldflags="-s -w"
if [ "$name" = cluster-api ]; then
  major=${version#v}; major=${major%%.*}
  minor=${version#v*.}; minor=${minor%%.*}
  v=sigs.k8s.io/cluster-api/version
  ldflags+=" -X $v.gitVersion=$version -X $v.gitMajor=$major -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
  ldflags+=" -X $v.buildDate=1970-01-01T00:00:00Z"
fi

echo "building $name $version ($package)" >&2
start=$(date +%s)
CGO_ENABLED=0 nice -n 10 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" "$package"

# The module's own CRDs and ClusterRole, as its release manifests are made from them.
dir=$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "build.sh: no module source for $module@$version" >&2; exit 1; }
rm -rf "$out/crds" "$out/rbac"
mkdir -p "$out/crds" "$out/rbac"
for crd in "${crds[@]}"; do cp "$dir/config/crd/bases/$crd.yaml" "$out/crds/"; done
cp "$dir/config/rbac/role.yaml" "$out/rbac/role.yaml"
# Flux binds kustomize-controller to cluster-admin: it applies whatever a
# Kustomization holds.
if [ "$name" = kustomize-controller ]; then
  cp "$dir/config/rbac/cluster_role_binding.yaml" "$out/rbac/cluster_role_binding.yaml"
fi
chmod -R u+w "$out/crds" "$out/rbac"
mv "$out/$name.tmp" "$out/$name"
echo "built $name $version in $(( $(date +%s) - start )) s into $out" >&2
echo "$out"
