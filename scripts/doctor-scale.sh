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

if [ -z "${FG_BIN:-}" ]; then
  cargo build --release --locked --quiet
  target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
  FG_BIN=$target/release/finalizer-guard
fi

work=$(mktemp -d)
cluster=${CLUSTER_DIR:-$work/cluster}
cleanup() {
  if [ "${KEEP:-0}" != 1 ]; then e2e/cluster.sh down "$cluster" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
e2e/cluster.sh up "$cluster"
kubectl() { "$cluster/bin/kubectl" --kubeconfig "$cluster/admin.kubeconfig" "$@"; }

echo "== $types CRDs"
for t in $(seq 1 "$types"); do
  cat <<EOF
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things$t.scale.example.com}
spec:
  group: scale.example.com
  scope: Namespaced
  names: {plural: things$t, singular: thing$t, kind: Thing$t}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
EOF
done > "$work/crds.yaml"
kubectl create -f "$work/crds.yaml" > /dev/null
kubectl wait --for=condition=Established --timeout=120s -f "$work/crds.yaml" > /dev/null
for ns in scale-a scale-b scale-c; do kubectl create namespace "$ns" > /dev/null; done

echo "== $((types * per_type)) objects"
python3 - "$work" "$types" "$per_type" <<'EOF'
import json, sys
work, types, per_type = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for t in range(1, types + 1):
    items = []
    for i in range(per_type):
        finalizers = [f"things{t}.scale.example.com/cleanup"]
        if i % 10 == 0:
            finalizers.append("shared.scale.example.com/protect")
        items.append({
            "apiVersion": "scale.example.com/v1", "kind": f"Thing{t}",
            "metadata": {"name": f"thing-{i}", "namespace": ["scale-a", "scale-b", "scale-c"][i % 3],
                         "labels": {"app": "scale", "type": str(t)}, "finalizers": finalizers},
            "spec": {"size": i, "owner": f"team-{i % 7}", "description": "x" * 200},
        })
    with open(f"{work}/things{t}.json", "w") as f:
        json.dump({"apiVersion": "v1", "kind": "List", "items": items}, f)
EOF
start=$(date +%s)
export -f kubectl; export cluster
ls "$work"/things*.json | xargs -P "$loaders" -I{} bash -c 'kubectl create -f "$1" > /dev/null' _ {}
echo "loaded in $(( $(date +%s) - start )) s"
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
