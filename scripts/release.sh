#!/usr/bin/env bash
# Writes everything a release of finalizer-guard publishes into OUT_DIR:
#
#   scripts/release.sh --key cosign.key OUT_DIR          # signed with a key pair
#   scripts/release.sh --keyless --push REGISTRY OUT_DIR # CI: Sigstore keyless, pushed
#   scripts/release.sh ... --binaries DIR OUT_DIR        # binaries built beforehand
#
#   finalizer-guard-VERSION-linux-amd64.tar.gz   static (musl) binaries, each with
#   finalizer-guard-VERSION-linux-arm64.tar.gz   LICENSE; their dependency list embedded
#                                                (cargo auditable)
#   finalizer-guard-VERSION-darwin-amd64.tar.gz  the CLI for macOS and Windows, with
#   finalizer-guard-VERSION-darwin-arm64.tar.gz  LICENSE (finalizer-guard.exe on Windows;
#   finalizer-guard-VERSION-windows-amd64.zip    `serve`'s dev mode and reusing a CA with
#                                                `certs` need Unix file owners: Linux, macOS)
#   finalizer-guard-VERSION.cdx.json             CycloneDX SBOM of the binary (the crates
#                                                of Cargo.lock it is built from)
#   finalizer-guard-VERSION-image.cdx.json       ... and of the image (the binary, the CA bundle)
#   finalizer-guard-VERSION-licenses.txt         every dependency's licence, checked
#                                                against deny.toml (cargo deny)
#   finalizer-guard-VERSION.tgz                  the Helm chart, with Artifact Hub annotations
#   artifacthub-repo.yml                         Artifact Hub's repository metadata
#   finalizer-guard.yaml                         the krew Plugin manifest (the archives' sha256)
#   finalizer-guard.rb                           the Homebrew formula, for a tap (macOS, Linux)
#   provenance.json                              the SLSA v1 provenance predicate
#   image/                                       OCI image layout (index.json): the image for
#                                                linux/amd64 and linux/arm64, one index, with
#                                                its cosign signature and attestations
#                                                (SBOM, provenance)
#   chart/                                       OCI image layout: the chart as `helm push`
#                                                makes it, signed, provenance attested
#   image.digest, chart.digest                   the two digests signed
#   cosign.pub                                   the public key (with --key)
#   SHA256SUMS                                   of every file above but itself
#   *.tar.gz.sigstore.json, *.zip.sigstore.json, each archive's cosign signature bundle
#   *.tgz.sigstore.json                          (the binaries', the chart's)
#   SHA256SUMS.sigstore.json                     ... and SHA256SUMS's (`cosign verify-blob
#                                                --bundle FILE.sigstore.json FILE`)
#
# VERSION is Cargo.toml's; a tree with uncommitted changes releases
# VERSION-dirty, and its binaries say `commit HASH-dirty`. Binaries and
# archives are reproducible from a commit (their dates are its time).
#
# Signing: --key FILE is a cosign key pair's private half (`cosign
# generate-key-pair`; COSIGN_PASSWORD is its password), FILE.pub or
# cosign.pub beside it the public half. Without a readable key (and without
# --keyless) the command stops before it writes anything. The image and the
# chart are pushed to a registry to be signed: a registry of its own on a
# loopback port unless --push REGISTRY (e.g. ghcr.io/finalizer-guard) names
# where they are published; `cosign save` then writes them, signatures and
# attestations included, into image/ and chart/ (`cosign load` pushes them
# anywhere, still signed).
#
# --registry NAME: the registry and namespace the chart's image and the
# Artifact Hub annotations name (default ghcr.io/finalizer-guard, or --push's).
# --download-url URL: where the krew manifest's archives are downloaded from
# (default the GitHub release of the tag vVERSION).
# --binaries DIR: the five binaries already built by scripts/release/build.sh
# of this commit, as DIR/TRIPLE/finalizer-guard (.exe for Windows), instead
# of building them here: the release workflow builds them in a job that
# holds no token, so no build script of a dependency runs beside the
# signing identity. Each must name this commit.
#
# The binaries are built by scripts/release/build.sh (its --help: the five
# targets and their C toolchains). Tools (cosign, the registry, cargo
# auditable, cargo cyclonedx, cargo deny, zig, Helm) are built by
# scripts/release-tools.sh and e2e/helm/build.sh into a cache outside the
# repository; podman assembles the images (no code of either architecture
# runs: the image is COPY-only).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

die() { printf 'release: %s\n' "$*" >&2; exit 1; }
log() { printf 'release: [%4d s] %s\n' "$(( $(date +%s) - started ))" "$*" >&2; }
started=$(date +%s)

key="${COSIGN_KEY:-}"
keyless=false
push=""
registry_name=""
download_url=""
binaries=""
while [ $# -gt 0 ]; do
  case "$1" in
    --key) key=${2:?--key needs a file}; shift 2 ;;
    --key=*) key=${1#--key=}; shift ;;
    --keyless) keyless=true; shift ;;
    --push) push=${2:?--push needs a registry}; shift 2 ;;
    --push=*) push=${1#--push=}; shift ;;
    --registry) registry_name=${2:?--registry needs a name}; shift 2 ;;
    --registry=*) registry_name=${1#--registry=}; shift ;;
    --binaries) binaries=${2:?--binaries needs a folder}; shift 2 ;;
    --binaries=*) binaries=${1#--binaries=}; shift ;;
    --download-url) download_url=${2:?--download-url needs a URL}; shift 2 ;;
    --download-url=*) download_url=${1#--download-url=}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown flag $1 (--help)" ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || die "usage: scripts/release.sh [--key FILE | --keyless] [--push REGISTRY] [--registry NAME] [--download-url URL] [--binaries DIR] OUT_DIR"
out=$1

# Everything that can stop the release is checked before anything is written.
if $keyless; then
  [ -z "$key" ] || die "--key and --keyless: one or the other"
  [ -n "$push" ] || die "--keyless signs in a public registry: --push REGISTRY"
else
  [ -n "$key" ] || die "no signing key: --key FILE (a cosign private key; COSIGN_PASSWORD its password) or --keyless"
  { [ -f "$key" ] && [ -r "$key" ]; } || die "the signing key $key is not a readable file"
  pub=${key%.key}.pub
  [ -f "$pub" ] || pub="$(dirname "$key")/cosign.pub"
  [ -f "$pub" ] || die "no public key beside $key (${key%.key}.pub or cosign.pub)"
  grep -q 'PRIVATE KEY' "$key" || die "$key is not a cosign private key"
  key=$(cd "$(dirname "$key")" && pwd)/$(basename "$key")
  pub=$(cd "$(dirname "$pub")" && pwd)/$(basename "$pub")
fi
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then die "$out is not empty"; fi
if [ -n "$binaries" ]; then
  [ -d "$binaries" ] || die "--binaries $binaries is not a folder"
  binaries=$(cd "$binaries" && pwd)
fi
command -v podman > /dev/null || die "podman is not installed (Debian: apt-get install podman)"
{ command -v git > /dev/null && git rev-parse HEAD > /dev/null 2>&1; } || die "not a git checkout"

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
commit=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  dirty=true; build_commit="$commit-dirty"; version="$version-dirty"
  log "the tree has uncommitted changes: releasing $version (commit $build_commit)"
else
  dirty=false; build_commit=$commit
fi
# The commit's time: the binaries' build date, the archives' and image's
# file times. Given to build.rs as FG_BUILD_EPOCH, not SOURCE_DATE_EPOCH,
# which some dependencies' build scripts watch (psm): a new commit would
# rebuild them and everything above them.
epoch=$(git log -1 --format=%ct HEAD)
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
source_url=https://github.com/finalizer-guard/finalizer-guard
registry_name=${registry_name:-${push:-ghcr.io/finalizer-guard}}
image_repo="$registry_name/finalizer-guard"
download_url=${download_url:-$source_url/releases/download/v$version}
# Written into the chart's values.yaml as is: a registry host (a port
# allowed) and a path of lower-case names, as OCI references have.
[[ "$registry_name" =~ ^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$ ]] \
  || die "--registry $registry_name is not a registry and namespace (e.g. ghcr.io/finalizer-guard)"
# Written into the krew manifest and the Homebrew formula as is.
[[ "$download_url" =~ ^https?://[A-Za-z0-9._~:/?\&=%+,\;@!*\(\)\'-]+$ ]] \
  || die "--download-url $download_url is not a plain http(s) URL"

declare -A triple=([linux-amd64]=x86_64-unknown-linux-musl [linux-arm64]=aarch64-unknown-linux-musl
  [darwin-amd64]=x86_64-apple-darwin [darwin-arm64]=aarch64-apple-darwin
  [windows-amd64]=x86_64-pc-windows-gnu)
# bin PLATFORM: the binary archived for it.
bin() {
  local exe=finalizer-guard
  [ "$1" != windows-amd64 ] || exe=finalizer-guard.exe
  if [ -n "$binaries" ]; then echo "$binaries/${triple[$1]}/$exe"; else echo "target/${triple[$1]}/release/$exe"; fi
}
if [ -n "$binaries" ]; then
  for platform in "${!triple[@]}"; do
    b=$(bin "$platform")
    [ -f "$b" ] || die "--binaries: no $b"
    grep -qaF "(commit $build_commit, target ${triple[$platform]}, " "$b" \
      || die "--binaries: $b is not the ${triple[$platform]} binary of commit $build_commit"
  done
  log "the binaries of $binaries (built from $build_commit)"
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
registry_pid=""
pod_tag="localhost/finalizer-guard-release-$$"
cleanup() {
  [ -z "$registry_pid" ] || kill "$registry_pid" 2> /dev/null || true
  podman manifest rm "$pod_tag:index" > /dev/null 2>&1 || true
  podman rmi -f "$pod_tag:amd64" "$pod_tag:arm64" > /dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The tools, built or taken from the cache (the first run builds them).
tool() { scripts/release-tools.sh "$1"; }
cosign=$(tool cosign)
cyclonedx=$(tool cargo-cyclonedx)
deny=$(tool cargo-deny)
helm=$(e2e/helm/build.sh)
PATH="$(dirname "$cyclonedx"):$(dirname "$deny"):$PATH"
export PATH

log "licences: cargo deny check licenses (deny.toml)"
cargo deny --locked check licenses > "$work/deny.log" 2>&1 \
  || { cat "$work/deny.log" >&2; die "a dependency's licence is not allowed (deny.toml)"; }
{
  echo "# finalizer-guard $version: the licence of every crate it is built from"
  echo "# (cargo deny list; checked against deny.toml's allowed licences)"
  cargo deny --locked list --layout crate --format human 2> /dev/null
} > "$out/finalizer-guard-$version-licenses.txt"

# The binaries (scripts/release/build.sh: linux's static, macOS's and
# Windows' CLI), each archived with LICENSE, reproducibly.
if [ -z "$binaries" ]; then scripts/release/build.sh; fi
for platform in linux-amd64 linux-arm64 darwin-amd64 darwin-arm64; do
  dir="$work/archive-$platform"
  mkdir -p "$dir"
  install -m 0755 "$(bin "$platform")" "$dir/finalizer-guard"
  install -m 0644 LICENSE "$dir/LICENSE"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -C "$dir" -c finalizer-guard LICENSE \
    | gzip -n -9 > "$out/finalizer-guard-$version-$platform.tar.gz"
done
# The zip as the tarballs: names sorted, the commit's time, no owner.
python3 - "$out/finalizer-guard-$version-windows-amd64.zip" "$epoch" \
  "$(bin windows-amd64)" LICENSE <<'PY'
import sys, time, zipfile
dest, epoch, exe, licence = sys.argv[1:]
when = time.gmtime(max(int(epoch), 315532800))[:6]  # a zip's dates start in 1980
with zipfile.ZipFile(dest, "w") as z:
    for name, path, mode in sorted([("finalizer-guard.exe", exe, 0o755), ("LICENSE", licence, 0o644)]):
        info = zipfile.ZipInfo(name, date_time=when)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.create_system = 3  # Unix: the mode below is kept
        info.external_attr = (0o100000 | mode) << 16
        z.writestr(info, open(path, "rb").read(), compresslevel=9)
PY

log "SBOM: cargo cyclonedx (CycloneDX 1.5: the crates the binary is built from, build scripts' included)"
rm -f "$work/sbom"*.json
# Written beside Cargo.toml: moved out at once.
cargo cyclonedx --format json --spec-version 1.5 --target all \
  --override-filename "finalizer-guard-sbom-$$" -q >&2
mv "finalizer-guard-sbom-$$.json" "$work/sbom.json"
ca_version=$(dpkg-query -W -f '${Version}' ca-certificates 2> /dev/null || echo unknown)
python3 - "$work/sbom.json" "$out" "$version" "$build_commit" "$created" "$ca_version" "$image_repo" <<'PY'
import json, sys
src, out, version, commit, created, ca_version, image_repo = sys.argv[1:]
bom = json.load(open(src))
# A release's SBOM is reproducible: its serial number and time come from the commit.
import uuid
bom["serialNumber"] = "urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, "finalizer-guard/" + commit))
meta = bom.setdefault("metadata", {})
meta["timestamp"] = created
meta.setdefault("component", {})["version"] = version
json.dump(bom, open(f"{out}/finalizer-guard-{version}.cdx.json", "w"), indent=2, sort_keys=True)
image = json.loads(json.dumps(bom))
image["serialNumber"] = "urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, "finalizer-guard-image/" + commit))
image["metadata"]["component"] = {
    "type": "container", "name": image_repo, "version": version,
    "bom-ref": "image", "licenses": [{"license": {"id": "Apache-2.0"}}],
}
image.setdefault("components", []).insert(0, {
    "type": "application", "name": "finalizer-guard", "version": version,
    "bom-ref": "finalizer-guard-binary", "licenses": [{"license": {"id": "Apache-2.0"}}],
    "properties": [{"name": "path", "value": "/usr/local/bin/finalizer-guard"}],
})
image["components"].append({
    "type": "library", "name": "ca-certificates", "version": ca_version,
    "purl": f"pkg:deb/debian/ca-certificates@{ca_version}?arch=all",
    "bom-ref": "ca-certificates", "licenses": [{"expression": "GPL-2.0-or-later AND MPL-2.0"}],
    "properties": [{"name": "path", "value": "/etc/ssl/certs/ca-certificates.crt"}],
})
json.dump(image, open(f"{out}/finalizer-guard-{version}-image.cdx.json", "w"), indent=2, sort_keys=True)
PY

log "image: linux/amd64 and linux/arm64 from the static binaries (COPY only: nothing runs)"
export CONTAINERS_CONF=${CONTAINERS_CONF:-$(
  c=${FG_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/finalizer-guard-e2e}/image; mkdir -p "$c"
  printf '[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n' > "$c/containers.conf"
  echo "$c/containers.conf")}
# The root file system: Debian's CA bundle (only Mozilla's authorities, not
# this machine's additions), passwd and group with nonroot (65532), /tmp.
rootfs="$work/rootfs"
mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/tmp" "$rootfs/home/nonroot" "$rootfs/usr/local/bin" \
  "$rootfs/usr/share/doc/finalizer-guard"
find /usr/share/ca-certificates/mozilla -name '*.crt' | LC_ALL=C sort | xargs cat \
  > "$rootfs/etc/ssl/certs/ca-certificates.crt"
[ -s "$rootfs/etc/ssl/certs/ca-certificates.crt" ] || die "no CA certificates (Debian: apt-get install ca-certificates)"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
  > "$rootfs/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' > "$rootfs/etc/group"
install -m 0644 LICENSE "$rootfs/usr/share/doc/finalizer-guard/LICENSE"
chmod 1777 "$rootfs/tmp"; chmod 0755 "$rootfs/home/nonroot"
podman manifest create "$pod_tag:index" > /dev/null
for arch in amd64 arm64; do
  ctx="$work/image-$arch"
  cp -a "$rootfs" "$ctx"
  install -m 0755 "$(bin "linux-$arch")" "$ctx/usr/local/bin/finalizer-guard"
  chown -R 0:0 "$ctx"; chown 65532:65532 "$ctx/home/nonroot"
  tar --sort=name --numeric-owner --mtime="@$epoch" -C "$ctx" -c . > "$work/rootfs-$arch.tar"
  mkdir -p "$work/context-$arch"
  mv "$work/rootfs-$arch.tar" "$work/context-$arch/rootfs.tar"
  cp scripts/release/Containerfile "$work/context-$arch/Containerfile"
  podman build --quiet --platform "linux/$arch" --timestamp "$epoch" \
    --label "org.opencontainers.image.source=$source_url" \
    --label "org.opencontainers.image.revision=$build_commit" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.created=$created" \
    -t "$pod_tag:$arch" "$work/context-$arch" > /dev/null
  podman manifest add "$pod_tag:index" "containers-storage:$pod_tag:$arch" > /dev/null
done

# A registry to sign in: ours on a loopback port, or the one published to.
if [ -n "$push" ]; then
  reg=$push
  tls=(--tls-verify=true); helm_http=()
else
  registry_bin=$(tool registry)
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  mkdir -p "$work/registry"
  printf 'version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
    "$work/registry" "$port" > "$work/registry.yml"
  "$registry_bin" serve "$work/registry.yml" > "$work/registry.log" 2>&1 &
  registry_pid=$!
  for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$port/v2/" > /dev/null 2>&1 && break
    kill -0 "$registry_pid" 2> /dev/null || { cat "$work/registry.log" >&2; die "the registry did not start"; }
    sleep 0.1
  done
  reg=127.0.0.1:$port
  tls=(--tls-verify=false); helm_http=(--plain-http)
fi
podman manifest push --quiet --all --format oci "${tls[@]}" --digestfile "$work/image.digest" \
  "$pod_tag:index" "docker://$reg/finalizer-guard:$version" > /dev/null
image_digest=$(cat "$work/image.digest")
echo "$image_digest" > "$out/image.digest"
log "image index $image_digest"

log "chart: finalizer-guard-$version.tgz (image $image_repo, Artifact Hub annotations)"
chart="$work/chart/finalizer-guard"
mkdir -p "$work/chart"
cp -a charts/finalizer-guard "$chart"
changes=$(python3 scripts/release/changes.py CHANGELOG.md)
sign_key=""
if ! $keyless; then
  cp "$pub" "$out/cosign.pub"
  fingerprint=$(openssl pkey -pubin -in "$pub" -outform DER 2> /dev/null | sha256sum | cut -d' ' -f1)
  sign_key="fingerprint: $fingerprint
url: $download_url/cosign.pub"
fi
python3 scripts/release/chart.py "$chart" "$version" "$image_repo" "$image_digest" "$changes" "$sign_key" "$source_url"
"$helm" lint --strict "$chart" > /dev/null
"$helm" package "$chart" --destination "$work" > /dev/null
# helm push names the chart's creation time after the file's: the commit's,
# so anyone's `helm push` of this file makes the manifest signed here.
touch -d "@$epoch" "$work/finalizer-guard-$version.tgz"
cp -p "$work/finalizer-guard-$version.tgz" "$out/"
"$helm" push "${helm_http[@]}" "$out/finalizer-guard-$version.tgz" "oci://$reg/charts" > "$work/push.txt" 2>&1 \
  || { cat "$work/push.txt" >&2; die "helm push failed"; }
chart_digest=$(sed -n 's/^Digest: //p' "$work/push.txt")
[ -n "$chart_digest" ] || { cat "$work/push.txt" >&2; die "helm push printed no digest"; }
echo "$chart_digest" > "$out/chart.digest"
log "chart $chart_digest"
cat > "$out/artifacthub-repo.yml" <<EOF
# Artifact Hub's repository metadata: push it as the tag artifacthub.io of
# oci://$registry_name/charts/finalizer-guard (docs/install.md).
repositoryID: null
owners: []
EOF

log "provenance: SLSA v1"
python3 - "$out/provenance.json" "$build_commit" "$created" "$version" "$source_url" "$(rustc --version)" \
  "${GITHUB_SERVER_URL:-}" "${GITHUB_REPOSITORY:-}" "${GITHUB_RUN_ID:-}" "${GITHUB_RUN_ATTEMPT:-}" "${GITHUB_REF:-}" \
  "$(date -u -d "@$started" +%Y-%m-%dT%H:%M:%SZ)" <<'PY'
import json, sys
path, commit, created, version, source, rustc, server, repository, run, attempt, ref, started = sys.argv[1:]
builder = f"{server}/{repository}/.github/workflows/release.yml@{ref}" if run else "scripts/release.sh (local)"
json.dump({
    "buildDefinition": {
        "buildType": source + "/blob/main/scripts/release.sh",
        "externalParameters": {"source": {"uri": "git+" + source, "digest": {"gitCommit": commit.removesuffix("-dirty")}},
                               "dirty": commit.endswith("-dirty"), "version": version},
        "internalParameters": {"rustc": rustc, "commitTime": created},
        "resolvedDependencies": [{"uri": "git+" + source, "digest": {"gitCommit": commit.removesuffix("-dirty")}}],
    },
    "runDetails": {
        "builder": {"id": builder},
        "metadata": {"invocationId": f"{server}/{repository}/actions/runs/{run}/attempts/{attempt}" if run else "",
                     "startedOn": started},
    },
}, open(path, "w"), indent=2, sort_keys=True)
PY

log "cosign: sign and attest the image index and the chart"
if $keyless; then
  signing=(--yes)
else
  # A key pair's signatures: no transparency log, nothing fetched.
  signing=(--key "$key" --tlog-upload=false --yes)
  export TUF_ROOT=${TUF_ROOT:-$work/tuf}
fi
image_ref="$reg/finalizer-guard@$image_digest"
chart_ref="$reg/charts/finalizer-guard@$chart_digest"
"$cosign" sign "${signing[@]}" "$image_ref" 2> "$work/cosign.log" || { cat "$work/cosign.log" >&2; die "cosign sign (image) failed"; }
"$cosign" attest "${signing[@]}" --type cyclonedx --predicate "$out/finalizer-guard-$version-image.cdx.json" "$image_ref" \
  2> "$work/cosign.log" || { cat "$work/cosign.log" >&2; die "cosign attest (image SBOM) failed"; }
"$cosign" attest "${signing[@]}" --type slsaprovenance1 --predicate "$out/provenance.json" "$image_ref" \
  2> "$work/cosign.log" || { cat "$work/cosign.log" >&2; die "cosign attest (image provenance) failed"; }
"$cosign" sign "${signing[@]}" "$chart_ref" 2> "$work/cosign.log" || { cat "$work/cosign.log" >&2; die "cosign sign (chart) failed"; }
"$cosign" attest "${signing[@]}" --type slsaprovenance1 --predicate "$out/provenance.json" "$chart_ref" \
  2> "$work/cosign.log" || { cat "$work/cosign.log" >&2; die "cosign attest (chart provenance) failed"; }
"$cosign" save --dir "$out/image" "$image_ref" 2> "$work/cosign.log" || { cat "$work/cosign.log" >&2; die "cosign save (image) failed"; }
"$cosign" save --dir "$out/chart" "$chart_ref" 2> "$work/cosign.log" || { cat "$work/cosign.log" >&2; die "cosign save (chart) failed"; }

log "krew: finalizer-guard.yaml"
python3 scripts/release/krew.py "$out" "$version" "$download_url" "$source_url" > "$out/finalizer-guard.yaml"
log "Homebrew: finalizer-guard.rb (a tap's formula)"
python3 scripts/release/homebrew.py "$out" "$version" "$download_url" "$source_url" > "$out/finalizer-guard.rb"

# Each archive, then SHA256SUMS (which lists the archives and their
# bundles), signed as a blob: FILE.sigstore.json is a Sigstore bundle (the
# signature, and keyless the certificate and Rekor's entry), what `cosign
# verify-blob --bundle FILE.sigstore.json FILE` checks (docs/install.md).
sign_blob() {
  "$cosign" sign-blob "${signing[@]}" --new-bundle-format --bundle "$1.sigstore.json" "$1" \
    > /dev/null 2> "$work/cosign.log" || { cat "$work/cosign.log" >&2; die "cosign sign-blob $(basename "$1") failed"; }
}
shopt -s nullglob
archives=("$out"/finalizer-guard-*.tar.gz "$out"/finalizer-guard-*.zip "$out"/finalizer-guard-*.tgz)
shopt -u nullglob
[ ${#archives[@]} -gt 0 ] || die "no archive in $out to sign"
log "cosign sign-blob: ${#archives[@]} archives, then SHA256SUMS (FILE.sigstore.json)"
for archive in "${archives[@]}"; do sign_blob "$archive"; done

(cd "$out" && find . -maxdepth 1 -type f ! -name SHA256SUMS ! -name SHA256SUMS.sigstore.json -printf '%f\n' \
  | LC_ALL=C sort | xargs sha256sum) > "$work/SHA256SUMS"
mv "$work/SHA256SUMS" "$out/SHA256SUMS"
sign_blob "$out/SHA256SUMS"
log "done: $out ($version, commit $build_commit$($dirty && echo ', a dirty tree'))"
(cd "$out" && du -sh -- * | sed 's/^/  /') >&2
