//! The decision on a change: the verdict, why, and what it read.

use super::approval::ApprovalProblem;
use super::field::FinalizerField;
use super::overrides::{Override, OverrideProblem};

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
        problem: ApprovalProblem,
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
    /// ([`MAX_LIST_NAMES`](super::change::MAX_LIST_NAMES)): what it removes
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
pub struct DecisionEvidence {
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
    pub evidence: DecisionEvidence,
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
