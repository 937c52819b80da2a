//! The catalog of well-known controllers (`presets:` in a policy).
//!
//! One definition, `presets.yaml` beside this file, embedded in the binary:
//! each entry's finalizers, the resources they sit on, the ServiceAccounts
//! its official chart or installer uses by default, and the upstream file
//! (module version or GitHub commit) every one of those strings was read
//! from. A policy that names a preset gets one ordinary [`Rule`] per
//! component, labelled `preset:NAME/COMPONENT`, so decisions, audit
//! records and `unstick` cite it like any rule.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

use super::config::{FinalizerPattern, PresetOrigin, ResourceName, Rule};

const CATALOG_YAML: &str = include_str!("presets.yaml");

/// The catalog, parsed once. Its validity is a unit test: an embedded file
/// that does not parse never ships.
static CATALOG: LazyLock<Catalog> = LazyLock::new(|| {
    serde_yaml_ng::from_str(CATALOG_YAML).expect("src/policy/presets.yaml is a valid catalog")
});

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Catalog {
    presets: Vec<Preset>,
}

/// One project's controllers.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Preset {
    pub name: String,
    pub title: String,
    /// Where the official chart or installer puts the ServiceAccounts.
    pub namespace: String,
    pub components: Vec<Component>,
    /// Values the upstream builds from parts: each part is one of `sources`' strings.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub composed: BTreeMap<String, Vec<String>>,
    pub sources: Vec<Source>,
    /// Finalizer names the upstream code holds that no component trusts,
    /// each with why (e2e/presets/check-complete.sh reads them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
    /// Places where the upstream passes a finalizer held in a variable, and
    /// what names reach them (e2e/presets/check-complete.sh reads them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub built_at_run_time: Vec<RunTimeSite>,
    /// Module versions read for completeness only, beyond those `sources` cite.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<ReadModule>,
}

/// A finalizer name found upstream that the preset does not trust, and why.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LeftOut {
    /// An exact name, or a prefix ending in `*`.
    pub finalizer: String,
    pub reason: String,
}

/// `FILE: EXPRESSION` (FILE inside its module), and what it builds.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunTimeSite {
    pub site: String,
    pub builds: String,
}

/// A module version e2e/presets/check-complete.sh reads beside the cited ones.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReadModule {
    pub module: String,
    pub version: String,
    /// Why the module proxy refuses it, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Where it was read by hand instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_at: Option<String>,
}

/// One controller of a project: one rule.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Component {
    pub name: String,
    /// This component's namespace, when its installer uses another than the preset's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_accounts: Vec<String>,
    /// The identity is every ServiceAccount of the namespace (the group
    /// `system:serviceaccounts:NAMESPACE`): the installer generates their names.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_service_accounts_in_namespace: bool,
    pub finalizers: Vec<String>,
    /// `resource.group`; omitted: any resource (the finalizers are the project's own names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
}

/// Where strings were read: a Go module version (checked through the module
/// proxy by e2e/presets/check-sources.sh) or a GitHub commit (where the proxy
/// refuses the module).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    pub file: String,
    pub strings: Vec<String>,
}

impl Source {
    /// `MODULE@VERSION` or `github.com/OWNER/REPO@COMMIT`.
    pub fn origin(&self) -> String {
        match (&self.module, &self.version, &self.github, &self.commit) {
            (Some(m), Some(v), _, _) => format!("{m}@{v}"),
            (_, _, Some(repo), Some(commit)) => format!("github.com/{repo}@{commit}"),
            _ => "unknown".to_string(),
        }
    }

    /// `module` or `github`, as the check script reads it.
    pub fn kind(&self) -> &'static str {
        if self.module.is_some() {
            "module"
        } else {
            "github"
        }
    }
}

/// Every preset of the catalog, in catalog order.
pub fn catalog() -> &'static [Preset] {
    &CATALOG.presets
}

/// The catalog's names, comma-separated, for error messages.
pub fn known_names() -> String {
    catalog()
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A preset as a policy names it, with what the chart or installer let its user rename.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PresetRef {
    /// Its place in `presets:`.
    pub index: usize,
    /// `NAME` or `NAME/COMPONENT`.
    pub name: String,
    pub namespace: Option<String>,
    /// Full usernames (`system:serviceaccount:NS:NAME`): replace every component's identities.
    pub service_accounts: Option<Vec<String>>,
}

/// Why a preset reference cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpandError {
    UnknownPreset,
    UnknownComponent { known: String },
}

/// The rules a preset reference stands for: one per component, in catalog order.
pub fn expand(reference: &PresetRef) -> Result<Vec<Rule>, ExpandError> {
    let (name, component) = match reference.name.split_once('/') {
        Some((name, component)) => (name, Some(component)),
        None => (reference.name.as_str(), None),
    };
    let preset = catalog()
        .iter()
        .find(|p| p.name == name)
        .ok_or(ExpandError::UnknownPreset)?;
    let components: Vec<&Component> = match component {
        None => preset.components.iter().collect(),
        Some(c) => {
            let found: Vec<&Component> = preset.components.iter().filter(|x| x.name == c).collect();
            if found.is_empty() {
                return Err(ExpandError::UnknownComponent {
                    known: preset
                        .components
                        .iter()
                        .map(|c| format!("{}/{}", preset.name, c.name))
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            found
        }
    };
    Ok(components
        .into_iter()
        .map(|c| component_rule(preset, c, reference))
        .collect())
}

fn component_rule(preset: &Preset, c: &Component, reference: &PresetRef) -> Rule {
    let namespace = reference
        .namespace
        .as_deref()
        .or(c.namespace.as_deref())
        .unwrap_or(&preset.namespace);
    let (service_accounts, groups) = match &reference.service_accounts {
        Some(users) => (users.clone(), Vec::new()),
        None if c.all_service_accounts_in_namespace => (
            Vec::new(),
            vec![format!("system:serviceaccounts:{namespace}")],
        ),
        None => (
            c.service_accounts
                .iter()
                .map(|sa| format!("system:serviceaccount:{namespace}:{sa}"))
                .collect(),
            Vec::new(),
        ),
    };
    Rule {
        label: format!("preset:{}/{}", preset.name, c.name),
        finalizers: c.finalizers.iter().map(|f| pattern(f)).collect(),
        users: Vec::new(),
        groups,
        service_accounts,
        namespaces: None,
        resources: c
            .resources
            .as_ref()
            .map(|rs| rs.iter().map(|r| resource(r)).collect()),
        preset: Some(PresetOrigin {
            index: reference.index,
            namespace: reference.namespace.clone(),
            service_accounts: reference.service_accounts.is_some(),
        }),
    }
}

fn pattern(f: &str) -> FinalizerPattern {
    match f.strip_suffix('*') {
        Some(prefix) => FinalizerPattern::Prefix(prefix.to_string()),
        None => FinalizerPattern::Exact(f.to_string()),
    }
}

fn resource(r: &str) -> ResourceName {
    let (resource, group) = r.split_once('.').unwrap_or((r, ""));
    ResourceName {
        resource: resource.to_string(),
        group: group.to_string(),
    }
}

/// The catalog's presets and components that own `finalizer` on
/// `resource.group`: what `doctor --cluster` names for a finalizer no rule covers.
pub fn covering(
    finalizer: &str,
    group: &str,
    resource: &str,
) -> Vec<(&'static Preset, &'static Component)> {
    catalog()
        .iter()
        .flat_map(|p| p.components.iter().map(move |c| (p, c)))
        .filter(|(_, c)| c.finalizers.iter().any(|f| pattern(f).matches(finalizer)))
        .filter(|(_, c)| {
            c.resources.as_ref().is_none_or(|rs| {
                rs.iter()
                    .any(|r| self::resource(r).matches(group, resource))
            })
        })
        .collect()
}

/// A preset rule in one line, as `policy validate` and `policy presets` print
/// it: who may remove which finalizers, and from what.
pub fn describe(rule: &Rule) -> String {
    let mut who: Vec<String> = rule.service_account_names().map(str::to_string).collect();
    who.extend(
        rule.groups
            .iter()
            .map(|g| match g.strip_prefix("system:serviceaccounts:") {
                Some(ns) => format!("every ServiceAccount in {ns}"),
                None => format!("group {g}"),
            }),
    );
    who.extend(rule.users.iter().map(|u| format!("user {u}")));
    let finalizers: Vec<String> = rule.finalizers.iter().map(ToString::to_string).collect();
    let on = match &rule.resources {
        None => "any resource".to_string(),
        Some(rs) => rs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    };
    format!(
        "{} may remove {} from {on}, in every namespace",
        who.join(", "),
        finalizers.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::config::Policy;

    #[test]
    fn the_catalog_parses_and_names_every_project_of_the_issue() {
        let names: Vec<&str> = catalog().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "argocd",
                "flux",
                "crossplane",
                "cert-manager",
                "cluster-api",
                "velero",
                "karpenter",
                "aws-load-balancer-controller",
                "rook",
                "longhorn",
                "sail-operator",
                "kubevirt",
                "external-secrets"
            ]
        );
    }

    /// Each value the catalog trusts was read from a cited file: it is one of
    /// the strings e2e/presets/check-sources.sh finds there, or composed of them.
    #[test]
    fn every_value_is_read_from_a_cited_string() {
        for p in catalog() {
            let strings: Vec<&str> = p
                .sources
                .iter()
                .flat_map(|s| s.strings.iter().map(String::as_str))
                .collect();
            let cited = |value: &str| {
                let quoted = [
                    format!("\"{value}\""),
                    format!("name: {value}"),
                    format!("namespace: {value}"),
                    format!("--namespace {value}"),
                    format!("-n {value}"),
                    format!("Name: {value}"),
                    format!(":-{value}}}"),
                    format!("{value}\n"),
                ];
                let whole = |s: &str| {
                    s == value
                        || quoted.iter().any(|q| s.contains(q.as_str()))
                        || s.ends_with(&format!(" {value}"))
                        || s.ends_with(&format!("={value}"))
                        || s.contains(&format!(" {value} "))
                        || s.contains(&format!("={value} "))
                };
                strings.iter().any(|s| whole(s))
                    || p.composed.get(value).is_some_and(|parts| {
                        parts.iter().all(|part| strings.contains(&part.as_str()))
                    })
            };
            for c in &p.components {
                for f in &c.finalizers {
                    assert!(cited(f), "{}: finalizer {f} is in no cited string", p.name);
                }
                for sa in &c.service_accounts {
                    assert!(
                        cited(sa),
                        "{}: ServiceAccount {sa} is in no cited string",
                        p.name
                    );
                }
                let ns = c.namespace.as_deref().unwrap_or(&p.namespace);
                if p.name != "sail-operator" {
                    assert!(
                        cited(ns),
                        "{}: namespace {ns} is in no cited string",
                        p.name
                    );
                }
            }
            for s in &p.sources {
                for string in s.strings.iter().chain([&s.file]) {
                    assert!(
                        !string.contains(['\t', '\n', '\r']),
                        "{}: {string:?}: `policy presets --sources` prints it on one tab-separated line",
                        p.name
                    );
                }
                assert!(
                    (s.module.is_some() && s.version.is_some())
                        != (s.github.is_some() && s.commit.is_some()),
                    "{}: {} names a module version or a GitHub commit",
                    p.name,
                    s.file
                );
            }
        }
    }

    /// What check-complete.sh reads beside the rules: each left-out name has a
    /// reason and is trusted by no component of its preset (a name both
    /// covered and left out says two things); each run-time site names a
    /// file and an expression, and what reaches it; each module read by hand
    /// says why the module proxy refuses it.
    #[test]
    fn left_out_names_run_time_sites_and_read_modules_are_explained() {
        for p in catalog() {
            for l in &p.left_out {
                assert!(
                    !l.reason.trim().is_empty(),
                    "{}: {} has no reason",
                    p.name,
                    l.finalizer
                );
                let covered = p.components.iter().any(|c| {
                    c.finalizers.iter().any(|f| {
                        pattern(f).matches(&l.finalizer) || pattern(&l.finalizer).matches(f)
                    })
                });
                assert!(
                    !covered,
                    "{}: {} is both trusted and left out",
                    p.name, l.finalizer
                );
            }
            for r in &p.built_at_run_time {
                let (file, expr) = r.site.split_once(": ").unwrap_or_else(|| {
                    panic!(
                        "{}: builtAtRunTime {:?} is not FILE: EXPRESSION",
                        p.name, r.site
                    )
                });
                assert!(
                    file.ends_with(".go") && !expr.is_empty(),
                    "{}: {:?}",
                    p.name,
                    r.site
                );
                assert!(
                    !r.builds.trim().is_empty(),
                    "{}: {} says nothing",
                    p.name,
                    r.site
                );
            }
            for m in &p.read {
                assert!(
                    m.read_at.is_none() || m.refused.is_some(),
                    "{}: {}@{} is read by hand but not said to be refused",
                    p.name,
                    m.module,
                    m.version
                );
                assert!(m.version.starts_with('v'), "{}: {}", p.name, m.version);
            }
        }
    }

    /// Argo CD's hook finalizer sits on every kind of object, in whatever
    /// namespace an application deploys to: only the application
    /// controller takes it off. Its pre-delete finalizers are the
    /// controller's alone too.
    #[test]
    fn argo_cds_hook_and_pre_delete_finalizers_are_its_application_controllers() {
        let policy = Policy::from_yaml("mode: enforce\npresets: [argocd]\n").unwrap();
        let controller = "system:serviceaccount:argocd:argocd-application-controller";
        let groups = ["system:serviceaccounts", "system:serviceaccounts:argocd"];
        let hook = "argocd.argoproj.io/hook-finalizer";
        for target in [
            ("batch", "jobs"),
            ("", "pods"),
            ("", "configmaps"),
            ("example.org", "widgets"),
        ] {
            for namespace in ["shop", "finalizer-guard", "team-created-after-enforce"] {
                assert!(
                    removal(&policy, controller, &groups, target, namespace, hook).allowed(),
                    "{target:?} in {namespace}"
                );
                for other in [
                    "system:serviceaccount:argocd:argocd-server",
                    "system:serviceaccount:argocd:argocd-applicationset-controller",
                    "system:serviceaccount:shop:default",
                    "system:serviceaccount:shop:argocd-application-controller",
                ] {
                    assert!(
                        !removal(&policy, other, &groups, target, namespace, hook).allowed(),
                        "{other} {target:?}"
                    );
                }
            }
        }
        let app = ("argoproj.io", "applications");
        for f in [
            "pre-delete-finalizer.argocd.argoproj.io",
            "pre-delete-finalizer.argocd.argoproj.io/cleanup",
        ] {
            assert!(
                removal(&policy, controller, &groups, app, "argocd", f).allowed(),
                "{f}"
            );
            for other in [
                "system:serviceaccount:argocd:argocd-server",
                "system:serviceaccount:argocd:argocd-applicationset-controller",
            ] {
                assert!(
                    !removal(&policy, other, &groups, app, "argocd", f).allowed(),
                    "{other} {f}"
                );
            }
            // Only on Applications.
            assert!(
                !removal(&policy, controller, &groups, ("batch", "jobs"), "shop", f).allowed(),
                "{f} on a Job"
            );
        }
    }

    /// The catalog's values are valid in a policy: the rules they expand to
    /// parse as a policy written by hand would.
    #[test]
    fn every_preset_expands_to_rules_a_policy_file_accepts() {
        for p in catalog() {
            for rule in expand(&PresetRef {
                name: p.name.clone(),
                ..PresetRef::default()
            })
            .unwrap()
            {
                let yaml = format!(
                    "rules:\n  - finalizers: {:?}\n    groups: {:?}\n    users: {:?}\n    resources: {:?}\n",
                    p.components
                        .iter()
                        .find(|c| rule.label.ends_with(&format!("/{}", c.name)))
                        .unwrap()
                        .finalizers,
                    rule.groups,
                    rule.service_accounts,
                    p.components
                        .iter()
                        .find(|c| rule.label.ends_with(&format!("/{}", c.name)))
                        .unwrap()
                        .resources
                        .clone()
                        .unwrap_or_else(|| vec!["x".into()])
                );
                Policy::from_yaml(&yaml).unwrap_or_else(|e| panic!("{}: {e}", rule.label));
            }
        }
    }

    /// The decision on `username` (in `groups`) removing `finalizer` from a
    /// `resource.group` in `namespace`, under `policy`.
    fn removal(
        policy: &Policy,
        username: &str,
        groups: &[&str],
        (group, resource): (&str, &str),
        namespace: &str,
        finalizer: &str,
    ) -> crate::policy::decision::Decision {
        use crate::policy::*;
        use std::borrow::Cow;
        let groups: Vec<Cow<'_, str>> = groups.iter().map(|g| Cow::Borrowed(*g)).collect();
        let old = [Cow::Borrowed(finalizer)];
        let none: [Cow<'_, str>; 0] = [];
        let annotations = std::collections::BTreeMap::new();
        let change = Change {
            operation: Operation::Update,
            target: Target {
                group,
                resource,
                subresource: "",
                namespace: (resource != "nodes" && resource != "customresourcedefinitions")
                    .then_some(namespace),
                name: "x",
            },
            requester: Requester {
                username,
                groups: &groups,
            },
            metadata_finalizers: FinalizerLists {
                old: &old,
                new: &none,
            },
            spec_finalizers: FinalizerLists {
                old: &none,
                new: &none,
            },
            annotations: &annotations,
            old_annotations: &annotations,
            deleting: true,
            uid: Some("uid-1"),
            now: "2026-11-26T08:00:00Z".parse().unwrap(),
            seal_key: None,
        };
        decide(&change, policy)
    }

    /// A finalizer a component's pattern matches: the name, or a name under the prefix.
    fn example(finalizer: &str) -> String {
        match finalizer.strip_suffix('*') {
            Some(prefix) => format!("{prefix}team-a-group"),
            None => finalizer.to_string(),
        }
    }

    fn split(resource: &str) -> (String, String) {
        let (r, g) = resource.split_once('.').unwrap_or((resource, ""));
        (g.to_string(), r.to_string())
    }

    /// Each preset: its controllers remove their finalizers on their resources
    /// in any namespace, one created after the policy too; a person, and the
    /// same name in another namespace, may not.
    #[test]
    fn each_preset_lets_its_controllers_and_no_one_else_remove_its_finalizers() {
        const NEW_NAMESPACE: &str = "team-created-after-enforce";
        for p in catalog() {
            let policy = Policy::from_yaml(&format!("presets: [{}]\n", p.name)).unwrap();
            assert_eq!(policy.rules.len(), p.components.len(), "{}", p.name);
            for c in &p.components {
                let ns = c.namespace.as_deref().unwrap_or(&p.namespace);
                let (username, groups) = match c.service_accounts.first() {
                    Some(sa) => (format!("system:serviceaccount:{ns}:{sa}"), Vec::new()),
                    None => (
                        format!("system:serviceaccount:{ns}:provider-generated-1a2b3c"),
                        vec![format!("system:serviceaccounts:{ns}")],
                    ),
                };
                let mut groups: Vec<&str> = groups.iter().map(String::as_str).collect();
                groups.extend(["system:serviceaccounts", "system:authenticated"]);
                let resources = c
                    .resources
                    .clone()
                    .unwrap_or_else(|| vec!["widgets.example.com".to_string()]);
                for f in &c.finalizers {
                    let finalizer = example(f);
                    for r in &resources {
                        let (group, resource) = split(r);
                        let target = (group.as_str(), resource.as_str());
                        let d = removal(
                            &policy,
                            &username,
                            &groups,
                            target,
                            NEW_NAMESPACE,
                            &finalizer,
                        );
                        assert!(
                            d.allowed(),
                            "{}/{}: {username} removing {finalizer} from {r}: {d:?}",
                            p.name,
                            c.name
                        );
                        let by = d.removed[0].authorized_by.clone();
                        assert!(
                            matches!(&by, Some(crate::policy::decision::Authority::Rule(l)) if l.starts_with(&format!("preset:{}/", p.name))),
                            "{by:?}"
                        );
                        let person = removal(
                            &policy,
                            "alice",
                            &["developers", "system:authenticated"],
                            target,
                            NEW_NAMESPACE,
                            &finalizer,
                        );
                        assert!(
                            !person.allowed(),
                            "{}: a person removed {finalizer} from {r}",
                            p.name
                        );
                        let elsewhere = username.replace(&format!(":{ns}:"), ":team-a:");
                        let impostor = removal(
                            &policy,
                            &elsewhere,
                            &[
                                "system:serviceaccounts",
                                "system:serviceaccounts:team-a",
                                "system:authenticated",
                            ],
                            target,
                            NEW_NAMESPACE,
                            &finalizer,
                        );
                        assert!(
                            !impostor.allowed(),
                            "{}: {elsewhere} removed {finalizer} from {r}",
                            p.name
                        );
                    }
                }
            }
        }
    }

    /// docs/presets.md lists every rule of the catalog and every file it cites.
    #[test]
    fn the_docs_list_the_catalog() {
        let docs = include_str!("../../docs/presets.md");
        for p in catalog() {
            for c in &p.components {
                let label = format!("`preset:{}/{}`", p.name, c.name);
                assert!(docs.contains(&label), "docs/presets.md: {label} is missing");
                for f in &c.finalizers {
                    assert!(
                        docs.contains(&format!("`{f}`")),
                        "docs/presets.md: {f} is missing"
                    );
                }
            }
            for s in &p.sources {
                assert!(
                    docs.contains(&format!("`{}`", s.file)),
                    "docs/presets.md: {} is missing",
                    s.file
                );
            }
        }
    }

    #[test]
    fn a_renamed_namespace_or_service_account_replaces_the_installers() {
        let policy = Policy::from_yaml(
            "presets:\n  - name: argocd\n    namespace: gitops\n  - name: flux/helm-controller\n    serviceAccounts: [\"platform:helm\"]\n",
        )
        .unwrap();
        let labels: Vec<&str> = policy.rules.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "preset:argocd/application-controller",
                "preset:argocd/hooks",
                "preset:argocd/applicationset-controller",
                "preset:argocd/server",
                "preset:flux/helm-controller"
            ]
        );
        let app = ("argoproj.io", "applications");
        let f = "resources-finalizer.argocd.argoproj.io";
        let ok = |user: &str, target, finalizer: &str| {
            removal(
                &policy,
                user,
                &["system:authenticated"],
                target,
                "team-c",
                finalizer,
            )
            .allowed()
        };
        assert!(ok(
            "system:serviceaccount:gitops:argocd-application-controller",
            app,
            f
        ));
        assert!(!ok(
            "system:serviceaccount:argocd:argocd-application-controller",
            app,
            f
        ));
        let hr = ("helm.toolkit.fluxcd.io", "helmreleases");
        assert!(ok(
            "system:serviceaccount:platform:helm",
            hr,
            "finalizers.fluxcd.io"
        ));
        assert!(!ok(
            "system:serviceaccount:flux-system:helm-controller",
            hr,
            "finalizers.fluxcd.io"
        ));
        // Only the component named: the source-controller is not trusted.
        let git = ("source.toolkit.fluxcd.io", "gitrepositories");
        assert!(!ok(
            "system:serviceaccount:flux-system:source-controller",
            git,
            "finalizers.fluxcd.io"
        ));
    }

    #[test]
    fn bad_preset_entries_are_refused_naming_the_field() {
        use crate::policy::invalid::PolicyError;
        let errors = |yaml: &str| Policy::from_yaml(yaml).expect_err(yaml).0;
        assert_eq!(
            errors("presets: [fluxcd]\n"),
            vec![PolicyError::UnknownPreset {
                index: 0,
                name: "fluxcd".into(),
                known: known_names()
            }]
        );
        assert!(known_names().starts_with("argocd, flux, crossplane"));
        let e = errors("presets: [flux/sorce-controller]\n");
        assert!(
            matches!(&e[..], [PolicyError::UnknownPresetComponent { index: 0, known, .. }] if known.contains("flux/source-controller")),
            "{e:?}"
        );
        let e = errors("presets:\n  - name: flux\n    serviceAccount: [a:b]\n");
        assert!(
            matches!(&e[..], [PolicyError::BadPreset { index: 0, message }] if message.contains("serviceAccount")),
            "{e:?}"
        );
        assert_eq!(
            errors("presets:\n  - name: flux\n    serviceAccounts: [helm]\n    namespace: Flux\n"),
            vec![
                PolicyError::BadPresetNamespace {
                    index: 0,
                    value: "Flux".into()
                },
                PolicyError::BadPresetServiceAccount {
                    index: 0,
                    value: "helm".into()
                }
            ]
        );
        assert_eq!(
            errors("presets: [flux, argocd, flux/helm-controller]\n"),
            vec![PolicyError::DuplicatePreset {
                index: 2,
                first: 0,
                name: "flux/helm-controller".into()
            }]
        );
        let e = errors("presets: [[flux]]\n");
        assert!(
            matches!(&e[..], [PolicyError::BadPreset { index: 0, .. }]),
            "{e:?}"
        );
        let e = errors("rules:\n  - name: preset:flux/x\n    finalizers: [a]\n    users: [b]\n");
        assert!(
            matches!(&e[..], [PolicyError::ReservedRuleName { rule: 0, .. }]),
            "{e:?}"
        );
        let text = crate::policy::invalid::InvalidPolicy(errors("presets: [nope]\n")).to_string();
        assert!(
            text.starts_with(
                "presets[0]: \"nope\" is not a preset of the catalog; known presets: argocd, flux,"
            ),
            "{text}"
        );
    }
}
