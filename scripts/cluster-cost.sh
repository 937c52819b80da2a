#!/usr/bin/env bash
# What finalizer-guard costs a cluster, measured through a real API server,
# beside the floor: a webhook that only answers "allowed" with the request's
# uid (examples/minimal_server.rs `echo-uid`: the same runtime, TLS and HTTP
# stack, no decision, no audit record, no Events).
#
# Starts the real control plane (e2e/cluster.sh: etcd, kube-apiserver,
# kube-controller-manager on 127.0.0.1), installs the webhook from
# manifests/ as tests/e2e does (the self-managed overlay, its clientConfig
# pointed at a local `finalizer-guard serve` by url; Events on, written with
# the token of the ServiceAccount the manifests install, for reviews that
# come with kube-apiserver's client certificate: `--client-ca`, as
# docs/security.md's "Only kube-apiserver may call" sets it up), and times writes
# with examples/cluster_load.rs (kube-rs, one ConfigMap per client, each
# write timed by the client):
#
#   override      swaps the ConfigMap's finalizer between two names no rule
#                 covers, on an object carrying the override annotation:
#                 every write is an override, judged, audited and reported
#                 by an Event; from the third on each repeats an earlier one,
#                 so the Events are two, their series counting the rest
#   override-new  the same with a new name each time: every override is a
#                 new Event (a create per write)
#   guarded       replaces the finalizer with a new name a policy rule lets
#                 the admin user remove: judged and allowed, no Event
#   label         a merge patch of a label, finalizers kept: an ordinary
#                 UPDATE, which the configuration's matchConditions keep from
#                 the webhook
#
# each with the ValidatingWebhookConfiguration pointed at finalizer-guard,
# pointed at the floor, and removed; with the policy exported as a
# ValidatingAdmissionPolicy (`finalizer-guard policy export --vap`) and no
# webhook (vap); and with both, the backstop (backstop), in rounds (the
# order reversed every other round); then override writes with more
# concurrent clients, through each webhook. With WRITERS=N, N writers at
# once instead, each stripping a finalizer under an override as fast as it
# can for SECONDS_PER_RUN, with no webhook (removed), the floor and
# finalizer-guard, the order rotated every round: rate, p50, p99, max,
# writes over a second and errors, and what each webhook adds. Around every run the webhook's review counter and the API
# server's count of webhook calls are read: a run that reached the wrong
# webhook, or one not at all when it should, fails the script.
#
#   scripts/cluster-cost.sh                    # 1000 writes per run, 3 rounds
#   WRITES=2000 ROUNDS=5 scripts/cluster-cost.sh
#   WRITERS=500 FG_BIN=finalizer-guard-of-the-release scripts/cluster-cost.sh
#
# Environment: WRITES (1000 per run and per client count), ROUNDS (3),
# CLIENTS ("1 10"; with WRITERS, none), WRITERS, SECONDS_PER_RUN (20), FG_BIN
# (the finalizer-guard binary measured, e.g. the release's static one;
# default a release build of this tree), CLIENT_CERT (1; 0: no --client-ca,
# so no Events), KINDS (with WRITERS, none by default) (the writes timed; default
# "override override-new guarded label"), STATES (the configurations, in
# the order of the odd rounds; default "finalizer-guard floor removed vap
# backstop"), FG_ARGS (more `serve` flags, e.g.
# "--events=false"), WEBHOOK_ADDR (the address both webhooks listen on and
# kube-apiserver calls, default 127.0.0.1: kube-apiserver speaks HTTP/2 only
# to a URL webhook on a loopback address, as a static install is; any other
# address of this machine, e.g. `hostname -I`'s first, gets HTTP/1.1, as
# every service-referenced webhook does, the chart's among them),
# DIR (the cluster's folder; default a new one under
# /tmp, removed at the end), REPORT (the markdown tables; default
# $TARGET/cluster-cost.md). Everything else listens on 127.0.0.1; the
# cluster and both webhooks are always stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
writes=${WRITES:-1000}
rounds=${ROUNDS:-3}
addr=${WEBHOOK_ADDR:-127.0.0.1}
case $addr in
  127.*) transport="HTTP/2 (a loopback URL)" ;;
  *[!0-9.]*) echo "WEBHOOK_ADDR: an IPv4 address of this machine, not $addr" >&2; exit 2 ;;
  *) transport="HTTP/1.1 (not a loopback URL, as for every service-referenced webhook)" ;;
esac
writers=${WRITERS:-}
seconds_per_run=${SECONDS_PER_RUN:-20}
if [ -n "$writers" ]; then
  clients=${CLIENTS:-}
  kinds=${KINDS:-}
else
  clients=${CLIENTS:-"1 10"}
  kinds=${KINDS:-"override override-new guarded label"}
fi
order=${STATES:-"finalizer-guard floor removed vap backstop"}
read -r -a fg_args <<< "${FG_ARGS:-}"

echo "== building (release): finalizer-guard (unless FG_BIN), examples/cluster_load, examples/minimal_server" >&2
if [ -n "${FG_BIN:-}" ]; then
  cargo build --release --locked --example cluster_load --example minimal_server >&2
else
  cargo build --release --locked --bin finalizer-guard --example cluster_load --example minimal_server >&2
fi
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
fg=${FG_BIN:-$target/release/finalizer-guard}
load=$target/release/examples/cluster_load
floor=$target/release/examples/minimal_server
report=${REPORT:-$target/cluster-cost.md}

own_dir=
if [ -z "${DIR:-}" ]; then
  DIR=$(mktemp -d /tmp/finalizer-guard-cost.XXXXXX)
  own_dir=1
fi
dir=$DIR
# CLIENT_CERT=0: the server asks kube-apiserver for no client certificate
# (the chart's default): every TLS connection costs the API server less,
# and no Event is written.
client_ca=(--client-ca "$dir/webhook-client-ca.crt")
[ "${CLIENT_CERT:-1}" != 0 ] || client_ca=()
webhook_pid=
floor_pid=
cleanup() {
  for pid in $webhook_pid $floor_pid; do
    kill "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
  done
  rm -f "$dir/run/finalizer-guard.pid"
  e2e/cluster.sh down "$dir" || true
  if [ -n "$own_dir" ]; then rm -rf "$dir"; fi
}
trap cleanup EXIT

e2e/cluster.sh up "$dir"
kubectl() { "$dir/bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" "$@"; }
free_ports() {
  python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind((sys.argv[2], 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1" "$addr"
}

# The webhook, installed as users install it: certificates for the address
# the API server calls, the self-managed overlay, then only the clientConfig
# changed to a url for the local server.
work=$dir/cost
rm -rf "$work"
mkdir -p "$work"
"$fg" certs --ip "$addr" --out "$work/certs" > /dev/null
cp -r manifests "$work/manifests"
cp "$work/certs/ca.crt" "$work/certs/tls.crt" "$work/certs/tls.key" "$work/manifests/overlays/self-managed/"
kubectl apply --server-side -k "$work/manifests/overlays/self-managed" > /dev/null
# Repeated Events update their series: a patch of the Event, which the
# manifests' role may not grant.
kubectl apply -f - > /dev/null << 'EOF'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cost-finalizer-guard-event-series}
rules:
  - {apiGroups: [events.k8s.io], resources: [events], verbs: [patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cost-finalizer-guard-event-series}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cost-finalizer-guard-event-series}
subjects:
  - {kind: ServiceAccount, name: finalizer-guard, namespace: finalizer-guard}
EOF
# The server's credentials for Events: a token of the installed ServiceAccount.
token=$(kubectl create token finalizer-guard -n finalizer-guard --duration 2h)
python3 - "$dir/admin.kubeconfig" "$token" > "$work/webhook.kubeconfig" << 'EOF'
import json, sys
admin, token = open(sys.argv[1]).read(), sys.argv[2]
server = next(l.split(": ", 1)[1].strip() for l in admin.splitlines() if l.strip().startswith("server:"))
ca = next(l.split(": ", 1)[1].strip() for l in admin.splitlines() if l.strip().startswith("certificate-authority:"))
json.dump({"apiVersion": "v1", "kind": "Config",
  "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": ca}}],
  "users": [{"name": "finalizer-guard", "user": {"token": token}}],
  "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "finalizer-guard"}}],
  "current-context": "e2e"}, sys.stdout)
EOF
cp examples/load/policy.yaml "$work/policy.yaml"
# The same policy as a ValidatingAdmissionPolicy and its binding, for the
# vap and backstop states; a probe object that only the policy (or the
# webhook) keeps a stranger from stripping, and a group that may write it,
# so that RBAC never answers in the policy's place.
"$fg" policy export --vap "$work/policy.yaml" > "$work/vap.yaml"
kubectl create namespace cost > /dev/null
kubectl apply -f - > /dev/null << 'EOF'
apiVersion: v1
kind: ConfigMap
metadata: {name: vap-probe, namespace: cost, finalizers: [probe.example.org/hold]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cost-vap-probe}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: Group, name: cost-vap-probe}
EOF
# Whether the ValidatingAdmissionPolicy is in force: a dry-run strip by a
# stranger is refused by it.
policy_in_force() {
  local said
  said=$(kubectl patch configmap vap-probe -n cost --type=merge -p '{"metadata":{"finalizers":null}}' \
    --dry-run=server --as=cost-prober --as-group=cost-vap-probe 2>&1 || true)
  grep -q "ValidatingAdmissionPolicy 'finalizer-guard'" <<< "$said"
}

# start_server NAME COMMAND...: starts a server on fresh ports ($port, and
# $admin_port for finalizer-guard), retrying when a port was taken before
# the bind; sets ${NAME}_pid.
ready() {
  if [ "$1" = webhook ]; then
    curl -sf "http://127.0.0.1:$admin_port/readyz" > /dev/null
  else
    curl -sfk "https://$addr:$floor_port/validate" -d '{"request":{"uid":"probe"}}' | grep -q probe
  fi
}
for attempt in 1 2 3 4 5; do
  read -r port admin_port < <(free_ports 2)
  KUBECONFIG=$work/webhook.kubeconfig "$fg" serve --policy "$work/policy.yaml" \
    --tls-cert "$work/certs/tls.crt" --tls-key "$work/certs/tls.key" \
    --listen "$addr:$port" --admin-listen "127.0.0.1:$admin_port" \
    "${client_ca[@]}" --shutdown-delay 0s "${fg_args[@]}" \
    > "$work/audit.jsonl" 2> "$work/server.log" &
  webhook_pid=$!
  echo "$webhook_pid" > "$dir/run/finalizer-guard.pid"
  for _ in $(seq 1 100); do
    ready webhook && break
    kill -0 "$webhook_pid" 2> /dev/null || break
    sleep 0.1
  done
  ready webhook && break
  kill "$webhook_pid" 2> /dev/null || true
  wait "$webhook_pid" 2> /dev/null || true
  webhook_pid=
  if [ "$attempt" = 5 ]; then cat "$work/server.log" >&2; exit 1; fi
done
for attempt in 1 2 3 4 5; do
  read -r floor_port < <(free_ports 1)
  "$floor" "$addr:$floor_port" "$work/certs/tls.crt" "$work/certs/tls.key" echo-uid \
    > /dev/null 2> "$work/floor.log" &
  floor_pid=$!
  for _ in $(seq 1 100); do
    ready floor && break
    kill -0 "$floor_pid" 2> /dev/null || break
    sleep 0.1
  done
  ready floor && break
  kill "$floor_pid" 2> /dev/null || true
  wait "$floor_pid" 2> /dev/null || true
  floor_pid=
  if [ "$attempt" = 5 ]; then cat "$work/floor.log" >&2; exit 1; fi
done

# failurePolicy Fail, as the policy here enforces (the manifests' default,
# Ignore, is warn mode's): a call that fails is a refused write the
# writers count, never a write let through unjudged. (The backstop state
# runs so too; a backstop install fails open, which changes nothing while
# every call is answered, and the script checks that each one was.)
kubectl patch validatingwebhookconfiguration finalizer-guard --type=json -p "[
  {\"op\": \"test\", \"path\": \"/webhooks/0/name\", \"value\": \"finalizers.finalizer-guard.io\"},
  {\"op\": \"replace\", \"path\": \"/webhooks/0/failurePolicy\", \"value\": \"Fail\"},
  {\"op\": \"remove\", \"path\": \"/webhooks/0/clientConfig/service\"},
  {\"op\": \"add\", \"path\": \"/webhooks/0/clientConfig/url\", \"value\": \"https://$addr:$port/validate\"}]" > /dev/null
# What each state re-creates: the configuration as installed, pointed at
# finalizer-guard or at the floor (same rules, matchConditions, timeouts).
kubectl get validatingwebhookconfiguration finalizer-guard -o json \
  | python3 -c 'import json, sys
c = json.load(sys.stdin)
c["metadata"] = {k: v for k, v in c["metadata"].items() if k in ("name", "labels", "annotations")}
json.dump(c, open(sys.argv[1], "w"))
c["webhooks"][0]["clientConfig"]["url"] = "https://%s:%s/validate" % (sys.argv[4], sys.argv[3])
json.dump(c, open(sys.argv[2], "w"))' "$work/config-finalizer-guard.json" "$work/config-floor.json" "$floor_port" "$addr"

# Reviews finalizer-guard has answered so far.
reviews() {
  curl -sf "http://127.0.0.1:$admin_port/metrics" \
    | awk '/^finalizer_guard_reviews_total\{/ { n += $NF } END { print n + 0 }'
}
# finalizer-guard's Event counters: sent updated repeated failed.
event_counts() {
  curl -sf "http://127.0.0.1:$admin_port/metrics" | awk '
    /^finalizer_guard_events_total\{/ {
      if (index($0, "\"sent\"")) s += $NF
      if (index($0, "\"updated\"")) u += $NF
      if (index($0, "\"repeated\"")) r += $NF
      if (index($0, "\"failed\"")) f += $NF
    }
    END { printf "%d %d %d %d\n", s, u, r, f }'
}
# The sum (seconds) and count of histogram $1 in Prometheus text on stdin,
# over its series whose line holds $2 (all when empty).
histogram() {
  awk -v m="$1" -v f="${2:-}" '
    (f == "" || index($0, f)) && index($0, m "_sum") == 1 { s += $NF }
    (f == "" || index($0, f)) && index($0, m "_count") == 1 { c += $NF }
    END { printf "%.9f %d\n", s, c }'
}
# What finalizer-guard spent deciding, and what the API server spent calling
# whichever webhook is installed (apiserver_admission_webhook_admission_duration_seconds:
# the whole call, as the API server times it).
decided() { curl -sf "http://127.0.0.1:$admin_port/metrics" | histogram finalizer_guard_review_duration_seconds; }
called() {
  kubectl get --raw /metrics \
    | histogram apiserver_admission_webhook_admission_duration_seconds 'name="finalizers.finalizer-guard.io"'
}
calls() { called | awk '{ print $2 }'; }
# CPU time (clock ticks, user + system) processes $@ have used so far.
ticks() {
  local pid total=0
  for pid in "$@"; do
    total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
  done
  echo "$total"
}
# The control plane's processes that serve a write: kube-apiserver and etcd.
control_plane=$(cat "$dir/run/kube-apiserver.pid" "$dir/run/etcd.pid" | tr '\n' ' ')
hz=$(getconf CLK_TCK)

# A guarded write of a probe object, untimed, removing the last probe's finalizer.
probes=0
probe() {
  probes=$((probes + 1))
  "$load" --kubeconfig "$dir/admin.kubeconfig" --write guarded --writes 1 --warmup 0 \
    --prefix probe --first "$probes" > /dev/null
}
# The webhook configuration of a state (none: removed), and whether it has
# the ValidatingAdmissionPolicy.
webhook_of() {
  case $1 in
    finalizer-guard | backstop) echo finalizer-guard ;;
    floor) echo floor ;;
    *) echo none ;;
  esac
}
has_policy() { [ "$1" = vap ] || [ "$1" = backstop ]; }
# state finalizer-guard|floor|removed|vap|backstop: changes the
# configuration and waits (bounded) until the API server acts on it: probes
# reach the webhook meant, twice in a row, or none; and the policy refuses
# a stranger's strip, or does not. It starts pointed at finalizer-guard,
# with no policy.
current=finalizer-guard
state() {
  local want=$1 r0 c0 r1 c1 seen=0 from to
  [ "$want" = "$current" ] && return 0
  from=$(webhook_of "$current"); to=$(webhook_of "$want")
  if [ "$from" != "$to" ]; then
    if [ "$from" != none ]; then
      kubectl delete validatingwebhookconfiguration finalizer-guard > /dev/null
    fi
    if [ "$to" != none ]; then kubectl create -f "$work/config-$to.json" > /dev/null; fi
  fi
  if has_policy "$want" && ! has_policy "$current"; then kubectl apply -f "$work/vap.yaml" > /dev/null; fi
  if has_policy "$current" && ! has_policy "$want"; then kubectl delete -f "$work/vap.yaml" > /dev/null; fi
  current=$want
  for _ in $(seq 1 200); do
    r0=$(reviews); c0=$(calls)
    probe
    r1=$(reviews); c1=$(calls)
    case $to in
      finalizer-guard) [ "$r1" -gt "$r0" ] && [ $((c1 - c0)) -eq $((r1 - r0)) ] && seen=$((seen + 1)) || seen=0 ;;
      floor) [ "$r1" -eq "$r0" ] && [ "$c1" -gt "$c0" ] && seen=$((seen + 1)) || seen=0 ;;
      none) [ "$r1" -eq "$r0" ] && [ "$c1" -eq "$c0" ] && seen=$((seen + 1)) || seen=0 ;;
    esac
    # (The policy's probe is a dry run the webhook judges too: outside the
    # counted probe.)
    if [ "$seen" -ge 2 ]; then
      if has_policy "$want"; then policy_in_force && return 0
      else policy_in_force || return 0; fi
    fi
    sleep 0.1
  done
  echo "the API server did not act on the configuration: $want" >&2
  exit 1
}

results=$work/results.jsonl
: > "$results"
runs=0
# run WRITE CLIENTS [SECONDS]: one timed run in the current state (WRITES
# writes in all, or each client writing for SECONDS), checked against both
# counters.
run() {
  local write=$1 n=$2 r0 r1 c0 c1 out want judged length
  local d0 d1 a0 a1 e0 e1 p0 p1 w0 w1 webhook
  webhook=$webhook_pid
  case $(webhook_of "$current") in
    floor) webhook=$floor_pid ;;
    none) webhook= ;;
  esac
  read -r -a d0 < <(decided)
  read -r -a a0 < <(called)
  read -r -a e0 < <(event_counts)
  r0=$(reviews)
  runs=$((runs + 1))
  # shellcheck disable=SC2086 # one pid per word
  p0=$(ticks $control_plane); w0=$(ticks $webhook)
  length=(--writes "$((writes / n))")
  if [ -n "${3:-}" ]; then length=(--seconds "$3" --warmup 2); fi
  # The connections the API server holds open to the webhook, every second
  # of the run (ss): how many it needed for the writes in flight.
  local sampler listening=
  case $(webhook_of "$current") in
    floor) listening=$floor_port ;;
    finalizer-guard) listening=$port ;;
  esac
  : > "$work/connections"
  if [ -n "$listening" ]; then
    while sleep 1; do
      ss -Htn state established "( sport = :$listening )" | wc -l >> "$work/connections"
    done &
    sampler=$!
  fi
  out=$("$load" --kubeconfig "$dir/admin.kubeconfig" --write "$write" "${length[@]}" \
    --clients "$n" --prefix "$write-$n-$runs")
  if [ -n "$listening" ]; then kill "$sampler"; wait "$sampler" 2>/dev/null || true; fi
  # shellcheck disable=SC2086
  p1=$(ticks $control_plane); w1=$(ticks $webhook)
  r1=$(reviews)
  read -r -a d1 < <(decided)
  read -r -a a1 < <(called)
  read -r -a e1 < <(event_counts)
  # Each timed write and each warm-up write once at least: the API server
  # runs admission again when its cached object was stale and the update
  # is retried.
  want=$(echo "$out" | python3 -c 'import json, sys; r = json.load(sys.stdin); print(r["writes"] + r["warmup"] * r["clients"])')
  judged=$want
  if [ "$write" = label ] || [ "$(webhook_of "$current")" = none ]; then judged=0; fi
  c1=${a1[1]}; c0=${a0[1]}
  if [ "$judged" = 0 ] && [ $((c1 - c0)) -ne 0 ]; then
    echo "$current $write: the API server called a webhook $((c1 - c0)) times, want none" >&2; exit 1
  fi
  if [ "$judged" != 0 ] && [ $((c1 - c0)) -lt "$judged" ]; then
    echo "$current $write: the API server called a webhook $((c1 - c0)) times, want at least $judged" >&2; exit 1
  fi
  if [ "$(webhook_of "$current")" = finalizer-guard ] && [ $((r1 - r0)) -ne $((c1 - c0)) ]; then
    echo "$out" >&2
    echo "$current $write: finalizer-guard judged $((r1 - r0)) of $((c1 - c0)) calls" >&2; exit 1
  fi
  if [ "$(webhook_of "$current")" != finalizer-guard ] && [ $((r1 - r0)) -ne 0 ]; then
    echo "$current $write: finalizer-guard judged $((r1 - r0)) writes, want none" >&2; exit 1
  fi
  echo "$out" | python3 -c 'import json, sys
r = json.load(sys.stdin)
state, calls, judged = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d0, d1, c0, c1 = (float(x) for x in sys.argv[4:8])
e0, e1 = [int(x) for x in sys.argv[8].split()], [int(x) for x in sys.argv[9].split()]
r["state"] = state
r["webhook_calls"] = calls
r["decide_ms_mean"] = (d1 - d0) * 1000 / judged if judged else None
r["apiserver_call_ms_mean"] = (c1 - c0) * 1000 / calls if calls else None
r["events"] = dict(zip(("sent", "updated", "repeated", "failed"), (b - a for a, b in zip(e0, e1))))
hz, control_plane, webhook = (int(x) for x in sys.argv[10:13])
timed = r["writes"] + r["warmup"] * r["clients"]
r["control_plane_cpu_us"] = control_plane * 1e6 / hz / timed
r["webhook_cpu_us"] = webhook * 1e6 / hz / timed if sys.argv[1] not in ("removed", "vap") else None
r["load"] = open("/proc/loadavg").read().split()[0]
counts = sorted(int(x) for x in open(sys.argv[14]).read().split())
r["connections_median"] = counts[len(counts) // 2] if counts else None
r["connections_max"] = counts[-1] if counts else None
r["round"] = int(sys.argv[13])
print(json.dumps(r))' "$current" "$((c1 - c0))" "$((r1 - r0))" "${d0[0]}" "${d1[0]}" "${a0[0]}" "${a1[0]}" \
    "${e0[*]}" "${e1[*]}" "$hz" "$((p1 - p0))" "$((w1 - w0))" "$round" "$work/connections" | tee -a "$results" >&2
}

for round in $(seq 1 "$rounds"); do
  [ -n "$kinds" ] || break
  states=$order
  if [ $((round % 2)) = 0 ]; then states=$(echo "$order" | tr ' ' '\n' | tac | tr '\n' ' '); fi
  for s in $states; do
    state "$s"
    echo "== round $round: $s" >&2
    for write in $kinds; do run "$write" 1; done
  done
done
round=0
for n in $clients; do
  [ "$n" = 1 ] && continue
  [[ " $kinds " == *" override "* ]] || continue
  for s in finalizer-guard floor; do
    state "$s"
    echo "== $n clients: $s" >&2
    run override "$n"
  done
done
if [ -n "$writers" ]; then
  states=(removed floor finalizer-guard)
  for round in $(seq 1 "$rounds"); do
    for k in 0 1 2; do
      s=${states[$(( (k + round - 1) % 3 ))]}
      state "$s"
      echo "== $writers writers for ${seconds_per_run}s, round $round: $s" >&2
      run override "$writers" "$seconds_per_run"
    done
  done
fi
if grep -q '"level":"WARN"\|WARN' "$work/server.log"; then
  echo "finalizer-guard warned during the runs:" >&2
  grep 'WARN' "$work/server.log" | tail -n 5 >&2
fi

python3 - "$results" "$writes" "$rounds" "$writers" "$seconds_per_run" "$addr" "$transport" > "$report" << 'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
writes, rounds, writers, seconds_per_run, addr, transport = sys.argv[2:8]
STATES = ("finalizer-guard", "floor", "removed")
ALL_STATES = STATES + ("vap", "backstop")
WRITES = ("override", "override-new", "guarded", "label")
def runs(state, write, clients=1):
    return [r for r in rows if r["state"] == state and r["write"] == write and r["clients"] == clients]
def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2
def merged(rs):
    # Percentiles of pooled runs are not derivable from per-run ones: the
    # median over the rounds is shown, each round's own after it.
    fields = ("mean_ms", "p50_ms", "p99_ms", "writes_per_second", "control_plane_cpu_us")
    return {f: median([r[f] for r in rs]) for f in fields}
def events(rs):
    total = {k: sum(r["events"][k] for r in rs) for k in ("sent", "updated", "repeated", "failed")}
    return f"{total['sent']} + {total['updated']} ({total['repeated']} repeats counted, {total['failed']} failed)"
loads = sorted(float(r["load"]) for r in rows)
present = [s for s in ALL_STATES if any(r["state"] == s for r in rows)]
out = [f"Writes per run: {writes} (one client), {rounds} rounds, configurations {', '.join(present)}; medians of the rounds, each round's own figure after them. CPU: kube-apiserver and etcd together, per write (timed and warm-up), from /proc. Load average during the runs: {loads[0]:.1f} to {loads[-1]:.1f}.\n"]
out.append("| write | configuration | writes | webhook calls | mean ms | p50 ms | p99 ms | writes/s | p50 ms of each round | p99 ms of each round | API server + etcd CPU µs per write | Event writes: created + series updates |")
out.append("|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---|")
m = {}
for write in WRITES:
    for state in ALL_STATES:
        rs = runs(state, write)
        if not rs:
            continue
        m[(write, state)] = merged(rs)
        s = m[(write, state)]
        ev = events(rs) if state in ("finalizer-guard", "backstop") and write != "label" else "-"
        out.append(f"| {write} | {state} | {sum(r['writes'] for r in rs)} | {sum(r['webhook_calls'] for r in rs)} | {s['mean_ms']:.2f} | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} | {s['writes_per_second']:.0f} | "
                   + ", ".join(f"{r['p50_ms']:.2f}" for r in rs) + " | " + ", ".join(f"{r['p99_ms']:.2f}" for r in rs) + f" | {s['control_plane_cpu_us']:.0f} | {ev} |")
def spread(xs, fmt):
    xs = [x for x in xs if x is not None]
    return f"{fmt(median(xs))} ({fmt(min(xs))} to {fmt(max(xs))})" if xs else "-"
if all(s in present for s in STATES):
    out.append("")
    out.append("What each webhook adds over no webhook, and finalizer-guard against the floor, paired within each round (the three configurations run back to back): medians of the rounds' figures, their range in brackets. Targets: added p50 at most 1.2x the floor's (goal 1.1x); p99 at most the floor's + 1 ms.\n")
    out.append("| write | added p50 ms, finalizer-guard | added p50 ms, floor | added p50, finalizer-guard / floor | p99 ms, finalizer-guard − floor | added mean ms, finalizer-guard / floor | webhook CPU µs per write, finalizer-guard / floor | added API server + etcd CPU µs per write, finalizer-guard / floor |")
    out.append("|---|---:|---:|---|---|---|---|---|")
    def paired(write, f):
        by_round = {}
        for r in rows:
            if r["write"] == write and r["clients"] == 1:
                by_round.setdefault(r["round"], {})[r["state"]] = r
        return [f(x["finalizer-guard"], x["floor"], x["removed"]) for x in by_round.values() if all(s in x for s in STATES)]
    for write in WRITES:
        if not all((write, s) in m for s in STATES):
            continue
        gp50 = paired(write, lambda g, f, r: g["p50_ms"] - r["p50_ms"])
        fp50 = paired(write, lambda g, f, r: f["p50_ms"] - r["p50_ms"])
        ratio = paired(write, lambda g, f, r: (g["p50_ms"] - r["p50_ms"]) / (f["p50_ms"] - r["p50_ms"]) if f["p50_ms"] > r["p50_ms"] else None)
        p99 = paired(write, lambda g, f, r: g["p99_ms"] - f["p99_ms"])
        mean = paired(write, lambda g, f, r: (g["mean_ms"] - r["mean_ms"], f["mean_ms"] - r["mean_ms"]))
        cpu = paired(write, lambda g, f, r: (g["webhook_cpu_us"], f["webhook_cpu_us"]))
        plane = paired(write, lambda g, f, r: (g["control_plane_cpu_us"] - r["control_plane_cpu_us"], f["control_plane_cpu_us"] - r["control_plane_cpu_us"]))
        two = lambda pairs, f: f"{f(median([a for a, _ in pairs]))} / {f(median([b for _, b in pairs]))}"
        out.append(f"| {write} | {median(gp50):+.2f} | {median(fp50):+.2f} | {spread(ratio, lambda v: f'{v:.2f}x')} | {spread(p99, lambda v: f'{v:+.2f}')} | "
                   f"{two(mean, lambda v: f'{v:+.2f}')} | {two(cpu, lambda v: f'{v:.0f}')} | {two(plane, lambda v: f'{v:+.0f}')} |")
out.append("")
guards = ("finalizer-guard", "vap", "backstop")
if any((w, "vap") in m for w in WRITES):
    out.append("The guard in kube-apiserver against the webhook (docs/security.md, \"Three ways to run the guard\"): what each adds over no guard at all (removed), paired within each round; medians of the rounds, their range in brackets. finalizer-guard: the webhook alone; vap: the ValidatingAdmissionPolicy alone; backstop: both.\n")
    out.append("| write | added p50 ms, webhook | added p50 ms, vap | added p50 ms, backstop | added p99 ms, webhook | added p99 ms, vap | added p99 ms, backstop | added API server + etcd CPU µs per write, webhook / vap / backstop |")
    out.append("|---|---|---|---|---|---|---|---|")
    for write in WRITES:
        by_round = {}
        for r in rows:
            if r["write"] == write and r["clients"] == 1:
                by_round.setdefault(r["round"], {})[r["state"]] = r
        full = [x for x in by_round.values() if all(s in x for s in guards + ("removed",))]
        if not full:
            continue
        added = lambda g, f: [x[g][f] - x["removed"][f] for x in full]
        cells = [spread(added(g, "p50_ms"), lambda v: f"{v:+.2f}") for g in guards]
        cells += [spread(added(g, "p99_ms"), lambda v: f"{v:+.2f}") for g in guards]
        cells.append(" / ".join(f"{median(added(g, 'control_plane_cpu_us')):+.0f}" for g in guards))
        out.append(f"| {write} | " + " | ".join(cells) + " |")
    out.append("")
if writers and not any(r["clients"] == 1 for r in rows):
    out = []
if writers:
    crowd = [r for r in rows if r["clients"] == int(writers) and r["write"] == "override"]
    out.append(f"{writers} writers at once, each stripping a finalizer of its own ConfigMap under an override for {seconds_per_run} s, one after the other; the configurations in turn, the order rotated every round. Latency as each writer saw it. kube-apiserver calls both webhooks at {addr} over {transport}.\n")
    out.append("| round | configuration | writes/s | p50 ms | p99 ms | max ms | writes over 1 s | errors | webhook call ms, mean (API server) | connections to the webhook, median / max | webhook CPU µs per write | API server + etcd CPU µs per write | Event writes: created + series updates |")
    out.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|")
    for r in sorted(crowd, key=lambda r: (r["round"], ("removed", "floor", "finalizer-guard").index(r["state"]))):
        cpu = "-" if r["webhook_cpu_us"] is None else f"{r['webhook_cpu_us']:.0f}"
        ev = events([r]) if r["state"] == "finalizer-guard" else "-"
        call = "-" if r.get("apiserver_call_ms_mean") is None else f"{r['apiserver_call_ms_mean']:.0f}"
        conns = "-" if r.get("connections_max") is None else f"{r['connections_median']} / {r['connections_max']}"
        out.append(f"| {r['round']} | {r['state']} | {r['writes_per_second']:.0f} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['max_ms']:.0f} | {r['over_1s']} | {r['errors']} | {call} | {conns} | {cpu} | {r['control_plane_cpu_us']:.0f} | {ev} |")
    by_round = {}
    for r in crowd:
        by_round.setdefault(r["round"], {})[r["state"]] = r
    full = [x for x in by_round.values() if all(k in x for k in ("removed", "floor", "finalizer-guard"))]
    if full:
        out.append("")
        out.append("What each webhook adds over none, paired within each round: medians of the rounds, their range in brackets.\n")
        out.append("| | finalizer-guard | floor | finalizer-guard / floor |")
        out.append("|---|---|---|---|")
        for f, name in (("p50_ms", "added p50 ms"), ("p99_ms", "added p99 ms"), ("max_ms", "added max ms")):
            g = [x["finalizer-guard"][f] - x["removed"][f] for x in full]
            fl = [x["floor"][f] - x["removed"][f] for x in full]
            ratio = [a / b for a, b in zip(g, fl) if b > 0]
            out.append(f"| {name} | {spread(g, lambda v: f'{v:+.0f}')} | {spread(fl, lambda v: f'{v:+.0f}')} | {spread(ratio, lambda v: f'{v:.2f}x')} |")
        g = [x["finalizer-guard"]["writes_per_second"] / x["removed"]["writes_per_second"] for x in full]
        fl = [x["floor"]["writes_per_second"] / x["removed"]["writes_per_second"] for x in full]
        out.append(f"| writes/s against none | {spread(g, lambda v: f'{v:.2f}x')} | {spread(fl, lambda v: f'{v:.2f}x')} | |")
    out.append("")
more = sorted((r for r in rows if r["write"] == "override" and r["state"] in ("finalizer-guard", "floor") and str(r["clients"]) != writers), key=lambda r: (r["clients"], r["state"]))
if more:
    out.append("| override writes | configuration | clients | writes | webhook calls | writes/s | mean ms | p50 ms | p99 ms | API server's call to the webhook, mean ms | finalizer-guard's decision, mean ms | webhook CPU µs per write | API server + etcd CPU µs per write | Event writes |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    fmt = lambda v: "-" if v is None else f"{v:.3f}"
    for r in more:
        ev = events([r]) if r["state"] == "finalizer-guard" else "-"
        out.append(f"| | {r['state']} | {r['clients']} | {r['writes']} | {r['webhook_calls']} | {r['writes_per_second']:.0f} | {r['mean_ms']:.2f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {fmt(r['apiserver_call_ms_mean'])} | {fmt(r['decide_ms_mean'])} | {r['webhook_cpu_us']:.0f} | {r['control_plane_cpu_us']:.0f} | {ev} |")
print("\n".join(out))
EOF
cat "$report"
echo "(written to $report)" >&2
