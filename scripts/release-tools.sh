#!/usr/bin/env bash
# Builds one tool the release (scripts/release.sh) or its proof (.ci/run)
# needs into a cache outside the repository, and prints the binary's path.
#
#   COSIGN=$(scripts/release-tools.sh cosign)
#   scripts/release-tools.sh all          # every tool, one after the other
#
# Each tool is pinned below and cached under NAME-VERSION, as e2e/build.sh
# and e2e/helm/build.sh cache theirs: a warm run reuses the binary, a version
# bump builds anew. Go tools come from the Go module proxy (`go install
# MODULE/CMD@VERSION`: the module's own go.mod and go.sum, checked against
# the checksum database), cargo tools from crates.io (`cargo install
# --locked`: their own Cargo.lock), and the two that are binaries shipped
# in PyPI wheels (zig, the C compiler and linker of the macOS builds, and
# cargo-zigbuild, which drives it) with pip (`pip install --no-deps
# --target`: one pinned wheel, nothing else). Builds run at `nice -n 19`. FG_E2E_CACHE
# moves the cache (default: ${XDG_CACHE_HOME:-~/.cache}/finalizer-guard-e2e).
set -euo pipefail

declare -A go_pkg=(
  [registry]=github.com/distribution/distribution/v3/cmd/registry@v3.1.2
  [cosign]=github.com/sigstore/cosign/v2/cmd/cosign@v2.6.5
  [krew]=sigs.k8s.io/krew/cmd/krew@v0.4.3
  [validate-krew-manifest]=sigs.k8s.io/krew/cmd/validate-krew-manifest@v0.4.3
  [actionlint]=github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
)
# NAME -> the PyPI project==version, and the binary's path inside it.
declare -A wheel=(
  [zig]=ziglang==0.17.0
  [cargo-zigbuild]=cargo-zigbuild==0.24.0
)
declare -A wheel_bin=([zig]=ziglang/zig [cargo-zigbuild]=bin/cargo-zigbuild)
declare -A crate=(
  [cargo-auditable]=0.7.7
  [cargo-cyclonedx]=0.5.9
  [cargo-deny]=0.20.2
)

cache=${FG_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/finalizer-guard-e2e}

build() { # build NAME: prints the binary's path
  local name=$1 out start
  if [ -n "${go_pkg[$name]:-}" ]; then
    local pkg=${go_pkg[$name]}
    out="$cache/$name-${pkg##*@}"
    if [ ! -x "$out/$name" ]; then
      echo "building $name (${pkg})" >&2
      start=$(date +%s)
      mkdir -p "$out.tmp"
      # Each tool's own module versions, not a shared requirement graph.
      CGO_ENABLED=0 GOBIN="$out.tmp" GOFLAGS=-mod=mod nice -n 19 \
        go install -trimpath -ldflags "-s -w" "$pkg" >&2
      rm -rf "$out"; mv "$out.tmp" "$out"
      echo "built $name in $(( $(date +%s) - start )) s into $out" >&2
    fi
    echo "$out/$name"
  elif [ -n "${crate[$name]:-}" ]; then
    out="$cache/$name-${crate[$name]}"
    if [ ! -x "$out/bin/$name" ]; then
      echo "building $name ${crate[$name]} (crates.io)" >&2
      start=$(date +%s)
      rm -rf "$out.tmp"
      CARGO_TARGET_DIR="$out.target" nice -n 19 \
        cargo install --quiet --locked --version "${crate[$name]}" --root "$out.tmp" "$name" >&2
      rm -rf "$out" "$out.target"; mv "$out.tmp" "$out"
      echo "built $name in $(( $(date +%s) - start )) s into $out" >&2
    fi
    echo "$out/bin/$name"
  elif [ -n "${wheel[$name]:-}" ]; then
    out="$cache/$name-${wheel[$name]##*==}"
    if [ ! -x "$out/${wheel_bin[$name]}" ]; then
      echo "installing $name (${wheel[$name]}, PyPI)" >&2
      start=$(date +%s)
      rm -rf "$out.tmp"
      nice -n 19 python3 -m pip install --quiet --disable-pip-version-check --no-deps --only-binary :all: \
        --target "$out.tmp" "${wheel[$name]}" >&2
      rm -rf "$out"; mv "$out.tmp" "$out"
      echo "installed $name in $(( $(date +%s) - start )) s into $out" >&2
    fi
    echo "$out/${wheel_bin[$name]}"
  else
    echo "release-tools: unknown tool '$name' (one of: ${!go_pkg[*]} ${!crate[*]} ${!wheel[*]})" >&2
    return 2
  fi
}

if [ "${1:-}" = all ]; then
  for name in "${!crate[@]}" "${!go_pkg[@]}" "${!wheel[@]}"; do build "$name"; done
else
  [ $# -eq 1 ] || { echo "usage: $0 TOOL|all" >&2; exit 2; }
  build "$1"
fi
