#!/usr/bin/env bash
# Checks every string the presets catalog (src/policy/presets.yaml) cites
# against the upstream file it cites: each Go module version is downloaded
# through the module proxy (into the Go module cache, outside the
# repository: a warm run downloads nothing) and the file must hold the
# string verbatim. A module whose go directive is newer than this Go (Argo
# CD 3.6 and Flux's 1.10 controllers ask for 1.27) is downloaded and verified but not unpacked by `go
# mod download`: its file is read from the module's zip file
# (e2e/presets/complete reads it). Entries read from GitHub (modules the proxy refuses) are
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

declare -A dirs=() zips=()
(cd e2e/presets/complete && go build -o "$scratch/complete" .)
checked=0 missing=0 github_checked=0 github_unchecked=0 failed_modules=0
declare -A unchecked=()

module_dir() { # module_dir MODULE@VERSION: sets dir to the module's folder, or to nothing
  local at=$1 json
  if [ -z "${dirs[$at]+x}" ]; then
    json=$(cd "$scratch" && GOFLAGS=-mod=mod go mod download -json "$at" 2>&1 || true)
    dirs[$at]=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<< "$json")
    zips[$at]=$(sed -n 's/^[[:space:]]*"Zip": "\(.*\)",\{0,1\}$/\1/p' <<< "$json")
    if [ -z "${dirs[$at]}" ] && [ -n "${zips[$at]}" ] && [ -f "${zips[$at]}" ]; then
      dirs[$at]=zip:${zips[$at]}
    fi
    if [ -z "${dirs[$at]}" ]; then
      echo "FAIL: $at could not be downloaded through the module proxy:" >&2
      sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/  \1/p' <<< "$json" >&2
      failed_modules=$((failed_modules + 1))
    fi
  fi
  dir=${dirs[$at]}
}

declare -A extracted_files=()
zip_file() { # zip_file MODULE@VERSION FILE: sets extracted to a copy of FILE read from the module's zip
  local key="$1 $2"
  if [ -z "${extracted_files[$key]+x}" ]; then
    extracted_files[$key]=$scratch/extracted.${#extracted_files[@]}
    "$scratch/complete" file "$1" "$2" > "${extracted_files[$key]}" 2>/dev/null || rm -f "${extracted_files[$key]}"
  fi
  extracted=${extracted_files[$key]}
  [ -f "$extracted" ]
}

while IFS=$'\t' read -r preset kind origin at file string; do
  case $kind in
    module)
      module_dir "$origin@$at"
      if [ -z "$dir" ]; then
        missing=$((missing + 1))
      elif [[ $dir == zip:* ]] && zip_file "$origin@$at" "$file" && grep -qF -- "$string" "$extracted"; then
        checked=$((checked + 1))
      elif [[ $dir != zip:* ]] && [ -f "$dir/$file" ] && grep -qF -- "$string" "$dir/$file"; then
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
