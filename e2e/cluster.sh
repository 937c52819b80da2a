#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1, for the end-to-end tests and
# for trying finalizer-guard by hand.
#
#   e2e/cluster.sh up DIR     start etcd, kube-apiserver, kube-controller-manager
#   e2e/cluster.sh down DIR   stop them (idempotent; leaves no process behind)
#   e2e/cluster.sh env DIR    print the variables below, for `eval`
#
# `up` builds the binaries first (e2e/build.sh, cached outside the
# repository), picks free ports, and returns once the API server is ready and
# the controllers run. DIR then holds:
#   admin.kubeconfig   user admin, group system:masters
#   alice.kubeconfig   user alice, group developers  (edit rights, cluster-wide)
#   carol.kubeconfig   user carol, group sre-oncall  (edit rights, cluster-wide; reads
#                      nodes, leases, APIServices and webhook configurations)
#   oncall.kubeconfig  user oncall, no group, bound to nothing: a scenario
#                      grants it the chart's on-call ClusterRole, and only that
#   audit.log          kube-apiserver's audit log: UPDATE, PATCH and DELETE at
#                      Metadata level, webhook audit annotations included, and
#                      Event creates
#   bin/               kubectl, kube-apiserver, kube-controller-manager, etcd
#   ca.crt             the CA of the API server's serving certificate
#   webhook-client-ca.crt  the CA of the client certificate kube-apiserver
#                      presents to every admission webhook that asks for one
#                      (admission-config.yaml): `serve --client-ca` takes it
#   logs/              each process's output
#
# FG_KUBE picks the release: unset, the one e2e/go.mod pins (v1.37.2), the
# newest the tests run; FG_KUBE=v1.28, the module in e2e/v1.28 (v1.28.15), the oldest the
# docs claim. Each is built and cached on its own (e2e/build.sh MODULE).
# FG_E2E_STATIC=FOLDER (1.37 or later) starts kube-apiserver in tamper-proof
# mode: its AdmissionConfiguration gets the entries `finalizer-guard policy
# export --static FOLDER` writes in FOLDER/admission-config.yaml, merged into
# its own as docs/tamper-proof.md says (staticManifestsDir FOLDER/policies
# for the ValidatingAdmissionPolicy plugin, FOLDER/webhooks beside the
# webhook plugin's client certificate). Both folders are created empty when
# missing: kube-apiserver needs them to exist, and loads what is written
# into them later (tests/e2e/static.rs).
# FG_E2E_MANAGED=1 configures kube-apiserver as a managed control plane
# (EKS, GKE, AKS) is: it presents no client certificate to any webhook
# (its webhook kubeconfig has no users), so `serve --client-ca` refuses
# its calls; tests/e2e/managed.rs runs there.
# There is no kubelet and no scheduler: pods stay Pending unless a test binds
# them to a Node object itself, and a webhook runs as a local process reached
# by a `url:` clientConfig. `e2e/nodes.sh up DIR` adds two real nodes and
# kube-scheduler; kube-apiserver resolves a Service clientConfig to its pods'
# IPs itself (--enable-aggregator-routing), as there is no kube-proxy.
set -euo pipefail

usage() { echo "usage: $0 up|down|env DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
dir=$2
here=$(cd "$(dirname "$0")" && pwd)
if [ "$cmd" = up ]; then mkdir -p "$dir"; fi
# Absolute: the processes are recognised by it on their command lines.
if [ -d "$dir" ]; then dir=$(cd "$dir" && pwd); fi

# Processes, in start order; `down` stops them in reverse. finalizer-guard
# is the webhook server a test run may leave behind (it writes
# run/finalizer-guard.pid; cluster.sh never starts it).
procs=(etcd kube-apiserver kube-controller-manager finalizer-guard)

log() { printf 'cluster: %s\n' "$*" >&2; }

# free_ports, alive
. "$here/lib.sh"

stop() {
  local name pid
  for (( i = ${#procs[@]} - 1; i >= 0; i-- )); do
    name=${procs[$i]}
    if alive "$name"; then
      pid=$(cat "$dir/run/$name.pid")
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do alive "$name" || break; sleep 0.1; done
      if alive "$name"; then kill -KILL "$pid" 2>/dev/null || true; fi
      for _ in $(seq 1 50); do alive "$name" || break; sleep 0.1; done
    fi
    rm -f "$dir/run/$name.pid"
  done
}

# start NAME ARGS...: runs bin/NAME in its own session, output to logs/NAME.log.
declare -A started_with restarted
start() {
  local name=$1; shift
  started_with[$name]=$(printf '%q ' "$@")
  setsid "$dir/bin/$name" "$@" > "$dir/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$dir/run/$name.pid"
}

# gone NAME: says how a process that is no longer alive ended (its exit
# status, or the signal that killed it, when it is this shell's child) and
# what it wrote. One that wrote nothing at all is started once more, with
# the same arguments: it never ran (status 0 from a reused pid file, or a
# signal from outside), and the next attempt says whether that repeats.
gone() {
  local name=$1 pid status
  pid=$(cat "$dir/run/$name.pid")
  # Still there, no zombie, and no other command line: it runs (alive
  # could not read it).
  if [ -d "/proc/$pid" ] && ! sed -E 's/.*\) //' "/proc/$pid/stat" 2>/dev/null | grep -q '^[ZX]'; then
    case $(tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline") in "" | *"$dir"*) return 0 ;; esac
  fi
  status=$(wait "$pid" 2>/dev/null; echo $?)
  if [ "$status" -gt 128 ] 2>/dev/null && [ "$status" -ne 255 ]; then
    status="killed by signal $(kill -l $(( status - 128 )) 2>/dev/null || echo $(( status - 128 )))"
  else
    status="exit status $status"
  fi
  log "$name exited ($status); last lines of logs/$name.log:"
  tail -n 30 "$dir/logs/$name.log" >&2
  if [ ! -s "$dir/logs/$name.log" ] && [ -z "${restarted[$name]:-}" ]; then
    restarted[$name]=1
    log "$name wrote nothing: starting it once more"
    eval "start $name ${started_with[$name]}"
    return 0
  fi
  return 1
}

# wait_for WHAT SECONDS COMMAND...: polls COMMAND until it succeeds.
wait_for() {
  local what=$1 seconds=$2; shift 2
  local deadline=$(( $(date +%s) + seconds ))
  until "$@" > /dev/null 2>&1; do
    for name in "${procs[@]}"; do
      if [ -f "$dir/run/$name.pid" ] && ! alive "$name"; then
        log "while waiting for $what:"
        gone "$name" || { stop; exit 1; }
      fi
    done
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "gave up waiting for $what after ${seconds}s"
      stop; exit 1
    fi
    sleep 0.2
  done
}

kubeconfig() { # kubeconfig FILE USER TOKEN
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: e2e
    cluster:
      server: https://127.0.0.1:$api_port
      certificate-authority: $dir/ca.crt
users:
  - name: $2
    user:
      token: $3
contexts:
  - name: e2e-$2
    context:
      cluster: e2e
      user: $2
current-context: e2e-$2
EOF
}

certificates() {
  local pki="$dir/pki"
  mkdir -p "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=finalizer-guard-e2e-ca" \
    -keyout "$pki/ca.key" -out "$dir/ca.crt" 2> /dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2> /dev/null
  printf 'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n' > "$pki/san.ext"
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$dir/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 3650 -extfile "$pki/san.ext" -out "$pki/apiserver.crt" 2> /dev/null
  # kube-apiserver's client certificate towards kubelets (logs, exec), for e2e/nodes.sh.
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
    -keyout "$pki/apiserver-kubelet-client.key" -out "$pki/apiserver-kubelet-client.csr" 2> /dev/null
  openssl x509 -req -in "$pki/apiserver-kubelet-client.csr" -CA "$dir/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 3650 -out "$pki/apiserver-kubelet-client.crt" 2> /dev/null
  # Service-account tokens: kube-controller-manager signs them, the API server checks them.
  openssl genrsa -out "$pki/sa.key" 2048 2> /dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2> /dev/null
  # kube-apiserver's client certificate towards admission webhooks, from a CA
  # of its own (webhook-client-ca.crt, for `serve --client-ca`): one from
  # ca.crt would also log in to the API server itself.
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=finalizer-guard-e2e-webhook-client-ca" \
    -keyout "$pki/webhook-client-ca.key" -out "$dir/webhook-client-ca.crt" 2> /dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$pki/webhook-client.key" -out "$pki/webhook-client.csr" 2> /dev/null
  printf 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' > "$pki/webhook-client.ext"
  openssl x509 -req -in "$pki/webhook-client.csr" -CA "$dir/webhook-client-ca.crt" \
    -CAkey "$pki/webhook-client-ca.key" -CAserial "$pki/webhook-client-ca.srl" -CAcreateserial -days 3650 -extfile "$pki/webhook-client.ext" \
    -out "$pki/webhook-client.crt" 2> /dev/null
}

# admission WEBHOOK_KUBECONFIG CONFIG: the AdmissionConfiguration that gives
# kube-apiserver its client certificate for every admission webhook, as
# docs/security.md's "Only kube-apiserver may call" does for the Service.
# The users entry `*` matches every webhook host: a `url:` webhook's
# 127.0.0.1:PORT, a Service's NAME.NS.svc:PORT. A webhook server that asks
# for no certificate is sent none.
admission() {
  local static_webhooks="" static_policies=""
  if [ -n "${FG_E2E_STATIC:-}" ]; then
    mkdir -p "$FG_E2E_STATIC/policies" "$FG_E2E_STATIC/webhooks"
    local folder
    folder=$(cd "$FG_E2E_STATIC" && pwd)
    static_webhooks="
      staticManifestsDir: $folder/webhooks"
    static_policies="
  - name: ValidatingAdmissionPolicy
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: ValidatingAdmissionPolicyConfiguration
      staticManifestsDir: $folder/policies"
  fi
  if [ -n "${FG_E2E_MANAGED:-}" ]; then
    # A managed control plane: no client certificate for any webhook.
    printf 'apiVersion: v1\nkind: Config\nusers: []\n' > "$1"
  else
    cat > "$1" <<EOF
apiVersion: v1
kind: Config
users:
  - name: "*"
    user:
      client-certificate: $dir/pki/webhook-client.crt
      client-key: $dir/pki/webhook-client.key
EOF
  fi
  cat > "$2" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: ValidatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: $1$static_webhooks$static_policies
EOF
}

up() {
  if alive kube-apiserver; then
    log "already up in $dir"; return 0
  fi
  local bin module=${FG_KUBE:-.} extra=()
  if [ "$module" != . ] && [ ! -f "$here/$module/go.mod" ]; then
    log "FG_KUBE=$module: no module e2e/$module (there are: $(cd "$here" && ls -d v*/ 2>/dev/null | tr -d / | tr '\n' ' '))"
    exit 2
  fi
  bin=$("$here/build.sh" "$module")
  # The release's minor version, from the cache folder build.sh keyed by it.
  local minor
  minor=$(basename "$bin" | sed -nE 's/^kubernetes-v1\.([0-9]+)\..*/\1/p')
  [ -n "$minor" ] || { log "cannot tell the Kubernetes release of $bin"; exit 1; }
  # Static manifests (tamper-proof mode) are beta and on by default from
  # 1.37; before, kube-apiserver refuses the staticManifestsDir field and
  # does not start.
  if [ -n "${FG_E2E_STATIC:-}" ] && [ "$minor" -lt 37 ]; then
    log "FG_E2E_STATIC needs Kubernetes 1.37 or later (manifest-based admission control); $(basename "$bin") is 1.$minor"
    exit 2
  fi
  # From 1.37 kube-apiserver refuses a loopback --advertise-address unless
  # it keeps no endpoints for the kubernetes Service (nothing here needs them).
  if [ "$minor" -ge 37 ]; then extra+=(--endpoint-reconciler-type none); fi
  rm -rf "$dir/run" "$dir/logs" "$dir/etcd" "$dir/bin"
  mkdir -p "$dir/run" "$dir/logs"
  ln -s "$bin" "$dir/bin"
  certificates

  local etcd_port peer_port kcm_port
  read -r etcd_port peer_port api_port kcm_port < <(free_ports 4)

  # Static tokens: TOKEN,USER,UID,"GROUPS". Random, so a cluster left up
  # on a shared machine is no open door.
  local admin alice carol oncall kcm
  admin=$(openssl rand -hex 16); alice=$(openssl rand -hex 16)
  carol=$(openssl rand -hex 16); oncall=$(openssl rand -hex 16)
  kcm=$(openssl rand -hex 16)
  cat > "$dir/pki/tokens.csv" <<EOF
$admin,admin,admin,"system:masters"
$alice,alice,alice,"developers"
$carol,carol,carol,"sre-oncall"
$oncall,oncall,oncall,""
$kcm,system:kube-controller-manager,system:kube-controller-manager,""
EOF
  kubeconfig "$dir/admin.kubeconfig" admin "$admin"
  kubeconfig "$dir/alice.kubeconfig" alice "$alice"
  kubeconfig "$dir/carol.kubeconfig" carol "$carol"
  kubeconfig "$dir/oncall.kubeconfig" oncall "$oncall"
  kubeconfig "$dir/pki/kube-controller-manager.kubeconfig" kube-controller-manager "$kcm"

  cat > "$dir/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [update, patch, delete]
  # Event writes, creates included: what repeated Events cost the API server.
  - level: Metadata
    verbs: [create]
    resources:
      - {group: "", resources: [events]}
      - {group: events.k8s.io, resources: [events]}
  - level: None
EOF

  admission "$dir/pki/webhook-client.kubeconfig" "$dir/admission-config.yaml"

  start etcd --name e2e --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "e2e=http://127.0.0.1:$peer_port" --listen-metrics-urls "" \
    --unsafe-no-fsync --log-level warn
  wait_for etcd 30 curl -fsS "http://127.0.0.1:$etcd_port/health"

  start kube-apiserver --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
    --client-ca-file "$dir/ca.crt" --token-auth-file "$dir/pki/tokens.csv" \
    --authorization-mode RBAC \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$dir/pki/sa.pub" --service-account-signing-key-file "$dir/pki/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 \
    --enable-aggregator-routing=true \
    --kubelet-client-certificate "$dir/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$dir/pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit.log" \
    --audit-log-format json --audit-log-mode blocking \
    --admission-control-config-file "$dir/admission-config.yaml" \
    --cert-dir "$dir/pki" --v 1 "${extra[@]}"
  wait_for kube-apiserver 120 "$dir/bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" get --raw /readyz

  # alice and carol edit anything in any namespace, as an ordinary
  # developer or on-call engineer with the built-in `edit` role would.
  "$dir/bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" apply -f - > /dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: e2e-developers-edit
subjects:
  - {kind: Group, name: developers, apiGroup: rbac.authorization.k8s.io}
  - {kind: Group, name: sre-oncall, apiGroup: rbac.authorization.k8s.io}
roleRef: {kind: ClusterRole, name: edit, apiGroup: rbac.authorization.k8s.io}
---
# The on-call engineer also reads what tells a dead node or a down API
# from a live one: nodes, leader leases, APIServices, webhook configurations.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: e2e-sre-oncall-read
rules:
  - {apiGroups: [""], resources: [nodes], verbs: [get, list, watch]}
  - {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, list]}
  - {apiGroups: [apiregistration.k8s.io], resources: [apiservices], verbs: [get, list]}
  - {apiGroups: [admissionregistration.k8s.io], resources: [validatingwebhookconfigurations], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: e2e-sre-oncall-read
subjects:
  - {kind: Group, name: sre-oncall, apiGroup: rbac.authorization.k8s.io}
roleRef: {kind: ClusterRole, name: e2e-sre-oncall-read, apiGroup: rbac.authorization.k8s.io}
EOF

  start_kcm() {
    start kube-controller-manager --kubeconfig "$dir/pki/kube-controller-manager.kubeconfig" \
      --authentication-kubeconfig "$dir/pki/kube-controller-manager.kubeconfig" \
      --authorization-kubeconfig "$dir/pki/kube-controller-manager.kubeconfig" \
      --bind-address 127.0.0.1 --secure-port "$kcm_port" --cert-dir "$dir/pki/kcm" \
      --use-service-account-credentials --service-account-private-key-file "$dir/pki/sa.key" \
      --root-ca-file "$dir/ca.crt" --cluster-signing-cert-file "$dir/ca.crt" \
      --cluster-signing-key-file "$dir/pki/ca.key" --leader-elect=false --v 1
  }
  start_kcm
  # Its port was chosen free at the start; by now a loopback connection may
  # hold it. One that dies in its first seconds is started once more on a
  # port chosen now, and says so (with what it wrote).
  sleep 3
  if ! alive kube-controller-manager; then
    log "kube-controller-manager exited at once; its log:"
    tail -n 30 "$dir/logs/kube-controller-manager.log" >&2
    kcm_port=$(free_ports 1)
    log "starting it once more, on port $kcm_port"
    start_kcm
  fi
  wait_for kube-controller-manager 120 curl -fsSk "https://127.0.0.1:$kcm_port/healthz"
  # The controllers run once they act: the service-account controller gives
  # `default` its ServiceAccount.
  wait_for "the controllers" 120 "$dir/bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" \
    get serviceaccount default -n default

  cat > "$dir/env" <<EOF
FG_E2E_DIR=$dir
FG_E2E_BIN=$dir/bin
FG_E2E_API_SERVER=https://127.0.0.1:$api_port
KUBECONFIG=$dir/admin.kubeconfig
EOF
  log "up: https://127.0.0.1:$api_port ($("$dir/bin/kubectl" version --kubeconfig "$dir/admin.kubeconfig" -o json \
    | sed -n 's/.*"gitVersion": "\([^"]*\)".*/\1/p' | tail -n 1)); kubeconfigs in $dir"
}

case $cmd in
  up) up ;;
  down)
    [ -d "$dir" ] || exit 0
    # Nodes first (e2e/nodes.sh): their kubelets still talk to the API server.
    # The control plane stops even if that fails (and then says so).
    nodes_down=0
    if [ -d "$dir/nodes" ] || [ -f "$dir/run/kube-scheduler.pid" ]; then
      "$here/nodes.sh" down "$dir" || nodes_down=$?
    fi
    stop
    if [ "$nodes_down" -ne 0 ]; then log "e2e/nodes.sh down $dir failed ($nodes_down)"; exit "$nodes_down"; fi
    log "down: $dir"
    ;;
  env)
    [ -f "$dir/env" ] || { log "no cluster in $dir"; exit 1; }
    sed 's/^/export /' "$dir/env"
    ;;
  *) usage ;;
esac
