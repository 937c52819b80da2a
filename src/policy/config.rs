//! The policy file: its YAML schema, and its validation into a [`Policy`].
//!
//! Every key is checked (`deny_unknown_fields`): a misspelled key is an error
//! that names it, never a setting that is silently ignored.

use std::fmt;

use serde::Deserialize;

use super::builtin::{BUILTIN_CONTROLLERS, BuiltinController, KUBE_CONTROLLER_MANAGER};

/// The policy the webhook runs when `serve` gets no `--policy`.
pub const DEFAULT_POLICY_YAML: &str = include_str!("default.yaml");

/// The annotation an override is written in, unless the policy names another.
pub const DEFAULT_OVERRIDE_ANNOTATION: &str = "finalizer-guard.io/override";

/// The approved emergency reasons, unless the policy lists others.
pub const DEFAULT_OVERRIDE_REASONS: [&str; 4] = [
    "node-lost",
    "controller-unavailable",
    "controller-uninstalled",
    "apiservice-unavailable",
];

/// What happens to a removal that no rule, built-in controller or override allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Deny it.
    #[default]
    Enforce,
    /// Allow it, with a warning and audit annotations saying it would be denied.
    Warn,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Warn => "warn",
        }
    }
}

/// A validated policy, ready for [`crate::policy::decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub mode: Mode,
    pub builtin_controllers: bool,
    /// More usernames for the built-in controllers, for platforms that run
    /// them under other identities.
    pub builtin_identities: Vec<BuiltinIdentity>,
    pub rules: Vec<Rule>,
    pub override_settings: OverrideSettings,
}

/// Usernames that act as a built-in controller (or, with `controller: None`,
/// as kube-controller-manager: every built-in controller at once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltinIdentity {
    pub controller: Option<&'static BuiltinController>,
    /// Full usernames (service accounts as `system:serviceaccount:NS:NAME`).
    pub users: Vec<String>,
}

/// Who may remove which finalizers, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `name` from the file, or `rules[N]`: how decisions and audit records cite the rule.
    pub label: String,
    pub finalizers: Vec<FinalizerPattern>,
    pub users: Vec<String>,
    pub groups: Vec<String>,
    /// Full usernames, `system:serviceaccount:NAMESPACE:NAME`.
    pub service_accounts: Vec<String>,
    /// `None`: everywhere, cluster-scoped objects too.
    pub namespaces: Option<Vec<String>>,
    /// `None`: every resource.
    pub resources: Option<Vec<ResourceName>>,
}

/// An exact finalizer name, or a prefix written with a trailing `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinalizerPattern {
    Exact(String),
    Prefix(String),
}

impl fmt::Display for FinalizerPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FinalizerPattern::Exact(name) => f.write_str(name),
            FinalizerPattern::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

impl FinalizerPattern {
    pub fn matches(&self, finalizer: &str) -> bool {
        match self {
            FinalizerPattern::Exact(name) => name == finalizer,
            FinalizerPattern::Prefix(prefix) => finalizer.starts_with(prefix.as_str()),
        }
    }
}

/// `resource` (core group) or `resource.group`, as RBAC and kubectl write them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceName {
    pub resource: String,
    pub group: String,
}

/// `resource` for the core group, `resource.group` otherwise: as a policy writes it.
impl fmt::Display for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

impl ResourceName {
    pub fn matches(&self, group: &str, resource: &str) -> bool {
        self.resource == resource && self.group == group
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverrideSettings {
    pub annotation: String,
    pub reasons: Vec<String>,
    /// Two-person rule: when set, an override must be approved in advance.
    pub approval: Option<Approval>,
    /// An override releases only an object being deleted (`deletionTimestamp`
    /// set), so one left on a live object authorizes nothing later.
    pub require_deletion: bool,
    /// `override.finalizers`: what releases particular finalizers. At most
    /// one entry matches a finalizer (validated); one no entry matches takes
    /// every reason of `reasons`.
    pub finalizers: Vec<FinalizerOverride>,
}

/// One `override.finalizers` entry: which overrides release the finalizers it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalizerOverride {
    /// `override.finalizers[N]`: how validation errors and explanations cite it.
    pub label: String,
    pub finalizers: Vec<FinalizerPattern>,
    /// `None`: every reason of `override.reasons`.
    pub reasons: Option<Vec<String>>,
    /// `approval: required`. With `override.approval` set every override
    /// needs the approval anyway (see [`OverrideSettings::needs_approval`]);
    /// the entry states it, and is refused without `override.approval`.
    pub approval_required: bool,
    /// `never: true`: no override releases these finalizers.
    pub never: bool,
}

/// Which overrides release one finalizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepts<'a> {
    /// Every reason of `override.reasons` (no entry narrows it).
    Every(&'a [String]),
    /// Only these, by `entry`.
    Only {
        reasons: &'a [String],
        entry: &'a str,
    },
    /// No override: only its rule or built-in controller, by `entry`.
    Never { entry: &'a str },
}

impl Accepts<'_> {
    /// Whether an override with `reason` (already on `override.reasons`) releases it.
    pub fn reason(&self, reason: &str) -> bool {
        match self {
            Accepts::Every(reasons) | Accepts::Only { reasons, .. } => {
                reasons.iter().any(|r| r == reason)
            }
            Accepts::Never { .. } => false,
        }
    }

    /// The reasons that release it (none for [`Accepts::Never`]).
    pub fn reasons(&self) -> &[String] {
        match self {
            Accepts::Every(reasons) | Accepts::Only { reasons, .. } => reasons,
            Accepts::Never { .. } => &[],
        }
    }
}

impl OverrideSettings {
    /// The entry of `override.finalizers` that matches `finalizer`: exact
    /// bytes, as the API server stores the name (no case folding, no trimming).
    pub fn entry_for(&self, finalizer: &str) -> Option<&FinalizerOverride> {
        self.finalizers
            .iter()
            .find(|e| e.finalizers.iter().any(|p| p.matches(finalizer)))
    }

    /// Which overrides release `finalizer`.
    pub fn accepts(&self, finalizer: &str) -> Accepts<'_> {
        match self.entry_for(finalizer) {
            None => Accepts::Every(&self.reasons),
            Some(e) if e.never => Accepts::Never { entry: &e.label },
            Some(e) => Accepts::Only {
                reasons: e.reasons.as_deref().unwrap_or(&self.reasons),
                entry: &e.label,
            },
        }
    }

    /// Whether an override needs the two-person approval: with
    /// `override.approval` set, every override does, of every finalizer, with
    /// or without an entry (the override annotation is one of an approval's annotations,
    /// which only approvers write, so no single-person override can be
    /// written beside it).
    pub fn needs_approval(&self) -> bool {
        self.approval.is_some()
    }
}

/// Who may approve an override, and for how long an approval may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub users: Vec<String>,
    pub groups: Vec<String>,
    /// How far ahead of the webhook's clock `override-expires` may be, when written.
    pub max_age: jiff::SignedDuration,
}

impl Approval {
    pub fn is_approver(&self, username: &str, groups: &[std::borrow::Cow<'_, str>]) -> bool {
        self.users.iter().any(|u| u == username)
            || self
                .groups
                .iter()
                .any(|g| groups.iter().any(|have| have == g))
    }

    /// `users alice, bob; groups security`
    pub fn describe_approvers(&self) -> String {
        let mut parts = Vec::new();
        if !self.users.is_empty() {
            parts.push(format!("users {}", self.users.join(", ")));
        }
        if !self.groups.is_empty() {
            parts.push(format!("groups {}", self.groups.join(", ")));
        }
        parts.join("; ")
    }
}

/// Why a policy was refused. Each names the field it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The YAML does not parse, or a key is unknown or of the wrong type. The
    /// parser's text names the field and, where it can, the line.
    #[error("{0}")]
    Syntax(String),
    #[error("the policy file is empty")]
    Empty,
    #[error("rules[{rule}].finalizers: must name at least one finalizer")]
    NoFinalizers { rule: usize },
    #[error(
        "rules[{rule}].finalizers: {pattern:?} is neither a finalizer name nor a prefix ending in a single trailing *"
    )]
    BadFinalizer { rule: usize, pattern: String },
    #[error("rules[{rule}]: names no users, groups or serviceAccounts, so it covers no one")]
    NoRequesters { rule: usize },
    #[error("rules[{rule}].serviceAccounts: {value:?} must be NAMESPACE:NAME")]
    BadServiceAccount { rule: usize, value: String },
    #[error("rules[{rule}].{field}: {value:?} is empty or contains whitespace")]
    BadName {
        rule: usize,
        field: &'static str,
        value: String,
    },
    #[error(
        "rules[{rule}].resources: {value:?} must be RESOURCE or RESOURCE.GROUP, e.g. pods or widgets.example.com"
    )]
    BadResource { rule: usize, value: String },
    #[error(
        "rules[{rule}].{field}: an empty list covers nothing; omit the field to cover every {what}"
    )]
    EmptyScope {
        rule: usize,
        field: &'static str,
        what: &'static str,
    },
    #[error("rules[{rule}].name: {name:?} is already the name of rules[{first}]")]
    DuplicateRuleName {
        rule: usize,
        first: usize,
        name: String,
    },
    #[error(
        "builtinIdentities[{index}].controller: {name:?} is not a built-in controller; one of kube-controller-manager, {known}"
    )]
    UnknownController {
        index: usize,
        name: String,
        known: String,
    },
    #[error("builtinIdentities[{index}]: names no users or serviceAccounts")]
    NoIdentities { index: usize },
    #[error("builtinIdentities[{index}].{field}: {value:?} is not valid{hint}")]
    BadIdentity {
        index: usize,
        field: &'static str,
        value: String,
        hint: &'static str,
    },
    #[error("override.annotation: {0:?} is not a valid annotation key (PREFIX/NAME or NAME)")]
    BadAnnotationKey(String),
    #[error("presets[{index}]: {name:?} is not a preset of the catalog; known presets: {known}")]
    UnknownPreset {
        index: usize,
        name: String,
        known: String,
    },
    #[error("presets[{index}]: {name:?} names no component of the preset; known: {known}")]
    UnknownPresetComponent {
        index: usize,
        name: String,
        known: String,
    },
    #[error("presets[{index}]: {message}")]
    BadPreset { index: usize, message: String },
    #[error("presets[{index}].serviceAccounts: {value:?} must be NAMESPACE:NAME")]
    BadPresetServiceAccount { index: usize, value: String },
    #[error(
        "presets[{index}].namespace: {value:?} is not a namespace name (a lowercase DNS label)"
    )]
    BadPresetNamespace { index: usize, value: String },
    #[error("presets[{index}]: {name:?} is already named by presets[{first}]")]
    DuplicatePreset {
        index: usize,
        first: usize,
        name: String,
    },
    #[error("rules[{rule}].name: {name:?}: names starting with \"preset:\" are the presets' own")]
    ReservedRuleName { rule: usize, name: String },
    #[error("override.reasons: must list at least one reason")]
    NoReasons,
    #[error("override.approval: names no users or groups, so no one could approve")]
    NoApprovers,
    #[error("override.approval.{field}: {value:?} is empty or contains whitespace")]
    BadApprover { field: &'static str, value: String },
    #[error("override.approval.maxAge: {0:?} is not a positive duration like 30m or 2h")]
    BadMaxAge(String),
    #[error(
        "override.reasons: {0:?} must be lowercase letters, digits and '-', and may not contain ':'"
    )]
    BadReason(String),
    #[error("override.finalizers[{entry}].finalizers: must name at least one finalizer")]
    NoOverrideFinalizers { entry: usize },
    #[error(
        "override.finalizers[{entry}].finalizers: {pattern:?} is neither a finalizer name nor a prefix ending in a single trailing *"
    )]
    BadOverrideFinalizer { entry: usize, pattern: String },
    #[error(
        "override.finalizers[{entry}].reasons: an empty list releases nothing; write never: true to say no override releases it"
    )]
    NoEntryReasons { entry: usize },
    #[error(
        "override.finalizers[{entry}].reasons: {reason:?} is not one of override.reasons ({known})"
    )]
    UnknownEntryReason {
        entry: usize,
        reason: String,
        known: String,
    },
    #[error(
        "override.finalizers[{entry}].approval: required needs override.approval (who approves, and for how long)"
    )]
    ApprovalWithoutApprovers { entry: usize },
    #[error(
        "override.finalizers[{entry}].never: no override releases these finalizers, so {field} says nothing; remove one of the two"
    )]
    NeverAnd { entry: usize, field: &'static str },
    #[error(
        "override.finalizers[{entry}]: sets none of reasons, approval or never, so it changes nothing"
    )]
    EmptyEntry { entry: usize },
    #[error(
        "override.finalizers[{entry}].finalizers: {pattern:?} and override.finalizers[{first}].finalizers {other:?} can both match {example:?}: one finalizer takes one entry's settings"
    )]
    OverlappingEntries {
        entry: usize,
        pattern: String,
        first: usize,
        other: String,
        example: String,
    },
}

/// Every problem found in a policy file, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPolicy(pub Vec<PolicyError>);

impl fmt::Display for InvalidPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for InvalidPolicy {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PolicyFile {
    #[serde(default)]
    mode: Mode,
    #[serde(default = "yes")]
    builtin_controllers: bool,
    #[serde(default)]
    builtin_identities: Vec<BuiltinIdentityFile>,
    #[serde(default)]
    rules: Vec<RuleFile>,
    /// Catalog names (`flux`) or objects (`{name, namespace, serviceAccounts}`),
    /// told apart in [`validate_presets`] so each error names its entry.
    #[serde(default)]
    presets: Vec<serde_yaml_ng::Value>,
    #[serde(default)]
    r#override: Option<OverrideFile>,
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
struct BuiltinIdentityFile {
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
struct RuleFile {
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
struct OverrideFile {
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

impl Policy {
    /// Parses and validates a policy file's text.
    pub fn from_yaml(text: &str) -> Result<Policy, InvalidPolicy> {
        if text
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            return Err(InvalidPolicy(vec![PolicyError::Empty]));
        }
        let file: PolicyFile = serde_yaml_ng::from_str(text)
            .map_err(|e| InvalidPolicy(vec![PolicyError::Syntax(e.to_string())]))?;
        file.validate()
    }

    /// The built-in controller that `username` is, by the table or by
    /// `builtinIdentities`, and that owns `finalizer`, if any.
    pub fn builtin_owner(
        &self,
        username: &str,
        finalizer: &str,
        field: super::model::FinalizerField,
    ) -> Option<&'static BuiltinController> {
        super::builtin::owner(username, finalizer, field).or_else(|| {
            self.builtin_identities
                .iter()
                .filter(|identity| identity.users.iter().any(|u| u == username))
                .find_map(|identity| match identity.controller {
                    Some(c) => (c.field == field && c.finalizers.contains(&finalizer)).then_some(c),
                    None => super::builtin::owner(KUBE_CONTROLLER_MANAGER, finalizer, field),
                })
        })
    }

    /// The embedded default policy.
    pub fn embedded_default() -> Policy {
        Policy::from_yaml(DEFAULT_POLICY_YAML).expect("the embedded default policy is valid")
    }
}

impl PolicyFile {
    fn validate(self) -> Result<Policy, InvalidPolicy> {
        let mut errors = Vec::new();
        let mut rules = Vec::with_capacity(self.rules.len());
        for (i, rule) in self.rules.into_iter().enumerate() {
            if let Some(name) = rule.name.as_ref().filter(|n| n.starts_with("preset:")) {
                errors.push(PolicyError::ReservedRuleName {
                    rule: i,
                    name: name.clone(),
                });
            }
            if let Some(rule) = rule.validate(i, &mut errors) {
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
        let builtin_identities = self
            .builtin_identities
            .into_iter()
            .enumerate()
            .filter_map(|(i, identity)| identity.validate(i, &mut errors))
            .collect();
        rules.extend(validate_presets(self.presets, &mut errors));
        let override_settings = validate_override(self.r#override, &mut errors);
        if !errors.is_empty() {
            return Err(InvalidPolicy(errors));
        }
        Ok(Policy {
            mode: self.mode,
            builtin_controllers: self.builtin_controllers,
            builtin_identities,
            rules,
            override_settings,
        })
    }
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
        })
    }
}

/// `presets:`: each entry's rules ([`super::presets::expand`]), after the file's own.
fn validate_presets(
    entries: Vec<serde_yaml_ng::Value>,
    errors: &mut Vec<PolicyError>,
) -> Vec<Rule> {
    use super::presets::{ExpandError, PresetRef, expand, known_names};
    let mut rules = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (index, entry) in entries.into_iter().enumerate() {
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
                        continue;
                    }
                }
            }
            _ => {
                errors.push(PolicyError::BadPreset {
                    index,
                    message: "must be a preset's name, or an object with name, namespace and serviceAccounts".to_string(),
                });
                continue;
            }
        };
        let before = errors.len();
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
        let reference = PresetRef {
            name: file.name,
            namespace: file.namespace,
            service_accounts,
        };
        match expand(&reference) {
            Ok(expanded) => {
                for rule in &expanded {
                    if let Some(first) = seen.iter().position(|l| *l == rule.label) {
                        errors.push(PolicyError::DuplicatePreset {
                            index,
                            first: rules_index(&rules, first),
                            name: reference.name.clone(),
                        });
                    }
                }
                if errors.len() == before {
                    for rule in &expanded {
                        seen.push(rule.label.clone());
                    }
                    rules.extend(expanded.into_iter().map(|r| (index, r)));
                }
            }
            Err(ExpandError::UnknownPreset) => errors.push(PolicyError::UnknownPreset {
                index,
                name: reference.name,
                known: known_names(),
            }),
            Err(ExpandError::UnknownComponent { known }) => {
                errors.push(PolicyError::UnknownPresetComponent {
                    index,
                    name: reference.name,
                    known,
                })
            }
        }
    }
    rules.into_iter().map(|(_, r)| r).collect()
}

/// The `presets[N]` index of the `n`th expanded rule.
fn rules_index(rules: &[(usize, Rule)], n: usize) -> usize {
    rules.get(n).map_or(0, |(index, _)| *index)
}

/// A namespace's name: a lowercase RFC 1123 label of at most 63 characters.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn validate_override(
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
    let reasons = file.reasons.unwrap_or_else(|| {
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
    let approval = file.approval.and_then(|a| {
        if a.users.is_empty() && a.groups.is_empty() {
            errors.push(PolicyError::NoApprovers);
        }
        for (field, names) in [("users", &a.users), ("groups", &a.groups)] {
            for name in names.iter().filter(|n| !is_word(n)) {
                errors.push(PolicyError::BadApprover {
                    field,
                    value: name.clone(),
                });
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
    });
    let finalizers = validate_entries(file.finalizers, &reasons, approval.is_some(), errors);
    OverrideSettings {
        annotation,
        reasons,
        approval,
        require_deletion: file.require_deletion,
        finalizers,
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
    for (entry, file) in files.into_iter().enumerate() {
        let before = errors.len();
        if file.finalizers.is_empty() {
            errors.push(PolicyError::NoOverrideFinalizers { entry });
        }
        let mut patterns = Vec::new();
        for p in file.finalizers {
            match parse_finalizer_pattern(&p) {
                Some(pattern) => patterns.push(pattern),
                None => errors.push(PolicyError::BadOverrideFinalizer { entry, pattern: p }),
            }
        }
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
        let approval_required = file.approval == Some(ApprovalRequirement::Required);
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
        if approval_required && !approvers {
            errors.push(PolicyError::ApprovalWithoutApprovers { entry });
        }
        // Two entries that can match one finalizer: which would decide is
        // a contradiction, not a matter of order.
        for pattern in &patterns {
            for (first, other) in &entries {
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
