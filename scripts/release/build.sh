#!/usr/bin/env bash
# Builds the release's binaries into target/TRIPLE/release, as
# scripts/release.sh archives them:
#
#   scripts/release/build.sh [PLATFORM ...]   # default: all five
#
#   linux-amd64    x86_64-unknown-linux-musl    static (musl-gcc for ring's C)
#   linux-arm64    aarch64-unknown-linux-musl   static (aarch64-linux-gnu-gcc)
#   darwin-amd64   x86_64-apple-darwin          zig (cargo zigbuild) as C compiler
#   darwin-arm64   aarch64-apple-darwin         and linker; no macOS SDK
#   windows-amd64  x86_64-pc-windows-gnu        mingw-w64 (finalizer-guard.exe)
#
# Each binary names its commit (HASH, or HASH-dirty for a tree with
# uncommitted changes) and the commit's time, embeds its dependency list
# (cargo auditable) and holds no path of this machine: the same binary from
# any checkout of the commit. scripts/release.sh runs this first; run ahead
# of it (as .ci/run does, in the background) it leaves release.sh's cargo
# nothing to do, the commit and flags being the same.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

die() { printf 'release/build: %s\n' "$*" >&2; exit 1; }
log() { printf 'release/build: [%4d s] %s\n' "$(( $(date +%s) - started ))" "$*" >&2; }
started=$(date +%s)

declare -A triple=([linux-amd64]=x86_64-unknown-linux-musl [linux-arm64]=aarch64-unknown-linux-musl
  [darwin-amd64]=x86_64-apple-darwin [darwin-arm64]=aarch64-apple-darwin
  [windows-amd64]=x86_64-pc-windows-gnu)
platforms=("$@")
[ ${#platforms[@]} -gt 0 ] || platforms=(linux-amd64 linux-arm64 darwin-amd64 darwin-arm64 windows-amd64)
declare -A want=()
for p in "${platforms[@]}"; do
  case "$p" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  esac
  [ -n "${triple[$p]:-}" ] || die "unknown platform '$p' (one of: ${!triple[*]})"
  want[$p]=1
done
{ command -v git > /dev/null && git rev-parse HEAD > /dev/null 2>&1; } || die "not a git checkout"

commit=$(git rev-parse HEAD)
build_commit=$commit
[ -z "$(git status --porcelain --untracked-files=no)" ] || build_commit="$commit-dirty"
# The commit's time: the binaries' build date. Given to build.rs as
# FG_BUILD_EPOCH, not SOURCE_DATE_EPOCH, which some dependencies' build
# scripts watch (psm): a new commit would rebuild them and everything above.
epoch=$(git log -1 --format=%ct HEAD)
# No path of this machine in the binaries (panic locations).
rustflags="--remap-path-prefix=$repo=. --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=cargo${RUSTFLAGS:+ $RUSTFLAGS}"

export CC_x86_64_unknown_linux_musl=${CC_x86_64_unknown_linux_musl:-musl-gcc}
export CC_aarch64_unknown_linux_musl=${CC_aarch64_unknown_linux_musl:-aarch64-linux-gnu-gcc}
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER:-aarch64-linux-gnu-gcc}
export CC_x86_64_pc_windows_gnu=${CC_x86_64_pc_windows_gnu:-x86_64-w64-mingw32-gcc}
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=${CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER:-x86_64-w64-mingw32-gcc}
declare -A debian=([linux-amd64]=musl-tools [linux-arm64]=gcc-aarch64-linux-gnu
  [windows-amd64]=gcc-mingw-w64-x86-64)
for p in "${!want[@]}"; do
  t=${triple[$p]}
  if [ -n "${debian[$p]:-}" ]; then
    cc_var="CC_${t//-/_}"
    command -v "${!cc_var}" > /dev/null || die "no C compiler for $t (Debian: apt-get install ${debian[$p]})"
  fi
  rustup target list --installed 2> /dev/null | grep -qx "$t" || rustup target add "$t" >&2
done

auditable=$(scripts/release-tools.sh cargo-auditable)
PATH="$(dirname "$auditable"):$PATH"
export PATH
# One cargo run per C toolchain; the build scripts and proc macros built for
# this machine (target/release) are shared by all of them.
build() { # build STRIP TRIPLE...: cargo auditable build of the binary for each
  local strip=$1; shift
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  log "cargo auditable build --release $*"
  FG_BUILD_COMMIT=$build_commit FG_BUILD_EPOCH=$epoch FG_BUILD_AUDITABLE=1 CARGO_PROFILE_RELEASE_STRIP=$strip \
    RUSTFLAGS="$rustflags" nice -n 19 cargo auditable build --release --locked --bin finalizer-guard "${targets[@]}" >&2
}

for p in linux-amd64 linux-arm64; do
  [ -n "${want[$p]:-}" ] || continue
  build symbols "${triple[$p]}"
  bin="target/${triple[$p]}/release/finalizer-guard"
  if file "$bin" | grep -q 'dynamically linked'; then die "$bin is dynamically linked"; fi
done

if [ -n "${want[darwin-amd64]:-}${want[darwin-arm64]:-}" ]; then
  darwin=()
  for p in darwin-amd64 darwin-arm64; do [ -z "${want[$p]:-}" ] || darwin+=("${triple[$p]}"); done
  zig=$(scripts/release-tools.sh zig)
  zigbuild=$(scripts/release-tools.sh cargo-zigbuild)
  # The frameworks linked (Security, CoreFoundation: the system's
  # certificates) as text stubs: zig ships macOS's libc, not its SDK.
  frameworks="$repo/target/macos-frameworks"
  python3 scripts/release/macos-frameworks.py "$frameworks"
  # cargo auditable runs `cargo zigbuild`, which runs `cargo build` with zig
  # as the C compiler and linker: the dependency list is embedded as above.
  # Not stripped afterwards: a strip of this machine would break the
  # signature zig's linker gives each binary (arm64 macOS runs only signed ones).
  log "cargo auditable zigbuild --release ${darwin[*]}"
  targets=()
  for t in "${darwin[@]}"; do targets+=(--target "$t"); done
  # MACOSX_DEPLOYMENT_TARGET: the oldest macOS the binaries load on (zig's
  # own default is its SDK's, 15.0); 11.0 is the first on Apple silicon.
  FG_BUILD_COMMIT=$build_commit FG_BUILD_EPOCH=$epoch FG_BUILD_AUDITABLE=1 CARGO_PROFILE_RELEASE_STRIP=none \
    MACOSX_DEPLOYMENT_TARGET=11.0 \
    RUSTFLAGS="$rustflags -C link-arg=-F$frameworks" PATH="$(dirname "$zig"):$(dirname "$zigbuild"):$PATH" \
    nice -n 19 cargo auditable zigbuild --release --locked --bin finalizer-guard "${targets[@]}" >&2
fi

[ -z "${want[windows-amd64]:-}" ] || build symbols "${triple[windows-amd64]}"
log "built: ${platforms[*]}"
