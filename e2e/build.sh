#!/usr/bin/env bash
# Builds the real control plane's binaries from this Go module into a cache
# outside the repository and prints the folder that holds them.
#
#   BIN=$(e2e/build.sh)    # $BIN/kube-apiserver, kube-controller-manager, kubectl, etcd,
#                          # kube-scheduler, kubelet (the last two for e2e/nodes.sh)
#
# The folder is keyed by the pinned versions (read from go.mod), so a warm
# run reuses it, a version bump builds anew, and a command added to the list
# is built alone. FG_E2E_CACHE moves the cache
# (default: ${XDG_CACHE_HOME:-~/.cache}/finalizer-guard-e2e).
set -euo pipefail
cd "$(dirname "$0")"

kube=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
cache=${FG_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/finalizer-guard-e2e}
out="$cache/kubernetes-$kube-etcd-$etcd"
cmds=(kube-apiserver kube-controller-manager kubectl etcd kube-scheduler kubelet)

complete=true
for cmd in "${cmds[@]}"; do [ -x "$out/$cmd" ] || complete=false; done
if $complete; then echo "$out"; exit 0; fi

mkdir -p "$out"
# Binaries built from modules report v0.0.0-master unless told their version;
# kubectl version, and Helm's kubeVersion checks, read it from here.
major=${kube#v}; major=${major%%.*}
minor=${kube#v*.}; minor=${minor%%.*}
ver=k8s.io/component-base/version
ldflags="-s -w -X $ver.gitVersion=$kube -X $ver.gitMajor=$major -X $ver.gitMinor=$minor \
  -X $ver.gitTreeState=clean -X $ver.buildDate=1970-01-01T00:00:00Z"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$kube"
ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=$major -X k8s.io/client-go/pkg/version.gitMinor=$minor"

build() { # build NAME PACKAGE
  [ -x "$out/$1" ] && return 0
  echo "building $1 ($2)" >&2
  CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out/$1.tmp" "$2"
  mv "$out/$1.tmp" "$out/$1"
}
start=$(date +%s)
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kubectl k8s.io/kubernetes/cmd/kubectl
build etcd go.etcd.io/etcd/server/v3
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build kubelet k8s.io/kubernetes/cmd/kubelet
echo "built ${cmds[*]} in $(( $(date +%s) - start )) s into $out" >&2
echo "$out"
