# Shared by scripts/load.sh and scripts/soak.sh: sourced, not run.
# Sets `target`, `sim`, `work` (a temporary folder removed on exit) and
# `pids` (processes killed and reaped on exit), and provides `make_certs`.

target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
sim=$("$shared/tools/apiserver-sim/build.sh")

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# make_certs BIN: serving certificates for the default Service names in $work/certs.
make_certs() {
  "$1" certs --service finalizer-guard --namespace finalizer-guard --out "$work/certs" > /dev/null 2>&1
}
