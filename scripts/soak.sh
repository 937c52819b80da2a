#!/usr/bin/env bash
# Bounded soak: at least REVIEWS (1,000,000) reviews through apiserver-sim
# `load` (HTTP/1.1 keep-alive over TLS, CONNS connections) against the release
# binary on loopback, in CHUNK-long runs, sampling the server's RSS every
# SAMPLE seconds. Passes when no request failed and RSS after warm-up stays
# within 10% of its value after the first chunk. Stops by itself after
# MAX_TIME seconds whatever the count.
#
#   scripts/soak.sh                      # ~2 minutes on 2 cores
#   REVIEWS=200000 scripts/soak.sh
#
# Environment: REVIEWS (1000000), CONNS (8), CHUNK (20s, in seconds), SAMPLE (5),
# MAX_TIME (900), REVIEW (examples/reviews/pod-strip-finalizers.json: a
# denial, so every review is judged, audited and counted), PORT_BASE (28450),
# SHARED_DIR. The server's audit records and logs go to /dev/null: a million
# of them is more than a gigabyte.
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${SHARED_DIR:-../shared}
reviews=${REVIEWS:-1000000}
conns=${CONNS:-8}
chunk=${CHUNK:-20s}
sample=${SAMPLE:-5}
max_time=${MAX_TIME:-900}
review=${REVIEW:-examples/reviews/pod-strip-finalizers.json}
port=${PORT_BASE:-28450}
server_name=finalizer-guard.finalizer-guard.svc

cargo build --release --locked --bin finalizer-guard >&2
. scripts/common.sh
fg=$target/release/finalizer-guard

make_certs "$fg"
"$fg" serve --tls-cert "$work/certs/tls.crt" --tls-key "$work/certs/tls.key" \
  --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$((port + 1))" --shutdown-delay 0s \
  > /dev/null 2>&1 &
server=$!
pids+=("$server")
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$((port + 1))/readyz" > /dev/null 2>&1 && break
  sleep 0.1
done
rss_kib() { awk '$1 == "VmRSS:" {print $2}' "/proc/$server/status"; }

# RSS sampler: bounded by count, stopped at the end.
started=$(date +%s)
(
  for _ in $(seq 1 $((max_time / sample + 2))); do
    echo "$(($(date +%s) - started)) $(rss_kib)"
    sleep "$sample"
  done
) > "$work/rss.txt" &
pids+=($!)

total=0
errors=0
chunks=0
baseline=
while [ "$total" -lt "$reviews" ] && [ $(($(date +%s) - started)) -lt "$max_time" ]; do
  out=$("$sim" load -url "https://127.0.0.1:$port/validate" -ca "$work/certs/ca.crt" \
    -server-name "$server_name" -review "$review" -c "$conns" -d "$chunk")
  chunks=$((chunks + 1))
  total=$((total + $(sed -n 's/.*requests=\([0-9]*\).*/\1/p' <<< "$out")))
  errors=$((errors + $(sed -n 's/.*errors=\([0-9]*\).*/\1/p' <<< "$out")))
  rss=$(rss_kib)
  [ -n "$baseline" ] || baseline=$rss
  echo "chunk $chunks: $out; total $total, RSS $rss KiB" >&2
done
elapsed=$(($(date +%s) - started))
final=$(rss_kib)
hwm=$(awk '$1 == "VmHWM:" {print $2}' "/proc/$server/status")
# Samples after the first chunk (warm-up): CHUNK is in seconds, like 20s.
read -r min max < <(awk -v t="${chunk%s}" \
  '$1 >= t && $2 != "" { if (min == "" || $2 < min) min = $2; if ($2 > max) max = $2 } END { print min, max }' "$work/rss.txt")
samples=$(wc -l < "$work/rss.txt")
growth=$(awk -v m="$max" -v b="$baseline" 'BEGIN { printf "%.1f", (m - b) * 100 / b }')
flat=$(awk -v m="$max" -v b="$baseline" 'BEGIN { print (m <= b * 1.10) ? "yes" : "no" }')

echo
echo "| reviews | errors | connections | seconds | RSS after first chunk | RSS min / max after warm-up | RSS at end | peak RSS (VmHWM) | samples | max growth | flat within 10% |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
mib() { awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }
echo "| $total | $errors | $conns | $elapsed | $(mib "$baseline") | $(mib "$min") / $(mib "$max") | $(mib "$final") | $(mib "$hwm") | $samples | $growth% | $flat |"
if [ "$total" -ge "$reviews" ] && [ "$errors" -eq 0 ] && [ "$flat" = yes ]; then
  echo "soak: passed"
else
  echo "soak: FAILED (want >= $reviews reviews, 0 errors, RSS flat within 10%)"
  exit 1
fi
