"""The chart as a release packages it: the published image by default, and
Artifact Hub's annotations (images, licence, changes, signing key).

    python3 chart.py CHART_DIR VERSION IMAGE_REPO IMAGE_DIGEST CHANGES SIGN_KEY SOURCE_URL

Chart.yaml, values.yaml and README.md are edited as text, so their comments
stay.
"""
import json
import re
import sys

chart, version, image_repo, digest, changes, sign_key, source = sys.argv[1:]


def block(text, indent="    "):
    """A YAML literal block scalar's lines."""
    return "".join(f"{indent}{line}\n" if line else "\n" for line in text.splitlines())


path = f"{chart}/Chart.yaml"
text = open(path).read()
# Replacements as functions: a backslash in a value is itself, never an escape.
text = re.sub(r"(?m)^version: .*$", lambda _: f"version: {version}", text, count=1)
text = re.sub(r'(?m)^appVersion: .*$', lambda _: f'appVersion: "{version}"', text, count=1)
if "\nhome:" not in text:
    text = text.replace("\ntype: application\n", f"\ntype: application\nhome: {source}\nsources:\n  - {source}\n", 1)
assert text.rstrip().endswith("artifacthub.io/license: Apache-2.0"), "Chart.yaml must end with its annotations"
images = (
    f"- name: finalizer-guard\n"
    f"  image: {image_repo}:{version}@{digest}\n"
    f"  platforms:\n    - linux/amd64\n    - linux/arm64\n"
)
text = text.rstrip("\n") + "\n"
text += "  artifacthub.io/images: |\n" + block(images)
text += "  artifacthub.io/changes: |\n" + block(changes)
text += f"  artifacthub.io/containsSecurityUpdates: \"false\"\n"
text += f"  artifacthub.io/links: |\n" + block(f"- name: source\n  url: {source}\n")
if sign_key:
    text += "  artifacthub.io/signKey: |\n" + block(sign_key)
open(path, "w").write(text)

path = f"{chart}/values.yaml"
text = open(path).read()
text, n = re.subn(r"(?m)^  repository: finalizer-guard$", lambda _: f"  repository: {image_repo}", text, count=1)
assert n == 1, "values.yaml: image.repository not found"
open(path, "w").write(text)

# The README's table of values (scripts/chart-readme.py) says the same default.
path = f"{chart}/README.md"
text = open(path).read()
row = '| `image.repository` | string | `"finalizer-guard"` |'
assert text.count(row) == 1, "README.md: the row of image.repository not found"
text = text.replace(row, f'| `image.repository` | string | `"{image_repo}"` |')
open(path, "w").write(text)
