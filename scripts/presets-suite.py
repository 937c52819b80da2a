#!/usr/bin/env python3
# Writes examples/presets/suite.yaml and policy.yaml from the catalog:
#   target/debug/finalizer-guard policy presets -o json > /tmp/presets.json && scripts/presets-suite.py
# (tests/cli.rs holds the suite to the catalog, so a preset added without cases fails there).
import json, re, sys
kinds = {}
src = open('src/policy/kinds.rs').read()
for g, v, k, r, sc in re.findall(r't\(\s*"([^"]*)",\s*"([^"]*)",\s*"([^"]*)",\s*"([^"]*)",\s*(NS|CLUSTER),?\s*\)', src):
    kinds[(r, g)] = (v, k, sc == 'NS')
d = json.load(open('/tmp/presets.json'))
out = []
def q(s): return json.dumps(s)
def obj(res, fin, ns):
    r, _, g = res.partition('.')
    if (r, g) in kinds:
        v, k, namespaced = kinds[(r, g)]
        api = f"{g}/{v}" if g else v
        extra = ""
    else:
        api, k, namespaced = f"{g}/v1", "Widget", True
        extra = f"\n    resource: {res}"
    o = f"{{apiVersion: {api}, kind: {k}, name: sample, "
    if namespaced:
        o += f"namespace: {ns}, "
    o += f"finalizers: [{q(fin)}]}}"
    return o, extra
lines = ["# The presets' own tests, in the short form: `finalizer-guard test examples/presets/suite.yaml`.",
         "# For every component of every preset: each of its ServiceAccounts may remove each",
         "# of its finalizers in a namespace created after the switch to enforce; a person",
         "# may not, nor a ServiceAccount of the same name in another namespace.",
         "# tests/cli.rs holds this file to the catalog (`policy presets -o json`).",
         "policy: policy.yaml", "cases:"]
for p in d['presets']:
    ns_default = p.get('namespace')
    for c in p['components']:
        ns_default = c.get('namespace') or p.get('namespace')
        resources = c.get('resources') or ['widgets.example.org']
        fins = c['finalizers']
        if c.get('serviceAccounts'):
            requester = f'{{serviceAccount: "{ns_default}:{c["serviceAccounts"][0]}"}}'
            stranger = f'{{serviceAccount: "elsewhere:{c["serviceAccounts"][0]}"}}'
        else:
            requester = f'{{serviceAccount: "{ns_default}:provider-generated-name"}}'
            stranger = '{serviceAccount: "elsewhere:provider-generated-name"}'
        for i, fin in enumerate(fins):
            name = fin[:-1] + "example" if fin.endswith('*') else fin
            res = resources[i % len(resources)]
            o, extra = obj(res, name, "created-after-enforce")
            lines += [f"  - name: {q('preset ' + p['name'] + '/' + c['name'] + ' removes ' + name + ' from ' + res)}",
                      f"    object: {o}{extra}",
                      f"    requester: {requester}",
                      "    finalizersAfter: []",
                      "    expect: allowed",
                      "    decision: authorized",
                      f"    messageContains: {q('preset:' + p['name'] + '/' + c['name'])}" if False else None]
            lines = [l for l in lines if l is not None]
        name = fins[0][:-1] + "example" if fins[0].endswith('*') else fins[0]
        o, extra = obj(resources[0], name, "created-after-enforce")
        for who, req in (("a person", '{user: jane@example.com, groups: [developers]}'), ("the same name in another namespace", stranger)):
            lines += [f"  - name: {q(who + ' may not remove ' + name + ' (preset ' + p['name'] + '/' + c['name'] + ')')}",
                      f"    object: {o}{extra}",
                      f"    requester: {req}",
                      "    finalizersAfter: []",
                      "    expect: denied"]
open('examples/presets/suite.yaml', 'w').write("\n".join(lines) + "\n")
names = [p['name'] for p in d['presets']]
open('examples/presets/policy.yaml', 'w').write(
    "# Every preset of the catalog, with the installers' default identities\n"
    "# (examples/presets/suite.yaml tests it).\nmode: enforce\npresets:\n" + "".join(f"  - {n}\n" for n in names))
print(len([l for l in lines if l.startswith('  - name')]), "cases")
