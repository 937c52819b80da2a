"""The Homebrew formula of a release, for a tap (`brew install
OWNER/TAP/finalizer-guard`): macOS (Apple silicon, Intel) and Linux (arm64,
amd64), each archive with its sha256. It installs the binary and the
`kubectl-finalizer_guard` name kubectl finds plugins by.

    python3 homebrew.py OUT_DIR VERSION DOWNLOAD_URL HOMEPAGE > finalizer-guard.rb
"""
import hashlib
import re
import sys

out, version, url, home = sys.argv[1:]
# Each goes into a Ruby string as is: nothing that could end it or
# interpolate (`"`, `\\`, `#{`) may pass.
if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?", version):
    sys.exit(f"homebrew.py: {version!r} is not a version")
for name, value in (("download URL", url), ("homepage", home)):
    if not re.fullmatch(r"https?://[A-Za-z0-9._~:/?&=%+,;@!*()'-]+", value):
        sys.exit(f"homebrew.py: the {name} {value!r} is not a plain http(s) URL")


def archive(os, arch):
    name = f"finalizer-guard-{version}-{os}-{arch}.tar.gz"
    digest = hashlib.sha256(open(f"{out}/{name}", "rb").read()).hexdigest()
    return f"""      url "{url}/{name}"
      sha256 "{digest}\""""


def system(block, os):
    return f"""  {block} do
    on_arm do
{archive(os, "arm64")}
    end
    on_intel do
{archive(os, "amd64")}
    end
  end"""


print(f"""class FinalizerGuard < Formula
  desc "Explain and release Kubernetes objects stuck on finalizers, safely"
  homepage "{home}"
  version "{version.split('-dirty')[0]}"
  license "Apache-2.0"

{system("on_macos", "darwin")}
{system("on_linux", "linux")}

  def install
    bin.install "finalizer-guard"
    bin.install_symlink "finalizer-guard" => "kubectl-finalizer_guard"
  end

  test do
    assert_match "finalizer-guard #{{version}}", shell_output("#{{bin}}/finalizer-guard --version")
  end
end""")
