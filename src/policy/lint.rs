//! Rules that parse but can match nothing: what `policy validate` warns about.
//!
//! A rule that matches nothing is not an error (the policy still guards
//! everything), but its author meant something by it: the controller it
//! was written for will be denied once the policy is enforced.

use super::config::{Policy, ResourceName, Rule};

/// Why (part of) a rule can match nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyWarning {
    /// `users`, `groups`, `serviceAccounts` and `namespaces` take exact
    /// names; no Kubernetes name holds a `*`.
    Wildcard {
        rule: String,
        field: &'static str,
        value: String,
    },
    /// A namespace that is not a DNS label: no namespace has that name.
    NotANamespace { rule: String, value: String },
    /// `pods.core`: the core group is written with no group at all.
    CoreGroup { rule: String, value: String },
    /// `deployments.v1.apps`: a resource is `resource` or `resource.group`, with no version.
    Version { rule: String, value: String },
    /// `pod`: resources are plural and lowercase.
    Singular {
        rule: String,
        value: String,
        plural: String,
    },
    /// A `namespaces` scope beside a cluster-scoped resource: the resource
    /// has no namespace, so the scope never holds for it.
    ClusterScoped { rule: String, value: String },
}

impl std::fmt::Display for PolicyWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyWarning::Wildcard { rule, field, value } => write!(
                f,
                "{rule}: {field} {value:?} matches nothing: {field} are exact names, and no name holds a '*'"
            ),
            PolicyWarning::NotANamespace { rule, value } => write!(
                f,
                "{rule}: namespaces {value:?} matches nothing: a namespace's name is a lowercase DNS label"
            ),
            PolicyWarning::CoreGroup { rule, value } => {
                let resource = value.split('.').next().unwrap_or_default();
                write!(
                    f,
                    "{rule}: resources {value:?} matches nothing: the core group has no name, write {resource:?}"
                )
            }
            PolicyWarning::Version { rule, value } => write!(
                f,
                "{rule}: resources {value:?} matches nothing: write resource or resource.group, with no version"
            ),
            PolicyWarning::Singular {
                rule,
                value,
                plural,
            } => write!(
                f,
                "{rule}: resources {value:?} matches nothing: resources are plural, write {plural:?}"
            ),
            PolicyWarning::ClusterScoped { rule, value } => write!(
                f,
                "{rule}: resources {value:?} is cluster-scoped, so the rule's namespaces never hold for it"
            ),
        }
    }
}

/// Built-in kinds' singular names, and the resource to write instead.
const SINGULAR: &[(&str, &str, &str)] = &[
    ("", "pod", "pods"),
    ("", "service", "services"),
    ("", "configmap", "configmaps"),
    ("", "secret", "secrets"),
    ("", "namespace", "namespaces"),
    ("", "node", "nodes"),
    ("", "persistentvolume", "persistentvolumes"),
    ("", "persistentvolumeclaim", "persistentvolumeclaims"),
    ("", "serviceaccount", "serviceaccounts"),
    ("apps", "deployment", "deployments.apps"),
    ("apps", "statefulset", "statefulsets.apps"),
    ("apps", "daemonset", "daemonsets.apps"),
    ("apps", "replicaset", "replicasets.apps"),
    ("batch", "job", "jobs.batch"),
    ("batch", "cronjob", "cronjobs.batch"),
];

/// Built-in cluster-scoped resources that carry finalizers in practice.
const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "namespaces"),
    ("", "nodes"),
    ("", "persistentvolumes"),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
    ("apiregistration.k8s.io", "apiservices"),
    ("rbac.authorization.k8s.io", "clusterroles"),
    ("rbac.authorization.k8s.io", "clusterrolebindings"),
    ("storage.k8s.io", "storageclasses"),
    ("storage.k8s.io", "volumeattachments"),
    ("storage.k8s.io", "csidrivers"),
    ("scheduling.k8s.io", "priorityclasses"),
    (
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
    ),
    ("networking.k8s.io", "ingressclasses"),
    ("resource.k8s.io", "deviceclasses"),
];

impl Policy {
    /// What in the rules can match nothing, rule by rule.
    pub fn warnings(&self) -> Vec<PolicyWarning> {
        let mut out = Vec::new();
        for rule in &self.rules {
            lint_rule(rule, &mut out);
        }
        out
    }
}

fn lint_rule(rule: &Rule, out: &mut Vec<PolicyWarning>) {
    let label = || rule.label.clone();
    let accounts: Vec<String> = rule
        .service_accounts
        .iter()
        .map(|u| {
            u.strip_prefix("system:serviceaccount:")
                .unwrap_or(u)
                .to_string()
        })
        .collect();
    let namespaces = rule.namespaces.as_deref().unwrap_or_default();
    for (field, values) in [
        ("users", &rule.users[..]),
        ("groups", &rule.groups[..]),
        ("serviceAccounts", &accounts[..]),
        ("namespaces", namespaces),
    ] {
        for value in values.iter().filter(|v| v.contains('*')) {
            out.push(PolicyWarning::Wildcard {
                rule: label(),
                field,
                value: value.clone(),
            });
        }
    }
    for ns in namespaces
        .iter()
        .filter(|ns| !ns.contains('*') && !is_dns_label(ns))
    {
        out.push(PolicyWarning::NotANamespace {
            rule: label(),
            value: ns.clone(),
        });
    }
    for resource in rule.resources.iter().flatten() {
        if let Some(warning) = lint_resource(&rule.label, resource) {
            out.push(warning);
        } else if rule.namespaces.is_some()
            && CLUSTER_SCOPED.contains(&(resource.group.as_str(), resource.resource.as_str()))
        {
            out.push(PolicyWarning::ClusterScoped {
                rule: label(),
                value: written(resource),
            });
        }
    }
}

fn lint_resource(rule: &str, resource: &ResourceName) -> Option<PolicyWarning> {
    let (rule, value) = (rule.to_string(), written(resource));
    let group = &resource.group;
    if group == "core" || group.starts_with("core.") {
        return Some(PolicyWarning::CoreGroup { rule, value });
    }
    if group.split('.').any(is_version) {
        return Some(PolicyWarning::Version { rule, value });
    }
    SINGULAR
        .iter()
        .find(|(g, singular, _)| g == group && *singular == resource.resource)
        .map(|(_, _, plural)| PolicyWarning::Singular {
            rule,
            value,
            plural: plural.to_string(),
        })
}

/// `v1`, `v1beta1`, `v2alpha3`: an API version, not part of a group.
fn is_version(segment: &str) -> bool {
    let Some(rest) = segment.strip_prefix('v') else {
        return false;
    };
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return false;
    }
    let rest = &rest[digits..];
    rest.is_empty()
        || ["alpha", "beta"].iter().any(|stage| {
            rest.strip_prefix(stage)
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
}

fn is_dns_label(s: &str) -> bool {
    s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The resource as the policy file writes it.
fn written(resource: &ResourceName) -> String {
    if resource.group.is_empty() {
        resource.resource.clone()
    } else {
        format!("{}.{}", resource.resource, resource.group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warnings(rules: &str) -> Vec<String> {
        Policy::from_yaml(&format!("rules:\n{rules}"))
            .unwrap()
            .warnings()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn rules_that_match_nothing_are_named_with_why() {
        let got = warnings(
            r#"
  - name: tenant
    finalizers: ["example.com/x"]
    serviceAccounts: ["team-a:*"]
    users: ["ci-*"]
    groups: ["*"]
    namespaces: ["team-*", "Team-B"]
    resources: ["pods.core", "deployments.v1.apps", "pod", "jobs.batch"]
  - finalizers: ["example.com/y"]
    users: ["x"]
    namespaces: ["team-a"]
    resources: ["persistentvolumes", "customresourcedefinitions.apiextensions.k8s.io", "widgets.example.com"]
"#,
        );
        assert_eq!(
            got,
            [
                r#"tenant: users "ci-*" matches nothing: users are exact names, and no name holds a '*'"#,
                r#"tenant: groups "*" matches nothing: groups are exact names, and no name holds a '*'"#,
                r#"tenant: serviceAccounts "team-a:*" matches nothing: serviceAccounts are exact names, and no name holds a '*'"#,
                r#"tenant: namespaces "team-*" matches nothing: namespaces are exact names, and no name holds a '*'"#,
                r#"tenant: namespaces "Team-B" matches nothing: a namespace's name is a lowercase DNS label"#,
                r#"tenant: resources "pods.core" matches nothing: the core group has no name, write "pods""#,
                r#"tenant: resources "deployments.v1.apps" matches nothing: write resource or resource.group, with no version"#,
                r#"tenant: resources "pod" matches nothing: resources are plural, write "pods""#,
                r#"rules[1]: resources "persistentvolumes" is cluster-scoped, so the rule's namespaces never hold for it"#,
                r#"rules[1]: resources "customresourcedefinitions.apiextensions.k8s.io" is cluster-scoped, so the rule's namespaces never hold for it"#,
            ]
        );
    }

    #[test]
    fn sound_rules_and_the_shipped_policies_warn_of_nothing() {
        let sound = warnings(
            r#"
  - finalizers: ["example.com/*"]
    serviceAccounts: ["ops:cleanup"]
    users: ["system:kube-controller-manager"]
    groups: ["system:serviceaccounts:team-a"]
    namespaces: ["team-a"]
    resources: ["pods", "widgets.example.com", "deployments.apps", "v1s.example.com"]
  - finalizers: ["example.com/*"]
    users: ["x"]
    resources: ["persistentvolumes"]
"#,
        );
        assert!(sound.is_empty(), "{sound:?}");
        assert!(Policy::embedded_default().warnings().is_empty());
    }

    #[test]
    fn versions_are_told_from_groups() {
        for v in ["v1", "v1beta1", "v2alpha3", "v10"] {
            assert!(is_version(v), "{v}");
        }
        for g in [
            "apps", "vendor", "v", "v1beta", "vx1", "v1gamma1", "example",
        ] {
            assert!(!is_version(g), "{g}");
        }
    }
}
