#!/usr/bin/env bash
# manifests/ from the Helm chart: one source for both ways to install.
#
#   scripts/render-manifests.sh          rewrite manifests/ in this checkout
#   scripts/render-manifests.sh DIR      write the same tree under DIR (a test
#                                        compares it with what is committed)
#
# `helm template` of charts/finalizer-guard as release `finalizer-guard` in
# namespace `finalizer-guard` (the names manifests/ has always had), with
# `certificates.source=external` (no certificate: the overlays bring one)
# and `policyCheck.enabled=false` (a Helm hook means nothing to kubectl):
#   base/*.yaml                        one file per chart template, and the
#                                      kustomization.yaml listing them
#   overlays/cert-manager/certificates.yaml
#                                      the chart's cert-manager objects
#   vap/validatingadmissionpolicy.yaml the chart's backstop (backstop.yaml) for
#                                      base/configmap.yaml's policy: its
#                                      `finalizer-guard policy export --vap`,
#                                      proven so by `policy validate --vap`
# What stays by hand: base/namespace.yaml (the chart installs into a
# namespace, it makes none), the overlays' kustomization.yaml files, and
# those of vap/ and components/backstop/.
#
# Helm's bookkeeping labels (app.kubernetes.io/instance, version,
# managed-by, helm.sh/chart) are left out: these objects are no Helm
# release, and a Deployment's selector can never change, so it stays the
# one manifests/ shipped before they were rendered.
#
# Helm: FG_HELM, else the one e2e/helm/build.sh builds and caches.
# finalizer-guard: FG_BIN, else this checkout's, built with cargo.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/manifests}
helm=${FG_HELM:-$("$root/e2e/helm/build.sh")}
bin=${FG_BIN:-}
if [ -z "$bin" ]; then
  cargo build --quiet --locked --manifest-path "$root/Cargo.toml" --bin finalizer-guard
  bin=$root/target/debug/finalizer-guard
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# No user configuration or repositories take part.
export HELM_CONFIG_HOME="$work/config" HELM_CACHE_HOME="$work/cache" HELM_DATA_HOME="$work/data"

render() { # render [HELM ARGS...]
  "$helm" template finalizer-guard "$root/charts/finalizer-guard" --namespace finalizer-guard \
    --set policyCheck.enabled=false "$@"
}

# keep TEMPLATE FILE: one rendered template, without Helm's labels, under a
# header saying where it comes from.
keep() {
  local template=$1 file=$2
  {
    echo "# Rendered from charts/finalizer-guard/templates/$template by"
    echo "# scripts/render-manifests.sh. Do not edit: change the chart and run the"
    echo "# script (tests/manifests/helm.rs fails when the two differ)."
    grep -vE '^[[:space:]]+(app\.kubernetes\.io/(instance|version|managed-by)|helm\.sh/chart):' \
      "$work/$template"
  } > "$file"
}

render --set certificates.source=external --output-dir "$work/base" > /dev/null
mkdir -p "$out/base" "$out/overlays/cert-manager"
find "$out/base" -maxdepth 1 -name '*.yaml' ! -name namespace.yaml -delete
resources=(namespace.yaml)
for path in "$work/base/finalizer-guard/templates/"*.yaml; do
  name=$(basename "$path")
  mv "$path" "$work/$name"
  keep "$name" "$out/base/$name"
  resources+=("$name")
done
{
  cat <<'EOF'
# finalizer-guard: the kustomize base, everything but the serving certificate.
# Written by scripts/render-manifests.sh from charts/finalizer-guard (all but
# namespace.yaml, which is kept by hand). Install it through an overlay,
# which adds the certificate (docs/install.md):
#   kubectl apply --server-side -k manifests/overlays/cert-manager   # cert-manager issues and renews it
#   kubectl apply --server-side -k manifests/overlays/self-managed   # from `finalizer-guard certs`
# It holds no Secret and no key material. The image is finalizer-guard at
# the chart's appVersion: set yours in an overlay,
#   kustomize edit set image finalizer-guard=REGISTRY/finalizer-guard:TAG
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: finalizer-guard
resources:
EOF
  printf '  - %s\n' "${resources[@]}"
} > "$out/base/kustomization.yaml"

# (--show-only finds nothing with --output-dir: to standard output.)
render --set certificates.source=cert-manager --show-only templates/certificates.yaml \
  > "$work/certificates.yaml"
keep certificates.yaml "$out/overlays/cert-manager/certificates.yaml"

# The backstop: the base's policy (the ConfigMap's policy.yaml, a block
# indented by four), exported by the binary and rendered by the chart, whose
# policy check's own command must take it.
awk '/^  policy.yaml: \|$/ {on=1; next} on && /^    / {print substr($0, 5); next} on {exit}' \
  "$out/base/configmap.yaml" > "$work/policy.yaml"
"$bin" policy export --vap "$work/policy.yaml" > "$work/vap.yaml"
"$bin" policy validate --vap "$work/vap.yaml" "$work/policy.yaml" > /dev/null
"$helm" template finalizer-guard "$root/charts/finalizer-guard" --namespace finalizer-guard \
  --set certificates.source=external --set backstop.enabled=true \
  --set-file backstop.validatingAdmissionPolicy="$work/vap.yaml" \
  --show-only templates/backstop.yaml > "$work/backstop.yaml"
mkdir -p "$out/vap"
keep backstop.yaml "$out/vap/validatingadmissionpolicy.yaml"
