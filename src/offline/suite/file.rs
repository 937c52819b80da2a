//! A suite file's shape: its policy, its cases and what each expects.

use std::path::PathBuf;

use serde::Deserialize;

use super::short;
use crate::policy::Verdict;

/// A suite file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SuiteFile {
    /// The policy file, relative to the suite file. Default: the embedded policy.
    #[serde(default)]
    pub policy: Option<PathBuf>,
    pub cases: Vec<SuiteCase>,
}

/// A case: a recorded review (`review`), or the short form (`object`,
/// `requester` and one change), which `suite::short` expands into the review
/// kube-apiserver would send.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SuiteCase {
    #[serde(default)]
    pub name: Option<String>,
    /// An AdmissionReview (or a recording), relative to the suite file.
    #[serde(default)]
    pub review: Option<PathBuf>,
    /// Short form: the object before the write, whole or as `kind`,
    /// `apiVersion`, `name`, `namespace`, `finalizers`, `annotations`,
    /// `deletionTimestamp`, `uid`, `spec`.
    #[serde(default)]
    pub object: Option<serde_json::Value>,
    /// Short form: `PLURAL.GROUP` of a type the built-in table does not know.
    #[serde(default)]
    pub resource: Option<String>,
    /// Short form: who writes.
    #[serde(default)]
    pub requester: Option<short::CaseRequester>,
    /// Short form, the change: a JSON merge patch (RFC 7386)...
    #[serde(default)]
    pub merge_patch: Option<serde_json::Value>,
    /// ... or a JSON patch (RFC 6902)...
    #[serde(default)]
    pub json_patch: Option<serde_json::Value>,
    /// ... or `metadata.finalizers` after the write.
    #[serde(default)]
    pub finalizers_after: Option<Vec<String>>,
    /// Short form: a dry-run write.
    #[serde(default)]
    pub dry_run: bool,
    pub expect: Expected,
    /// The exact decision, e.g. `authorized`, `would-deny`, `nothing-removed`.
    #[serde(default)]
    pub decision: Option<Verdict>,
    /// A substring of the denial message or a warning.
    #[serde(default)]
    pub message_contains: Option<String>,
}

/// What a suite expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Expected {
    /// Allowed without an override (authorized, nothing removed, not judged, or warn mode).
    Allowed,
    /// Denied.
    Denied,
    /// Allowed by an override annotation.
    Override,
}

impl Expected {
    /// Every verdict named, none by default: a new one must be placed here.
    pub(super) fn of(verdict: Verdict) -> Expected {
        match verdict {
            Verdict::Override => Expected::Override,
            Verdict::Denied | Verdict::ApprovalDenied => Expected::Denied,
            Verdict::NotJudged
            | Verdict::NothingRemoved
            | Verdict::Authorized
            | Verdict::WouldDeny
            | Verdict::ApprovalRecorded
            | Verdict::ApprovalWouldDeny => Expected::Allowed,
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Expected::Allowed => "allowed",
            Expected::Denied => "denied",
            Expected::Override => "override",
        }
    }
}
