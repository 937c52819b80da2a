#!/usr/bin/env bash
# End-to-end load, finalizer-guard against the floor of its stack: a minimal
# axum + rustls server (examples/minimal_server.rs: same runtime, TLS, HTTP
# and router; reads the body, answers a fixed review: the very bytes
# finalizer-guard answers to the 3 KiB review), built and run here.
#
# Both serve the same certificates (`finalizer-guard certs`) on loopback;
# apiserver-sim `load` calls them as kube-apiserver does (HTTP/1.1 keep-alive
# over TLS, at most 25 idle connections) with 1, 8 and 25 connections at a
# 3 KiB review, and with one connection at a 2.6 MB review. Reported per run:
# requests/s, p50, p99, server CPU time per request (utime+stime from
# /proc/PID/stat), and per server: start to first answered review, idle RSS,
# peak RSS (VmHWM). Every loop is bounded; every run stops by itself.
#
#   scripts/load.sh                       # 3 x 10 s per row, ~6 minutes in all
#   DURATION=5s REPEAT=1 CONNS="1 8" scripts/load.sh
#
# The machine is shared: before each run the script waits (at most
# QUIET_TIMEOUT seconds, default 120) until other processes leave it idle,
# and reports how busy the whole machine was during each run.
#
# Environment: DURATION (10s), REPEAT (3: runs per row, servers alternating;
# the table shows medians), CONNS ("1 8 25"), FG_BIN (another finalizer-guard
# binary, e.g. a prototype), FG_ARGS (extra `serve` flags), BIG (0: skip the
# 2.6 MB review), SMALL_REVIEW
# (examples/reviews/pod-strip-finalizers.json), BIG_OBJECT_BYTES (1300000:
# object and oldObject, a ~2.6 MB body), PORT_BASE (28440), REPORT (where the
# markdown table is written; default $TARGET/load-report.md), SHARED_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${SHARED_DIR:-../shared}
duration=${DURATION:-10s}
repeat=${REPEAT:-3}
conns=${CONNS:-"1 8 25"}
small=${SMALL_REVIEW:-examples/reviews/pod-strip-finalizers.json}
big_object_bytes=${BIG_OBJECT_BYTES:-1300000}
port_base=${PORT_BASE:-28440}
server_name=finalizer-guard.finalizer-guard.svc

echo "== building (release): finalizer-guard, examples/minimal_server, examples/gen_review" >&2
cargo build --release --locked --bin finalizer-guard --example minimal_server --example gen_review >&2
. scripts/common.sh
fg=${FG_BIN:-$target/release/finalizer-guard}
minimal=$target/release/examples/minimal_server
report=${REPORT:-$target/load-report.md}

make_certs "$fg"
ca=$work/certs/ca.crt
"$target/release/examples/gen_review" "$big_object_bytes" 2 > "$work/big.json"
# apiserver-sim sends the review compacted; these are the sizes on the wire.
wire_bytes() { python3 -c 'import json,sys; print(len(json.dumps(json.load(open(sys.argv[1])), separators=(",", ":"))))' "$1"; }
small_bytes=$(wire_bytes "$small")
big_bytes=$(wire_bytes "$work/big.json")
clk_tck=$(getconf CLK_TCK)

now_ns() { date +%s%N; }
# Busy and total jiffies of the whole machine, from /proc/stat.
machine_jiffies() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }
# Waits (bounded) until the machine is below 15% busy for a second.
quiet() {
  local waited=0 b0 t0 b1 t1
  while [ "$waited" -lt "${QUIET_TIMEOUT:-120}" ]; do
    read -r b0 t0 < <(machine_jiffies)
    sleep 1
    read -r b1 t1 < <(machine_jiffies)
    [ $(((b1 - b0) * 100)) -lt $(((t1 - t0) * 15)) ] && return 0
    waited=$((waited + 1))
  done
  echo "the machine is still busy after ${waited}s; measuring anyway" >&2
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
# One review with curl; prints the HTTP status (000 when nothing answered).
post_once() {
  curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$ca" \
    --resolve "$server_name:$1:127.0.0.1" -H 'content-type: application/json' \
    --data-binary @"$small" "https://$server_name:$1/validate" || true
}
# Go's time.Duration text (812.5µs, 2.3ms, 1.2s) in milliseconds.
go_ms() {
  awk -v d="$1" 'BEGIN {
    v = d; gsub(/[^0-9.]/, "", v)
    if (d ~ /ms$/) print v + 0
    else if (d ~ /ns$/) print v / 1e6
    else if (d ~ /^[0-9.]+s$/) print v * 1000
    else if (d ~ /m/) { split(d, p, "m"); s = p[2]; gsub(/[^0-9.]/, "", s); print p[1] * 60000 + s * 1000 }
    else print v / 1000
  }'
}
calc() { awk "BEGIN { printf \"%.${2:-2}f\", $1 }"; }

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

declare -A pid_of port_of start_ms idle_kib curl_ms
# start NAME PORT CMD...: starts a server and times exec to first answered
# review, REPEAT times (all but the last are stopped again); the median counts.
start() {
  local name=$1 port=$2
  shift 2
  local t0 t1 code tries i times=() pid
  for i in $(seq 1 "$repeat"); do
    quiet
    code=000 tries=0
    t0=$(now_ns)
    "$@" > "$work/$name.out" 2> "$work/$name.err" &
    pid=$!
    pids+=("$pid")
    while [ "$code" != 200 ] && [ "$tries" -lt 1000 ]; do
      code=$(post_once "$port")
      tries=$((tries + 1))
    done
    t1=$(now_ns)
    if [ "$code" != 200 ]; then
      echo "$name did not answer a review after $tries tries:" >&2
      cat "$work/$name.err" >&2
      exit 1
    fi
    times+=("$(calc "($t1 - $t0) / 1e6" 1)")
    if [ "$i" -lt "$repeat" ]; then
      kill "$pid"
      wait "$pid" 2> /dev/null || true
    fi
  done
  pid_of[$name]=$pid
  port_of[$name]=$port
  start_ms[$name]=$(median "${times[@]}")
  echo "$name: start to first answered review ${times[*]} ms" >&2
  # What one curl review costs on its own (process start, handshake, request):
  # the start time above includes one of these.
  t0=$(now_ns)
  post_once "$port" > /dev/null
  curl_ms[$name]=$(calc "($(now_ns) - $t0) / 1e6" 1)
  sleep 1
  idle_kib[$name]=$(status_kib "$pid" VmRSS)
}

# shellcheck disable=SC2086 # FG_ARGS is a list of flags
start finalizer-guard "$port_base" "$fg" serve --tls-cert "$work/certs/tls.crt" --tls-key "$work/certs/tls.key" \
  --listen "127.0.0.1:$port_base" --admin-listen "127.0.0.1:$((port_base + 2))" --shutdown-delay 0s ${FG_ARGS:-}
# The minimal server answers what finalizer-guard answers to the 3 KiB review
# (a denial with its message and audit annotations): the same bytes on the wire.
curl -s -o "$work/answer.json" --cacert "$ca" --resolve "$server_name:$port_base:127.0.0.1" \
  -H 'content-type: application/json' --data-binary @"$small" "https://$server_name:$port_base/validate"
start minimal "$((port_base + 1))" "$minimal" "127.0.0.1:$((port_base + 1))" "$work/certs/tls.crt" "$work/certs/tls.key" "$work/answer.json"

# Every run's figures, space-separated, by SERVER/REVIEW/CONNECTIONS.
declare -A all_requests all_errors all_rps all_p50 all_p99 all_cpu all_busy
# run NAME LABEL REVIEW C: one bounded apiserver-sim load run.
run() {
  local name=$1 label=$2 review=$3 c=$4 pid=${pid_of[$1]} before after out b0 t0 b1 t1
  quiet
  read -r b0 t0 < <(machine_jiffies)
  before=$(cpu_ticks "$pid")
  out=$("$sim" load -url "https://127.0.0.1:${port_of[$name]}/validate" -ca "$ca" \
    -server-name "$server_name" -review "$review" -c "$c" -d "$duration")
  after=$(cpu_ticks "$pid")
  read -r b1 t1 < <(machine_jiffies)
  echo "$name $label c=$c: $out" >&2
  local requests key=$name/$label/$c
  requests=$(sed -n 's/.*requests=\([0-9]*\).*/\1/p' <<< "$out")
  all_requests[$key]+=" $requests"
  all_errors[$key]+=" $(sed -n 's/.*errors=\([0-9]*\).*/\1/p' <<< "$out")"
  all_rps[$key]+=" $(sed -n 's/.*rps=\([0-9]*\).*/\1/p' <<< "$out")"
  all_p50[$key]+=" $(go_ms "$(sed -n 's/.* p50=\([^ ]*\).*/\1/p' <<< "$out")")"
  all_p99[$key]+=" $(go_ms "$(sed -n 's/.* p99=\([^ ]*\).*/\1/p' <<< "$out")")"
  all_cpu[$key]+=" $(calc "($after - $before) / $clk_tck * 1e6 / ($requests > 0 ? $requests : 1)" 0)"
  all_busy[$key]+=" $(calc "($b1 - $b0) * 100 / ($t1 - $t0)" 0)"
}

# Minimal and finalizer-guard alternate, so both see the same machine.
scenarios=()
for c in $conns; do scenarios+=("small $small $c"); done
[ "${BIG:-1}" = 0 ] || scenarios+=("big $work/big.json 1")
for i in $(seq 1 "$repeat"); do
  for scenario in "${scenarios[@]}"; do
    read -r label review c <<< "$scenario"
    for name in minimal finalizer-guard; do run "$name" "$label" "$review" "$c"; done
  done
done

declare -A rps p99
rows=()
for scenario in "${scenarios[@]}"; do
  read -r label review c <<< "$scenario"
  shown="3 KiB ($small_bytes B)"
  [ "$label" = big ] && shown="2.6 MB ($big_bytes B)"
  for name in minimal finalizer-guard; do
    key=$name/$label/$c
    # shellcheck disable=SC2086 # word splitting wanted: the runs' figures
    {
      rps[$key]=$(median ${all_rps[$key]})
      p99[$key]=$(median ${all_p99[$key]})
      errors=$(awk '{ for (i = 1; i <= NF; i++) s += $i } END { print s + 0 }' <<< "${all_errors[$key]}")
      rows+=("| $name | $shown | $c | $(median ${all_requests[$key]}) | $errors | ${rps[$key]} | $(calc "$(median ${all_p50[$key]})" 3) | $(calc "${p99[$key]}" 3) | $(median ${all_cpu[$key]}) | $(median ${all_busy[$key]})% | $(sed 's/^ //; s/ /, /g' <<< "${all_rps[$key]}") |")
    }
  done
done

{
  echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores: $repeat runs of $duration per row, alternating servers; medians (errors: the sum). Client and servers share the machine. Both servers answer $(wc -c < "$work/answer.json") bytes."
  echo
  echo "| server | review | connections | requests | errors | requests/s | p50 ms | p99 ms | server CPU µs/request | machine busy | requests/s of each run |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "| server | start to first answered review (median of $repeat) | of which one curl review | idle RSS | peak RSS (VmHWM) |"
  echo "|---|---:|---:|---:|---:|"
  for name in minimal finalizer-guard; do
    echo "| $name | ${start_ms[$name]} ms | ${curl_ms[$name]} ms | $(calc "${idle_kib[$name]} / 1024" 1) MiB | $(calc "$(status_kib "${pid_of[$name]}" VmHWM) / 1024" 1) MiB |"
  done
  echo
  echo "| target | measured | |"
  echo "|---|---:|---|"
  verdict() { awk "BEGIN { print ($1) ? \"met\" : \"not met\" }"; }
  for c in $conns; do
    ratio=$(calc "${rps[finalizer-guard/small/$c]} / ${rps[minimal/small/$c]}")
    echo "| requests/s >= 0.85x minimal, 3 KiB, $c conn | ${ratio}x | $(verdict "$ratio >= 0.85") |"
    ratio=$(calc "${p99[finalizer-guard/small/$c]} / ${p99[minimal/small/$c]}")
    echo "| p99 <= 1.25x minimal, 3 KiB, $c conn | ${ratio}x | $(verdict "$ratio <= 1.25") |"
  done
  if [ "${BIG:-1}" != 0 ]; then
    q=${p99[finalizer-guard/big/1]}
    echo "| 2.6 MB review p99 < 25 ms, 1 conn | $(calc "$q" 2) ms | $(verdict "$q < 25") |"
  fi
  idle=$(calc "${idle_kib[finalizer-guard]} / 1024" 1)
  echo "| idle RSS <= 15 MiB | $idle MiB | $(verdict "$idle <= 15") |"
  echo "| start to first answered review <= 100 ms | ${start_ms[finalizer-guard]} ms | $(verdict "${start_ms[finalizer-guard]} <= 100") |"
} > "$work/report.md"
cp "$work/report.md" "$report"
cat "$report"
echo >&2
echo "(written to $report)" >&2
