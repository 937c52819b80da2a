#!/usr/bin/env bash
# `watch` at scale, on the real control plane (e2e/cluster.sh): TYPES
# CustomResourceDefinitions with PER_TYPE objects each, every object carrying
# its type's finalizer, none Terminating; then `finalizer-guard watch`
# (release build, --stuck-after STUCK_AFTER) starts, and the script measures:
#
#   1. start to ready (every type listed once), and RSS then;
#   2. deletion to gauge: SINGLE objects deleted one at a time, the time from
#      `kubectl delete` returning to finalizer_guard_stuck_objects counting
#      each (polled every 50 ms);
#   3. STUCK objects (SINGLE included) deleted at once, LOADERS kubectl at a
#      time: the time until the gauges count them all, and until each has had
#      its FinalizerStuck Event;
#   4. a steady PERIOD after that: RSS every 10 s, CPU time, and the LIST and
#      WATCH requests kube-apiserver served for the scale types, read from
#      its apiserver_request_total before and after (e2e/cluster.sh's audit
#      policy records writes only, so the audit log cannot count reads).
#
#   scripts/watch-scale.sh                          # 30 types x 3,334 = 100,020 objects, 1,000 stuck
#   TYPES=10 PER_TYPE=1000 STUCK=100 PERIOD=60 scripts/watch-scale.sh
#
# The objects are created by `kubectl create -f` of List manifests, LOADERS
# at a time. The cluster is started in a temporary folder (or CLUSTER_DIR,
# left up with KEEP=1) and stopped on exit, `watch` with it.
#
# Environment: TYPES (30), PER_TYPE (3334), STUCK (1000), SINGLE (10),
# STUCK_AFTER (0s: the figures are the watch's own latency), PERIOD (600
# seconds), LOADERS (4), MAX_RSS_MIB (64: the steady RSS it must stay
# under, else exit 1, as for any LIST in the steady period), FG_BIN (default: a release build of this
# checkout), CLUSTER_DIR, KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."

types=${TYPES:-30}
per_type=${PER_TYPE:-3334}
stuck=${STUCK:-1000}
single=${SINGLE:-10}
stuck_after=${STUCK_AFTER:-0s}
period=${PERIOD:-600}
loaders=${LOADERS:-4}
[ "$single" -le "$types" ] || { echo "SINGLE must be at most TYPES"; exit 2; }
[ "$stuck" -ge "$single" ] || { echo "STUCK must be at least SINGLE"; exit 2; }
[ $(( (stuck + types - 1) / types + 1 )) -le "$per_type" ] || { echo "STUCK is too many for TYPES x PER_TYPE"; exit 2; }

. scripts/scale.sh
watch_pid=
on_exit() {
  if [ -n "$watch_pid" ]; then kill "$watch_pid" 2>/dev/null || true; wait "$watch_pid" 2>/dev/null || true; fi
}
now_ms() { date +%s%3N; }
load_things "$types" "$per_type" 0 "$loaders"

# apiserver_request_total for the scale types, by verb: "LIST WATCH".
requests() {
  kubectl get --raw /metrics | awk '
    /^apiserver_request_total\{/ && /group="scale.example.com"/ {
      if ($0 ~ /verb="LIST"/) l += $NF; else if ($0 ~ /verb="WATCH"/) w += $NF
    }
    END { printf "%d %d\n", l, w }'
}
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
metrics() { curl -fsS "http://127.0.0.1:$port/metrics" 2>/dev/null || true; }
# The scale types' stuck objects, summed over finalizers.
stuck_now() { metrics | awk '/^finalizer_guard_stuck_objects\{/ && /scale\.example\.com"/ { n += $NF } END { printf "%d\n", n }'; }
events_total() { metrics | awk -v d="$1" '$0 ~ "^finalizer_guard_events_total\\{decision=\"" d "\"\\}" { n = $NF } END { printf "%d\n", n }'; }
events_sent() { events_total sent; }
rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$watch_pid/status"; }
hwm_kib() { awk '/^VmHWM/ { print $2 }' "/proc/$watch_pid/status"; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$watch_pid/stat"; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
# wait_for COUNT OP VALUE SECONDS POLL: until the number COUNT prints is OP
# (-gt, -ge) VALUE, asking every POLL seconds; past SECONDS, says what it
# reached and exits 1.
wait_for() {
  local deadline=$(( $(now_ms) + $4 * 1000 ))
  until [ "$("$1")" "$2" "$3" ]; do
    [ "$(now_ms)" -lt "$deadline" ] || { echo "$1 at $("$1") after $4 s, waiting for $2 $3"; exit 1; }
    sleep "$5"
  done
}

echo "== watch --stuck-after $stuck_after"
read -r lists_before watches_before < <(requests)
started=$(now_ms)
"$FG_BIN" watch --kubeconfig "$cluster/admin.kubeconfig" --stuck-after "$stuck_after" \
  --admin-listen "127.0.0.1:$port" --log-format json 2> "$work/watch.log" &
watch_pid=$!
until curl -fsS "http://127.0.0.1:$port/readyz" > /dev/null 2>&1; do
  kill -0 "$watch_pid" 2>/dev/null || { echo "watch exited"; cat "$work/watch.log"; exit 1; }
  sleep 0.1
done
ready=$(now_ms)
read -r lists_ready watches_ready < <(requests)
types_watched=$(metrics | awk '/^finalizer_guard_watched_types / { print $NF }')
echo "ready in $(( ready - started )) ms, $types_watched types; RSS $(mib "$(rss_kib)") MiB, peak $(mib "$(hwm_kib)") MiB; first lists: $((lists_ready - lists_before)) LIST requests for the scale types"

# Which objects: n_t per type, the first SINGLE types' last object deleted alone.
per() { echo $(( stuck / types + ($1 <= stuck % types ? 1 : 0) )); }
echo "== deletion to gauge, $single objects one at a time"
latencies=()
for t in $(seq 1 "$single"); do
  i=$(( per_type - 1 )); ns=(scale-a scale-b scale-c); ns=${ns[$((i % 3))]}
  before=$(stuck_now)
  kubectl delete "things$t.scale.example.com" "thing-$i" -n "$ns" --wait=false > /dev/null
  deleted=$(now_ms)
  wait_for stuck_now -gt "$before" 60 0.05
  latencies+=($(( $(now_ms) - deleted )))
done
printf '%s\n' "${latencies[@]}" | sort -n > "$work/latencies"
echo "deletion to gauge (ms): $(tr '\n' ' ' < "$work/latencies")"
echo "  median $(sed -n "$(( (single + 1) / 2 ))p" "$work/latencies") ms, max $(tail -n 1 "$work/latencies") ms"

echo "== $((stuck - single)) more deleted at once ($stuck stuck in all)"
rss_before=$(rss_kib)
for t in $(seq 1 "$types"); do
  n=$(per "$t"); [ "$t" -le "$single" ] && n=$(( n - 1 ))
  for i in $(seq 0 $(( n - 1 ))); do
    ns=(scale-a scale-b scale-c); echo "$t ${ns[$((i % 3))]} thing-$i"
  done
done | awk '{ k = $1 " " $2; a[k] = a[k] " " $3 } END { for (k in a) print k a[k] }' > "$work/deletes"
bulk=$(now_ms)
xargs -P "$loaders" -L 1 bash -c 'kubectl delete "things$0.scale.example.com" -n "$1" "${@:2}" --wait=false > /dev/null' < "$work/deletes"
bulk_deleted=$(now_ms)
wait_for stuck_now -ge "$stuck" 120 0.1
counted=$(now_ms)
wait_for events_sent -ge "$stuck" 600 0.5
announced=$(now_ms)
echo "deletes took $(( bulk_deleted - bulk )) ms; all $stuck counted $(( counted - bulk_deleted )) ms after the last delete returned; every Event written $(( announced - bulk_deleted )) ms after it"
echo "RSS before the deletions $(mib "$rss_before") MiB, with $stuck stuck $(mib "$(rss_kib)") MiB"

echo "== steady, $period s"
read -r lists_0 watches_0 < <(requests)
cpu_0=$(cpu_ticks); hz=$(getconf CLK_TCK)
samples=()
for _ in $(seq 1 $(( period / 10 ))); do
  sleep 10
  samples+=("$(rss_kib)")
done
read -r lists_1 watches_1 < <(requests)
cpu_1=$(cpu_ticks)
rss_list=$(for s in "${samples[@]}"; do printf '%s ' "$(mib "$s")"; done)
echo "RSS every 10 s (MiB): $rss_list"
echo "RSS first $(mib "${samples[0]}") MiB, last $(mib "${samples[-1]}") MiB, peak over the whole run $(mib "$(hwm_kib)") MiB"
echo "CPU over the period: $(( (cpu_1 - cpu_0) * 1000 / hz )) ms"
echo "scale types, over the period: $((lists_1 - lists_0)) LIST, $((watches_1 - watches_0)) WATCH requests (all clients: watch, and kube-controller-manager's metadata informers)"
echo "still counted: $(stuck_now) stuck; Events sent $(events_sent), failed $(events_total failed)"
echo "watch log: $(grep -c '"stuck"' "$work/watch.log") stuck lines, $(grep -c '"WARN"' "$work/watch.log") warnings"
grep '"WARN"' "$work/watch.log" | grep -v '"stuck"' | head -5 || true

# What the issue asks of it: steady memory under MAX_RSS_MIB, and no relist.
max_rss_mib=${MAX_RSS_MIB:-64}
if [ "$(mib "${samples[-1]}" | cut -d. -f1)" -ge "$max_rss_mib" ]; then
  echo "FAIL: steady RSS $(mib "${samples[-1]}") MiB, not under $max_rss_mib MiB"; exit 1
fi
if [ $((lists_1 - lists_0)) -ne 0 ]; then
  echo "FAIL: $((lists_1 - lists_0)) LIST requests for the scale types in the steady period: a relist"; exit 1
fi
echo "steady RSS under $max_rss_mib MiB, no LIST in the steady period"
