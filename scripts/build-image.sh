#!/usr/bin/env bash
# Builds finalizer-guard's image from the repository's Dockerfile with podman,
# then runs it: `--version`, and `serve` until /readyz answers.
#
#   scripts/build-image.sh [IMAGE]     # default localhost/finalizer-guard:dev
#
# The Dockerfile's two base images are build arguments. Where they can be
# pulled, `podman build .` or `docker build .` uses the published ones. Here
# they are built first, from Debian 12's own packages, and cached:
#   BUILDER  localhost/finalizer-guard-base/rust:VERSION-slim-bookworm-musl
#            what rust:VERSION-slim-bookworm is: Debian 12 (debootstrap,
#            minbase) with ca-certificates, gcc and libc6-dev, and the Rust
#            toolchain of this machine (rustc, cargo, std for the host and
#            for both musl targets, added with rustup first) in
#            /usr/local/rustup, CARGO_HOME=/usr/local/cargo; and the
#            certificate authorities this machine adds to Debian's
#            (/usr/local/share/ca-certificates), so that cargo and apt reach
#            crates.io and Debian through the same TLS-inspecting proxy, if any.
#   DEBIAN   localhost/finalizer-guard-base/debian:bookworm-build, the same
#            Debian 12 without the toolchain: where the Dockerfile takes the
#            CA bundle from (the image itself is FROM scratch).
# FG_IMAGE_BUILDER / FG_IMAGE_DEBIAN name other base images instead (then
# nothing is built for them). The bases are rebuilt when their tag is absent
# from podman's storage: `podman rmi` one to rebuild it. FG_IMAGE_PLATFORM
# (default: this machine's) builds for linux/amd64 or linux/arm64, cross-
# compiled: nothing of the other architecture runs.
#
# podman runs with runc and cgroupfs (the containers.conf written beside the
# cache), and the build reaches crates.io over the host's network.
set -euo pipefail
# debootstrap: where Debian puts them, whatever the caller's PATH.
export PATH="$PATH:/usr/sbin:/sbin"
cd "$(dirname "$0")/.."
repo=$(pwd)
image=${1:-localhost/finalizer-guard:dev}
cache=${FG_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/finalizer-guard-e2e}/image
mkdir -p "$cache"

log() { printf 'build-image: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
command -v podman > /dev/null || die "podman is not installed (Debian: apt-get install podman runc)"

# crun refuses hybrid cgroup hierarchies; the default nofile ulimit may be
# above the machine's hard limit.
cat > "$cache/containers.conf" <<'EOF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
export CONTAINERS_CONF="$cache/containers.conf"

rust_version=$(rustc --version | awk '{print $2}')
rust_minor=${rust_version%.*}
builder=${FG_IMAGE_BUILDER:-localhost/finalizer-guard-base/rust:$rust_minor-slim-bookworm-musl}
debian=${FG_IMAGE_DEBIAN:-localhost/finalizer-guard-base/debian:bookworm-build}
platform=${FG_IMAGE_PLATFORM:-}

# Debian 12, minbase, with what rust:*-slim-bookworm adds for linking.
if [ -z "${FG_IMAGE_DEBIAN:-}" ] && ! podman image exists "$debian"; then
  command -v debootstrap > /dev/null || die "debootstrap is not installed (Debian: apt-get install debootstrap)"
  log "debootstrap bookworm (minbase, ca-certificates gcc libc6-dev)"
  root="$cache/debian-rootfs"
  rm -rf "$root"
  debootstrap --variant=minbase --include=ca-certificates,gcc,libc6-dev bookworm "$root" \
    http://deb.debian.org/debian > "$cache/debootstrap.log" 2>&1 \
    || { tail -n 20 "$cache/debootstrap.log" >&2; die "debootstrap failed (log: $cache/debootstrap.log)"; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar --numeric-owner -C "$root" -c . | podman import --change 'CMD ["bash"]' - "$debian" > /dev/null
  rm -rf "$root"
fi

if [ -z "${FG_IMAGE_BUILDER:-}" ] && ! podman image exists "$builder"; then
  rustup target add x86_64-unknown-linux-musl aarch64-unknown-linux-musl >&2
  sysroot=$(rustc --print sysroot)
  log "builder $builder: $debian + the toolchain in $sysroot"
  ctx="$cache/builder-context"
  rm -rf "$ctx"; mkdir -p "$ctx/toolchain" "$ctx/ca"
  cp /usr/local/share/ca-certificates/*.crt "$ctx/ca/" 2> /dev/null || true
  # bin, lib (rustc's own libraries, the host's std and the musl targets'), libexec, etc: no docs.
  for part in bin lib libexec etc; do
    [ -e "$sysroot/$part" ] && cp -a "$sysroot/$part" "$ctx/toolchain/"
  done
  cat > "$ctx/Containerfile" <<EOF
FROM $debian
ENV RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo \\
    PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    RUST_VERSION=$rust_version
COPY toolchain /usr/local/rustup/toolchains/$rust_version-x86_64-unknown-linux-gnu
COPY ca /usr/local/share/ca-certificates
RUN update-ca-certificates > /dev/null \\
 && mkdir -p /usr/local/cargo/bin \\
 && for tool in cargo rustc rustdoc; do \\
      ln -s /usr/local/rustup/toolchains/$rust_version-x86_64-unknown-linux-gnu/bin/\$tool /usr/local/cargo/bin/\$tool; \\
    done \\
 && rustc --version && cargo --version
EOF
  podman build --quiet -t "$builder" "$ctx" > /dev/null
  rm -rf "$ctx"
fi

log "podman build -t $image (RUST_IMAGE=$builder, DEBIAN_IMAGE=$debian${platform:+, --platform $platform})"
start=$(date +%s)
commit=$(git rev-parse HEAD 2> /dev/null || echo unknown)
[ -z "$(git status --porcelain --untracked-files=no 2> /dev/null)" ] || commit="$commit-dirty"
podman build --network host --layers ${platform:+--platform "$platform"} \
  --build-arg "RUST_IMAGE=$builder" --build-arg "DEBIAN_IMAGE=$debian" \
  --build-arg "FG_BUILD_COMMIT=$commit" \
  --build-arg "FG_BUILD_EPOCH=$(git log -1 --format=%ct 2> /dev/null || date +%s)" \
  -t "$image" "$repo" >&2
# Another architecture's image is built, not run.
if [ -n "$platform" ] && [ "$platform" != "linux/$(podman info --format '{{.Host.Arch}}')" ]; then
  log "$image built for $platform in $(( $(date +%s) - start )) s (not run here)"
  echo "$image"; exit 0
fi
log "built in $(( $(date +%s) - start )) s"

# It runs: the version, then `serve` (dev mode, its own certificate) until
# /readyz answers, as the Deployment's readiness probe asks.
version=$(podman run --rm --network none "$image" --version)
log "$image: $version"
want="finalizer-guard $(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1) (commit "
[ "${version#"$want"}" != "$version" ] || die "--version printed $version"
admin=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
name=fg-image-smoke-$$
podman run -d --rm --name "$name" --network host --read-only --cap-drop ALL \
  "$image" serve --listen 127.0.0.1:0 --admin-listen "127.0.0.1:$admin" > /dev/null
ready=false
for _ in $(seq 1 100); do
  if curl -fsS "http://127.0.0.1:$admin/readyz" > /dev/null 2>&1; then ready=true; break; fi
  sleep 0.1
done
user=$(podman inspect --format '{{.Config.User}}' "$image")
logs=$(podman logs "$name" 2>&1 || true)
podman stop -t 10 "$name" > /dev/null 2>&1 || true
$ready || { printf '%s\n' "$logs" >&2; die "serve in $image never answered /readyz"; }
[ "$user" = "65532:65532" ] || die "the image runs as '$user', not 65532:65532"
size=$(podman image inspect --format '{{.Size}}' "$image")
log "$image serves (/readyz answered), runs as $user, $(( size / 1024 / 1024 )) MiB ($size bytes)"
echo "$image"
