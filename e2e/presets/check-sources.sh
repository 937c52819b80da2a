#!/usr/bin/env bash
# Checks every string the presets catalog (src/policy/presets.yaml) cites
# against the upstream file it cites: each Go module version is downloaded
# through the module proxy (into the Go module cache, outside the
# repository: a warm run downloads nothing) and the file must hold the
# string verbatim. Entries read from GitHub (modules the proxy refuses) are
# checked against raw.githubusercontent.com when it can be reached, and
# otherwise listed as not checked here.
#
#   e2e/presets/check-sources.sh [FINALIZER_GUARD_BINARY]
#
# Exit 0 when every module string was found, 1 when one was not (or its
# module could not be downloaded), 2 on usage errors.
set -euo pipefail
cd "$(dirname "$0")/../.."

bin=${1:-${FG_BIN:-target/release/finalizer-guard}}
if [ ! -x "$bin" ]; then
  echo "usage: $0 [FINALIZER_GUARD_BINARY] (no executable at $bin)" >&2
  exit 2
fi
command -v go >/dev/null || { echo "go is needed to download the cited modules" >&2; exit 2; }

# `go mod download` needs a module to run in; it changes nothing there.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
(cd "$scratch" && go mod init presets-check >/dev/null 2>&1)

declare -A dirs=()
checked=0 missing=0 github_checked=0 github_unchecked=0 failed_modules=0
declare -A unchecked=()

module_dir() { # module_dir MODULE@VERSION: sets dir to the module's folder, or to nothing
  local at=$1 json
  if [ -z "${dirs[$at]+x}" ]; then
    json=$(cd "$scratch" && GOFLAGS=-mod=mod go mod download -json "$at" 2>&1 || true)
    dirs[$at]=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<< "$json")
    if [ -z "${dirs[$at]}" ]; then
      echo "FAIL: $at could not be downloaded through the module proxy:" >&2
      sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/  \1/p' <<< "$json" >&2
      failed_modules=$((failed_modules + 1))
    fi
  fi
  dir=${dirs[$at]}
}

while IFS=$'\t' read -r preset kind origin at file string; do
  case $kind in
    module)
      module_dir "$origin@$at"
      if [ -z "$dir" ]; then
        missing=$((missing + 1))
      elif [ -f "$dir/$file" ] && grep -qF -- "$string" "$dir/$file"; then
        checked=$((checked + 1))
      else
        echo "FAIL: $preset: $origin@$at $file does not hold: $string" >&2
        missing=$((missing + 1))
      fi
      ;;
    github)
      url="https://raw.githubusercontent.com/$origin/$at/$file"
      if body=$(curl -fsSL --max-time 15 "$url" 2>/dev/null); then
        if grep -qF -- "$string" <<< "$body"; then
          github_checked=$((github_checked + 1))
        else
          echo "FAIL: $preset: github.com/$origin@$at $file does not hold: $string" >&2
          missing=$((missing + 1))
        fi
      else
        github_unchecked=$((github_unchecked + 1))
        unchecked["$preset: github.com/$origin@$at $file"]=1
      fi
      ;;
    *)
      echo "unexpected line from $bin policy presets --sources: $kind" >&2
      exit 2
      ;;
  esac
done < <("$bin" policy presets --sources)

echo "presets: $checked string(s) found in the module files they cite ($(printf '%s\n' "${!dirs[@]}" | grep -c .) module versions)"
if [ "$github_checked" -gt 0 ]; then
  echo "presets: $github_checked string(s) found in the GitHub files they cite"
fi
if [ "$github_unchecked" -gt 0 ]; then
  echo "presets: $github_unchecked string(s) not checked here: the module proxy refuses their module and GitHub cannot be reached:"
  printf '  %s\n' "${!unchecked[@]}" | sort
fi
if [ "$missing" -gt 0 ] || [ "$failed_modules" -gt 0 ]; then
  echo "presets: $missing cited string(s) not found" >&2
  exit 1
fi
