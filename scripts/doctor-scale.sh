#!/usr/bin/env bash
# `doctor --cluster` at scale, on the real control plane (e2e/cluster.sh):
# TYPES CustomResourceDefinitions with PER_TYPE objects each, every object
# carrying its type's finalizer (every tenth a second, shared one), a few of
# them Terminating; then `finalizer-guard doctor --cluster` under
# /usr/bin/time -v: wall time and peak RSS, REPEAT times.
#
#   scripts/doctor-scale.sh                 # 30 types x 700 objects = 21,000
#   TYPES=40 PER_TYPE=1000 scripts/doctor-scale.sh
#
# The objects are created by `kubectl create -f` of List manifests, LOADERS
# at a time. The cluster is started in a temporary folder (or CLUSTER_DIR,
# left up with KEEP=1) and stopped on exit.
#
# Environment: TYPES (30), PER_TYPE (700), LOADERS (4), REPEAT (3),
# FG_BIN (default: a release build of this checkout), CLUSTER_DIR, KEEP.
set -euo pipefail
cd "$(dirname "$0")/.."

types=${TYPES:-30}
per_type=${PER_TYPE:-700}
loaders=${LOADERS:-4}
repeat=${REPEAT:-3}

. scripts/scale.sh
load_things "$types" "$per_type" 10 "$loaders"
# A few Terminating, as in a real cluster.
for t in 1 2 3; do
  kubectl delete "things$t.scale.example.com" thing-1 thing-4 -n scale-b --wait=false > /dev/null
done

echo "== doctor --cluster ($repeat runs)"
for r in $(seq 1 "$repeat"); do
  set +e
  /usr/bin/time -v "$FG_BIN" doctor --cluster --kubeconfig "$cluster/admin.kubeconfig" \
    > "$work/doctor.txt" 2> "$work/time.txt"
  rc=$?
  set -e
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/time.txt")
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time.txt")
  cpu=$(sed -n 's/.*Percent of CPU this job got: //p' "$work/time.txt")
  echo "run $r: exit $rc, wall $wall, peak RSS $((rss / 1024)) MiB ($rss KiB), CPU $cpu"
  test "$rc" -eq 1 || { echo "expected exit 1 (the scale finalizers have no rule)"; cat "$work/doctor.txt" "$work/time.txt"; exit 1; }
done
sed -n '2p' "$work/doctor.txt"
grep -c '^BLOCKED' "$work/doctor.txt" | sed 's/^/blocked finalizers: /'
grep -m2 -E '^BLOCKED (things1\.|shared)' "$work/doctor.txt"
