#!/usr/bin/env bash
# Holds the presets catalog (src/policy/presets.yaml) to what upstream code
# does: reads every Go module version the catalog cites (and those its
# `read` entries add) through the module proxy, into the Go module cache
# outside the repository, and lists every finalizer name the code adds,
# removes, checks or declares (resolved to its string), and every place where
# it passes a finalizer held in a variable. Each name must be covered by a
# component of its preset or listed in its `leftOut` with a reason; each such
# place must be in its `builtAtRunTime`. The report names the modules the
# module proxy refused (and those the catalog cites from GitHub, read by
# hand). The reader is e2e/presets/complete (Go, no dependency): it parses
# the code, never builds or runs it.
#
#   e2e/presets/check-complete.sh [FINALIZER_GUARD_BINARY]
#
# Exit 0 when everything found is covered or explained; 1 when a name or a
# place is not, or a module the catalog reads was refused without the
# catalog saying so; 2 on usage errors.
set -euo pipefail
cd "$(dirname "$0")/../.."

bin=${1:-${FG_BIN:-target/release/finalizer-guard}}
if [ ! -x "$bin" ]; then
  echo "usage: $0 [FINALIZER_GUARD_BINARY] (no executable at $bin)" >&2
  exit 2
fi
command -v go >/dev/null || { echo "go is needed to read the cited modules" >&2; exit 2; }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# The reader's own tests first: what it finds in a module made for them.
(cd e2e/presets/complete && go vet . && go test -count=1 . && go build -o "$scratch/complete" .)
"$bin" policy presets -o json > "$scratch/catalog.json"
"$scratch/complete" "$scratch/catalog.json"
