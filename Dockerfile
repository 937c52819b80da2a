# syntax=docker/dockerfile:1
#
# finalizer-guard's image: a release build on Debian 12, run on distroless.
#   docker build -t REGISTRY/finalizer-guard:TAG .
#
# The two base images are build arguments, for a registry mirror or a
# pinned digest (--build-arg RUST_IMAGE=... --build-arg RUNTIME_IMAGE=...).
# scripts/build-image.sh builds both from Debian 12's packages where they
# cannot be pulled, and then this file with podman.
#
# Why distroless/cc and not a static musl binary on scratch: the binary links
# glibc and libgcc_s (Rust's std; *ring* builds its C and assembly with the
# same toolchain), which distroless/cc-debian12 ships and nothing else: no
# shell, no package manager. A musl build would need a second target in the
# builder and musl's allocator, which is much slower under concurrent load.
# The builder is bookworm because the runtime is Debian 12: a binary built on
# a newer glibc may need symbols Debian 12 lacks.

ARG RUST_IMAGE=rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS build
WORKDIR /src
# Everything cargo needs to read the manifest and build (.dockerignore keeps
# target/, certificates and the rest out of the context).
COPY . .
# Cache mounts keep the registry and compiled dependencies between builds
# (BuildKit, Docker's default builder since 23.0): an edit to src/ rebuilds
# the crate, not its dependencies. --locked: exactly Cargo.lock's versions.
# The binary is copied out because the target cache is not part of the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked --bin finalizer-guard \
 && install -D -m 0755 target/release/finalizer-guard /out/finalizer-guard

FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="finalizer-guard" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/finalizer-guard /usr/local/bin/finalizer-guard
# The licence travels with the binary (Apache-2.0, section 4).
COPY LICENSE /usr/share/doc/finalizer-guard/LICENSE
# Numeric, so the kubelet can check runAsNonRoot without a passwd lookup;
# the Deployment sets the same user.
USER 65532:65532
# 8443: the webhook (TLS). 9090: /metrics, /healthz, /readyz (plain HTTP).
EXPOSE 8443 9090
ENTRYPOINT ["/usr/local/bin/finalizer-guard"]
# Without arguments: serve in dev mode, with a generated certificate. The
# Deployment passes `serve --policy ... --tls-cert ... --tls-key ...`.
CMD ["serve"]
