"""Artifact Hub's `artifacthub.io/changes` from CHANGELOG.md: the first
`## ` section that has entries (an empty `## [Unreleased]` is passed over),
its top-level bullets, first sentence (after a `**Breaking:**` mark, which
is kept, and those entries first), kind by heading.

    python3 changes.py CHANGELOG.md
"""
import re
import sys

text = open(sys.argv[1]).read()
sections = re.split(r"(?m)^## ", text)[1:]
section = next((s for s in sections if re.search(r"(?m)^- ", s)), "")
kind = "changed"
kinds = {"upgrade": "changed", "added": "added", "fixed": "fixed", "security": "security",
         "removed": "removed", "deprecated": "deprecated", "changed": "changed"}
entries = []
for chunk in re.split(r"(?m)^(?=### |- )", section):
    if chunk.startswith("### "):
        heading = chunk[4:].split("\n", 1)[0].lower()
        kind = next((v for k, v in kinds.items() if k in heading), "changed")
        continue
    if not chunk.startswith("- "):
        continue
    entry = " ".join(chunk[2:].split())
    mark = ""
    if entry.startswith("**Breaking:** "):
        mark, entry = "Breaking: ", entry[len("**Breaking:** "):]
    bold = re.match(r"\*\*(.+?)\*\*", entry)
    first = bold.group(1) if bold else re.split(r"(?<!e\.g\.)(?<!i\.e\.)(?<=\.)\s", entry, maxsplit=1)[0]
    first = mark + re.sub(r"\*\*|`", "", first).rstrip(".:")
    entries.append((kind, first[:200]))
# What users must act on first: at most 40 entries are shown.
entries.sort(key=lambda e: not e[1].startswith("Breaking: "))
for kind, desc in entries[:40]:
    desc = desc.replace("\\", "\\\\").replace('"', '\\"')
    print(f'- kind: {kind}\n  description: "{desc}"')
