#!/usr/bin/env bash
# Seeds the fuzz corpora from the repository's own inputs (needs jq):
#   corpus/review: examples/reviews/*.json, the `review` (or `raw` body) of every
#     case file in tests/fixtures/cases*/, the recorded reviews in
#     ../shared/fixtures/recorded when present, and two two-person approval
#     reviews made from the override example; compact JSON, none over 64 KiB.
#   corpus/policy: the repository's policy files.
set -euo pipefail
cd "$(dirname "$0")"
root=..
shared=${SHARED_DIR:-$root/../shared}
max_bytes=65536
mkdir -p corpus/review corpus/policy

# seed NAME < BODY: keeps a body small enough to mutate quickly.
seed() {
  local tmp
  tmp=$(mktemp)
  cat > "$tmp"
  if [ "$(wc -c < "$tmp")" -le "$max_bytes" ]; then mv "$tmp" "corpus/review/$1"; else rm "$tmp"; fi
}

for f in "$root"/examples/reviews/*.json; do
  jq -c . "$f" | seed "example-$(basename "$f")"
done
for f in "$root"/tests/fixtures/cases*/*.json; do
  name="case-$(basename "$(dirname "$f")")-$(basename "$f")"
  if jq -e 'has("review")' "$f" > /dev/null; then
    jq -c .review "$f" | seed "$name"
  else
    jq -j .raw "$f" | seed "$name"
  fi
done
if [ -d "$shared/fixtures/recorded" ]; then
  find "$shared/fixtures/recorded" -name '*.json' | while read -r f; do
    jq -c . "$f" 2> /dev/null | seed "recorded-$(basename "$(dirname "$f")")-$(basename "$f")" || true
  done
fi

# Two-person approvals, valid at the fuzz targets' clock (2026-11-21T08:00:00Z).
approval='{"finalizer-guard.io/override": "node-lost: INC-4711 worker-3 powered off",
  "finalizer-guard.io/approved-by": "sec-lead@example.com",
  "finalizer-guard.io/override-expires": "2026-11-21T09:00:00Z"}'
override=$root/examples/reviews/pod-strip-finalizers-override.json
jq -c --argjson a "$approval" \
  '.request.object.metadata.annotations += $a | .request.oldObject.metadata.annotations += $a' \
  "$override" | seed two-person-strip.json
jq -c --argjson a "$approval" \
  '.request.userInfo.username = "sec-lead@example.com"
   | .request.object.metadata.annotations += $a
   | .request.object.metadata.finalizers = .request.oldObject.metadata.finalizers' \
  "$override" | seed two-person-approve.json

cp "$root"/examples/policy.yaml "$root"/src/policy/default.yaml corpus/policy/
for f in "$root"/tests/fixtures/policy*.yaml; do cp "$f" "corpus/policy/fixtures-$(basename "$f")"; done
echo "corpus/review: $(ls corpus/review | wc -l) seeds; corpus/policy: $(ls corpus/policy | wc -l) seeds"
