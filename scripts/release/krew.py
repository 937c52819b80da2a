"""The krew Plugin manifest of a release: one platform per archive, each
with its sha256.

    python3 krew.py OUT_DIR VERSION DOWNLOAD_URL HOMEPAGE > finalizer-guard.yaml
"""
import hashlib
import sys

out, version, url, home = sys.argv[1:]
platforms = ""
for arch in ("amd64", "arm64"):
    name = f"finalizer-guard-{version}-linux-{arch}.tar.gz"
    digest = hashlib.sha256(open(f"{out}/{name}", "rb").read()).hexdigest()
    platforms += f"""  - selector:
      matchLabels:
        os: linux
        arch: {arch}
    uri: {url}/{name}
    sha256: {digest}
    files:
      - from: finalizer-guard
        to: .
      - from: LICENSE
        to: .
    bin: finalizer-guard
"""
print(f"""apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: finalizer-guard
spec:
  version: v{version.split('-dirty')[0]}
  homepage: {home}
  shortDescription: Explain and release objects stuck on finalizers, safely
  description: |
    finalizer-guard's CLI. `kubectl finalizer-guard unstick` explains what holds
    objects stuck deleting (each finalizer's owner, what may leak, whether you
    may remove it) and, with --reason, releases them through the
    finalizer-guard admission webhook; `approve` writes the two-person
    override's approval; `doctor --cluster` says who may remove each
    finalizer in the cluster under the policy; `check` and `test` decide
    recorded reviews offline.
  platforms:
{platforms.rstrip()}""")
