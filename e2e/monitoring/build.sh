#!/usr/bin/env bash
# What the chart's monitoring is proven with, from Go modules pinned in
# go.mod, cached outside the repository:
#
#   PROMTOOL=$(e2e/monitoring/build.sh promtool)   # promtool, built from the Prometheus module
#   CRDS=$(e2e/monitoring/build.sh crds)           # the prometheus-operator CRDs (a folder of YAML)
#
# Keyed by the pinned version, as ../helm/build.sh: a warm run reuses the
# binary, a version bump builds anew. FG_E2E_CACHE moves the cache
# (default: ${XDG_CACHE_HOME:-~/.cache}/finalizer-guard-e2e).
set -euo pipefail
cd "$(dirname "$0")"
cache=${FG_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/finalizer-guard-e2e}

case "${1:-}" in
  promtool)
    version=$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
    # Without the service discovery plugins (Prometheus' remove_all_sd build
    # tag): rule tests need none, and the build is a fifth smaller.
    out="$cache/promtool-$version-no-sd"
    if [ -x "$out/promtool" ]; then echo "$out/promtool"; exit 0; fi
    mkdir -p "$out"
    echo "building promtool from github.com/prometheus/prometheus $version" >&2
    start=$(date +%s)
    CGO_ENABLED=0 go build -mod=readonly -trimpath -tags remove_all_sd -ldflags "-s -w" -o "$out/promtool.tmp" \
      github.com/prometheus/prometheus/cmd/promtool
    mv "$out/promtool.tmp" "$out/promtool"
    echo "built promtool in $(( $(date +%s) - start )) s into $out" >&2
    echo "$out/promtool"
    ;;
  crds)
    module=github.com/prometheus-operator/prometheus-operator
    version=$(go list -m -f '{{.Version}}' "$module")
    out="$cache/prometheus-operator-crds-$version"
    if [ -d "$out" ]; then echo "$out"; exit 0; fi
    dir=$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    mkdir -p "$out.tmp"
    for crd in servicemonitors podmonitors prometheusrules; do
      cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml" "$out.tmp/"
    done
    mv "$out.tmp" "$out"
    echo "$out"
    ;;
  *)
    echo "usage: $0 promtool|crds" >&2
    exit 2
    ;;
esac
