#!/usr/bin/env python3
"""The table of values in charts/finalizer-guard/README.md, written from the
chart itself, as helm-docs writes one: each value's description from
values.schema.json, its type from the schema, its default from values.yaml.

    scripts/chart-readme.py           rewrite the table in the README
    scripts/chart-readme.py --check   exit 1, saying so, when the README's
                                      table is not what this writes
                                      (tests/manifests/docs.rs runs it)

The table is the part of the README between its two marker lines; the rest
is written by hand. A row per value: every key of the chart's own maps (those
the schema closes, additionalProperties false), down to the first that is
not one (a list, a free map, a Kubernetes type such as resources), and a row
for a closed map too when the schema describes it; of `global`, the keys the
chart reads. A value the schema does
not describe is an error: every row says what its value does.

The defaults are values.yaml as Helm reads it (FG_HELM, else the helm
e2e/helm/build.sh builds and caches): a scratch chart whose one template
prints .Values as JSON, so YAML's rules are Helm's, not a second parser's.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHART = os.path.join(ROOT, "charts", "finalizer-guard")
README = os.path.join(CHART, "README.md")
BEGIN = "<!-- values: written by scripts/chart-readme.py from values.schema.json and values.yaml; do not edit by hand -->"
END = "<!-- end of values -->"
# Closed maps that are Kubernetes types or selectors: one row each, not a
# row per field.
WHOLE = {"resources", "watch.resources", "webhook.namespaceSelector", "webhook.objectSelector"}
# Open maps whose known keys get rows of their own (a parent chart's global).
EXPAND = {"global"}
# A default longer than this is summarized: values.yaml has it whole.
LONGEST_DEFAULT = 120


def helm():
    given = os.environ.get("FG_HELM")
    if given:
        return given
    out = subprocess.run([os.path.join(ROOT, "e2e", "helm", "build.sh")], check=True,
                         stdout=subprocess.PIPE, text=True)
    return out.stdout.strip()


def defaults():
    """values.yaml, as Helm reads it."""
    with tempfile.TemporaryDirectory() as work:
        chart = os.path.join(work, "values")
        os.makedirs(os.path.join(chart, "templates"))
        with open(os.path.join(chart, "Chart.yaml"), "w") as f:
            f.write("apiVersion: v2\nname: values\nversion: 0.0.0\n")
        with open(os.path.join(CHART, "values.yaml")) as src, \
                open(os.path.join(chart, "values.yaml"), "w") as dst:
            dst.write(src.read())
        with open(os.path.join(chart, "templates", "values.json"), "w") as f:
            f.write("{{ toJson .Values }}\n")
        env = dict(os.environ, HELM_CONFIG_HOME=os.path.join(work, "config"),
                   HELM_CACHE_HOME=os.path.join(work, "cache"),
                   HELM_DATA_HOME=os.path.join(work, "data"))
        env.pop("KUBECONFIG", None)
        out = subprocess.run([helm(), "template", "values", chart], check=True,
                             stdout=subprocess.PIPE, text=True, env=env)
    body = [l for l in out.stdout.splitlines() if l and not l.startswith(("---", "#"))]
    return json.loads("\n".join(body))


def closed(node):
    return node.get("type") == "object" and node.get("additionalProperties") is False \
        and "properties" in node


def rows(node, path, values, out, undescribed):
    for key, child in node.get("properties", {}).items():
        dotted = ".".join(path + [key])
        here = values.get(key) if isinstance(values, dict) else None
        present = isinstance(values, dict) and key in values
        description = child.get("description")
        if (closed(child) and dotted not in WHOLE) or dotted in EXPAND:
            if description:
                out.append((dotted, kind(child), "", description))
            rows(child, path + [key], here if isinstance(here, dict) else {}, out, undescribed)
            continue
        if not description:
            undescribed.append(dotted)
            continue
        out.append((dotted, kind(child), default(here, present), description))


def kind(node):
    t = node.get("type")
    if isinstance(t, list):
        return " or ".join(x for x in t if x != "null")
    if t:
        return t
    if "oneOf" in node:
        return " or ".join(kind(o) for o in node["oneOf"])
    return "any"


def default(value, present):
    if not present:
        return "unset"
    text = json.dumps(value, separators=(", ", ": "), ensure_ascii=False)
    if len(text) > LONGEST_DEFAULT:
        if isinstance(value, list):
            return f"{len(value)} entries (values.yaml)"
        return "see values.yaml"
    return f"`{text}`"


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def table():
    with open(os.path.join(CHART, "values.schema.json")) as f:
        schema = json.load(f)
    out, undescribed = [], []
    rows(schema, [], defaults(), out, undescribed)
    if undescribed:
        sys.exit("values.schema.json describes none of: " + ", ".join(undescribed)
                 + " (every value's row says what it does: add a description)")
    lines = ["| value | type | default | what |", "|---|---|---|---|"]
    for dotted, t, d, description in out:
        lines.append(f"| `{dotted}` | {t} | {cell(d)} | {cell(description)} |")
    return "\n".join(lines)


def main():
    check = sys.argv[1:] == ["--check"]
    if sys.argv[1:] not in ([], ["--check"]):
        sys.exit(__doc__)
    with open(README) as f:
        readme = f.read()
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        sys.exit(f"{README}: no table to write (its two marker lines, {BEGIN!r} and {END!r})")
    head, rest = readme.split(BEGIN)
    _, tail = rest.split(END)
    written = f"{head}{BEGIN}\n{table()}\n{END}{tail}"
    if check:
        if written != readme:
            sys.exit(f"{README} is stale: its table of values is not what the chart says; "
                     "run scripts/chart-readme.py")
        return
    if written != readme:
        with open(README, "w") as f:
            f.write(written)


if __name__ == "__main__":
    main()
