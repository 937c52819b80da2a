# syntax=docker/dockerfile:1
#
# finalizer-guard's image: a static (musl) binary on an empty base, with
# Debian's CA certificates and a non-root user; nothing else (no libc, no
# shell, no package manager). The same image a release publishes
# (scripts/release.sh assembles it from the release's binaries with
# scripts/release/Containerfile), for either architecture:
#   docker build -t REGISTRY/finalizer-guard:TAG .
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/finalizer-guard:TAG --push .
#
# The binary is cross-compiled on the build machine's architecture
# ($BUILDPLATFORM) for the target's ($TARGETARCH): no emulation, no arm64
# code runs to build the arm64 image. The two base images are build
# arguments, for a registry mirror or a pinned digest (--build-arg
# RUST_IMAGE=... --build-arg DEBIAN_IMAGE=...); scripts/build-image.sh builds
# both from Debian 12's packages where they cannot be pulled, and then this
# file with podman. FG_BUILD_COMMIT and FG_BUILD_EPOCH (seconds), if given, are
# what `finalizer-guard version` says (the build context has no .git).

ARG RUST_IMAGE=rust:1.95-slim-bookworm
ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM --platform=$BUILDPLATFORM ${RUST_IMAGE} AS build
ARG TARGETARCH
# musl-gcc for amd64's C and assembly (ring), Debian's aarch64 cross
# compiler and linker for arm64's; the musl targets' std from rustup (or
# already in the toolchain).
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends musl-tools gcc-aarch64-linux-gnu libc6-dev-arm64-cross > /dev/null \
 && rm -rf /var/lib/apt/lists/*
ENV CC_x86_64_unknown_linux_musl=musl-gcc \
    CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
WORKDIR /src
# Everything cargo needs to read the manifest and build (.dockerignore keeps
# target/, certificates and the rest out of the context).
COPY . .
ARG FG_BUILD_COMMIT=""
ARG FG_BUILD_EPOCH=""
# Cache mounts keep the registry and compiled dependencies between builds
# (BuildKit, Docker's default builder since 23.0): an edit to src/ rebuilds
# the crate, not its dependencies. --locked: exactly Cargo.lock's versions.
# The binary is copied out because the target cache is not part of the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    case "$TARGETARCH" in \
      amd64) triple=x86_64-unknown-linux-musl ;; \
      arm64) triple=aarch64-unknown-linux-musl ;; \
      *) echo "unsupported architecture: $TARGETARCH (amd64, arm64)" >&2; exit 1 ;; \
    esac \
 && { [ -d "$(rustc --print sysroot)/lib/rustlib/$triple" ] || rustup target add "$triple"; } \
 && CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked --bin finalizer-guard --target "$triple" \
 && install -D -m 0755 "target/$triple/release/finalizer-guard" /out/finalizer-guard

# The root file system: Debian's CA bundle (Mozilla's authorities), passwd
# and group with nonroot (65532), /home/nonroot, /tmp, the licence.
FROM --platform=$BUILDPLATFORM ${DEBIAN_IMAGE} AS rootfs
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ca-certificates > /dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /rootfs/etc/ssl/certs /rootfs/tmp /rootfs/home/nonroot /rootfs/usr/share/doc/finalizer-guard \
 && find /usr/share/ca-certificates/mozilla -name '*.crt' | LC_ALL=C sort | xargs cat > /rootfs/etc/ssl/certs/ca-certificates.crt \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /rootfs/etc/passwd \
 && printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' > /rootfs/etc/group \
 && chmod 1777 /rootfs/tmp \
 && chown 65532:65532 /rootfs/home/nonroot
# The licence travels with the binary (Apache-2.0, section 4).
COPY LICENSE /rootfs/usr/share/doc/finalizer-guard/LICENSE

FROM scratch
COPY --from=rootfs /rootfs/ /
COPY --from=rootfs --chown=65532:65532 /rootfs/home/nonroot /home/nonroot
COPY --from=build /out/finalizer-guard /usr/local/bin/finalizer-guard
LABEL org.opencontainers.image.title="finalizer-guard" \
      org.opencontainers.image.description="A validating admission webhook that guards metadata.finalizers" \
      org.opencontainers.image.source="https://github.com/finalizer-guard/finalizer-guard" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
# Numeric, so the kubelet can check runAsNonRoot without a passwd lookup;
# the Deployment sets the same user.
USER 65532:65532
WORKDIR /home/nonroot
# 8443: the webhook (TLS). 9090: /metrics, /healthz, /readyz (plain HTTP).
EXPOSE 8443 9090
ENTRYPOINT ["/usr/local/bin/finalizer-guard"]
# Without arguments: serve in dev mode, with a generated certificate. The
# Deployment passes `serve --policy ... --tls-cert ... --tls-key ...`.
CMD ["serve"]
