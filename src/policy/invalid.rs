//! Why a policy was refused: each problem names the field it is about.

use std::fmt;

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
    /// An approver that is everyone, or nearly: the two-person rule would
    /// need no second person ([`super::breadth`]).
    #[error(
        "override.approval.{field}: {value:?} is {who}: any of them could approve an override and any other one remove the finalizer, so it would take no second person; name the people who approve (users, or a group only they are in)"
    )]
    BroadApprover {
        field: &'static str,
        value: String,
        who: String,
    },
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
