# Shared by scripts/doctor-scale.sh and scripts/watch-scale.sh: sourced, not
# run. Provides:
#   FG_BIN      a release build of this checkout, unless already set;
#   work        a temporary folder, removed on exit;
#   cluster     the real control plane (e2e/cluster.sh) in $work/cluster, or
#               CLUSTER_DIR (left up with KEEP=1), stopped on exit;
#   kubectl     the cluster's kubectl as its administrator;
#   on_exit     a function the sourcing script may redefine, run first on exit;
#   load_things TYPES PER_TYPE SHARED_EVERY LOADERS
#               TYPES CustomResourceDefinitions things1..TYPES.scale.example.com
#               with PER_TYPE objects each over namespaces scale-a/b/c, each
#               holding its type's finalizer (and every SHARED_EVERY-th a
#               second, shared.scale.example.com/protect; 0: none), created
#               by `kubectl create -f` of List manifests, LOADERS at a time.

if [ -z "${FG_BIN:-}" ]; then
  cargo build --release --locked --quiet
  target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
  FG_BIN=$target/release/finalizer-guard
fi

work=$(mktemp -d)
cluster=${CLUSTER_DIR:-$work/cluster}
on_exit() { :; }
cleanup() {
  on_exit
  if [ "${KEEP:-0}" != 1 ]; then e2e/cluster.sh down "$cluster" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
e2e/cluster.sh up "$cluster"
kubectl() { "$cluster/bin/kubectl" --kubeconfig "$cluster/admin.kubeconfig" "$@"; }

load_things() {
  local types=$1 per_type=$2 shared_every=$3 loaders=$4 t ns start
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
  python3 - "$work" "$types" "$per_type" "$shared_every" <<'EOF'
import json, sys
work, types, per_type, shared_every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for t in range(1, types + 1):
    items = []
    for i in range(per_type):
        finalizers = [f"things{t}.scale.example.com/cleanup"]
        if shared_every and i % shared_every == 0:
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
}
