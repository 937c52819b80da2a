#!/usr/bin/env bash
# Two real nodes, node-a and node-b, for the control plane of e2e/cluster.sh:
# each its own containerd (runc) and kubelet, its pods on its own bridge;
# and kube-scheduler, so pods are placed on them.
#
#   e2e/nodes.sh up DIR [IMAGE.tar...]   after `e2e/cluster.sh up DIR`; each
#                                        IMAGE.tar (an OCI archive, `podman save
#                                        --format oci-archive`) is imported into
#                                        both nodes before they register
#   FG_NODES_REGISTRY=HOST:PORT e2e/nodes.sh up DIR
#                                        the nodes' containerd pulls HOST:PORT/...
#                                        images over plain HTTP (a registry on
#                                        this machine, e.g. the release's loopback
#                                        one: scripts/release/prove.sh); several
#                                        registries separated by commas
#   e2e/nodes.sh import DIR IMAGE.tar    import one more image into both nodes
#   e2e/nodes.sh kill DIR NODE           the node dies: its kubelet, its containerd
#                                        and every container on it are killed, its
#                                        bridge goes down; the Node object stays
#   e2e/nodes.sh down DIR                stop all, unmount, delete the bridges and
#                                        network namespaces (idempotent)
#
# Built and cached outside the repository: the kubelet and kube-scheduler by
# e2e/build.sh, containerd, the CNI plugins and the pause image by
# e2e/build-nodes.sh. Needs root, runc and podman (Debian: apt-get install
# runc podman). Each node gets a free 10.244.K.0/24 and a bridge fg-e2e-K
# whose address 10.244.K.1 is the node's InternalIP (kube-apiserver reaches
# the kubelet and the pods there, on this machine only: nothing is routed
# out). kube-apiserver runs with
# --enable-aggregator-routing, so a webhook's Service resolves to its pods'
# IPs with no kube-proxy; a pod reaches the API server at 10.0.0.1:443 through
# one DNAT rule per bridge, what kube-proxy would write (see start_node).
#
# A node's containerd and kubelet run in this machine's network namespace
# (only the pods have their own), so a registry on 127.0.0.1 is reached as
# by any process here: each node's CRI image service reads
# DIR/nodes/NODE/certs.d/HOST:PORT/hosts.toml (its `config_path`), which
# names `http://HOST:PORT` for pull and resolve. (containerd falls back to
# plain HTTP for a loopback registry by itself; the hosts.toml says so, and
# is what a registry at any other address or name needs.) The pause image
# is built here and imported, never pulled.
#
# The nodes are what a kubelet needs on this kind of machine: cgroupfs,
# no QoS cgroups, no node allocatable enforcement, swap allowed, eviction
# and image garbage collection thresholds out of the way of a full disk, and
# containerd's restrict_oom_score_adj (the sandbox refuses a lowered
# oom_score_adj). DIR/nodes/NODE/ holds each node's state, logs and env.
set -euo pipefail
# ip: where Debian puts them, whatever the caller's PATH.
export PATH="$PATH:/usr/sbin:/sbin"

usage() { echo "usage: [FG_NODES_REGISTRY=HOST:PORT] $0 up DIR [IMAGE.tar...] | import DIR IMAGE.tar | kill DIR NODE | down DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1
dir=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
[ -d "$dir" ] || { [ "$cmd" = down ] && exit 0; echo "nodes: no cluster in $dir" >&2; exit 1; }
dir=$(cd "$dir" && pwd)
nodes=(node-a node-b)
pause_image=localhost/finalizer-guard-e2e/pause:1
# The rule that takes a pod's connection to the `kubernetes` Service
# (10.0.0.1:443) to kube-apiserver; @BRIDGE@ is the node's bridge.
api_rule=(-i @BRIDGE@ -d 10.0.0.1 -p tcp --dport 443 -m comment --comment "fg-e2e @BRIDGE@" -j DNAT)

log() { printf 'nodes: %s\n' "$*" >&2; }

# free_ports, alive
. "$here/lib.sh"

stop_proc() { # stop_proc NAME [SIGNAL]
  local name=$1 sig=${2:-TERM} pid
  if alive "$name"; then
    pid=$(cat "$dir/run/$name.pid")
    kill "-$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive "$name" || break; sleep 0.1; done
    if alive "$name"; then kill -KILL "$pid" 2>/dev/null || true; fi
    for _ in $(seq 1 50); do alive "$name" || break; sleep 0.1; done
  fi
  rm -f "$dir/run/$name.pid"
}

start_proc() { # start_proc NAME BINARY ARGS...
  local name=$1 binary=$2; shift 2
  setsid "$binary" "$@" > "$dir/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$dir/run/$name.pid"
}

wait_for() { # wait_for WHAT SECONDS COMMAND...
  local what=$1 seconds=$2; shift 2
  local deadline=$(( $(date +%s) + seconds ))
  until "$@" > /dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "gave up waiting for $what after ${seconds}s"; return 1
    fi
    sleep 0.5
  done
}

kubectl() { "$dir/bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" "$@"; }

# cert CN ORG NAME: a client certificate from the cluster's CA, and its kubeconfig.
client() {
  local cn=$1 org=$2 name=$3 pki="$dir/pki/nodes"
  mkdir -p "$pki"
  local subj="/CN=$cn"
  [ -n "$org" ] && subj="/O=$org/CN=$cn"
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$pki/$name.key" -out "$pki/$name.csr" 2> /dev/null
  openssl x509 -req -in "$pki/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/pki/ca.key" -CAcreateserial \
    -days 3650 -out "$pki/$name.crt" 2> /dev/null
  cat > "$pki/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: e2e
    cluster: {server: "$api", certificate-authority: "$dir/ca.crt"}
users:
  - name: $name
    user: {client-certificate: "$pki/$name.crt", client-key: "$pki/$name.key"}
contexts:
  - name: $name
    context: {cluster: e2e, user: $name}
current-context: $name
EOF
}

# free_subnet: K such that no interface is called fg-e2e-K and no address
# in 10.244.K.0/24 is held on this machine (another cluster's nodes).
free_subnet() {
  local k taken
  taken=$(ip -o -4 addr show | awk '{print $4}')
  for k in $(seq 10 250); do
    ip link show "fg-e2e-$k" > /dev/null 2>&1 && continue
    grep -q "^10\.244\.$k\." <<< "$taken" && continue
    echo "$k"; return 0
  done
  log "no free 10.244.K.0/24 left"; return 1
}

ctr_node() { # ctr_node NODE ARGS...
  local node=$1; shift
  "$nodebin/ctr" --address "$dir/nodes/$node/containerd.sock" -n k8s.io "$@"
}

start_node() { # start_node NODE K
  local node=$1 k=$2 nd="$dir/nodes/$1"
  local ip=10.244.$k.1 bridge=fg-e2e-$k
  mkdir -p "$nd/cni-conf" "$nd/ipam" "$nd/runc" "$nd/kubelet" "$nd/pod-logs"
  cat > "$nd/env" <<EOF
NODE=$node
BRIDGE=$bridge
NODE_IP=$ip
POD_SUBNET=10.244.$k.0/24
EOF
  # The bridge first: the node's address is on it before the kubelet starts.
  # (Each step says when it fails: `set -e` does not hold in a function
  # called with `||`.)
  ip link add "$bridge" type bridge || return 1
  ip addr add "$ip/24" dev "$bridge" || return 1
  ip link set "$bridge" up || return 1
  # What kube-proxy does on a real node for the `kubernetes` Service: a pod's
  # connection to 10.0.0.1:443 goes to kube-apiserver, which listens on the
  # loopback address only (route_localnet lets this bridge carry it). Only
  # what arrives on this node's own bridge is rewritten; `down` deletes it.
  local api_dnat
  api_dnat=$(sed -n 's|^FG_E2E_API_SERVER=https://||p' "$dir/env")
  sysctl -qw "net.ipv4.conf.$bridge.route_localnet=1" || return 1
  iptables -w -t nat -A PREROUTING "${api_rule[@]/@BRIDGE@/$bridge}" --to-destination "$api_dnat" || return 1
  echo "API_DNAT=$api_dnat" >> "$nd/env"

  cat > "$nd/cni-conf/10-$node.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "fg-e2e-$node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.244.$k.0/24", "gateway": "$ip"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$nd/ipam"
      }
    }
  ]
}
EOF
  cat > "$nd/containerd.toml" <<EOF
version = 3
root = "$nd/containerd/root"
state = "$nd/containerd/state"
# NRI's socket is one per machine: the two nodes' containerds would share it.
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "$nd/containerd.sock"
[ttrpc]
  address = "$nd/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$nd/containerd/opt"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$pause_image"
  # One hosts.toml per registry (FG_NODES_REGISTRY), written below.
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "$nd/certs.d"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$nodebin/cni"]
    conf_dir = "$nd/cni-conf"
    max_conf_num = 1
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$runc"
        Root = "$nd/runc"
        SystemdCgroup = false
EOF
  local registry
  mkdir -p "$nd/certs.d"
  for registry in "${registries[@]}"; do
    mkdir -p "$nd/certs.d/$registry"
    cat > "$nd/certs.d/$registry/hosts.toml" <<EOF
# A registry on this machine, plain HTTP (no TLS to verify).
server = "http://$registry"

[host."http://$registry"]
  capabilities = ["pull", "resolve"]
EOF
  done
  start_proc "containerd-$node" "$nodebin/containerd" --config "$nd/containerd.toml" --log-level warn
  wait_for "containerd of $node" 60 ctr_node "$node" version \
    || { tail -n 30 "$dir/logs/containerd-$node.log" >&2; return 1; }
  local archive
  for archive in "$nodebin/pause.oci.tar" "${images[@]}"; do
    ctr_node "$node" images import "$archive" > /dev/null \
      || { log "$node: cannot import $archive"; return 1; }
  done

  client "system:node:$node" system:nodes "kubelet-$node"
  local port healthz
  read -r port healthz < <(free_ports 2)
  cat > "$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
containerRuntimeEndpoint: unix://$nd/containerd.sock
podLogsDir: $nd/pod-logs
# Small files, rotated every few seconds under the scenarios' writes, as a
# busy cluster's are at its 10Mi default: the audit trail is read across
# the rotations, the way a log shipper reads it (tests/nodes), never from
# kubectl logs' newest file only. As many bytes kept as the default's 5
# files of 10Mi.
containerLogMaxSize: 1Mi
containerLogMaxFiles: 50
containerLogMonitorInterval: 3s
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
# From 1.35 the kubelet refuses a host on cgroup v1 unless told (this
# machine's kind of host may be on either).
failCgroupV1: false
# The machine's disk is shared and may be fuller than the kubelet's
# defaults allow: no eviction for disk, and images are never collected
# (the pause image and any archive are imported, not pullable).
evictionHard:
  memory.available: 100Mi
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/ca.crt}
authorization:
  mode: Webhook
clusterDomain: cluster.local
EOF
  start_proc "kubelet-$node" "$dir/bin/kubelet" --config "$nd/kubelet.yaml" \
    --kubeconfig "$dir/pki/nodes/kubelet-$node.kubeconfig" --hostname-override "$node" \
    --node-ip "$ip" --root-dir "$nd/kubelet" --cert-dir "$nd/kubelet/pki" --v 1
}

up() {
  api=$(sed -n 's/^FG_E2E_API_SERVER=//p' "$dir/env")
  [ -n "$api" ] || { log "no cluster in $dir (e2e/cluster.sh up $dir)"; exit 1; }
  if alive kubelet-node-a; then log "already up in $dir"; return 0; fi
  command -v runc > /dev/null || { log "runc is not installed (Debian: apt-get install runc)"; exit 1; }
  runc=$(command -v runc)
  images=()
  registries=()
  local image registry listed=()
  # HOST:PORT, as an image reference names it (and containerd's certs.d folder).
  IFS=, read -r -a listed <<< "${FG_NODES_REGISTRY:-}"
  for registry in "${listed[@]}"; do
    [ -n "$registry" ] || continue
    [[ $registry =~ ^[A-Za-z0-9.-]+(:[0-9]+)?$|^\[[0-9A-Fa-f:]+\](:[0-9]+)?$ ]] \
      || { log "FG_NODES_REGISTRY: $registry is not HOST[:PORT]"; exit 1; }
    curl -fsS -o /dev/null "http://$registry/v2/" \
      || { log "FG_NODES_REGISTRY: no registry answers at http://$registry/v2/"; exit 1; }
    registries+=("$registry")
  done
  for image in "$@"; do
    [ -s "$image" ] || { log "no image archive $image"; exit 1; }
    images+=("$(cd "$(dirname "$image")" && pwd)/$(basename "$image")")
  done
  "$here/build.sh" > /dev/null
  nodebin=$("$here/build-nodes.sh")
  [ -x "$dir/bin/kubelet" ] && [ -x "$dir/bin/kube-scheduler" ] \
    || { log "$dir/bin has no kubelet or kube-scheduler (e2e/build.sh)"; exit 1; }

  # Kubelets as their group is meant to be bound, and the scheduler.
  kubectl apply -f - > /dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: e2e-nodes
subjects:
  - {kind: Group, name: system:nodes, apiGroup: rbac.authorization.k8s.io}
roleRef: {kind: ClusterRole, name: system:node, apiGroup: rbac.authorization.k8s.io}
EOF
  client system:kube-scheduler "" kube-scheduler
  local sched_port
  read -r sched_port < <(free_ports 1)
  start_proc kube-scheduler "$dir/bin/kube-scheduler" \
    --kubeconfig "$dir/pki/nodes/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig "$dir/pki/nodes/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig "$dir/pki/nodes/kube-scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$sched_port" --leader-elect=false --v 1

  local node k
  for node in "${nodes[@]}"; do
    k=$(free_subnet)
    start_node "$node" "$k" || { down; exit 1; }
  done
  for node in "${nodes[@]}"; do
    if ! wait_for "$node Ready" 120 sh -c "'$dir/bin/kubectl' --kubeconfig '$dir/admin.kubeconfig' get node $node \
        -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"; then
      tail -n 30 "$dir/logs/kubelet-$node.log" >&2; down; exit 1
    fi
  done
  log "up: ${nodes[*]} Ready ($(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.status.addresses[0].address} {end}'))${registries[*]:+, pulling from ${registries[*]}}"
}

import() {
  nodebin=$("$here/build-nodes.sh")
  local node
  for node in "${nodes[@]}"; do
    alive "containerd-$node" && ctr_node "$node" images import "$1" > /dev/null
  done
}

# kill_containers NODE: every container of the node's runc, killed and deleted.
# (containerd's runc shim keeps one runc root per containerd namespace.)
kill_containers() {
  local root id
  command -v runc > /dev/null || return 0
  for root in "$dir/nodes/$1/runc"/*/; do
    [ -d "$root" ] || continue
    for id in $(runc --root "$root" list -q 2>/dev/null); do
      runc --root "$root" kill -a "$id" KILL 2>/dev/null || runc --root "$root" kill "$id" KILL 2>/dev/null || true
    done
    sleep 0.5
    for id in $(runc --root "$root" list -q 2>/dev/null); do
      runc --root "$root" delete -f "$id" 2>/dev/null || true
    done
  done
}

# kill_shims NODE: containerd's shims outlive it; theirs name its socket.
kill_shims() {
  local sock="$dir/nodes/$1/containerd.sock" pid
  for pid in $(pgrep -f -- "-address $sock" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
}

kill_node() { # the node dies: nothing on it runs any more.
  local node=$1
  stop_proc "kubelet-$node" KILL
  stop_proc "containerd-$node" KILL
  kill_containers "$node"
  kill_shims "$node"
  if [ -f "$dir/nodes/$node/env" ]; then
    ip link set "$(sed -n 's/^BRIDGE=//p' "$dir/nodes/$node/env")" down 2>/dev/null || true
  fi
}

down() {
  local node mnt bridge api_dnat
  stop_proc kube-scheduler
  for node in "${nodes[@]}"; do
    stop_proc "kubelet-$node"
    kill_containers "$node"
    stop_proc "containerd-$node"
    kill_shims "$node"
  done
  # Mounts under DIR/nodes (rootfs overlays, volumes, network namespaces), deepest first.
  if [ -d "$dir/nodes" ]; then
    while read -r mnt; do
      umount -l "$mnt" 2>/dev/null || true
    done < <(awk -v d="$dir/nodes/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r)
  fi
  for node in "${nodes[@]}"; do
    if [ -f "$dir/nodes/$node/env" ]; then
      bridge=$(sed -n 's/^BRIDGE=//p' "$dir/nodes/$node/env")
      api_dnat=$(sed -n 's/^API_DNAT=//p' "$dir/nodes/$node/env")
      if [ -n "$api_dnat" ]; then
        iptables -w -t nat -D PREROUTING "${api_rule[@]/@BRIDGE@/$bridge}" --to-destination "$api_dnat" 2>/dev/null || true
      fi
      ip link delete "$bridge" 2>/dev/null || true
    fi
  done
  rm -rf "$dir/nodes"
  log "down: $dir"
}

case $cmd in
  up) up "$@" ;;
  import) [ $# -eq 1 ] || usage; import "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")" ;;
  kill)
    [ $# -eq 1 ] || usage
    kill_node "$1"
    log "$1 killed: kubelet, containerd and its containers"
    ;;
  down) down ;;
  *) usage ;;
esac
