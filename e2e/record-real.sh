#!/usr/bin/env bash
# Records the AdmissionReviews a real kube-apiserver sends the webhook during
# the scenarios tests/fixtures/real/ keeps, named as its README says, into a
# folder of that release's own: `cargo test` replays every such folder
# (tests/real.rs).
#
#   e2e/cluster.sh up /tmp/fg-e2e
#   e2e/record-real.sh /tmp/fg-e2e     # writes tests/fixtures/real/v1.37.2/
#   e2e/cluster.sh down /tmp/fg-e2e
#
# The control plane must be fresh: the scenarios run once on it. The
# folder is named by the version kube-apiserver reports; a second
# argument names another. A folder that already exists is left alone (remove
# it first to record again), and nothing is written unless every scenario
# passed: the recordings are gathered in a temporary folder and moved in
# whole at the end.
set -euo pipefail

[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 CLUSTER_DIR [OUT]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
[ -x "$1/bin/kubectl" ] && [ -f "$1/admin.kubeconfig" ] \
  || { echo "record-real: $1 holds no cluster (e2e/cluster.sh up $1)" >&2; exit 2; }
cluster=$(cd "$1" && pwd)
# The scenarios make namespaces and objects of fixed names: they run once
# on a control plane (the harness installs the webhook into DIR/webhook).
if [ -e "$cluster/webhook" ]; then
  echo "record-real: scenarios have run on $cluster already; record on a fresh control plane (e2e/cluster.sh down, remove the folder, up)" >&2
  exit 1
fi

version=$("$cluster/bin/kubectl" --kubeconfig "$cluster/admin.kubeconfig" version -o json \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')
case $version in
  v[0-9]*.[0-9]*.[0-9]*) ;;
  *) echo "record-real: kube-apiserver reports version '$version', not vMAJOR.MINOR.PATCH" >&2; exit 1 ;;
esac
out=${2:-$root/tests/fixtures/real/$version}
if [ -e "$out" ]; then
  echo "record-real: $out exists; remove it to record kube-apiserver $version again" >&2
  exit 1
fi

# prefix, then the scenario of tests/e2e/main.rs whose reviews it names.
scenarios=(
  "dead-node dead_node_pods_are_released_only_with_an_override"
  "configmap-paths a_configmap_finalizer_is_refused_through_every_path"
  "stuck-namespace a_namespace_stuck_on_an_unavailable_apiservice"
  "dry-run dry_run_gets_the_same_answer_and_changes_nothing"
  "builtin kubernetes_controllers_are_never_blocked_when_the_webhook_judges_them"
)

tmp=$(mktemp -d "$(dirname "$out")/.record-real.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for entry in "${scenarios[@]}"; do
  read -r prefix scenario <<< "$entry"
  echo "record-real: $scenario on kube-apiserver $version" >&2
  # Each run installs the webhook afresh, its recordings folder empty.
  (cd "$root" && FG_E2E_DIR="$cluster" cargo test --locked --test e2e -- --ignored --exact "$scenario")
  # The run leaves its webhook server running (cluster.sh down stops only the
  # last one): stop it before the next run starts its own.
  if [ -s "$cluster/run/finalizer-guard.pid" ]; then
    kill "$(cat "$cluster/run/finalizer-guard.pid")" 2>/dev/null || true
    rm -f "$cluster/run/finalizer-guard.pid"
  fi
  # PREFIX-RESOURCE[-SUBRESOURCE]-REQUESTER-DECISION[-dry-run][-N].json, oldest first.
  python3 - "$cluster/webhook/recordings" "$tmp" "$prefix" <<'EOF'
import json, os, re, sys

src, dst, prefix = sys.argv[1:]
def part(s):
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-") or "none"
count = 0
for name in sorted(os.listdir(src)):
    if not name.endswith(".json"):
        continue
    with open(os.path.join(src, name)) as f:
        text = f.read()
    rec = json.loads(text)
    req = rec["review"]["request"]
    user = req["userInfo"]["username"]
    for lead in ("system:serviceaccount:kube-system:", "system:"):
        if user.startswith(lead):
            user = user[len(lead):]
            break
    words = [prefix, req["resource"]["resource"]]
    if req.get("subResource"):
        words.append(req["subResource"])
    words += [user, rec["decision"]]
    if req.get("dryRun"):
        words.append("dry-run")
    base = "-".join(part(w) for w in words)
    path, n = os.path.join(dst, base + ".json"), 1
    while os.path.exists(path):
        n += 1
        path = os.path.join(dst, f"{base}-{n}.json")
    with open(path, "w") as f:
        f.write(text)
    count += 1
if count == 0:
    sys.exit(f"record-real: the scenario recorded nothing in {src}")
print(f"record-real: {count} recordings", file=sys.stderr)
EOF
done
mv "$tmp" "$out"
trap - EXIT
echo "record-real: $(find "$out" -name '*.json' | wc -l) recordings of kube-apiserver $version in $out" >&2
