#!/usr/bin/env bash
# Builds the real control plane's binaries from this Go module into a cache
# outside the repository and prints the folder that holds them.
#
#   BIN=$(e2e/build.sh)    # e2e/go.mod, the newest release the tests run:
#                          # $BIN/kube-apiserver, kube-controller-manager, kubectl, etcd,
#                          # kube-scheduler, kubelet (the last two for e2e/nodes.sh)
#   BIN=$(e2e/build.sh v1.28)  # e2e/v1.28: the oldest release the docs claim
#                          # (kube-apiserver, kube-controller-manager, kubectl, etcd)
#
# Each module folder pins one Kubernetes release; the commands built are the
# ones its tools.go imports. An etcd of the same version already built for
# another release is reused (hard-linked) rather than built again.
#
# The folder is keyed by the pinned versions (read from go.mod), so a warm
# run reuses it, a version bump builds anew, and a command added to the list
# is built alone. FG_E2E_CACHE moves the cache
# (default: ${XDG_CACHE_HOME:-~/.cache}/finalizer-guard-e2e).
set -euo pipefail
cd "$(dirname "$0")"
module=${1:-.}
[ -f "$module/go.mod" ] || { echo "build.sh: no Go module in e2e/$module" >&2; exit 2; }
cd "$module"

kube=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
cache=${FG_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/finalizer-guard-e2e}
out="$cache/kubernetes-$kube-etcd-$etcd"
# The commands are the ones tools.go imports, in this order.
cmds=()
for cmd in kube-apiserver kube-controller-manager kubectl etcd kube-scheduler kubelet; do
  case $cmd in
    etcd) pkg='"go.etcd.io/etcd/server/v3"' ;;
    *) pkg="\"k8s.io/kubernetes/cmd/$cmd\"" ;;
  esac
  grep -qF "_ $pkg" tools.go && cmds+=("$cmd")
done

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
  case " ${cmds[*]} " in *" $1 "*) ;; *) return 0 ;; esac
  if [ "$1" = etcd ]; then
    # etcd does not depend on the Kubernetes release: reuse a build of the
    # same version from a sibling folder.
    for other in "$cache"/kubernetes-*-etcd-"$etcd"/etcd; do
      if [ -x "$other" ] && ln -f "$other" "$out/etcd.tmp" 2>/dev/null; then
        mv "$out/etcd.tmp" "$out/etcd"; echo "reused $other" >&2; return 0
      fi
    done
  fi
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
