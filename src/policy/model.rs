//! The change a review asks for (who, what, which finalizers) and the decision on it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::overrides::{Override, OverrideProblem};

/// Which list a finalizer sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FinalizerField {
    /// `metadata.finalizers`, on every object.
    Metadata,
    /// `spec.finalizers` of a Namespace, written through `namespaces/finalize`.
    Spec,
}

impl serde::Serialize for FinalizerField {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.path())
    }
}

impl<'de> serde::Deserialize<'de> for FinalizerField {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let path = String::deserialize(deserializer)?;
        [FinalizerField::Metadata, FinalizerField::Spec]
            .into_iter()
            .find(|f| f.path() == path)
            .ok_or_else(|| {
                serde::de::Error::unknown_variant(
                    &path,
                    &["metadata.finalizers", "spec.finalizers"],
                )
            })
    }
}

impl FinalizerField {
    pub fn path(self) -> &'static str {
        match self {
            FinalizerField::Metadata => "metadata.finalizers",
            FinalizerField::Spec => "spec.finalizers",
        }
    }
}

/// The admission operation. Only `Update` can remove a finalizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl serde::Serialize for Operation {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Operation {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        const ALL: [Operation; 4] = [
            Operation::Create,
            Operation::Update,
            Operation::Delete,
            Operation::Connect,
        ];
        let name = String::deserialize(deserializer)?;
        ALL.into_iter().find(|o| o.as_str() == name).ok_or_else(|| {
            serde::de::Error::unknown_variant(&name, &["CREATE", "UPDATE", "DELETE", "CONNECT"])
        })
    }
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// Names held as `String`s, lent the way a [`Change`] reads them.
pub fn borrowed(names: &[String]) -> Vec<Cow<'_, str>> {
    names.iter().map(|n| Cow::Borrowed(n.as_str())).collect()
}

/// Who asks: `request.userInfo`.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    pub username: &'a str,
    /// Borrowed from the request body where it holds the names unescaped.
    pub groups: &'a [Cow<'a, str>],
}

/// What is written: `request.resource`, `subResource`, `namespace`, `name`.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
}

impl Target<'_> {
    fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.resource == "namespaces"
    }

    /// `namespaces/finalize`: the subresource that writes a Namespace's `spec.finalizers`.
    pub fn is_namespace_finalize(&self) -> bool {
        self.is_namespace() && self.subresource == "finalize"
    }

    /// The namespace the object lives in; `None` for cluster-scoped objects.
    /// The apiserver reports a Namespace's own name as its namespace, but a
    /// Namespace is cluster-scoped.
    pub fn object_namespace(&self) -> Option<&str> {
        if self.is_namespace() {
            return None;
        }
        self.namespace.filter(|ns| !ns.is_empty())
    }
}

/// A finalizer list before and after the write. Absent, `null` and `[]` are all empty.
#[derive(Debug, Clone, Copy, Default)]
pub struct FinalizerLists<'a> {
    pub old: &'a [Cow<'a, str>],
    pub new: &'a [Cow<'a, str>],
}

/// One admission request, as the policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    pub operation: Operation,
    pub target: Target<'a>,
    pub requester: Requester<'a>,
    pub metadata_finalizers: FinalizerLists<'a>,
    /// Judged only for `namespaces/finalize`.
    pub spec_finalizers: FinalizerLists<'a>,
    /// The annotations of `object`: the object as it will be stored.
    pub annotations: &'a BTreeMap<String, String>,
    /// The annotations of `oldObject` (empty for CREATE).
    pub old_annotations: &'a BTreeMap<String, String>,
    /// `oldObject` has a `deletionTimestamp`: the object is being deleted.
    pub deleting: bool,
    /// The object's `metadata.uid` (of `oldObject` for an UPDATE): what a
    /// two-person approval's seal binds to.
    pub uid: Option<&'a str>,
    /// The webhook's clock, for the two-person rule's expiry. Passed in: the core reads no clock.
    pub now: jiff::Timestamp,
    /// The webhook's key for sealing approvals. Passed in: the core reads no files.
    pub seal_key: Option<&'a super::seal::SealKey>,
}

/// What allowed one removed finalizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authority {
    /// A policy rule, by its label.
    Rule(String),
    /// A built-in controller removing a finalizer it owns, by controller name.
    Builtin(&'static str),
}

impl Authority {
    /// `rule ` or `built-in controller `, and the name: what Display joins.
    pub fn parts(&self) -> (&'static str, &str) {
        match self {
            Authority::Rule(label) => ("rule ", label),
            Authority::Builtin(name) => ("built-in controller ", name),
        }
    }
}

impl std::fmt::Display for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, name) = self.parts();
        write!(f, "{what}{name}")
    }
}

impl serde::Serialize for Authority {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// One finalizer the write removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    pub finalizer: String,
    pub field: FinalizerField,
    /// `None`: nothing authorizes this requester to remove it.
    pub authorized_by: Option<Authority>,
}

/// The most names a review reads in one finalizer list: past it, what an
/// UPDATE removes cannot be told ([`Outcome::TooManyNames`]).
pub const MAX_LIST_NAMES: usize = 16_384;

/// The verdict, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not an UPDATE: allowed untouched.
    NotJudged,
    /// An UPDATE that removes no finalizer: allowed silently.
    NothingRemoved,
    /// Every removal is authorized by a rule or a built-in controller.
    Authorized,
    /// Some removals are unauthorized, but the object carries a valid override.
    Override(Override),
    /// Two-person rule: an approver wrote a valid approval.
    ApprovalRecorded,
    /// Two-person rule: a write of the approval annotations is refused.
    /// `enforced` is false in `warn` mode.
    ApprovalRefused {
        problem: super::approval::ApprovalProblem,
        enforced: bool,
    },
    /// Some removals are unauthorized and no valid override was given.
    /// `enforced` is false in `warn` mode, where the write is allowed anyway.
    Denied {
        problem: OverrideProblem,
        enforced: bool,
    },
    /// An UPDATE whose finalizer list (`field`, before or after the write)
    /// holds more names than a review reads
    /// ([`MAX_LIST_NAMES`]): what it removes
    /// cannot be told, so it is denied. `enforced` is false in `warn` mode,
    /// where the write is allowed anyway.
    TooManyNames {
        field: FinalizerField,
        enforced: bool,
    },
}

/// What was decided, without why: what audit records, metrics, Events,
/// recordings and suites name. Serialized as its [`Verdict::as_str`] name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    NotJudged,
    NothingRemoved,
    Authorized,
    Override,
    Denied,
    /// Warn mode: allowed, but enforce mode would deny.
    WouldDeny,
    ApprovalRecorded,
    ApprovalDenied,
    ApprovalWouldDeny,
}

impl Verdict {
    /// Every verdict, for series that exist at 0 from start.
    pub const ALL: [Verdict; 9] = [
        Verdict::NotJudged,
        Verdict::NothingRemoved,
        Verdict::Authorized,
        Verdict::Override,
        Verdict::Denied,
        Verdict::WouldDeny,
        Verdict::ApprovalRecorded,
        Verdict::ApprovalDenied,
        Verdict::ApprovalWouldDeny,
    ];

    /// The name in audit annotations, audit records, metrics and recordings.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::NotJudged => "not-judged",
            Verdict::NothingRemoved => "nothing-removed",
            Verdict::Authorized => "authorized",
            Verdict::Override => "override",
            Verdict::Denied => "denied",
            Verdict::WouldDeny => "would-deny",
            Verdict::ApprovalRecorded => "approval-recorded",
            Verdict::ApprovalDenied => "approval-denied",
            Verdict::ApprovalWouldDeny => "approval-would-deny",
        }
    }

    /// Whether the write goes through.
    pub fn allowed(self) -> bool {
        !matches!(self, Verdict::Denied | Verdict::ApprovalDenied)
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a decision read from the object besides the finalizers: the answer
/// and the audit record quote it, and need not read the object again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    /// The override annotation's value, when it was found not valid.
    pub rejected_override: Option<String>,
    /// Two-person rule: `approved-by` of the approval used (in `oldObject`)
    /// or written (in `object`).
    pub approved_by: Option<String>,
    /// Two-person rule: `override-expires` of that approval.
    pub override_expires: Option<String>,
}

/// The decision on one change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub outcome: Outcome,
    /// Every removed finalizer, in the order of the old list (metadata first).
    pub removed: Vec<Removal>,
    pub evidence: Evidence,
}

impl Decision {
    pub fn allowed(&self) -> bool {
        self.verdict().allowed()
    }

    /// What was decided, without why.
    pub fn verdict(&self) -> Verdict {
        match self.outcome {
            Outcome::NotJudged => Verdict::NotJudged,
            Outcome::NothingRemoved => Verdict::NothingRemoved,
            Outcome::Authorized => Verdict::Authorized,
            Outcome::Override(_) => Verdict::Override,
            Outcome::Denied { enforced: true, .. } => Verdict::Denied,
            Outcome::Denied {
                enforced: false, ..
            }
            | Outcome::TooManyNames {
                enforced: false, ..
            } => Verdict::WouldDeny,
            Outcome::TooManyNames { enforced: true, .. } => Verdict::Denied,
            Outcome::ApprovalRecorded => Verdict::ApprovalRecorded,
            Outcome::ApprovalRefused { enforced: true, .. } => Verdict::ApprovalDenied,
            Outcome::ApprovalRefused {
                enforced: false, ..
            } => Verdict::ApprovalWouldDeny,
        }
    }

    /// Whether finalizers were removed or an approval written: worth auditing.
    pub fn audited(&self) -> bool {
        !self.removed.is_empty()
            || matches!(
                self.outcome,
                Outcome::ApprovalRecorded
                    | Outcome::ApprovalRefused { .. }
                    | Outcome::TooManyNames { .. }
            )
    }

    /// The override used, if that is what allowed the write.
    pub fn override_used(&self) -> Option<&Override> {
        match &self.outcome {
            Outcome::Override(o) => Some(o),
            _ => None,
        }
    }

    pub fn unauthorized(&self) -> impl Iterator<Item = &Removal> + Clone {
        self.removed.iter().filter(|r| r.authorized_by.is_none())
    }
}
