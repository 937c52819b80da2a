//! Rules that parse but can match nothing, and identities too broad to
//! trust ([`super::breadth`]) that a file may still hold: what `policy
//! validate` warns about.
//!
//! A rule that matches nothing is not an error (the policy still guards
//! everything), but its author meant something by it: the controller it
//! was written for will be denied once the policy is enforced.

use super::breadth::{Grant, Kind, too_broad};
use super::config::{FinalizerPattern, Policy, ResourceName, Rule};
use super::kinds;
use super::schema::is_dns_label;

/// What a user name that no authenticator sends looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserShape {
    /// A ServiceAccount's name: sent as `system:serviceaccount:NS:NAME`.
    ServiceAccount,
    /// A Kubernetes component's name without its `system:` prefix.
    Component,
    /// A group's name (`system:serviceaccounts:NS`).
    Group,
}

impl UserShape {
    /// Why a user written in this shape matches nothing.
    fn why(self) -> &'static str {
        match self {
            UserShape::ServiceAccount => {
                "matches nothing if it is a ServiceAccount, which is sent as system:serviceaccount:NAMESPACE:NAME"
            }
            UserShape::Component => {
                "matches nothing: Kubernetes' components are sent as system:NAME"
            }
            UserShape::Group => "matches nothing: it is a group's name, never a user's",
        }
    }
}

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
    /// `applications`: written with no group, which means the core group,
    /// and the core group has no such resource. `groups`: the groups that
    /// serve it ([`kinds::known_groups`]), if any is known.
    NoGroup {
        rule: String,
        value: String,
        groups: Vec<&'static str>,
    },
    /// A ServiceAccount with a `*` (`team-a:*`, `team-*:builder`).
    ServiceAccountWildcard { rule: String, value: String },
    /// A user name shaped like a ServiceAccount's (`flux-system:source-controller`,
    /// `argocd-application-controller`), or a Kubernetes component's without
    /// its `system:` prefix: such a requester is never sent under that name.
    /// `write`: what to write instead.
    NotAUser {
        rule: String,
        value: String,
        shape: UserShape,
        write: String,
    },
    /// An identity too broad to trust ([`super::breadth`]): everyone, or nearly, a
    /// namespace's default ServiceAccount, or every ServiceAccount of a
    /// namespace granted every finalizer (or of `default`, `kube-system`):
    /// the guard is off for them for the rule's finalizers.
    GuardOff {
        rule: String,
        field: &'static str,
        value: String,
        who: String,
        finalizers: String,
    },
    /// The same, in a rule a `presets:` entry expands to, through what the
    /// entry renamed: `field` is its `namespace` or `serviceAccounts`,
    /// `written` what it says there, `identity` what the rule then trusts.
    PresetGuardOff {
        index: usize,
        field: &'static str,
        written: String,
        rule: String,
        identity: String,
        who: String,
        finalizers: String,
    },
    /// An approver of the two-person rule that is a namespace's default
    /// ServiceAccount, or every ServiceAccount of a namespace: whoever runs a
    /// pod there approves. (Everyone, or nearly, is refused outright.)
    BroadApprover {
        field: &'static str,
        value: String,
        who: String,
    },
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
            PolicyWarning::NoGroup {
                rule,
                value,
                groups,
            } => write_no_group(f, rule, value, groups),
            PolicyWarning::ServiceAccountWildcard { rule, value } => {
                write_service_account_wildcard(f, rule, value)
            }
            PolicyWarning::NotAUser {
                rule,
                value,
                shape,
                write,
            } => write!(f, "{rule}: users {value:?} {}; write {write}", shape.why()),
            PolicyWarning::GuardOff {
                rule,
                field,
                value,
                who,
                finalizers,
            } => write!(
                f,
                "{rule}: {field} {value:?} is {who}: each of them may remove {finalizers}, so the guard is off for them; name the controllers' serviceAccounts, or your people's groups, instead"
            ),
            PolicyWarning::PresetGuardOff {
                index,
                field,
                written,
                rule,
                identity,
                who,
                finalizers,
            } => write!(
                f,
                "presets[{index}].{field} {written:?}: {rule} would trust {identity}, {who}: each of them may remove {finalizers}, so the guard is off for them; {}",
                preset_fix(field)
            ),
            PolicyWarning::BroadApprover { field, value, who } => write!(
                f,
                "override.approval.{field} {value:?} is {who}: each of them may approve an override of any finalizer, so the two-person rule's second person is whoever runs a pod there; name the people who approve (users, or a group only they are in)"
            ),
        }
    }
}

/// [`PolicyWarning::NoGroup`]: a resource with no group, and the groups
/// that do have it.
fn write_no_group(
    f: &mut std::fmt::Formatter<'_>,
    rule: &str,
    value: &str,
    groups: &[&str],
) -> std::fmt::Result {
    write!(
        f,
        "{rule}: resources {value:?} matches nothing: with no group it names the core group, which has no {value}; "
    )?;
    match groups {
        [] => write!(
            f,
            "write it with its API group, as RESOURCE.GROUP (e.g. {:?})",
            format!("{value}.example.com")
        ),
        [group] => write!(f, "write {:?}", format!("{value}.{group}")),
        groups => {
            let all: Vec<String> = groups
                .iter()
                .map(|g| format!("{:?}", format!("{value}.{g}")))
                .collect();
            write!(f, "write the one you mean: {}", all.join(", "))
        }
    }
}

/// [`PolicyWarning::ServiceAccountWildcard`]: what to write instead.
fn write_service_account_wildcard(
    f: &mut std::fmt::Formatter<'_>,
    rule: &str,
    value: &str,
) -> std::fmt::Result {
    write!(
        f,
        "{rule}: serviceAccounts {value:?} matches nothing: a ServiceAccount is an exact NAMESPACE:NAME, and no name holds a '*'; "
    )?;
    match value.split_once(':') {
        Some((ns, "*")) if !ns.contains('*') => write!(
            f,
            "for every ServiceAccount of namespace {ns}, write groups: [{:?}]",
            format!("system:serviceaccounts:{ns}")
        ),
        _ => f.write_str("list each ServiceAccount as NAMESPACE:NAME"),
    }
}

/// [`PolicyWarning::PresetGuardOff`]: what to name instead.
fn preset_fix(field: &str) -> &'static str {
    if field == "namespace" {
        "name the namespace the preset's controllers run in, one of their own"
    } else {
        "name the controllers' own ServiceAccounts"
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
        for (i, identity) in self.builtin_identities.iter().enumerate() {
            let finalizers = match identity.controller {
                Some(controller) => format!("the {} controller's finalizers", controller.name),
                None => "every built-in controller's finalizers".to_string(),
            };
            for user in &identity.users {
                if let Some(who) = too_broad(Kind::User, user, Grant::Named) {
                    out.push(PolicyWarning::GuardOff {
                        rule: format!("builtinIdentities[{i}]"),
                        field: "users",
                        value: user.clone(),
                        who: who.to_string(),
                        finalizers: finalizers.clone(),
                    });
                }
            }
        }
        if let Some(approval) = &self.override_settings.approval {
            for (field, kind, names) in [
                ("users", Kind::User, &approval.users),
                ("groups", Kind::Group, &approval.groups),
            ] {
                for name in names {
                    // Everyone, or nearly, never gets this far: the schema refuses it.
                    if let Some(who) = too_broad(kind, name, Grant::EveryFinalizer) {
                        out.push(PolicyWarning::BroadApprover {
                            field,
                            value: name.clone(),
                            who: who.to_string(),
                        });
                    }
                }
            }
        }
        out
    }
}

fn lint_rule(rule: &Rule, out: &mut Vec<PolicyWarning>) {
    lint_wildcards(rule, out);
    lint_requesters(rule, out);
    lint_scope(rule, out);
}

/// Exact names written with a `*`: they match nothing.
fn lint_wildcards(rule: &Rule, out: &mut Vec<PolicyWarning>) {
    let label = || rule.label.clone();
    let accounts: Vec<String> = rule.service_account_names().map(str::to_string).collect();
    let namespaces = rule.namespaces.as_deref().unwrap_or_default();
    for (field, values) in [
        ("users", &rule.users[..]),
        ("groups", &rule.groups[..]),
        ("serviceAccounts", &accounts[..]),
        ("namespaces", namespaces),
    ] {
        for value in values.iter().filter(|v| v.contains('*')) {
            out.push(if field == "serviceAccounts" {
                PolicyWarning::ServiceAccountWildcard {
                    rule: label(),
                    value: value.clone(),
                }
            } else {
                PolicyWarning::Wildcard {
                    rule: label(),
                    field,
                    value: value.clone(),
                }
            });
        }
    }
}

/// Requesters no authenticator sends, and requesters that are everyone (or
/// every pod of a namespace): the guard turned off.
fn lint_requesters(rule: &Rule, out: &mut Vec<PolicyWarning>) {
    let label = || rule.label.clone();
    for user in &rule.users {
        if let Some((shape, write)) = not_a_user(user) {
            out.push(PolicyWarning::NotAUser {
                rule: label(),
                value: user.clone(),
                shape,
                write,
            });
        }
    }
    let grant = if rule.finalizers.iter().any(spans_domains) {
        Grant::EveryFinalizer
    } else {
        Grant::Named
    };
    for (field, kind, values) in [
        ("users", Kind::User, &rule.users),
        ("groups", Kind::Group, &rule.groups),
        ("serviceAccounts", Kind::User, &rule.service_accounts),
    ] {
        for value in values {
            let Some(who) = too_broad(kind, value, grant) else {
                continue;
            };
            let (who, finalizers) = (who.to_string(), finalizers_named(&rule.finalizers));
            out.push(match preset_field(rule, field, value) {
                Some((index, field, written)) => PolicyWarning::PresetGuardOff {
                    index,
                    field,
                    written,
                    rule: label(),
                    identity: match kind {
                        Kind::Group => format!("group {value:?}"),
                        Kind::User => format!("{value:?}"),
                    },
                    who,
                    finalizers,
                },
                None => PolicyWarning::GuardOff {
                    rule: label(),
                    field,
                    value: value.clone(),
                    who,
                    finalizers,
                },
            });
        }
    }
}

/// What a `presets:` entry wrote that put a rule's `field` there: its
/// `serviceAccounts`, or its `namespace` (the one a preset's ServiceAccounts,
/// and its every-ServiceAccount group, live in). `None` for a rule of
/// `rules:`, and for the catalog's own values (tested sound).
fn preset_field(rule: &Rule, field: &str, value: &str) -> Option<(usize, &'static str, String)> {
    let origin = rule.preset.as_ref()?;
    if field == "serviceAccounts" && origin.service_accounts {
        let written = value
            .strip_prefix("system:serviceaccount:")
            .unwrap_or(value);
        return Some((origin.index, "serviceAccounts", written.to_string()));
    }
    let namespace = origin.namespace.clone()?;
    Some((origin.index, "namespace", namespace))
}

/// Namespaces that are no namespace's name, resources written so they match
/// nothing, and a namespace scope beside a cluster-scoped resource.
fn lint_scope(rule: &Rule, out: &mut Vec<PolicyWarning>) {
    let label = || rule.label.clone();
    let namespaces = rule.namespaces.as_deref().unwrap_or_default();
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
            && (CLUSTER_SCOPED.contains(&(resource.group.as_str(), resource.resource.as_str()))
                || kinds::by_resource(&resource.group, &resource.resource)
                    .is_some_and(|t| !t.namespaced))
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
    if let Some((_, _, plural)) = SINGULAR
        .iter()
        .find(|(g, singular, _)| g == group && *singular == resource.resource)
    {
        return Some(PolicyWarning::Singular {
            rule,
            value,
            plural: plural.to_string(),
        });
    }
    if group.is_empty() {
        let groups = kinds::known_groups(&resource.resource);
        if !groups.contains(&"") {
            return Some(PolicyWarning::NoGroup {
                rule,
                value,
                groups,
            });
        }
    }
    None
}

/// Whether a pattern reaches finalizers of any domain: `"*"`, or a prefix
/// that stops before its domain's `/` (`"a*"`: every domain starting with
/// `a`; sixty-two such prefixes are every finalizer there is).
fn spans_domains(pattern: &FinalizerPattern) -> bool {
    matches!(pattern, FinalizerPattern::Prefix(p) if !p.contains('/'))
}

/// `every finalizer (finalizers "*")`, or the finalizers a rule names.
fn finalizers_named(finalizers: &[FinalizerPattern]) -> String {
    if finalizers
        .iter()
        .any(|f| matches!(f, FinalizerPattern::Prefix(p) if p.is_empty()))
    {
        return "every finalizer (finalizers \"*\")".to_string();
    }
    let named: Vec<String> = finalizers
        .iter()
        .map(|f| match f {
            FinalizerPattern::Exact(name) => format!("{name:?}"),
            FinalizerPattern::Prefix(prefix) => format!("{:?}", format!("{prefix}*")),
        })
        .collect();
    if finalizers.iter().any(spans_domains) {
        return format!(
            "finalizers of every domain a prefix without a \"/\" reaches ({})",
            named.join(", ")
        );
    }
    named.join(", ")
}

/// Prefixes an authenticator gives user names (`--oidc-username-prefix`,
/// webhook token authenticators, managed platforms' own components): `oidc:alice`
/// is a person, `eks:cloud-controller-manager` a component EKS runs.
const USER_PREFIXES: &[&str] = &[
    "oidc",
    "dex",
    "keycloak",
    "okta",
    "google",
    "github",
    "gitlab",
    "azure",
    "aad",
    "aws",
    "iam",
    "ldap",
    "saml",
    "sso",
    "user",
    "users",
    "system",
    "eks",
    "gke",
    "aks",
    "openshift",
];

/// ServiceAccount names of well-known controllers that no suffix gives away.
const CONTROLLER_ACCOUNTS: &[&str] = &[
    "argocd-server",
    "argocd-repo-server",
    "crossplane",
    "external-secrets",
    "karpenter",
    "velero",
    "longhorn-service-account",
];

/// Kubernetes' components, which authenticate as `system:NAME`.
const COMPONENTS: &[&str] = &[
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
    "cloud-controller-manager",
];

/// What to write instead of a user name that no authenticator sends: a
/// ServiceAccount's `NAMESPACE:NAME`, or a component's name without its
/// `system:` prefix. A person's name (an email, `oidc:alice`, `jane`, a
/// certificate's `kubernetes-admin`) or a full `system:` name is `None`.
fn not_a_user(user: &str) -> Option<(UserShape, String)> {
    let accounts = |account: &str| {
        Some((
            UserShape::ServiceAccount,
            format!("serviceAccounts: [{account:?}]"),
        ))
    };
    if let Some(rest) = user.strip_prefix("system:serviceaccounts") {
        let group = format!("system:serviceaccounts{rest}");
        return Some((UserShape::Group, format!("groups: [{group:?}]")));
    }
    if COMPONENTS.contains(&user) {
        let name = format!("system:{user}");
        return Some((UserShape::Component, format!("users: [{name:?}]")));
    }
    for prefix in ["serviceaccount:", "serviceaccounts:", "sa:"] {
        if let Some(rest) = user.strip_prefix(prefix)
            && let Some((ns, name)) = rest.split_once(':')
            && is_dns_label(ns)
            && is_account_name(name)
        {
            return accounts(rest);
        }
    }
    match user.split_once(':') {
        Some((ns, name)) => {
            let shaped = is_dns_label(ns)
                && is_account_name(name)
                && !USER_PREFIXES.contains(&ns)
                && (is_controller_namespace(ns) || is_controller_name(name));
            if shaped { accounts(user) } else { None }
        }
        None if is_account_name(user) && is_controller_name(user) => {
            accounts(&format!("NAMESPACE:{user}"))
        }
        None => None,
    }
}

/// `flux-system`, `kube-system`, `argocd`: where controllers run.
fn is_controller_namespace(ns: &str) -> bool {
    ns.ends_with("-system")
        || [
            "argocd",
            "cert-manager",
            "velero",
            "karpenter",
            "external-secrets",
            "kubevirt",
            "rook-ceph",
            "longhorn",
            "sail-operator",
        ]
        .contains(&ns)
}

/// `source-controller`, `capi-controller-manager`, `rook-ceph-operator`:
/// a controller's ServiceAccount, by its name.
fn is_controller_name(name: &str) -> bool {
    CONTROLLER_ACCOUNTS.contains(&name)
        || [
            "-controller",
            "-controller-manager",
            "-manager",
            "-operator",
            "-webhook",
            "-cainjector",
            "-provisioner",
            "-sa",
            "-serviceaccount",
            "-service-account",
        ]
        .iter()
        .any(|suffix| name.len() > suffix.len() && name.ends_with(suffix))
}

/// A ServiceAccount's name: a DNS subdomain.
fn is_account_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 253 && name.split('.').all(is_dns_label)
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
    resources: ["persistentvolumes", "customresourcedefinitions.apiextensions.k8s.io", "widgets.example.com", "clusterissuers.cert-manager.io", "issuers.cert-manager.io"]
"#,
        );
        assert_eq!(
            got,
            [
                r#"tenant: users "ci-*" matches nothing: users are exact names, and no name holds a '*'"#,
                r#"tenant: groups "*" matches nothing: groups are exact names, and no name holds a '*'"#,
                r#"tenant: serviceAccounts "team-a:*" matches nothing: a ServiceAccount is an exact NAMESPACE:NAME, and no name holds a '*'; for every ServiceAccount of namespace team-a, write groups: ["system:serviceaccounts:team-a"]"#,
                r#"tenant: namespaces "team-*" matches nothing: namespaces are exact names, and no name holds a '*'"#,
                r#"tenant: namespaces "Team-B" matches nothing: a namespace's name is a lowercase DNS label"#,
                r#"tenant: resources "pods.core" matches nothing: the core group has no name, write "pods""#,
                r#"tenant: resources "deployments.v1.apps" matches nothing: write resource or resource.group, with no version"#,
                r#"tenant: resources "pod" matches nothing: resources are plural, write "pods""#,
                r#"rules[1]: resources "persistentvolumes" is cluster-scoped, so the rule's namespaces never hold for it"#,
                r#"rules[1]: resources "customresourcedefinitions.apiextensions.k8s.io" is cluster-scoped, so the rule's namespaces never hold for it"#,
                r#"rules[1]: resources "clusterissuers.cert-manager.io" is cluster-scoped, so the rule's namespaces never hold for it"#,
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

    /// A built-in identity, or a rule's ServiceAccount, that is everyone or a
    /// namespace's default ServiceAccount switches the guard off as surely
    /// as `groups: [system:authenticated]` does: `--strict` fails it.
    #[test]
    fn open_doors_through_built_in_identities_and_default_accounts_are_named() {
        let policy = Policy::from_yaml(
            "builtinIdentities:\n  - controller: kube-controller-manager\n    users: [\"system:anonymous\", \"system:serviceaccount:default:default\", \"system:serviceaccount:kube-system:gc\"]\nrules:\n  - finalizers: [example.com/a]\n    serviceAccounts: [\"team-a:default\", \"team-a:builder\"]\n",
        )
        .unwrap();
        let warnings: Vec<String> = policy.warnings().iter().map(ToString::to_string).collect();
        assert_eq!(warnings.len(), 3, "{warnings:#?}");
        assert!(warnings[0].starts_with("rules[0]: serviceAccounts \"system:serviceaccount:team-a:default\" is a namespace's default ServiceAccount"), "{warnings:#?}");
        assert!(warnings[1].starts_with("builtinIdentities[0]: users \"system:anonymous\" is every unauthenticated request: each of them may remove every built-in controller's finalizers"), "{warnings:#?}");
        assert!(warnings[2].starts_with("builtinIdentities[0]: users \"system:serviceaccount:default:default\" is a namespace's default ServiceAccount"), "{warnings:#?}");
    }

    /// What locks a controller out, or lets everyone in, while it parses:
    /// each named with its rule and the fix.
    #[test]
    fn lockouts_and_open_doors_are_named_with_the_fix() {
        let got = warnings(
            r#"
  - name: argocd
    finalizers: ["resources-finalizer.argocd.argoproj.io"]
    users: ["argocd-application-controller", "flux-system:source-controller", "serviceaccount:ops:cleanup", "kube-controller-manager"]
    resources: ["applications", "providers", "widgets", "deployments"]
  - finalizers: ["*"]
    groups: ["system:authenticated"]
  - finalizers: ["example.com/a", "example.com/b*"]
    groups: ["system:serviceaccounts", "system:unauthenticated"]
    users: ["system:anonymous"]
  - finalizers: ["example.com/a"]
    serviceAccounts: ["team-*:builder", "*:*"]
"#,
        );
        assert_eq!(
            got,
            [
                r#"argocd: users "argocd-application-controller" matches nothing if it is a ServiceAccount, which is sent as system:serviceaccount:NAMESPACE:NAME; write serviceAccounts: ["NAMESPACE:argocd-application-controller"]"#,
                r#"argocd: users "flux-system:source-controller" matches nothing if it is a ServiceAccount, which is sent as system:serviceaccount:NAMESPACE:NAME; write serviceAccounts: ["flux-system:source-controller"]"#,
                r#"argocd: users "serviceaccount:ops:cleanup" matches nothing if it is a ServiceAccount, which is sent as system:serviceaccount:NAMESPACE:NAME; write serviceAccounts: ["ops:cleanup"]"#,
                r#"argocd: users "kube-controller-manager" matches nothing: Kubernetes' components are sent as system:NAME; write users: ["system:kube-controller-manager"]"#,
                r#"argocd: resources "applications" matches nothing: with no group it names the core group, which has no applications; write "applications.argoproj.io""#,
                r#"argocd: resources "providers" matches nothing: with no group it names the core group, which has no providers; write the one you mean: "providers.notification.toolkit.fluxcd.io", "providers.pkg.crossplane.io""#,
                r#"argocd: resources "widgets" matches nothing: with no group it names the core group, which has no widgets; write it with its API group, as RESOURCE.GROUP (e.g. "widgets.example.com")"#,
                r#"argocd: resources "deployments" matches nothing: with no group it names the core group, which has no deployments; write "deployments.apps""#,
                r#"rules[1]: groups "system:authenticated" is every authenticated user: each of them may remove every finalizer (finalizers "*"), so the guard is off for them; name the controllers' serviceAccounts, or your people's groups, instead"#,
                r#"rules[2]: users "system:anonymous" is every unauthenticated request: each of them may remove "example.com/a", "example.com/b*", so the guard is off for them; name the controllers' serviceAccounts, or your people's groups, instead"#,
                r#"rules[2]: groups "system:serviceaccounts" is every ServiceAccount of every namespace: each of them may remove "example.com/a", "example.com/b*", so the guard is off for them; name the controllers' serviceAccounts, or your people's groups, instead"#,
                r#"rules[2]: groups "system:unauthenticated" is every unauthenticated request: each of them may remove "example.com/a", "example.com/b*", so the guard is off for them; name the controllers' serviceAccounts, or your people's groups, instead"#,
                r#"rules[3]: serviceAccounts "team-*:builder" matches nothing: a ServiceAccount is an exact NAMESPACE:NAME, and no name holds a '*'; list each ServiceAccount as NAMESPACE:NAME"#,
                r#"rules[3]: serviceAccounts "*:*" matches nothing: a ServiceAccount is an exact NAMESPACE:NAME, and no name holds a '*'; list each ServiceAccount as NAMESPACE:NAME"#,
            ]
        );
    }

    /// One definition of too broad, in every identity list: a namespace's
    /// every ServiceAccount granted every finalizer (its default one alone
    /// already is), or trusted in `default` or `kube-system` through a
    /// preset's namespace; a preset's own ServiceAccounts that are a
    /// default one; approvers that are whoever runs a pod somewhere.
    #[test]
    fn too_broad_identities_are_named_in_every_list() {
        let policy = Policy::from_yaml(
            r#"
rules:
  - finalizers: ["*"]
    groups: ["system:serviceaccounts:team-a"]
  - finalizers: ["*"]
    serviceAccounts: ["team-a:default"]
  - finalizers: ["example.com/*"]
    groups: ["system:serviceaccounts:team-a", "system:serviceaccounts:kube-system"]
presets:
  - name: crossplane
    namespace: default
  - name: flux/helm-controller
    serviceAccounts: ["flux-system:helm-controller", "ops:default"]
  - name: argocd
    namespace: kube-system
override:
  approval:
    users: ["sec-lead", "system:serviceaccount:ops:default"]
    groups: ["security", "system:serviceaccounts:ops"]
    maxAge: 1h
"#,
        )
        .unwrap();
        let got: Vec<String> = policy.warnings().iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                r#"rules[0]: groups "system:serviceaccounts:team-a" is every ServiceAccount of namespace team-a, so every pod there (its default ServiceAccount's too): each of them may remove every finalizer (finalizers "*"), so the guard is off for them; name the controllers' serviceAccounts, or your people's groups, instead"#,
                r#"rules[1]: serviceAccounts "system:serviceaccount:team-a:default" is a namespace's default ServiceAccount, which every pod of the namespace that names no ServiceAccount runs as: each of them may remove every finalizer (finalizers "*"), so the guard is off for them; name the controllers' serviceAccounts, or your people's groups, instead"#,
                r#"rules[2]: groups "system:serviceaccounts:kube-system" is every ServiceAccount of namespace kube-system, each of Kubernetes' own components and add-ons there: each of them may remove "example.com/*", so the guard is off for them; name the controllers' serviceAccounts, or your people's groups, instead"#,
                r#"presets[0].namespace "default": preset:crossplane/providers would trust group "system:serviceaccounts:default", every ServiceAccount of namespace default, where everything that names no namespace runs: each of them may remove "finalizer.managedresource.crossplane.io", "in-use.crossplane.io", so the guard is off for them; name the namespace the preset's controllers run in, one of their own"#,
                r#"presets[1].serviceAccounts "ops:default": preset:flux/helm-controller would trust "system:serviceaccount:ops:default", a namespace's default ServiceAccount, which every pod of the namespace that names no ServiceAccount runs as: each of them may remove "finalizers.fluxcd.io", so the guard is off for them; name the controllers' own ServiceAccounts"#,
                r#"override.approval.users "system:serviceaccount:ops:default" is a namespace's default ServiceAccount, which every pod of the namespace that names no ServiceAccount runs as: each of them may approve an override of any finalizer, so the two-person rule's second person is whoever runs a pod there; name the people who approve (users, or a group only they are in)"#,
                r#"override.approval.groups "system:serviceaccounts:ops" is every ServiceAccount of namespace ops, so every pod there (its default ServiceAccount's too): each of them may approve an override of any finalizer, so the two-person rule's second person is whoever runs a pod there; name the people who approve (users, or a group only they are in)"#,
            ]
        );
    }

    #[test]
    fn prefixes_short_of_a_domain_and_every_node_are_too_broad_too() {
        let every: Vec<String> = ('a'..='z')
            .chain('A'..='Z')
            .chain('0'..='9')
            .map(|c| format!("\"{c}*\""))
            .collect();
        let policy = Policy::from_yaml(&format!(
            "rules:\n  - finalizers: [{}]\n    groups: [\"system:serviceaccounts:team-a\"]\n  - finalizers: [\"*\"]\n    groups: [\"system:nodes\"]\n  - finalizers: [\"example.com/*\"]\n    groups: [\"system:serviceaccounts:team-a\"]\n",
            every.join(", ")
        ))
        .unwrap();
        let got: Vec<String> = policy.warnings().iter().map(ToString::to_string).collect();
        assert_eq!(got.len(), 2, "{got:#?}");
        assert!(got[0].starts_with(r#"rules[0]: groups "system:serviceaccounts:team-a" is every ServiceAccount of namespace team-a"#), "{}", got[0]);
        assert!(
            got[0].contains("finalizers of every domain a prefix without a \"/\" reaches"),
            "{}",
            got[0]
        );
        assert!(
            got[1].starts_with(r#"rules[1]: groups "system:nodes" is every node's kubelet"#),
            "{}",
            got[1]
        );
    }

    /// Every preset of the catalog, in its own namespace or renamed to
    /// another of a project's own, trusts no identity too broad.
    #[test]
    fn the_catalog_in_its_namespaces_trusts_no_one_too_broad() {
        for preset in super::super::presets::catalog() {
            for namespace in ["", "platform"] {
                let entry = if namespace.is_empty() {
                    format!("presets: [{}]\n", preset.name)
                } else {
                    format!(
                        "presets:\n  - name: {}\n    namespace: {namespace}\n",
                        preset.name
                    )
                };
                let warnings = Policy::from_yaml(&entry).unwrap().warnings();
                assert!(warnings.is_empty(), "{entry}: {warnings:?}");
            }
        }
    }

    #[test]
    fn a_group_or_a_component_written_as_a_user_is_named() {
        assert_eq!(
            not_a_user("system:serviceaccounts:ops"),
            Some((
                UserShape::Group,
                r#"groups: ["system:serviceaccounts:ops"]"#.to_string()
            ))
        );
        assert_eq!(
            not_a_user("kube-scheduler"),
            Some((
                UserShape::Component,
                r#"users: ["system:kube-scheduler"]"#.to_string()
            ))
        );
        assert_eq!(
            not_a_user("cert-manager:cert-manager").map(|(_, w)| w),
            Some(r#"serviceAccounts: ["cert-manager:cert-manager"]"#.to_string())
        );
        assert_eq!(
            not_a_user("sa:ops:cleanup").map(|(_, w)| w),
            Some(r#"serviceAccounts: ["ops:cleanup"]"#.to_string())
        );
    }

    /// People's names, as authenticators send them, and the core group's
    /// resources written plainly, warn of nothing.
    #[test]
    fn people_and_core_resources_warn_of_nothing() {
        for user in [
            "jane@example.com",
            "oidc:alice",
            "oidc:deploy-controller",
            "eks:cloud-controller-manager",
            "https://accounts.example.com#1234",
            "kubernetes-admin",
            "alice",
            "ci-bot",
            "system:kube-controller-manager",
            "system:serviceaccount:flux-system:source-controller",
            "system:node:worker-1",
            "team-a:alice",
            "CN=Jane,O=ops",
        ] {
            assert_eq!(not_a_user(user), None, "{user}");
        }
        let sound = warnings(
            r#"
  - finalizers: ["example.com/x"]
    groups: ["system:serviceaccounts:team-a", "system:masters"]
    users: ["jane@example.com", "oidc:alice"]
    resources: ["pods", "persistentvolumeclaims", "namespaces", "events", "nodes", "services", "secrets", "configmaps"]
"#,
        );
        assert!(sound.is_empty(), "{sound:?}");
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
