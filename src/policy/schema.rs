//! The policy file as written: its YAML shapes, and the check of each section.
//!
//! Every key is checked (`deny_unknown_fields`): a misspelled key is an error
//! that names it, never a setting that is silently ignored. Every problem is
//! collected, in file order, so one run names them all.

use serde::Deserialize;

use super::breadth::{Broad, Grant, Kind, too_broad};
use super::builtin::BUILTIN_CONTROLLERS;
use super::config::{
    Approval, BuiltinIdentity, DEFAULT_OVERRIDE_ANNOTATION, DEFAULT_OVERRIDE_REASONS,
    FinalizerOverride, FinalizerPattern, Mode, OverrideSettings, ResourceName, Rule,
};
use super::invalid::PolicyError;
use super::presets::PresetRef;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct PolicyFile {
    #[serde(default)]
    pub(super) mode: Mode,
    #[serde(default = "yes")]
    pub(super) builtin_controllers: bool,
    #[serde(default)]
    pub(super) builtin_identities: Vec<BuiltinIdentityFile>,
    #[serde(default)]
    pub(super) rules: Vec<RuleFile>,
    /// Catalog names (`flux`) or objects (`{name, namespace, serviceAccounts}`),
    /// told apart in [`preset_ref`] so each error names its entry.
    #[serde(default)]
    pub(super) presets: Vec<serde_yaml_ng::Value>,
    #[serde(default)]
    pub(super) r#override: Option<OverrideFile>,
}

/// A preset named with what its chart or installer lets its user rename.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PresetFile {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    service_accounts: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct BuiltinIdentityFile {
    controller: String,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    service_accounts: Vec<String>,
}

impl BuiltinIdentityFile {
    fn validate(self, index: usize, errors: &mut Vec<PolicyError>) -> Option<BuiltinIdentity> {
        let before = errors.len();
        let controller = if self.controller == "kube-controller-manager" {
            None
        } else {
            match BUILTIN_CONTROLLERS
                .iter()
                .find(|c| c.name == self.controller)
            {
                Some(c) => Some(c),
                None => {
                    let known: Vec<&str> = BUILTIN_CONTROLLERS.iter().map(|c| c.name).collect();
                    errors.push(PolicyError::UnknownController {
                        index,
                        name: self.controller,
                        known: known.join(", "),
                    });
                    None
                }
            }
        };
        if self.users.is_empty() && self.service_accounts.is_empty() {
            errors.push(PolicyError::NoIdentities { index });
        }
        let mut users = Vec::new();
        for user in self.users {
            if user.is_empty() || user.chars().any(char::is_whitespace) {
                errors.push(PolicyError::BadIdentity {
                    index,
                    field: "users",
                    value: user,
                    hint: " (empty or whitespace)",
                });
            } else {
                users.push(user);
            }
        }
        for sa in self.service_accounts {
            match service_account_username(&sa) {
                Some(user) => users.push(user),
                None => errors.push(PolicyError::BadIdentity {
                    index,
                    field: "serviceAccounts",
                    value: sa,
                    hint: " (NAMESPACE:NAME)",
                }),
            }
        }
        (errors.len() == before).then_some(BuiltinIdentity { controller, users })
    }
}

/// `NAMESPACE:NAME` as the username Kubernetes gives that service account.
fn service_account_username(value: &str) -> Option<String> {
    match value.split_once(':') {
        Some((ns, name)) if is_word(ns) && is_word(name) && !name.contains(':') => {
            Some(format!("system:serviceaccount:{ns}:{name}"))
        }
        _ => None,
    }
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RuleFile {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    finalizers: Vec<String>,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    service_accounts: Vec<String>,
    #[serde(default)]
    namespaces: Option<Vec<String>>,
    #[serde(default)]
    resources: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct OverrideFile {
    #[serde(default)]
    annotation: Option<String>,
    #[serde(default)]
    reasons: Option<Vec<String>>,
    #[serde(default)]
    approval: Option<ApprovalFile>,
    #[serde(default = "yes")]
    require_deletion: bool,
    #[serde(default)]
    finalizers: Vec<FinalizerOverrideFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FinalizerOverrideFile {
    #[serde(default)]
    finalizers: Vec<String>,
    #[serde(default)]
    reasons: Option<Vec<String>>,
    #[serde(default)]
    approval: Option<ApprovalRequirement>,
    #[serde(default)]
    never: bool,
}

/// `approval:` in an `override.finalizers` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ApprovalRequirement {
    Required,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ApprovalFile {
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    max_age: String,
}

/// `rules:`, in file order: each valid, none named like a preset's, no two alike.
pub(super) fn validate_rules(files: Vec<RuleFile>, errors: &mut Vec<PolicyError>) -> Vec<Rule> {
    let mut rules = Vec::with_capacity(files.len());
    for (i, rule) in files.into_iter().enumerate() {
        if let Some(name) = rule.name.as_ref().filter(|n| n.starts_with("preset:")) {
            errors.push(PolicyError::ReservedRuleName {
                rule: i,
                name: name.clone(),
            });
        }
        if let Some(rule) = rule.validate(i, errors) {
            if let Some(first) = rules.iter().position(|r: &Rule| r.label == rule.label) {
                errors.push(PolicyError::DuplicateRuleName {
                    rule: i,
                    first,
                    name: rule.label.clone(),
                });
            }
            rules.push(rule);
        }
    }
    rules
}

/// `builtinIdentities:`, in file order.
pub(super) fn validate_identities(
    files: Vec<BuiltinIdentityFile>,
    errors: &mut Vec<PolicyError>,
) -> Vec<BuiltinIdentity> {
    files
        .into_iter()
        .enumerate()
        .filter_map(|(i, identity)| identity.validate(i, errors))
        .collect()
}

impl RuleFile {
    fn validate(self, i: usize, errors: &mut Vec<PolicyError>) -> Option<Rule> {
        let before = errors.len();
        if self.finalizers.is_empty() {
            errors.push(PolicyError::NoFinalizers { rule: i });
        }
        let finalizers = self
            .finalizers
            .into_iter()
            .filter_map(|p| match parse_finalizer_pattern(&p) {
                Some(pattern) => Some(pattern),
                None => {
                    errors.push(PolicyError::BadFinalizer {
                        rule: i,
                        pattern: p,
                    });
                    None
                }
            })
            .collect();
        if self.users.is_empty() && self.groups.is_empty() && self.service_accounts.is_empty() {
            errors.push(PolicyError::NoRequesters { rule: i });
        }
        check_names(i, "users", &self.users, errors);
        check_names(i, "groups", &self.groups, errors);
        let service_accounts = self
            .service_accounts
            .into_iter()
            .filter_map(|sa| match service_account_username(&sa) {
                Some(user) => Some(user),
                None => {
                    errors.push(PolicyError::BadServiceAccount { rule: i, value: sa });
                    None
                }
            })
            .collect();
        if let Some(namespaces) = &self.namespaces {
            if namespaces.is_empty() {
                errors.push(PolicyError::EmptyScope {
                    rule: i,
                    field: "namespaces",
                    what: "namespace",
                });
            }
            check_names(i, "namespaces", namespaces, errors);
        }
        let resources = self.resources.map(|resources| {
            if resources.is_empty() {
                errors.push(PolicyError::EmptyScope {
                    rule: i,
                    field: "resources",
                    what: "resource",
                });
            }
            resources
                .into_iter()
                .filter_map(|r| match parse_resource(&r) {
                    Some(name) => Some(name),
                    None => {
                        errors.push(PolicyError::BadResource { rule: i, value: r });
                        None
                    }
                })
                .collect()
        });
        if errors.len() > before {
            return None;
        }
        Some(Rule {
            label: self.name.unwrap_or_else(|| format!("rules[{i}]")),
            finalizers,
            users: self.users,
            groups: self.groups,
            service_accounts,
            namespaces: self.namespaces,
            resources,
            preset: None,
        })
    }
}

/// One `presets:` entry as a reference to the catalog: a name, or an object
/// with `name`, `namespace` and `serviceAccounts`; `None` when it is not one
/// (the problems pushed to `errors`). What it names, [`super::presets::expand`] finds.
pub(super) fn preset_ref(
    index: usize,
    entry: serde_yaml_ng::Value,
    errors: &mut Vec<PolicyError>,
) -> Option<PresetRef> {
    let file = match entry {
        serde_yaml_ng::Value::String(name) => PresetFile {
            name,
            namespace: None,
            service_accounts: None,
        },
        value @ serde_yaml_ng::Value::Mapping(_) => {
            match serde_yaml_ng::from_value::<PresetFile>(value) {
                Ok(file) => file,
                Err(e) => {
                    errors.push(PolicyError::BadPreset {
                        index,
                        message: e.to_string(),
                    });
                    return None;
                }
            }
        }
        _ => {
            errors.push(PolicyError::BadPreset {
                index,
                message:
                    "must be a preset's name, or an object with name, namespace and serviceAccounts"
                        .to_string(),
            });
            return None;
        }
    };
    if let Some(ns) = file.namespace.as_ref().filter(|ns| !is_dns_label(ns)) {
        errors.push(PolicyError::BadPresetNamespace {
            index,
            value: ns.clone(),
        });
    }
    let service_accounts = file.service_accounts.map(|sas| {
        if sas.is_empty() {
            errors.push(PolicyError::BadPreset {
                index,
                message:
                    "serviceAccounts: an empty list covers no one; omit it to keep the preset's"
                        .to_string(),
            });
        }
        sas.into_iter()
            .filter_map(|sa| match service_account_username(&sa) {
                Some(user) => Some(user),
                None => {
                    errors.push(PolicyError::BadPresetServiceAccount { index, value: sa });
                    None
                }
            })
            .collect::<Vec<_>>()
    });
    Some(PresetRef {
        index,
        name: file.name,
        namespace: file.namespace,
        service_accounts,
    })
}

/// A namespace's (or Service's) name: a lowercase RFC 1123 label of at most
/// 63 characters.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

pub(super) fn validate_override(
    file: Option<OverrideFile>,
    errors: &mut Vec<PolicyError>,
) -> OverrideSettings {
    let file = file.unwrap_or(OverrideFile {
        annotation: None,
        reasons: None,
        approval: None,
        require_deletion: true,
        finalizers: Vec::new(),
    });
    let annotation = file
        .annotation
        .unwrap_or_else(|| DEFAULT_OVERRIDE_ANNOTATION.to_string());
    if !is_annotation_key(&annotation) {
        errors.push(PolicyError::BadAnnotationKey(annotation.clone()));
    }
    let reasons = validate_reasons(file.reasons, errors);
    let approval = file.approval.and_then(|a| validate_approval(a, errors));
    let finalizers = validate_entries(file.finalizers, &reasons, approval.is_some(), errors);
    OverrideSettings {
        annotation,
        reasons,
        approval,
        require_deletion: file.require_deletion,
        finalizers,
    }
}

/// `override.reasons`: the defaults when absent; none empty, each lowercase
/// letters, digits and dashes.
fn validate_reasons(reasons: Option<Vec<String>>, errors: &mut Vec<PolicyError>) -> Vec<String> {
    let reasons = reasons.unwrap_or_else(|| {
        DEFAULT_OVERRIDE_REASONS
            .iter()
            .map(|r| r.to_string())
            .collect()
    });
    if reasons.is_empty() {
        errors.push(PolicyError::NoReasons);
    }
    for reason in &reasons {
        let ok = !reason.is_empty()
            && reason
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            errors.push(PolicyError::BadReason(reason.clone()));
        }
    }
    reasons
}

/// `override.approval`: someone named, no one too broad to trust, a
/// positive `maxAge`.
fn validate_approval(a: ApprovalFile, errors: &mut Vec<PolicyError>) -> Option<Approval> {
    if a.users.is_empty() && a.groups.is_empty() {
        errors.push(PolicyError::NoApprovers);
    }
    for (field, kind, names) in [
        ("users", Kind::User, &a.users),
        ("groups", Kind::Group, &a.groups),
    ] {
        for name in names {
            if !is_word(name) {
                errors.push(PolicyError::BadApprover {
                    field,
                    value: name.clone(),
                });
            } else if let Some(who) =
                too_broad(kind, name, Grant::EveryFinalizer).filter(Broad::is_everyone)
            {
                // Refused, not warned of: no policy means it (the
                // narrower ones are `policy validate`'s warnings).
                errors.push(PolicyError::BroadApprover {
                    field,
                    value: name.clone(),
                    who: who.to_string(),
                });
            }
        }
    }
    match a.max_age.parse::<jiff::SignedDuration>() {
        Ok(d) if d.is_positive() => Some(Approval {
            users: a.users,
            groups: a.groups,
            max_age: d,
        }),
        _ => {
            errors.push(PolicyError::BadMaxAge(a.max_age));
            None
        }
    }
}

/// `override.finalizers`: each entry valid, and no two that can match one finalizer.
fn validate_entries(
    files: Vec<FinalizerOverrideFile>,
    reasons: &[String],
    approvers: bool,
    errors: &mut Vec<PolicyError>,
) -> Vec<FinalizerOverride> {
    let mut entries: Vec<(usize, FinalizerOverride)> = Vec::new();
    for (entry, mut file) in files.into_iter().enumerate() {
        let before = errors.len();
        if file.finalizers.is_empty() {
            errors.push(PolicyError::NoOverrideFinalizers { entry });
        }
        let mut patterns = Vec::new();
        for p in std::mem::take(&mut file.finalizers) {
            match parse_finalizer_pattern(&p) {
                Some(pattern) => patterns.push(pattern),
                None => errors.push(PolicyError::BadOverrideFinalizer { entry, pattern: p }),
            }
        }
        check_entry_settings(entry, &file, reasons, approvers, errors);
        overlapping(entry, &patterns, &entries, errors);
        let approval_required = file.approval == Some(ApprovalRequirement::Required);
        if errors.len() == before {
            entries.push((
                entry,
                FinalizerOverride {
                    label: format!("override.finalizers[{entry}]"),
                    finalizers: patterns,
                    reasons: file.reasons,
                    approval_required,
                    never: file.never,
                },
            ));
        }
    }
    entries.into_iter().map(|(_, e)| e).collect()
}

/// One `override.finalizers` entry's `reasons`, `approval` and `never`:
/// known reasons, and no two that contradict each other.
fn check_entry_settings(
    entry: usize,
    file: &FinalizerOverrideFile,
    reasons: &[String],
    approvers: bool,
    errors: &mut Vec<PolicyError>,
) {
    if let Some(list) = &file.reasons {
        if list.is_empty() {
            errors.push(PolicyError::NoEntryReasons { entry });
        }
        for reason in list.iter().filter(|r| !reasons.contains(r)) {
            errors.push(PolicyError::UnknownEntryReason {
                entry,
                reason: reason.clone(),
                known: reasons.join(", "),
            });
        }
    }
    if file.never {
        if file.reasons.is_some() {
            errors.push(PolicyError::NeverAnd {
                entry,
                field: "reasons",
            });
        }
        if file.approval.is_some() {
            errors.push(PolicyError::NeverAnd {
                entry,
                field: "approval",
            });
        }
    } else if file.reasons.is_none() && file.approval.is_none() {
        errors.push(PolicyError::EmptyEntry { entry });
    }
    if file.approval == Some(ApprovalRequirement::Required) && !approvers {
        errors.push(PolicyError::ApprovalWithoutApprovers { entry });
    }
}

/// Two entries that can match one finalizer: which would decide is a
/// contradiction, not a matter of order.
fn overlapping(
    entry: usize,
    patterns: &[FinalizerPattern],
    entries: &[(usize, FinalizerOverride)],
    errors: &mut Vec<PolicyError>,
) {
    for pattern in patterns {
        for (first, other) in entries {
            if let Some(clash) = other
                .finalizers
                .iter()
                .find_map(|o| overlap(pattern, o).map(|example| (o, example)))
            {
                errors.push(PolicyError::OverlappingEntries {
                    entry,
                    pattern: pattern.to_string(),
                    first: *first,
                    other: clash.0.to_string(),
                    example: clash.1,
                });
            }
        }
    }
}

/// A finalizer name both patterns match, if there is one.
fn overlap(a: &FinalizerPattern, b: &FinalizerPattern) -> Option<String> {
    use FinalizerPattern::{Exact, Prefix};
    match (a, b) {
        (Exact(x), Exact(y)) => (x == y).then(|| x.clone()),
        (Exact(x), p @ Prefix(_)) | (p @ Prefix(_), Exact(x)) => p.matches(x).then(|| x.clone()),
        (Prefix(x), Prefix(y)) => {
            let longer = if x.len() >= y.len() { x } else { y };
            (x.starts_with(y.as_str()) || y.starts_with(x.as_str())).then(|| format!("{longer}x"))
        }
    }
}

fn check_names(rule: usize, field: &'static str, names: &[String], errors: &mut Vec<PolicyError>) {
    for name in names {
        if !is_word(name) {
            errors.push(PolicyError::BadName {
                rule,
                field,
                value: name.clone(),
            });
        }
    }
}

fn is_word(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(char::is_whitespace)
}

fn parse_finalizer_pattern(p: &str) -> Option<FinalizerPattern> {
    if !is_word(p) {
        return None;
    }
    match p.strip_suffix('*') {
        Some(prefix) if !prefix.contains('*') => Some(FinalizerPattern::Prefix(prefix.to_string())),
        Some(_) => None,
        None if p.contains('*') => None,
        None => Some(FinalizerPattern::Exact(p.to_string())),
    }
}

fn parse_resource(r: &str) -> Option<ResourceName> {
    let valid = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    };
    if !valid(r) {
        return None;
    }
    let (resource, group) = r.split_once('.').unwrap_or((r, ""));
    if resource.is_empty() || group.starts_with('.') || group.ends_with('.') {
        return None;
    }
    Some(ResourceName {
        resource: resource.to_string(),
        group: group.to_string(),
    })
}

/// An annotation key as Kubernetes validates it: an optional DNS-subdomain
/// prefix and `/`, then a name of at most 63 characters.
fn is_annotation_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| {
                !label.is_empty()
                    && label.starts_with(|c: char| c.is_ascii_alphanumeric())
                    && label.ends_with(|c: char| c.is_ascii_alphanumeric())
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    name_ok && prefix_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::config::{Accepts, Policy};

    fn errors(yaml: &str) -> Vec<PolicyError> {
        Policy::from_yaml(yaml)
            .expect_err("policy should be refused")
            .0
    }

    #[test]
    fn embedded_default_is_valid() {
        let p = Policy::embedded_default();
        assert_eq!(p.mode, Mode::Enforce);
        assert!(p.builtin_controllers);
        assert!(p.rules.is_empty());
        assert_eq!(
            p.override_settings.annotation,
            "finalizer-guard.io/override"
        );
        assert_eq!(p.override_settings.reasons, DEFAULT_OVERRIDE_REASONS);
    }

    #[test]
    fn contract_example_parses() {
        let p = Policy::from_yaml(
            r#"
mode: enforce
builtinControllers: true
rules:
  - finalizers: ["example.com/cleanup", "storage.example.com/*"]
    users: ["system:kube-controller-manager"]
    groups: ["platform-admins"]
    serviceAccounts: ["ops:cleanup-controller"]
    namespaces: ["team-a"]
    resources: ["pods", "widgets.example.com"]
override:
  annotation: finalizer-guard.io/override
  reasons: [node-lost, controller-unavailable, controller-uninstalled, apiservice-unavailable]
"#,
        )
        .unwrap();
        let rule = &p.rules[0];
        assert_eq!(rule.label, "rules[0]");
        assert_eq!(
            rule.finalizers,
            vec![
                FinalizerPattern::Exact("example.com/cleanup".into()),
                FinalizerPattern::Prefix("storage.example.com/".into())
            ]
        );
        assert_eq!(
            rule.service_accounts,
            vec!["system:serviceaccount:ops:cleanup-controller".to_string()]
        );
        assert_eq!(
            rule.resources.as_deref().unwrap(),
            &[
                ResourceName {
                    resource: "pods".into(),
                    group: "".into()
                },
                ResourceName {
                    resource: "widgets".into(),
                    group: "example.com".into()
                }
            ]
        );
    }

    #[test]
    fn defaults_apply_when_keys_are_omitted() {
        let p = Policy::from_yaml("mode: warn\n").unwrap();
        assert_eq!(p.mode, Mode::Warn);
        assert!(p.builtin_controllers);
        assert_eq!(p.override_settings.reasons.len(), 4);
    }

    #[test]
    fn misspelled_key_is_named_with_its_line() {
        let e = errors("mode: enforce\nrules:\n  - finalizers: [a]\n    user: [bob]\n");
        let [PolicyError::Syntax(msg)] = e.as_slice() else {
            panic!("{e:?}")
        };
        assert!(msg.contains("unknown field `user`"), "{msg}");
        assert!(msg.contains("line 4"), "{msg}");
    }

    #[test]
    fn misspelled_top_level_key_is_refused() {
        let e = errors("mode: enforce\nbuiltinController: false\n");
        assert!(matches!(&e[0], PolicyError::Syntax(m) if m.contains("builtinController")));
    }

    #[test]
    fn unknown_mode_is_refused() {
        let e = errors("mode: enforcing\n");
        assert!(matches!(&e[0], PolicyError::Syntax(m) if m.contains("enforcing")));
    }

    #[test]
    fn empty_file_is_refused() {
        assert_eq!(errors("# nothing\n\n"), vec![PolicyError::Empty]);
    }

    #[test]
    fn semantic_errors_are_all_reported() {
        let e = errors(
            r#"
rules:
  - finalizers: []
    users: [alice]
  - finalizers: ["a*b", "ok/*"]
  - finalizers: [x]
    serviceAccounts: ["no-colon", "ns:"]
    namespaces: []
    resources: ["Pods", "deployments.apps"]
override:
  annotation: "bad key/"
  reasons: ["Node Lost"]
"#,
        );
        assert_eq!(
            e,
            vec![
                PolicyError::NoFinalizers { rule: 0 },
                PolicyError::BadFinalizer {
                    rule: 1,
                    pattern: "a*b".into()
                },
                PolicyError::NoRequesters { rule: 1 },
                PolicyError::BadServiceAccount {
                    rule: 2,
                    value: "no-colon".into()
                },
                PolicyError::BadServiceAccount {
                    rule: 2,
                    value: "ns:".into()
                },
                PolicyError::EmptyScope {
                    rule: 2,
                    field: "namespaces",
                    what: "namespace"
                },
                PolicyError::BadResource {
                    rule: 2,
                    value: "Pods".into()
                },
                PolicyError::BadAnnotationKey("bad key/".into()),
                PolicyError::BadReason("Node Lost".into()),
            ]
        );
    }

    #[test]
    fn approval_settings() {
        let p = Policy::from_yaml(
            "override:\n  approval:\n    users: [sec-lead]\n    groups: [security]\n    maxAge: 2h\n",
        )
        .unwrap();
        let a = p.override_settings.approval.unwrap();
        assert_eq!(a.max_age, jiff::SignedDuration::from_hours(2));
        assert!(a.is_approver("sec-lead", &[]));
        assert!(a.is_approver("x", &["security".into()]));
        assert!(!a.is_approver("x", &["securityx".into()]));
        assert_eq!(
            errors("override:\n  approval:\n    maxAge: soon\n"),
            vec![
                PolicyError::NoApprovers,
                PolicyError::BadMaxAge("soon".into())
            ]
        );
        assert_eq!(
            errors("override:\n  approval:\n    users: [a]\n    maxAge: -5m\n"),
            vec![PolicyError::BadMaxAge("-5m".into())]
        );
        let e = errors("override:\n  approval:\n    users: [a]\n    max_age: 1h\n");
        assert!(
            matches!(&e[0], PolicyError::Syntax(m) if m.contains("max_age")),
            "{e:?}"
        );
    }

    /// Approvers that are everyone, or nearly, are refused: any two
    /// accounts would make a two-person override. Each is named, with why.
    #[test]
    fn approvers_everyone_is_in_are_refused() {
        let e = errors(
            "override:\n  approval:\n    users: [sec-lead, \"system:anonymous\"]\n    groups: [\"system:authenticated\", security, \"system:unauthenticated\", \"system:serviceaccounts\"]\n    maxAge: 1h\n",
        );
        let who = |field: &'static str, value: &str, who: &str| PolicyError::BroadApprover {
            field,
            value: value.into(),
            who: who.into(),
        };
        assert_eq!(
            e,
            vec![
                who("users", "system:anonymous", "every unauthenticated request"),
                who("groups", "system:authenticated", "every authenticated user"),
                who(
                    "groups",
                    "system:unauthenticated",
                    "every unauthenticated request"
                ),
                who(
                    "groups",
                    "system:serviceaccounts",
                    "every ServiceAccount of every namespace"
                ),
            ]
        );
        assert_eq!(
            e[1].to_string(),
            "override.approval.groups: \"system:authenticated\" is every authenticated user: any of them could approve an override and any other one remove the finalizer, so it would take no second person; name the people who approve (users, or a group only they are in)"
        );
        // A namespace's ServiceAccounts are `policy validate`'s warnings.
        Policy::from_yaml(
            "override:\n  approval:\n    groups: [\"system:serviceaccounts:ops\"]\n    maxAge: 1h\n",
        )
        .unwrap();
    }

    #[test]
    fn per_finalizer_overrides() {
        let p = Policy::from_yaml(
            "override:\n  finalizers:\n    - finalizers: [kubernetes.io/pvc-protection]\n      reasons: [node-lost]\n    - finalizers: [\"vault.io/*\"]\n      never: true\n",
        )
        .unwrap();
        let s = &p.override_settings;
        assert_eq!(
            s.accepts("kubernetes.io/pvc-protection").reasons(),
            ["node-lost"]
        );
        assert_eq!(
            s.accepts("vault.io/x"),
            Accepts::Never {
                entry: "override.finalizers[1]"
            }
        );
        assert_eq!(s.accepts("other").reasons(), DEFAULT_OVERRIDE_REASONS);
    }

    #[test]
    fn per_finalizer_contradictions_name_the_field() {
        let cases: &[(&str, &str)] = &[
            (
                "  finalizers:\n    - finalizers: [a]\n      reasons: [bored]\n",
                "override.finalizers[0].reasons: \"bored\" is not one of override.reasons",
            ),
            (
                "  reasons: [node-lost]\n  finalizers:\n    - finalizers: [a]\n      reasons: [controller-unavailable]\n",
                "override.finalizers[0].reasons: \"controller-unavailable\" is not one of override.reasons (node-lost)",
            ),
            (
                "  finalizers:\n    - finalizers: [a]\n      reasons: []\n",
                "override.finalizers[0].reasons: an empty list releases nothing",
            ),
            (
                "  finalizers:\n    - finalizers: [a]\n      approval: required\n",
                "override.finalizers[0].approval: required needs override.approval",
            ),
            (
                "  finalizers:\n    - finalizers: [a]\n      never: true\n      reasons: [node-lost]\n",
                "override.finalizers[0].never: no override releases these finalizers, so reasons says nothing",
            ),
            (
                "  finalizers:\n    - finalizers: [a]\n",
                "override.finalizers[0]: sets none of reasons, approval or never",
            ),
            (
                "  finalizers:\n    - reasons: [node-lost]\n",
                "override.finalizers[0].finalizers: must name at least one finalizer",
            ),
            (
                "  finalizers:\n    - finalizers: [\"a*b\"]\n      never: true\n",
                "override.finalizers[0].finalizers: \"a*b\" is neither",
            ),
            (
                "  finalizers:\n    - finalizers: [a]\n      never: true\n    - finalizers: [b, a]\n      reasons: [node-lost]\n",
                "override.finalizers[1].finalizers: \"a\" and override.finalizers[0].finalizers \"a\" can both match \"a\"",
            ),
            (
                "  finalizers:\n    - finalizers: [\"example.com/*\"]\n      never: true\n    - finalizers: [example.com/x]\n      reasons: [node-lost]\n",
                "override.finalizers[1].finalizers: \"example.com/x\" and override.finalizers[0].finalizers \"example.com/*\" can both match \"example.com/x\"",
            ),
            (
                "  finalizers:\n    - finalizers: [\"example.com/a*\"]\n      never: true\n    - finalizers: [\"example.com/*\"]\n      reasons: [node-lost]\n",
                "override.finalizers[1].finalizers: \"example.com/*\" and override.finalizers[0].finalizers \"example.com/a*\" can both match \"example.com/ax\"",
            ),
            (
                "  finalizers:\n    - finalizers: [a]\n      approval: optional\n",
                "unknown variant `optional`",
            ),
            (
                "  finalizers:\n    - finalizers: [a]\n      reason: [node-lost]\n",
                "unknown field `reason`",
            ),
        ];
        for (yaml, want) in cases {
            let err = Policy::from_yaml(&format!("override:\n{yaml}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{yaml}\n{err}");
        }
        // Prefixes that cannot meet, and one entry naming overlapping
        // patterns (one entry, one setting), are fine.
        Policy::from_yaml(
            "override:\n  finalizers:\n    - finalizers: [\"a.io/*\", a.io/x]\n      never: true\n    - finalizers: [\"b.io/*\"]\n      reasons: [node-lost]\n",
        )
        .unwrap();
        // approval: required with approvers.
        let p = Policy::from_yaml(
            "override:\n  approval:\n    users: [sec]\n    maxAge: 1h\n  finalizers:\n    - finalizers: [a]\n      approval: required\n",
        )
        .unwrap();
        assert!(p.override_settings.finalizers[0].approval_required);
        assert!(p.override_settings.needs_approval());
    }

    #[test]
    fn duplicate_rule_names_are_refused() {
        let e = errors(
            "rules:\n  - name: a\n    finalizers: [x]\n    users: [u]\n  - name: a\n    finalizers: [y]\n    users: [u]\n",
        );
        assert_eq!(
            e,
            vec![PolicyError::DuplicateRuleName {
                rule: 1,
                first: 0,
                name: "a".into()
            }]
        );
    }

    #[test]
    fn finalizer_patterns() {
        let p = |s| parse_finalizer_pattern(s);
        assert_eq!(p("*"), Some(FinalizerPattern::Prefix("".into())));
        assert_eq!(p("a/*"), Some(FinalizerPattern::Prefix("a/".into())));
        assert_eq!(p("a/b"), Some(FinalizerPattern::Exact("a/b".into())));
        assert_eq!(p("a**"), None);
        assert_eq!(p("*a"), None);
        assert_eq!(p(""), None);
        assert_eq!(p("a b"), None);
        assert!(
            FinalizerPattern::Prefix("storage.example.com/".into())
                .matches("storage.example.com/x")
        );
        assert!(
            !FinalizerPattern::Prefix("storage.example.com/".into()).matches("storage.example.com")
        );
    }

    #[test]
    fn annotation_keys() {
        assert!(is_annotation_key("finalizer-guard.io/override"));
        assert!(is_annotation_key("override"));
        assert!(!is_annotation_key("Finalizer-Guard.io/override"));
        assert!(!is_annotation_key("/override"));
        assert!(!is_annotation_key("a/b/c"));
        assert!(!is_annotation_key(&"x".repeat(64)));
    }
}
