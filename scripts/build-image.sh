#!/usr/bin/env bash
# Builds finalizer-guard's image from the repository's Dockerfile with podman,
# then runs it: `--version`, and `serve` until /readyz answers.
#
#   scripts/build-image.sh [IMAGE]     # default localhost/finalizer-guard:dev
#
# The Dockerfile's two base images are build arguments. Where they can be
# pulled, `podman build .` or `docker build .` uses the published ones. Here
# they are built first, from Debian 12's own packages, and cached:
#   BUILDER  localhost/finalizer-guard-base/rust:VERSION-slim-bookworm
#            what rust:VERSION-slim-bookworm is: Debian 12 (debootstrap,
#            minbase) with ca-certificates, gcc and libc6-dev, and the Rust
#            toolchain of this machine (rustc, cargo, std for the host) in
#            /usr/local/rustup, CARGO_HOME=/usr/local/cargo; and the
#            certificate authorities this machine adds to Debian's
#            (/usr/local/share/ca-certificates), so that cargo reaches
#            crates.io through the same TLS-inspecting proxy, if any.
#   RUNTIME  localhost/finalizer-guard-base/distroless-cc-debian12:nonroot
#            what gcr.io/distroless/cc-debian12:nonroot is: the files of the
#            Debian 12 packages base-files, netbase, tzdata, ca-certificates
#            (the bundle), libc6, libssl3, gcc-12-base, libgcc-s1, libgomp1
#            and libstdc++6, each package's control file in
#            /var/lib/dpkg/status.d (as scanners read distroless), passwd and
#            group with root, nobody and nonroot (65532), /home/nonroot,
#            /tmp; no shell, no package manager; USER 65532, WORKDIR
#            /home/nonroot, SSL_CERT_FILE set.
# FG_IMAGE_BUILDER / FG_IMAGE_RUNTIME name other base images instead (then
# nothing is built for them). The bases are rebuilt when their tag is absent
# from podman's storage: `podman rmi` one to rebuild it.
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
builder=${FG_IMAGE_BUILDER:-localhost/finalizer-guard-base/rust:$rust_minor-slim-bookworm}
runtime=${FG_IMAGE_RUNTIME:-localhost/finalizer-guard-base/distroless-cc-debian12:nonroot}
debian=localhost/finalizer-guard-base/debian:bookworm-build

# Debian 12, minbase, with what rust:*-slim-bookworm adds for linking.
if [ -z "${FG_IMAGE_BUILDER:-}" ] && ! podman image exists "$debian"; then
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
  sysroot=$(rustc --print sysroot)
  log "builder $builder: $debian + the toolchain in $sysroot"
  ctx="$cache/builder-context"
  rm -rf "$ctx"; mkdir -p "$ctx/toolchain" "$ctx/ca"
  cp /usr/local/share/ca-certificates/*.crt "$ctx/ca/" 2> /dev/null || true
  # bin, lib (rustc's own libraries and the host's std), libexec, etc: no docs.
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

if [ -z "${FG_IMAGE_RUNTIME:-}" ] && ! podman image exists "$runtime"; then
  log "runtime $runtime: Debian 12's packages, as distroless/cc-debian12 is made"
  out="$cache/runtime-build"
  rm -rf "$out"; mkdir -p "$out"
  # Inside Debian 12 itself, so the packages are bookworm's whatever the host is.
  podman run --rm --network host -v "$out:/out" "$debian" bash -euo pipefail -c '
    pkgs="base-files netbase tzdata ca-certificates libc6 libssl3 gcc-12-base libgcc-s1 libgomp1 libstdc++6"
    apt-get update -qq
    mkdir -p /tmp/debs /root
    cd /tmp/debs && apt-get download -qq $pkgs
    root=/root/rootfs
    mkdir -p $root/var/lib/dpkg/status.d
    for deb in /tmp/debs/*.deb; do
      name=$(dpkg-deb -f "$deb" Package)
      dpkg-deb -x "$deb" $root
      dpkg-deb -f "$deb" > $root/var/lib/dpkg/status.d/$name
      dpkg-deb -f "$deb" Package Version >&2
    done
    # What update-ca-certificates would make, without running it.
    mkdir -p $root/etc/ssl/certs
    find $root/usr/share/ca-certificates -name "*.crt" | sort | xargs cat > $root/etc/ssl/certs/ca-certificates.crt
    printf "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n" > $root/etc/passwd
    printf "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n" > $root/etc/group
    mkdir -p $root/tmp $root/root $root/home/nonroot
    chmod 1777 $root/tmp; chmod 700 $root/root $root/home/nonroot
    chown 65532:65532 $root/home/nonroot
    tar --numeric-owner -C $root -c . > /out/rootfs.tar
  ' 2> "$out/packages.txt" || { cat "$out/packages.txt" >&2; die "assembling the runtime base failed"; }
  podman import \
    --change 'USER 65532' --change 'WORKDIR /home/nonroot' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    "$out/rootfs.tar" "$runtime" > /dev/null
  log "runtime packages: $(tr '\n' ' ' < "$out/packages.txt")"
  rm -rf "$out"
fi

log "podman build -t $image (RUST_IMAGE=$builder, RUNTIME_IMAGE=$runtime)"
start=$(date +%s)
podman build --network host --layers \
  --build-arg "RUST_IMAGE=$builder" --build-arg "RUNTIME_IMAGE=$runtime" \
  -t "$image" "$repo" >&2
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
