#!/usr/bin/env bash
# Builds what the nodes of e2e/nodes.sh run besides the kubelet (which
# e2e/build.sh builds with the control plane) into a cache outside the
# repository, and prints the folder that holds them:
#
#   NODE=$(e2e/build-nodes.sh)
#     $NODE/containerd, containerd-shim-runc-v2, ctr   containerd, from its Go module
#     $NODE/cni/bridge, host-local, loopback, portmap   the CNI plugins, from theirs
#     $NODE/pause                                       the sandbox's process (e2e/pause)
#     $NODE/pause.oci.tar                               it as an image: localhost/finalizer-guard-e2e/pause:1
#
# containerd's module cannot be `go install`ed (its go.mod has exclude
# directives): it is downloaded through the module proxy and built inside a
# copy of itself, without cgo and without the btrfs, devmapper and zfs
# snapshotters. runc comes from the distribution (Debian: apt-get install
# runc). The pause image is made with podman (apt-get install podman).
set -euo pipefail
cd "$(dirname "$0")"

containerd_version=v2.1.4
cni_version=v1.9.0
pause_image=localhost/finalizer-guard-e2e/pause:1
cache=${FG_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/finalizer-guard-e2e}
out="$cache/nodes-containerd-$containerd_version-cni-$cni_version"
want=(containerd containerd-shim-runc-v2 ctr cni/bridge cni/host-local cni/loopback cni/portmap pause pause.oci.tar)

complete=true
for file in "${want[@]}"; do [ -s "$out/$file" ] || complete=false; done
if $complete; then echo "$out"; exit 0; fi
mkdir -p "$out/cni"
start=$(date +%s)

# module_dir PATH@VERSION: the module's folder in the module cache.
module_dir() {
  go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

if [ ! -x "$out/containerd" ] || [ ! -x "$out/containerd-shim-runc-v2" ] || [ ! -x "$out/ctr" ]; then
  src=$(module_dir "github.com/containerd/containerd/v2@$containerd_version")
  work=$(mktemp -d)
  trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
  cp -r "$src/." "$work/"
  chmod -R u+w "$work"
  # A module zip carries no vendor/ folder but its modules.txt: build from the module graph.
  rm -rf "$work/vendor"
  for cmd in containerd containerd-shim-runc-v2 ctr; do
    echo "building $cmd $containerd_version" >&2
    (cd "$work" && CGO_ENABLED=0 go build -mod=mod -trimpath -tags "no_btrfs no_devmapper no_zfs" \
      -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version" \
      -o "$out/$cmd.tmp" "./cmd/$cmd")
    mv "$out/$cmd.tmp" "$out/$cmd"
  done
fi

plugins=(main/bridge ipam/host-local main/loopback meta/portmap)
missing=false
for plugin in "${plugins[@]}"; do [ -x "$out/cni/${plugin#*/}" ] || missing=true; done
if $missing; then
  src=$(module_dir "github.com/containernetworking/plugins@$cni_version")
  for plugin in "${plugins[@]}"; do
    echo "building CNI plugin ${plugin#*/} $cni_version" >&2
    (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" \
      -o "$out/cni/${plugin#*/}.tmp" "./plugins/$plugin")
    mv "$out/cni/${plugin#*/}.tmp" "$out/cni/${plugin#*/}"
  done
fi

if [ ! -s "$out/pause.oci.tar" ]; then
  CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" -o "$out/pause" ./pause
  ctx=$(mktemp -d)
  cp "$out/pause" "$ctx/pause"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' > "$ctx/Containerfile"
  conf="$cache/image/containers.conf"
  mkdir -p "$(dirname "$conf")"
  [ -s "$conf" ] || printf '[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n' > "$conf"
  CONTAINERS_CONF=$conf podman build --quiet -t "$pause_image" "$ctx" > /dev/null
  rm -f "$out/pause.oci.tar.tmp"
  CONTAINERS_CONF=$conf podman save --format oci-archive -o "$out/pause.oci.tar.tmp" "$pause_image"
  mv "$out/pause.oci.tar.tmp" "$out/pause.oci.tar"
  rm -rf "$ctx"
fi
echo "built containerd $containerd_version, CNI plugins $cni_version and the pause image in $(( $(date +%s) - start )) s into $out" >&2
echo "$out"
