//! The validated policy: what [`crate::policy::decide`] reads.
//!
//! The file it comes from, and how each of its keys is checked, is
//! `super::schema`; [`Policy::from_yaml`] (in [`super::load`]) turns one into
//! the other.

use std::fmt;

use serde::Deserialize;

use super::builtin::{BuiltinController, KUBE_CONTROLLER_MANAGER};

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
    /// The `presets:` entry the rule was expanded from; `None` for `rules:`.
    pub preset: Option<PresetOrigin>,
}

/// The `presets:` entry a rule was expanded from, and what it renamed: how a
/// warning names what the policy's author wrote rather than the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresetOrigin {
    /// `presets[index]`.
    pub index: usize,
    /// `namespace`, when the entry renames it.
    pub namespace: Option<String>,
    /// Whether the entry names its own `serviceAccounts`.
    pub service_accounts: bool,
}

impl Rule {
    /// `serviceAccounts` as the file writes them: `NAMESPACE:NAME`.
    pub fn service_account_names(&self) -> impl Iterator<Item = &str> {
        self.service_accounts
            .iter()
            .map(|u| u.strip_prefix("system:serviceaccount:").unwrap_or(u))
    }
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

impl Policy {
    /// The built-in controller that `username` is, by the table or by
    /// `builtinIdentities`, and that owns `finalizer`, if any.
    pub fn builtin_owner(
        &self,
        username: &str,
        finalizer: &str,
        field: super::field::FinalizerField,
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
}
