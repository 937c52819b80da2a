#!/usr/bin/env bash
# What finalizer-guard costs a cluster, measured through a real API server.
#
# Starts the real control plane (e2e/cluster.sh: etcd, kube-apiserver,
# kube-controller-manager on 127.0.0.1), installs the webhook from
# manifests/ as tests/e2e does (the self-managed overlay, its clientConfig
# pointed at a local `finalizer-guard serve` by url), and times writes with
# examples/cluster_load.rs (kube-rs, one ConfigMap per client, each write
# timed by the client):
#
#   guarded   a merge patch replacing the ConfigMap's one finalizer with a new
#             name: every write removes a finalizer, authorized by a policy
#             rule for the admin user, so every write is allowed, and with
#             the configuration installed every write is sent to the webhook
#   label     a merge patch of a label, finalizers kept: an ordinary UPDATE,
#             which the configuration's matchConditions keep from the webhook
#
# each with the ValidatingWebhookConfiguration installed and removed, in
# alternating rounds; then guarded writes/s with 1 and 10 concurrent clients,
# installed. The webhook's own review counter is read around every run: an
# installed guarded run must have been judged once per write, every other
# run not at all, or the script fails.
#
#   scripts/cluster-cost.sh                    # 1000 writes per run, 2 rounds
#   WRITES=2000 ROUNDS=3 scripts/cluster-cost.sh
#
# Environment: WRITES (1000 per run and per client count), ROUNDS (2),
# CLIENTS ("1 10"), DIR (the cluster's folder; default a new one under
# /tmp, removed at the end), REPORT (the markdown table; default
# $TARGET/cluster-cost.md). The cluster is always stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
writes=${WRITES:-1000}
rounds=${ROUNDS:-2}
clients=${CLIENTS:-"1 10"}

echo "== building (release): finalizer-guard, examples/cluster_load" >&2
cargo build --release --locked --bin finalizer-guard --example cluster_load >&2
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
fg=$target/release/finalizer-guard
load=$target/release/examples/cluster_load
report=${REPORT:-$target/cluster-cost.md}

own_dir=
if [ -z "${DIR:-}" ]; then
  DIR=$(mktemp -d /tmp/finalizer-guard-cost.XXXXXX)
  own_dir=1
fi
dir=$DIR
webhook_pid=
cleanup() {
  if [ -n "$webhook_pid" ]; then
    kill "$webhook_pid" 2> /dev/null || true
    wait "$webhook_pid" 2> /dev/null || true
    rm -f "$dir/run/finalizer-guard.pid"
  fi
  e2e/cluster.sh down "$dir" || true
  if [ -n "$own_dir" ]; then rm -rf "$dir"; fi
}
trap cleanup EXIT

e2e/cluster.sh up "$dir"
kubectl() { "$dir/bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" "$@"; }
free_ports() {
  python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

# The webhook, installed as users install it: certificates for the address
# the API server calls, the self-managed overlay, then only the clientConfig
# changed to a url for the local server.
work=$dir/cost
rm -rf "$work"
mkdir -p "$work"
"$fg" certs --ip 127.0.0.1 --out "$work/certs" > /dev/null
cp -r manifests "$work/manifests"
cp "$work/certs/ca.crt" "$work/certs/tls.crt" "$work/certs/tls.key" "$work/manifests/overlays/self-managed/"
kubectl apply --server-side -k "$work/manifests/overlays/self-managed" > /dev/null
cat > "$work/policy.yaml" << 'EOF'
mode: enforce
rules:
  - name: cost-measurement
    finalizers: ["example.com/*"]
    users: ["admin"]
EOF
# A free port can be taken by someone's outgoing connection before the
# server binds it: a few tries.
for attempt in 1 2 3 4 5; do
  read -r port admin_port < <(free_ports 2)
  "$fg" serve --policy "$work/policy.yaml" \
    --tls-cert "$work/certs/tls.crt" --tls-key "$work/certs/tls.key" \
    --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin_port" \
    --events false --shutdown-delay 0s \
    > "$work/audit.jsonl" 2> "$work/server.log" &
  webhook_pid=$!
  echo "$webhook_pid" > "$dir/run/finalizer-guard.pid"
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$admin_port/readyz" > /dev/null && break
    kill -0 "$webhook_pid" 2> /dev/null || break
    sleep 0.1
  done
  curl -sf "http://127.0.0.1:$admin_port/readyz" > /dev/null && break
  kill "$webhook_pid" 2> /dev/null || true
  wait "$webhook_pid" 2> /dev/null || true
  webhook_pid=
  if [ "$attempt" = 5 ]; then cat "$work/server.log" >&2; exit 1; fi
done
kubectl patch validatingwebhookconfiguration finalizer-guard --type=json -p "[
  {\"op\": \"test\", \"path\": \"/webhooks/0/name\", \"value\": \"finalizers.finalizer-guard.io\"},
  {\"op\": \"remove\", \"path\": \"/webhooks/0/clientConfig/service\"},
  {\"op\": \"add\", \"path\": \"/webhooks/0/clientConfig/url\", \"value\": \"https://127.0.0.1:$port/validate\"}]" > /dev/null
# What `installed` re-creates after `removed` deleted it.
kubectl get validatingwebhookconfiguration finalizer-guard -o json \
  | python3 -c 'import json, sys
c = json.load(sys.stdin)
c["metadata"] = {k: v for k, v in c["metadata"].items() if k in ("name", "labels", "annotations")}
json.dump(c, sys.stdout)' > "$work/webhook-configuration.json"
kubectl create namespace cost > /dev/null

# Reviews the webhook has answered so far.
reviews() {
  curl -sf "http://127.0.0.1:$admin_port/metrics" \
    | awk '/^finalizer_guard_reviews_total\{/ { n += $NF } END { print n + 0 }'
}
# The sum (seconds) and count of histogram $1 in Prometheus text on stdin,
# over its series whose line holds $2 (all when empty).
histogram() {
  awk -v m="$1" -v f="${2:-}" '
    (f == "" || index($0, f)) && index($0, m "_sum") == 1 { s += $NF }
    (f == "" || index($0, f)) && index($0, m "_count") == 1 { c += $NF }
    END { printf "%.9f %d\n", s, c }'
}
# What the webhook spent deciding, and what the API server spent calling it
# (apiserver_admission_webhook_admission_duration_seconds: the whole call,
# as the API server times it).
decided() { curl -sf "http://127.0.0.1:$admin_port/metrics" | histogram finalizer_guard_review_duration_seconds; }
called() {
  kubectl get --raw /metrics \
    | histogram apiserver_admission_webhook_admission_duration_seconds 'name="finalizers.finalizer-guard.io"'
}

# A guarded write of a probe object, untimed, removing the last probe's finalizer.
probes=0
probe() {
  probes=$((probes + 1))
  "$load" --kubeconfig "$dir/admin.kubeconfig" --write guarded --writes 1 --warmup 0 \
    --prefix probe --first "$probes" > /dev/null
}
# state installed|removed: changes the configuration and waits (bounded)
# until the API server acts on it: probes reach the webhook, or stop to.
state() {
  local want=$1 before tries
  if [ "$want" = installed ]; then
    kubectl create -f "$work/webhook-configuration.json" > /dev/null
  else
    kubectl delete validatingwebhookconfiguration finalizer-guard > /dev/null
  fi
  for tries in $(seq 1 100); do
    before=$(reviews)
    probe
    if [ "$want" = installed ] && [ "$(reviews)" -gt "$before" ]; then return 0; fi
    if [ "$want" = removed ] && [ "$(reviews)" -eq "$before" ]; then
      # Twice in a row, so a late call cannot land inside a timed run.
      before=$(reviews); probe
      [ "$(reviews)" -eq "$before" ] && return 0
    fi
    sleep 0.1
  done
  echo "the API server did not act on the configuration being $want" >&2
  exit 1
}

results=$work/results.jsonl
: > "$results"
runs=0
# run STATE WRITE CLIENTS: one timed run, checked against the webhook's counter.
run() {
  local state=$1 write=$2 n=$3 before after calls want out
  local d0 d1 c0 c1
  read -r -a d0 < <(decided)
  read -r -a c0 < <(called)
  before=$(reviews)
  runs=$((runs + 1))
  out=$("$load" --kubeconfig "$dir/admin.kubeconfig" --write "$write" --writes "$((writes / n))" \
    --clients "$n" --prefix "$write-$n" --first "$((runs * 100000))")
  after=$(reviews)
  read -r -a d1 < <(decided)
  read -r -a c1 < <(called)
  calls=$((after - before))
  # Each timed write and each warm-up write once at least: the API server
  # runs admission again when its cached object was stale and the update
  # is retried.
  if [ "$state" = installed ] && [ "$write" = guarded ]; then
    want=$(echo "$out" | python3 -c 'import json, sys; r = json.load(sys.stdin); print(r["writes"] + r["warmup"] * r["clients"])')
    if [ "$calls" -lt "$want" ]; then
      echo "$state $write: the webhook judged $calls writes, want at least $want" >&2
      exit 1
    fi
  elif [ "$calls" -ne 0 ]; then
    echo "$state $write: the webhook judged $calls writes, want none" >&2
    exit 1
  fi
  echo "$out" | python3 -c 'import json, sys
r = json.load(sys.stdin); r["state"] = sys.argv[1]; r["webhook_calls"] = int(sys.argv[2])
d0, d1, c0, c1 = (float(x) for x in sys.argv[3:7])
n = int(float(sys.argv[7]) - float(sys.argv[8]))
r["decide_ms_mean"] = (d1 - d0) * 1000 / r["webhook_calls"] if r["webhook_calls"] else None
r["apiserver_call_ms_mean"] = (c1 - c0) * 1000 / n if n else None
print(json.dumps(r))' "$state" "$calls" "${d0[0]}" "${d1[0]}" "${c0[0]}" "${c1[0]}" "${c1[1]}" "${c0[1]}" | tee -a "$results" >&2
}

current=installed
for round in $(seq 1 "$rounds"); do
  for s in installed removed; do
    if [ "$s" != "$current" ]; then state "$s"; current=$s; fi
    echo "== round $round: $s" >&2
    run "$s" guarded 1
    run "$s" label 1
  done
done
if [ "$current" != installed ]; then state installed; fi
for n in $clients; do
  [ "$n" = 1 ] && continue
  echo "== $n clients: installed" >&2
  run installed guarded "$n"
done

python3 - "$results" "$writes" "$rounds" > "$report" << 'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
writes, rounds = sys.argv[2], sys.argv[3]
def runs(state, write, clients=1):
    return [r for r in rows if r["state"] == state and r["write"] == write and r["clients"] == clients]
def merged(rs):
    # Percentiles of the pooled runs are not derivable from per-run ones:
    # the median run is shown, with the range across runs.
    key = lambda f: sorted(r[f] for r in rs)
    mid = lambda f: key(f)[len(rs) // 2] if len(rs) % 2 else sum(key(f)[len(rs) // 2 - 1:len(rs) // 2 + 1]) / 2
    return {f: mid(f) for f in ("mean_ms", "p50_ms", "p99_ms", "writes_per_second")}, rs
out = []
out.append(f"Writes per run: {writes} (one client), {rounds} rounds alternating installed and removed; medians of the rounds, each round's own figure after the slash list.\n")
out.append("| write | configuration | writes | webhook calls | mean ms | p50 ms | p99 ms | writes/s | p50 ms of each round | p99 ms of each round |")
out.append("|---|---|---:|---:|---:|---:|---:|---:|---|---|")
summary = {}
for write in ("guarded", "label"):
    for state in ("installed", "removed"):
        m, rs = merged(runs(state, write))
        summary[(write, state)] = m
        out.append(f"| {write} | {state} | {sum(r['writes'] for r in rs)} | {sum(r['webhook_calls'] for r in rs)} | {m['mean_ms']:.2f} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} | {m['writes_per_second']:.0f} | "
                   + ", ".join(f"{r['p50_ms']:.2f}" for r in rs) + " | " + ", ".join(f"{r['p99_ms']:.2f}" for r in rs) + " |")
out.append("")
out.append("| write | added mean ms | added p50 ms | added p99 ms |")
out.append("|---|---:|---:|---:|")
for write in ("guarded", "label"):
    i, r = summary[(write, "installed")], summary[(write, "removed")]
    out.append(f"| {write} | {i['mean_ms'] - r['mean_ms']:+.2f} | {i['p50_ms'] - r['p50_ms']:+.2f} | {i['p99_ms'] - r['p99_ms']:+.2f} |")
out.append("")
out.append("| guarded writes, installed | clients | writes | webhook calls | writes/s | mean ms | p50 ms | p99 ms | API server's call to the webhook, mean ms | webhook's decision, mean ms |")
out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
fmt = lambda v: "-" if v is None else f"{v:.3f}"
for r in sorted((r for r in rows if r["state"] == "installed" and r["write"] == "guarded"), key=lambda r: r["clients"]):
    out.append(f"| | {r['clients']} | {r['writes']} | {r['webhook_calls']} | {r['writes_per_second']:.0f} | {r['mean_ms']:.2f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {fmt(r['apiserver_call_ms_mean'])} | {fmt(r['decide_ms_mean'])} |")
print("\n".join(out))
EOF
cat "$report"
echo "(written to $report)" >&2
