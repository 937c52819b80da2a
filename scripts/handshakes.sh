#!/usr/bin/env bash
# What one call costs the webhook's CPU when every call brings a TLS
# handshake, beside the floor (examples/minimal_server.rs `echo-uid`: the
# same runtime, TLS and HTTP stack, no review). kube-apiserver calls a
# service-referenced webhook over HTTP/1.1 and keeps few idle connections:
# with hundreds of calls in flight (docs/performance.md, "500 writers at
# once") most calls open a connection of their own. e2e/churn calls as
# its Go client does; each server's CPU time (/proc) is divided by the
# calls it answered. The servers take turns, ROUNDS times; the machine
# should be otherwise idle.
#
#   scripts/handshakes.sh                                 # this tree, glibc release build
#   FG_BINS="old/finalizer-guard new/finalizer-guard" scripts/handshakes.sh
#   CONN=h2 CALLERS=200 scripts/handshakes.sh            # HTTP/2, no handshakes
#
# Environment: FG_BINS (finalizer-guard binaries, space-separated; default a
# release build of this tree), CONN (new: a connection per call, default;
# keep: HTTP/1.1 keep-alive; h2), CALLERS (32), SECONDS_PER_RUN (10),
# ROUNDS (3), REVIEW (the reviewed request, default the 1.2 KB ConfigMap
# override examples/load/configmap-override.json, recorded from
# scripts/cluster-cost.sh's writes), PORT (8443).
set -euo pipefail
cd "$(dirname "$0")/.."
conn=${CONN:-new}
callers=${CALLERS:-32}
seconds=${SECONDS_PER_RUN:-10}
rounds=${ROUNDS:-3}
review=${REVIEW:-examples/load/configmap-override.json}
port=${PORT:-8443}
target=${CARGO_TARGET_DIR:-target}
work=$(mktemp -d /tmp/finalizer-guard-handshakes.XXXXXX)
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2> /dev/null && wait "$server" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT

echo "== building: finalizer-guard (unless FG_BINS), examples/minimal_server, e2e/churn" >&2
if [ -z "${FG_BINS:-}" ]; then
  cargo build --release --locked >&2
  fg_bins=$target/release/finalizer-guard
else
  fg_bins=$FG_BINS
fi
cargo build --release --locked --example minimal_server >&2
floor=$target/release/examples/minimal_server
(cd e2e && CGO_ENABLED=0 go build -mod=readonly -trimpath -o "$work/churn" ./churn)

first_bin=${fg_bins%% *}
"$first_bin" certs --ip 127.0.0.1 --out "$work/certs" > /dev/null
clk_tck=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
churn() {
  "$work/churn" -url "https://127.0.0.1:$port/validate" -ca "$work/certs/ca.crt" \
    -server-name finalizer-guard -review "$review" -c "$callers" -conn "$conn" -d "$1"
}

# measure LABEL CMD...: starts the server, warms it, times one run.
measure() {
  local label=$1 t0 t1 out answered failed
  shift
  "$@" > /dev/null 2> "$work/server.log" &
  server=$!
  for _ in $(seq 1 100); do
    curl -sf -o /dev/null --cacert "$work/certs/ca.crt" --resolve "finalizer-guard:$port:127.0.0.1" \
      -H 'content-type: application/json' --data-binary @"$review" "https://finalizer-guard:$port/validate" && break
    sleep 0.1
  done
  churn 2s > /dev/null
  t0=$(cpu_ticks "$server")
  out=$(churn "${seconds}s")
  t1=$(cpu_ticks "$server")
  kill "$server"
  wait "$server" 2> /dev/null || true
  server=
  answered=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["answered"])' "$out")
  failed=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["failed"])' "$out")
  if [ "$failed" != 0 ] || [ "$answered" = 0 ]; then
    echo "$label: $out" >&2
    cat "$work/server.log" >&2
    exit 1
  fi
  printf '| %s | %s | %s | %.0f | %.1f |\n' "$round" "$label" "$answered" \
    "$(awk -v n="$answered" -v s="$seconds" 'BEGIN { print n / s }')" \
    "$(awk -v a="$t0" -v b="$t1" -v t="$clk_tck" -v n="$answered" 'BEGIN { print (b - a) / t * 1e6 / n }')"
}

echo "Calls from $callers callers for ${seconds}s each, connections: $conn; server CPU per call (user + system)."
echo
echo "| round | server | calls | calls/s | CPU µs per call |"
echo "|---:|---|---:|---:|---:|"
for round in $(seq 1 "$rounds"); do
  for bin in $fg_bins; do
    measure "$bin" "$bin" serve --policy examples/load/policy.yaml --tls-cert "$work/certs/tls.crt" \
      --tls-key "$work/certs/tls.key" --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:0" \
      --shutdown-delay 0s
  done
  measure floor "$floor" "127.0.0.1:$port" "$work/certs/tls.crt" "$work/certs/tls.key" echo-uid
done
