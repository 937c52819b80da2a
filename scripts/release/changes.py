"""Artifact Hub's `artifacthub.io/changes` from CHANGELOG.md: the first
section's entries (its top-level bullets, first sentence), kind by heading.

    python3 changes.py CHANGELOG.md
"""
import re
import sys

text = open(sys.argv[1]).read()
sections = re.split(r"(?m)^## ", text)[1:]
section = sections[0] if sections else ""
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
    bold = re.match(r"\*\*(.+?)\*\*", entry)
    first = bold.group(1) if bold else re.split(r"(?<=\.)\s", entry, maxsplit=1)[0]
    first = re.sub(r"\*\*|`", "", first).rstrip(".:")
    entries.append((kind, first[:200]))
for kind, desc in entries[:40]:
    desc = desc.replace("\\", "\\\\").replace('"', '\\"')
    print(f'- kind: {kind}\n  description: "{desc}"')
