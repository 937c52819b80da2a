"""The krew Plugin manifest of a release: one platform per archive, each
with its sha256.

    python3 krew.py OUT_DIR VERSION DOWNLOAD_URL HOMEPAGE > finalizer-guard.yaml
"""
import hashlib
import re
import sys

out, version, url, home = sys.argv[1:]
# Each goes into the YAML as a plain scalar: nothing that could end it.
if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?", version):
    sys.exit(f"krew.py: {version!r} is not a version")
for name, value in (("download URL", url), ("homepage", home)):
    if not re.fullmatch(r"https?://[A-Za-z0-9._~:/?&=%+,;@!*()'-]+", value):
        sys.exit(f"krew.py: the {name} {value!r} is not a plain http(s) URL")
platforms = ""
# (os, arch, the archive's ending, the binary in it)
for os, arch, ext, binary in (
    ("linux", "amd64", "tar.gz", "finalizer-guard"),
    ("linux", "arm64", "tar.gz", "finalizer-guard"),
    ("darwin", "amd64", "tar.gz", "finalizer-guard"),
    ("darwin", "arm64", "tar.gz", "finalizer-guard"),
    ("windows", "amd64", "zip", "finalizer-guard.exe"),
):
    name = f"finalizer-guard-{version}-{os}-{arch}.{ext}"
    digest = hashlib.sha256(open(f"{out}/{name}", "rb").read()).hexdigest()
    platforms += f"""  - selector:
      matchLabels:
        os: {os}
        arch: {arch}
    uri: {url}/{name}
    sha256: {digest}
    files:
      - from: {binary}
        to: .
      - from: LICENSE
        to: .
    bin: {binary}
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
