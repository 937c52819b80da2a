#!/usr/bin/env bash
# Proves a release end to end, as .ci/run does after scripts/release.sh:
#
#   scripts/release/prove.sh RELEASE_DIR COSIGN_PUB
#
# - SHA256SUMS holds, the archives hold a static binary and the licence;
# - SHA256SUMS and every archive verify against their cosign bundles
#   (`cosign verify-blob --bundle FILE.sigstore.json --key COSIGN_PUB`), and
#   a copy of an archive with one byte flipped does not;
# - a registry (distribution's, built from its Go module) on a loopback
#   port: the image index and its signatures pushed (`cosign load`), the
#   chart pushed with `helm push` (the digest that was signed) and its
#   signatures; `cosign verify` and `cosign verify-attestation` (SBOM,
#   provenance) pass for both, and fail for an image whose layer was
#   changed after signing (pushed under the same tag, the signature copied);
# - the arm64 binary under qemu-user: `version`, `check` of the reviews in
#   tests/fixtures/cases and `test` of the cases answer as the amd64 one does;
# - the macOS and Windows archives hold the licence and a binary of their
#   format and architecture (`file`: Mach-O x86_64, Mach-O arm64, PE32+
#   x86-64), the arm64 one signed (LC_CODE_SIGNATURE), both loadable from
#   macOS 11 on (LC_BUILD_VERSION), both loading macOS's
#   own Security and CoreFoundation; the Windows one under wine (Debian's
#   wine64), when installed:
#   `version` names the release's commit, `check` decides a case's review as
#   the linux binary does, `policy validate` takes the example policy, `test`
#   passes the cases, and
#   reusing a CA with `certs` is refused with a reason (no Unix owners to
#   check). No macOS binary runs here: no Mach-O loader exists for Linux;
# - the krew manifest passes krew's validator (all five platforms), and
#   `kubectl krew install --manifest --archive` installs a plugin
#   `kubectl finalizer-guard version` runs;
# - the Homebrew formula (loaded by ruby under a stand-in for Homebrew's
#   DSL: scripts/release/homebrew-check.rb) and Cargo.toml's cargo binstall
#   metadata download, for each system, the krew manifest's archive, with
#   the sha256 SHA256SUMS gives;
# - the SBOM names each crate the binary is built from (Cargo.lock's
#   versions), and nothing that is not in Cargo.lock.
#
# Prints the registry's address on its last line; kills it unless
# FG_RELEASE_REGISTRY_KEEP is set to a file (then the registry's pid is written there).
set -euo pipefail
cd "$(dirname "$0")/../.."
rel=$(cd "${1:?usage: prove.sh RELEASE_DIR COSIGN_PUB}" && pwd)
pub=${2:?usage: prove.sh RELEASE_DIR COSIGN_PUB}
die() { printf 'prove: %s\n' "$*" >&2; exit 1; }
say() { printf 'prove: %s\n' "$*" >&2; }

cosign=$(scripts/release-tools.sh cosign)
registry_bin=$(scripts/release-tools.sh registry)
validate=$(scripts/release-tools.sh validate-krew-manifest)
krew=$(scripts/release-tools.sh krew)
helm=$(e2e/helm/build.sh)
kubectl="$(e2e/build.sh)/kubectl"
version=$(tar -xzOf "$rel"/finalizer-guard-*.tgz finalizer-guard/Chart.yaml | sed -n 's/^version: //p' | head -n 1)
[ -n "$version" ] || die "no chart in $rel"
image_digest=$(cat "$rel/image.digest")
chart_digest=$(cat "$rel/chart.digest")
work=$(mktemp -d)
registry_pid=""
http_pid=""
cleanup() {
  [ -z "$http_pid" ] || kill "$http_pid" 2> /dev/null || true
  if [ -n "$registry_pid" ] && [ -z "${FG_RELEASE_REGISTRY_KEEP:-}" ]; then kill "$registry_pid" 2> /dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
# cosign, offline: a key pair's signatures, no transparency log, no TUF root fetched.
export TUF_ROOT="$work/tuf" SIGSTORE_NO_CACHE=true
verify_flags=(--key "$pub" --insecure-ignore-tlog=true --insecure-ignore-sct=true)

say "SHA256SUMS, the archives"
(cd "$rel" && sha256sum --quiet -c SHA256SUMS) || die "SHA256SUMS does not hold"

say "cosign verify-blob: SHA256SUMS and every archive against its bundle (FILE.sigstore.json); a tampered archive fails"
# Offline: a trusted root with no authority and no log in it, so nothing is
# fetched; only the key is trusted.
printf '{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1"}\n' > "$work/trusted_root.json"
blob_flags=(--key "$pub" --insecure-ignore-tlog=true --trusted-root "$work/trusted_root.json")
shopt -s nullglob
archives=("$rel"/finalizer-guard-*.tar.gz "$rel"/finalizer-guard-*.zip "$rel"/finalizer-guard-*.tgz)
shopt -u nullglob
[ ${#archives[@]} -gt 0 ] || die "no archive in $rel"
for file in "$rel/SHA256SUMS" "${archives[@]}"; do
  name=$(basename "$file")
  [ -f "$file.sigstore.json" ] || die "$name has no signature bundle $name.sigstore.json"
  [ "$name" = SHA256SUMS ] || grep -qE "^[0-9a-f]{64}  $name\$" "$rel/SHA256SUMS" || die "SHA256SUMS does not list $name"
  "$cosign" verify-blob "${blob_flags[@]}" --bundle "$file.sigstore.json" "$file" 2> "$work/cosign.log" \
    || { cat "$work/cosign.log" >&2; die "cosign verify-blob $name failed"; }
  say "  cosign verify-blob --bundle $name.sigstore.json $name: $(grep -m1 -x 'Verified OK' "$work/cosign.log")"
done
# A copy of an archive with one byte flipped, checked against the archive's bundle.
first=${archives[0]}
mkdir -p "$work/tampered"
tampered_archive="$work/tampered/$(basename "$first")"
cp "$first" "$tampered_archive"
python3 - "$tampered_archive" <<'PY'
import os, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(os.path.getsize(sys.argv[1]) // 2)
    byte = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([byte[0] ^ 0xFF]))
PY
cmp -s "$first" "$tampered_archive" && die "the tampered copy of $(basename "$first") is the same bytes"
if "$cosign" verify-blob "${blob_flags[@]}" --bundle "$first.sigstore.json" "$tampered_archive" 2> "$work/cosign.log"; then
  die "cosign verify-blob passed for a tampered copy of $(basename "$first")"
fi
say "  cosign verify-blob of $(basename "$first") with one byte flipped fails: $(grep -m1 '^Error: ' "$work/cosign.log" | cut -c1-160)"
if (cd "$work/tampered" && grep -F "  $(basename "$first")" "$rel/SHA256SUMS" | sha256sum --quiet -c - > /dev/null 2>&1); then
  die "SHA256SUMS holds for a tampered copy of $(basename "$first")"
fi
say "  sha256sum -c of the tampered copy fails"
for arch in amd64 arm64; do
  mkdir -p "$work/$arch"
  tar -xzf "$rel/finalizer-guard-$version-linux-$arch.tar.gz" -C "$work/$arch"
  [ -f "$work/$arch/LICENSE" ] || die "no LICENSE in the $arch archive"
  info=$(file -b "$work/$arch/finalizer-guard")
  say "  $arch: $info"
  case "$info" in *"statically linked"*|*"static-pie linked"*) ;; *) die "the $arch binary is not static: $info" ;; esac
done
case "$(file -b "$work/arm64/finalizer-guard")" in *aarch64*) ;; *) die "the arm64 binary is not aarch64" ;; esac

say "the macOS and Windows archives: each binary's format and architecture"
mkdir -p "$work/darwin-amd64" "$work/darwin-arm64" "$work/windows-amd64"
for arch in amd64 arm64; do
  tar -xzf "$rel/finalizer-guard-$version-darwin-$arch.tar.gz" -C "$work/darwin-$arch"
done
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
  "$rel/finalizer-guard-$version-windows-amd64.zip" "$work/windows-amd64"
for platform in darwin-amd64:finalizer-guard:'Mach-O 64-bit x86_64 executable' \
  darwin-arm64:finalizer-guard:'Mach-O 64-bit arm64 executable' \
  windows-amd64:finalizer-guard.exe:'PE32+ executable (console) x86-64'; do
  IFS=: read -r name binary expected <<< "$platform"
  [ -f "$work/$name/LICENSE" ] || die "no LICENSE in the $name archive"
  [ -f "$work/$name/$binary" ] || die "no $binary in the $name archive"
  info=$(file -b "$work/$name/$binary")
  say "  $name: $info"
  case "$info" in "$expected"*) ;; *) die "the $name binary is not a $expected: $info" ;; esac
done
# macOS on arm64 runs only signed binaries: the linker's ad-hoc signature
# (LC_CODE_SIGNATURE) is there, and the frameworks are macOS's own.
for arch in amd64 arm64; do
  python3 - "$work/darwin-$arch/finalizer-guard" "$arch" <<'PY' || die "the darwin-$arch binary's load commands"
import struct, sys
path, arch = sys.argv[1:]
data = open(path, "rb").read()
ncmds = struct.unpack_from("<I", data, 16)[0]
off, cmds, dylibs, minos = 32, set(), [], None
for _ in range(ncmds):
    cmd, size = struct.unpack_from("<II", data, off)
    cmds.add(cmd)
    if cmd in (0xC, 0x80000018):  # LC_LOAD_DYLIB, LC_LOAD_WEAK_DYLIB
        name = struct.unpack_from("<I", data, off + 8)[0]
        dylibs.append(data[off + name:off + size].split(b"\0")[0].decode())
    if cmd == 0x32:  # LC_BUILD_VERSION: the oldest macOS that loads it
        version = struct.unpack_from("<I", data, off + 12)[0]
        minos = (version >> 16, (version >> 8) & 0xFF)
    off += size
assert arch == "amd64" or 0x1D in cmds, "no code signature (LC_CODE_SIGNATURE)"
# macOS 11 (Big Sur), the first on Apple silicon: what docs/install.md promises.
assert minos is not None and minos <= (11, 0), f"needs macOS {minos}, newer than 11.0"
for framework in ("Security", "CoreFoundation"):
    want = f"/System/Library/Frameworks/{framework}.framework/Versions/A/{framework}"
    assert want in dylibs, f"{framework} not loaded from {want}: {dylibs}"
print(f"prove:   darwin-{arch}: macOS {minos[0]}.{minos[1]} or later; loads {', '.join(sorted(dylibs))}", file=sys.stderr)
PY
done

say "the Windows binary under wine: version, check, policy validate, test, certs"
# wine64 is Debian's (apt-get install wine64): about 20 packages, a prefix
# made on first use (about 30 s). Without it this part is skipped, said so.
wine=$(command -v wine64 || command -v wine || true)
[ -n "$wine" ] || { [ ! -x /usr/lib/wine/wine64 ] || wine=/usr/lib/wine/wine64; }
if [ -z "$wine" ]; then
  say "  skipped: no wine64 (Debian: apt-get install wine64)"
else
  export WINEPREFIX="$work/wine" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
  mkdir -p "$work/wine-run"
  exe="$work/wine-run/finalizer-guard.exe"
  cp "$work/windows-amd64/finalizer-guard.exe" "$exe"
  # Wine 8 lacks bcryptprimitives.dll (ProcessPrng); beside the binary, a
  # stand-in over wine's RtlGenRandom (scripts/release/wine-bcryptprimitives.c).
  command -v x86_64-w64-mingw32-gcc > /dev/null \
    || die "no mingw-w64 for wine's bcryptprimitives.dll (Debian: apt-get install gcc-mingw-w64-x86-64)"
  x86_64-w64-mingw32-gcc -shared -O2 -o "$work/wine-run/bcryptprimitives.dll" scripts/release/wine-bcryptprimitives.c -ladvapi32
  win_version=$(timeout 300 "$wine" "$exe" version -o json 2> "$work/wine.log" | tr -d '\r') \
    || { cat "$work/wine.log" >&2; die "finalizer-guard.exe version failed under wine"; }
  linux_version=$("$work/amd64/finalizer-guard" version -o json)
  python3 - "$linux_version" "$win_version" <<'PY'
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:])
assert b["target"] == "x86_64-pc-windows-gnu", b
for k in ("version", "commit", "dirty", "build_date", "dependencies"):
    assert a[k] == b[k], (k, a[k], b[k])
PY
  say "  version: $(python3 -c 'import json,sys; v=json.loads(sys.argv[1]); print(v["version"], v["commit"], v["target"])' "$win_version")"
  # The first case file (read whole: no pipe closed early under pipefail).
  review=$(cd tests/fixtures/cases && find . -maxdepth 1 -name '*.json' -printf '%f\n' | LC_ALL=C sort | sed -n 1p)
  case_file=tests/fixtures/cases/$review
  mkdir -p "$work/reviews"
  [ -f "$work/reviews/$review" ] || python3 - "$case_file" "$work/reviews/$review" <<'PY'
import json, sys
json.dump(json.load(open(sys.argv[1]))["review"], open(sys.argv[2], "w"))
PY
  set +e
  linux_check=$(cd "$work/reviews" && "$work/amd64/finalizer-guard" check --policy "$OLDPWD/tests/fixtures/policy.yaml" -- "$review"; echo "exit $?")
  win_check=$(cd "$work/reviews" && timeout 300 "$wine" "$exe" check --policy "$OLDPWD/tests/fixtures/policy.yaml" -- "$review" 2> "$work/wine.log"; echo "exit $?")
  set -e
  win_check=$(printf '%s\n' "$win_check" | tr -d '\r')
  [ "$win_check" = "$linux_check" ] || { diff <(echo "$linux_check") <(echo "$win_check") >&2; cat "$work/wine.log" >&2; die "check answers differently on windows"; }
  say "  check $review: $(printf '%s\n' "$win_check" | tr '\n' ' ')(as linux)"
  timeout 300 "$wine" "$exe" policy validate examples/policy.yaml > "$work/validate-policy.txt" 2> "$work/wine.log" \
    || { cat "$work/validate-policy.txt" "$work/wine.log" >&2; die "policy validate of examples/policy.yaml failed under wine"; }
  say "  policy validate examples/policy.yaml: $(tr -d '\r' < "$work/validate-policy.txt" | head -n 1)"
  set +e
  timeout 600 "$wine" "$exe" test --policy tests/fixtures/policy.yaml tests/fixtures/cases > "$work/test-windows.txt" 2> "$work/wine.log"
  echo "test exit $?" >> "$work/test-windows.txt"
  set -e
  linux_tested=$("$work/amd64/finalizer-guard" test --policy tests/fixtures/policy.yaml tests/fixtures/cases | tail -n 1)
  win_tested=$(tr -d '\r' < "$work/test-windows.txt" | grep -E '^[0-9]+ passed')
  grep -qx 'test exit 0' "$work/test-windows.txt" && [ "$win_tested" = "$linux_tested" ] \
    || { cat "$work/test-windows.txt" "$work/wine.log" >&2; die "test of the cases answers differently on windows"; }
  say "  test of the cases: $win_tested (as linux)"
  timeout 300 "$wine" "$exe" certs --out "$work/win-certs" > /dev/null 2> "$work/wine.log" \
    || { cat "$work/wine.log" >&2; die "certs failed under wine"; }
  if timeout 300 "$wine" "$exe" certs --out "$work/win-certs" > /dev/null 2> "$work/wine.log"; then
    die "certs reused a CA under wine, whose owner it cannot check"
  fi
  grep -q 'checked on Linux and macOS only' "$work/wine.log" || { cat "$work/wine.log" >&2; die "certs said no reason for not reusing the CA"; }
  say "  certs, twice: $(tr -d '\r' < "$work/wine.log" | grep -m1 'checked on Linux')"
fi

say "the arm64 binary under qemu-user answers as the amd64 one"
qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64) || die "no qemu-aarch64 (Debian: apt-get install qemu-user-static)"
amd64_version=$("$work/amd64/finalizer-guard" version -o json)
arm64_version=$("$qemu" "$work/arm64/finalizer-guard" version -o json)
printf '%s\n' "$arm64_version" >&2
python3 - "$amd64_version" "$arm64_version" <<'PY'
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:])
assert a["target"] == "x86_64-unknown-linux-musl" and b["target"] == "aarch64-unknown-linux-musl", (a, b)
for k in ("version", "commit", "dirty", "build_date", "dependencies"):
    assert a[k] == b[k], (k, a[k], b[k])
assert a["dependencies"] == "cargo-auditable", a
PY
# The example reviews: each case file's AdmissionReview, decided by `check`
# under the cases' policy; and `test` of the case files themselves.
mkdir -p "$work/reviews"
python3 - "$work/reviews" tests/fixtures/cases/*.json <<'PY'
import json, os, sys
for path in sys.argv[2:]:
    case = json.load(open(path))
    if isinstance(case, dict) and "review" in case:
        json.dump(case["review"], open(os.path.join(sys.argv[1], os.path.basename(path)), "w"))
PY
for arch in amd64 arm64; do
  run=("$work/$arch/finalizer-guard")
  [ "$arch" = amd64 ] || run=("$qemu" "$work/$arch/finalizer-guard")
  set +e
  (cd "$work/reviews" && "${run[@]}" check --policy "$OLDPWD/tests/fixtures/policy.yaml" -- *.json) > "$work/check-$arch.txt"
  echo "check exit $?" >> "$work/check-$arch.txt"
  "${run[@]}" test --policy tests/fixtures/policy.yaml tests/fixtures/cases > "$work/test-$arch.txt"
  echo "test exit $?" >> "$work/test-$arch.txt"
  set -e
done
diff -u "$work/check-amd64.txt" "$work/check-arm64.txt" || die "check answers differently on arm64"
diff -u "$work/test-amd64.txt" "$work/test-arm64.txt" || die "test answers differently on arm64"
grep -qx 'test exit 0' "$work/test-arm64.txt" || { cat "$work/test-arm64.txt" >&2; die "the cases fail on arm64"; }
say "  check of $(grep -c '\.json: ' "$work/check-amd64.txt") reviews: $(grep -c ': allowed$' "$work/check-amd64.txt") allowed, $(grep -c ': denied' "$work/check-amd64.txt") denied, the same on both ($(tail -n 1 "$work/check-amd64.txt")); test of the cases: $(grep -E '^[0-9]+ passed' "$work/test-arm64.txt") on both"

say "a registry on a loopback port"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$work/registry"
printf 'version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
  "${FG_RELEASE_REGISTRY_DIR:-$work/registry}" "$port" > "$work/registry.yml"
"$registry_bin" serve "$work/registry.yml" > "$work/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$port/v2/" > /dev/null 2>&1 && break
  kill -0 "$registry_pid" 2> /dev/null || { cat "$work/registry.log" >&2; die "the registry did not start"; }
  sleep 0.1
done
reg=127.0.0.1:$port
[ -z "${FG_RELEASE_REGISTRY_KEEP:-}" ] || echo "$registry_pid" > "$FG_RELEASE_REGISTRY_KEEP"

say "push: the image index and its signatures (cosign load), the chart (helm push) and its signatures"
"$cosign" load --dir "$rel/image" "$reg/finalizer-guard:$version" 2> "$work/cosign.log" \
  || { cat "$work/cosign.log" >&2; die "cosign load (image) failed"; }
pushed=$(curl -fsS -o /dev/null -w '%header{docker-content-digest}' \
  -H 'Accept: application/vnd.oci.image.index.v1+json' "http://$reg/v2/finalizer-guard/manifests/$version")
[ "$pushed" = "$image_digest" ] || die "the tag $version is $pushed, not the signed $image_digest"
"$helm" push --plain-http "$rel/finalizer-guard-$version.tgz" "oci://$reg/charts" > "$work/push.txt" 2>&1 \
  || { cat "$work/push.txt" >&2; die "helm push failed"; }
pushed=$(sed -n 's/^Digest: //p' "$work/push.txt")
[ "$pushed" = "$chart_digest" ] || die "helm push made $pushed, not the signed $chart_digest"
"$cosign" load --dir "$rel/chart" "$reg/charts/finalizer-guard:$version" 2> "$work/cosign.log" \
  || { cat "$work/cosign.log" >&2; die "cosign load (chart) failed"; }
mkdir -p "$work/pulled"
"$helm" pull --plain-http "oci://$reg/charts/finalizer-guard" --version "$version" -d "$work/pulled" > "$work/pull.txt" 2>&1 \
  || { cat "$work/pull.txt" >&2; die "helm pull failed"; }
cmp "$work/pulled/finalizer-guard-$version.tgz" "$rel/finalizer-guard-$version.tgz" \
  || die "the chart pulled is not the one released"

say "cosign verify and verify-attestation: the image and the chart"
for ref in "$reg/finalizer-guard:$version" "$reg/charts/finalizer-guard:$version"; do
  "$cosign" verify "${verify_flags[@]}" "$ref" > "$work/verify.json" 2> "$work/cosign.log" \
    || { cat "$work/cosign.log" >&2; die "cosign verify $ref failed"; }
  say "  verify $ref: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["critical"]["image"]["docker-manifest-digest"])' "$work/verify.json")"
  "$cosign" verify-attestation "${verify_flags[@]}" --type slsaprovenance1 "$ref" > /dev/null 2> "$work/cosign.log" \
    || { cat "$work/cosign.log" >&2; die "cosign verify-attestation --type slsaprovenance1 $ref failed"; }
  say "  verify-attestation --type slsaprovenance1 $ref: ok"
done
"$cosign" verify-attestation "${verify_flags[@]}" --type cyclonedx "$reg/finalizer-guard:$version" > "$work/sbom-att.json" 2> "$work/cosign.log" \
  || { cat "$work/cosign.log" >&2; die "cosign verify-attestation --type cyclonedx failed"; }
say "  verify-attestation --type cyclonedx $reg/finalizer-guard:$version: ok"

say "tampered: a layer changed after signing, pushed under the same tag with the signature copied"
python3 scripts/release/tamper.py "$reg" finalizer-guard "$version" "$image_digest" > "$work/tampered.digest"
tampered=$(cat "$work/tampered.digest")
say "  the tag $version now points to $tampered"
for check in verify "verify-attestation --type slsaprovenance1"; do
  # shellcheck disable=SC2086
  if "$cosign" $check "${verify_flags[@]}" "$reg/finalizer-guard:$version" > /dev/null 2> "$work/cosign.log"; then
    die "cosign $check passed for the tampered image"
  fi
  say "  cosign $check of the tampered image fails: $(grep -m1 -E '^Error: |no matching' "$work/cosign.log" | cut -c1-160)"
done
"$cosign" verify "${verify_flags[@]}" "$reg/finalizer-guard@$image_digest" > /dev/null 2>&1 \
  || die "the signed digest no longer verifies"
say "  the signed digest $image_digest still verifies"

say "krew: validate-krew-manifest (the manifest, then a copy downloading from a loopback server: both platforms installed), kubectl krew install --manifest --archive"
mkdir -p "$work/bin" "$work/krew-check"
ln -s "$krew" "$work/bin/kubectl-krew"
ln -s "$kubectl" "$work/bin/kubectl"
"$validate" --manifest "$rel/finalizer-guard.yaml" --skip-install 2> "$work/validate.log" \
  || { cat "$work/validate.log" >&2; die "validate-krew-manifest refused the manifest"; }
http_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$rel" "$http_port" > /dev/null 2>&1 &
http_pid=$!
sed -E "s#^( *uri: ).*/([^/]+)\$#\1http://127.0.0.1:$http_port/\2#" "$rel/finalizer-guard.yaml" > "$work/krew-check/finalizer-guard.yaml"
for _ in $(seq 1 50); do curl -fsS -o /dev/null "http://127.0.0.1:$http_port/SHA256SUMS" 2> /dev/null && break; sleep 0.1; done
PATH="$work/bin:$PATH" "$validate" --manifest "$work/krew-check/finalizer-guard.yaml" 2> "$work/validate.log" \
  || { kill "$http_pid"; cat "$work/validate.log" >&2; die "validate-krew-manifest could not install the plugin"; }
kill "$http_pid" 2> /dev/null || true
grep -E 'installed +spec.platforms|structural validation OK' "$work/validate.log" | sed 's/^/  /' >&2
export KREW_ROOT="$work/krew"
PATH="$work/bin:$PATH" kubectl krew install --manifest="$rel/finalizer-guard.yaml" \
  --archive="$rel/finalizer-guard-$version-linux-amd64.tar.gz" > "$work/krew.log" 2>&1 \
  || { cat "$work/krew.log" >&2; die "kubectl krew install failed"; }
plugin=$(PATH="$KREW_ROOT/bin:$work/bin:$PATH" kubectl finalizer-guard version)
printf '%s\n' "$plugin" | sed 's/^/  kubectl finalizer-guard version: /' >&2
grep -qx "target:       x86_64-unknown-linux-musl" <<< "$plugin" || die "the krew plugin is not the release's binary"

say "Homebrew and cargo binstall: each archive they download is the krew manifest's, with its sha256"
command -v ruby > /dev/null || die "ruby is not installed, to load the Homebrew formula (Debian: apt-get install ruby)"
ruby scripts/release/homebrew-check.rb "$rel/finalizer-guard.rb" > "$work/homebrew.txt" \
  || die "the Homebrew formula $rel/finalizer-guard.rb does not load"
cargo metadata --locked --offline --no-deps --format-version 1 > "$work/metadata.json"
python3 - "$rel" "$version" "$work/homebrew.txt" "$work/metadata.json" <<'PY'
import hashlib, json, re, sys
rel, version, homebrew, metadata = sys.argv[1:]
sums = dict(reversed(line.split()) for line in open(f"{rel}/SHA256SUMS"))
krew = {}
manifest = open(f"{rel}/finalizer-guard.yaml").read()
for os, arch, uri, sha in re.findall(
    r"os: (\w+)\n\s+arch: (\w+)\n\s+uri: (\S+)\n\s+sha256: (\w+)", manifest):
    assert sums[uri.rsplit("/", 1)[1]] == sha, f"krew's sha256 of {uri}"
    krew[(os, arch)] = (uri, sha)
assert len(krew) == 5, f"the krew manifest names {len(krew)} platforms"
for line in open(homebrew):
    os, arch, url, sha = line.split()
    assert krew[(os, arch)] == (url, sha), f"Homebrew {os}/{arch}: {url} {sha}, krew {krew[(os, arch)]}"
print(f"prove:   Homebrew: {sum(1 for _ in open(homebrew))} systems, each the krew archive", file=sys.stderr)
package = json.load(open(metadata))["packages"][0]
binstall = package["metadata"]["binstall"]
platform = {"x86_64-unknown-linux-gnu": ("linux", "amd64"), "x86_64-unknown-linux-musl": ("linux", "amd64"),
            "aarch64-unknown-linux-gnu": ("linux", "arm64"), "aarch64-unknown-linux-musl": ("linux", "arm64"),
            "x86_64-apple-darwin": ("darwin", "amd64"), "aarch64-apple-darwin": ("darwin", "arm64"),
            "x86_64-pc-windows-gnu": ("windows", "amd64"), "x86_64-pc-windows-msvc": ("windows", "amd64")}
assert sorted(binstall["overrides"]) == sorted(platform), sorted(binstall["overrides"])
for target, override in binstall["overrides"].items():
    values = {"repo": package["repository"], "version": version.split("-dirty")[0], "name": package["name"],
              "target": target}
    url = re.sub(r"\{ ([a-z-]+) \}", lambda m: values[m.group(1)], override["pkg-url"])
    # A dirty tree's release names its files VERSION-dirty; the published ones do not.
    url = url.replace(f"-{values['version']}-", f"-{version}-")
    assert url.rsplit("/", 1)[1] == krew[platform[target]][0].rsplit("/", 1)[1], f"binstall {target}: {url}"
    fmt = override.get("pkg-fmt", binstall["pkg-fmt"])
    assert (fmt == "zip") == url.endswith(".zip"), f"binstall {target}: {fmt} for {url}"
print(f"prove:   cargo binstall: {len(binstall['overrides'])} targets, each a release archive", file=sys.stderr)
PY

say "the SBOM names each crate of Cargo.lock the binary is built from, with its version"
cargo tree --locked -e normal,build --target x86_64-unknown-linux-musl --prefix none --format '{p}' \
  > "$work/tree-amd64.txt"
cargo tree --locked -e normal,build --target aarch64-unknown-linux-musl --prefix none --format '{p}' \
  > "$work/tree-arm64.txt"
python3 - "$rel/finalizer-guard-$version.cdx.json" Cargo.lock "$work/tree-amd64.txt" "$work/tree-arm64.txt" "$work/sbom-att.json" <<'PY'
import json, re, sys, base64
sbom, lock, *trees, att = sys.argv[1:]
bom = json.load(open(sbom))
named = {(c["name"], c["version"]) for c in bom["components"]}
locked = set(re.findall(r'(?m)^name = "([^"]+)"\nversion = "([^"]+)"', open(lock).read()))
built = set()
for tree in trees:
    for line in open(tree):
        m = re.match(r"(\S+) v(\S+)", line.strip())
        if m and m.group(1) != "finalizer-guard":
            built.add((m.group(1), m.group(2)))
missing = sorted(built - named)
assert not missing, f"the SBOM lacks {missing}"
unknown = sorted(named - locked)
assert not unknown, f"the SBOM names crates not in Cargo.lock: {unknown}"
# The attested SBOM is the image's: the same crates, the binary and the CA bundle.
statement = json.loads(base64.b64decode(json.loads(open(att).readline())["payload"]))
image = {(c["name"], c.get("version")) for c in statement["predicate"]["components"]}
assert named <= image and any(n == "ca-certificates" for n, _ in image), "the attested image SBOM"
print(f"prove:   {len(named)} crates in the SBOM, {len(built)} built into the binary, all in Cargo.lock", file=sys.stderr)
PY
say "all proven"
echo "$reg"
