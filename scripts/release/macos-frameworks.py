"""Text stubs (.tbd) of the two macOS frameworks the CLI links,
Security and CoreFoundation (through rustls-native-certs and
rustls-platform-verifier), for zig's linker: no macOS SDK is needed.

    python3 macos-frameworks.py DIR   # run in the repository; link with -F DIR

Each stub names the framework's install name, where macOS loads it from,
and the symbols its -sys crate (security-framework-sys,
core-foundation-sys, located with `cargo metadata`) declares. A symbol the
binary needs and a stub lacks fails the link, naming it.
"""
import json
import os
import re
import subprocess
import sys

out = sys.argv[1]
frameworks = {"Security": "security-framework-sys", "CoreFoundation": "core-foundation-sys"}
meta = json.loads(subprocess.run(
    ["cargo", "metadata", "--locked", "--format-version", "1", "--filter-platform", "aarch64-apple-darwin"],
    check=True, capture_output=True, text=True).stdout)
source = {p["name"]: os.path.dirname(p["manifest_path"]) for p in meta["packages"]}
# Declarations in `extern "C"` blocks: `pub fn Name(` and `pub static Name:`.
declared = re.compile(r"\bpub\s+(?:unsafe\s+)?(?:fn|static(?:\s+mut)?)\s+([A-Za-z_][A-Za-z0-9_]*)\s*[(:<]")
for framework, crate in frameworks.items():
    if crate not in source:
        sys.exit(f"macos-frameworks: {crate} is not in Cargo.lock's macOS dependencies")
    symbols = set()
    for root, _, files in os.walk(os.path.join(source[crate], "src")):
        for name in files:
            if name.endswith(".rs"):
                symbols.update(declared.findall(open(os.path.join(root, name), encoding="utf-8").read()))
    if not symbols:
        sys.exit(f"macos-frameworks: no symbol declared in {crate}")
    folder = os.path.join(out, f"{framework}.framework")
    os.makedirs(folder, exist_ok=True)
    listed = ",\n                       ".join(f"_{s}" for s in sorted(symbols))
    text = f"""--- !tapi-tbd
tbd-version:     4
targets:         [ x86_64-macos, arm64-macos ]
install-name:    '/System/Library/Frameworks/{framework}.framework/Versions/A/{framework}'
exports:
  - targets:         [ x86_64-macos, arm64-macos ]
    symbols:         [ {listed} ]
...
"""
    path = os.path.join(folder, f"{framework}.tbd")
    # Written only when changed: the link's inputs stay as they were.
    if not os.path.exists(path) or open(path).read() != text:
        open(path, "w").write(text)
    print(f"{framework}: {len(symbols)} symbols ({crate})", file=sys.stderr)
