//! The two-person override (`override.approval`).
//!
//! An approver writes four annotations in one request: the override
//! (`REASON: DETAIL`), `approved-by` (their own username), `override-expires`
//! (RFC 3339, at most `maxAge` ahead of the webhook's clock) and
//! `approval-seal`, the webhook's seal of those three on this object
//! ([`super::seal`]). The webhook tells an approver the seal when it refuses
//! the write without it, and never tells anyone else. Every write that adds
//! or changes one of the four is judged, whoever sends it. Later, someone
//! else may remove finalizers while the approval stands: present in
//! `oldObject`, unchanged, sealed by this webhook under the policy in force,
//! not expired, at most `maxAge` ahead, and not used by the approver who
//! signed it. No CEL admission policy can do this: it has no clock, no key
//! and no second person.

use jiff::Timestamp;

use super::change::{Change, Operation};
use super::config::{Approval, Mode, OverrideSettings};
use super::overrides::{self, Override, OverrideProblem};
use super::seal::{APPROVAL_SEAL, Sealed};

pub const APPROVED_BY: &str = "finalizer-guard.io/approved-by";
pub const OVERRIDE_EXPIRES: &str = "finalizer-guard.io/override-expires";

/// Why a write of the approval annotations is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalProblem {
    /// The requester is not an approver.
    NotAnApprover,
    /// `approved-by` names someone other than the requester.
    SignedForSomeoneElse(String),
    /// One of the three annotations is missing.
    Incomplete(&'static str),
    /// The override annotation's value is not valid.
    BadOverride(OverrideProblem),
    /// `override-expires` is not an RFC 3339 time.
    BadExpiry(String),
    /// `override-expires` is not in the future.
    AlreadyExpired(String),
    /// `override-expires` is further ahead than `maxAge`.
    BeyondMaxAge { expires: String, max_age: String },
    /// The approval is valid but does not carry this webhook's seal; `seal`
    /// is the one to write with it. Only an approver is ever told.
    Unsealed { seal: String },
    /// The object has no `metadata.uid` to seal the approval to.
    NoUid,
    /// No seal key: the approval cannot be sealed here (an offline check
    /// without the webhook's serving key).
    NoSealKey,
}

impl std::fmt::Display for ApprovalProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApprovalProblem::NotAnApprover => f.write_str("the requester is not an approver"),
            ApprovalProblem::SignedForSomeoneElse(who) => {
                write!(
                    f,
                    "{APPROVED_BY} must be the approver's own username, not {who:?}"
                )
            }
            ApprovalProblem::Incomplete(missing) => write!(
                f,
                "{missing} is missing: write all three annotations together"
            ),
            ApprovalProblem::BadOverride(p) => {
                write!(f, "the override annotation is not valid: {p}")
            }
            ApprovalProblem::BadExpiry(v) => {
                write!(f, "{OVERRIDE_EXPIRES} {v:?} is not an RFC 3339 time")
            }
            ApprovalProblem::AlreadyExpired(v) => {
                write!(f, "{OVERRIDE_EXPIRES} {v:?} is not in the future")
            }
            ApprovalProblem::BeyondMaxAge { expires, max_age } => {
                write!(
                    f,
                    "{OVERRIDE_EXPIRES} {expires:?} is more than maxAge {max_age} ahead"
                )
            }
            ApprovalProblem::Unsealed { seal } => write!(
                f,
                "{APPROVAL_SEAL} must be \"{seal}\": the webhook's seal of this approval on this object; write it together with the other three"
            ),
            ApprovalProblem::NoUid => {
                f.write_str("the object has no metadata.uid to seal the approval to")
            }
            ApprovalProblem::NoSealKey => f.write_str(
                "no seal key to seal the approval with (an offline check needs the webhook's serving key: --tls-key)",
            ),
        }
    }
}

/// The seal a refusal tells an approver ([`ApprovalProblem::Unsealed`]), read
/// back from the message the API server passes on: how `approve` learns it.
pub fn told_seal(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once(&format!("{APPROVAL_SEAL} must be \""))?;
    let (seal, _) = rest.split_once('"')?;
    Some(seal)
}

/// The keys an approval consists of.
fn keys(settings: &OverrideSettings) -> [&str; 4] {
    [
        settings.annotation.as_str(),
        APPROVED_BY,
        OVERRIDE_EXPIRES,
        APPROVAL_SEAL,
    ]
}

/// Whether `key` is one of the annotations an approval consists of.
pub fn is_approval_key(settings: &OverrideSettings, key: &str) -> bool {
    keys(settings).contains(&key)
}

/// Whether this request adds or changes any approval annotation (removing them is anyone's right).
pub fn writes_approval(change: &Change<'_>, settings: &OverrideSettings) -> bool {
    let old = match change.operation {
        Operation::Create => None,
        _ => Some(change.old_annotations),
    };
    keys(settings).iter().any(|k| {
        let new = change.annotations.get(*k);
        new.is_some() && new != old.and_then(|o| o.get(*k))
    })
}

/// What is wrong with an `override-expires`, at a write or at a use.
enum Expiry {
    NotATime,
    Passed,
    /// Further ahead than `maxAge` (written as the policy says it).
    TooFar(String),
}

/// An `override-expires` must be an RFC 3339 time, in the future, and at
/// most `maxAge` ahead of `now`.
fn check_expiry(text: &str, now: Timestamp, approval: &Approval) -> Result<(), Expiry> {
    let expires: Timestamp = text.parse().map_err(|_| Expiry::NotATime)?;
    if expires <= now {
        return Err(Expiry::Passed);
    }
    if expires.duration_since(now) > approval.max_age {
        return Err(Expiry::TooFar(format!("{:#}", approval.max_age)));
    }
    Ok(())
}

/// Checks a write of the approval annotations.
pub fn check_write(
    change: &Change<'_>,
    mode: Mode,
    settings: &OverrideSettings,
    approval: &Approval,
) -> Result<(), ApprovalProblem> {
    let requester = &change.requester;
    if !approval.is_approver(requester.username, requester.groups) {
        return Err(ApprovalProblem::NotAnApprover);
    }
    let get = |k: &'static str| {
        change
            .annotations
            .get(k)
            .ok_or(ApprovalProblem::Incomplete(k))
    };
    let value = change
        .annotations
        .get(&settings.annotation)
        .ok_or(ApprovalProblem::Incomplete("the override annotation"))?;
    overrides::parse(value, &settings.reasons).map_err(ApprovalProblem::BadOverride)?;
    let approved_by = get(APPROVED_BY)?;
    if approved_by != requester.username {
        return Err(ApprovalProblem::SignedForSomeoneElse(approved_by.clone()));
    }
    let expires = get(OVERRIDE_EXPIRES)?;
    check_expiry(expires, change.now, approval).map_err(|e| match e {
        Expiry::NotATime => ApprovalProblem::BadExpiry(expires.clone()),
        Expiry::Passed => ApprovalProblem::AlreadyExpired(expires.clone()),
        Expiry::TooFar(max_age) => ApprovalProblem::BeyondMaxAge {
            expires: expires.clone(),
            max_age,
        },
    })?;
    // Only now, for an approver's valid approval, is the seal computed.
    let key = change.seal_key.ok_or(ApprovalProblem::NoSealKey)?;
    let uid = change.uid.ok_or(ApprovalProblem::NoUid)?;
    let sealed = Sealed {
        uid,
        value,
        approved_by,
        expires,
    };
    let written = change.annotations.get(APPROVAL_SEAL);
    if written.is_some_and(|seal| key.verify(&sealed, mode, settings, approval, seal)) {
        return Ok(());
    }
    Err(ApprovalProblem::Unsealed {
        seal: key.seal(&sealed, mode, settings, approval),
    })
}

/// The override a removal may use under the two-person rule.
pub fn check_override(
    change: &Change<'_>,
    mode: Mode,
    settings: &OverrideSettings,
    approval: &Approval,
) -> Result<Override, OverrideProblem> {
    let old = change.old_annotations;
    let Some(value) = old.get(&settings.annotation) else {
        return Err(if change.annotations.contains_key(&settings.annotation) {
            OverrideProblem::NotApprovedEarlier
        } else {
            OverrideProblem::Absent
        });
    };
    let (Some(approved_by), Some(expires_text)) = (old.get(APPROVED_BY), old.get(OVERRIDE_EXPIRES))
    else {
        return Err(OverrideProblem::NotApprovedEarlier);
    };
    if keys(settings)
        .iter()
        .any(|k| change.annotations.get(*k) != old.get(*k))
    {
        return Err(OverrideProblem::ApprovalChanged);
    }
    let valid = overrides::parse(value, &settings.reasons)?;
    // As when it was written: an expiry further ahead was never admitted.
    check_expiry(expires_text, change.now, approval).map_err(|e| match e {
        Expiry::NotATime | Expiry::Passed => OverrideProblem::Expired(expires_text.clone()),
        Expiry::TooFar(max_age) => OverrideProblem::BeyondMaxAge {
            expires: expires_text.clone(),
            max_age,
        },
    })?;
    if approved_by == change.requester.username {
        return Err(OverrideProblem::SelfApproved(approved_by.clone()));
    }
    // The annotations prove nothing by themselves: only the webhook's seal
    // shows that it admitted them from an approver under this policy.
    let key = change.seal_key.ok_or(OverrideProblem::Unverifiable)?;
    let uid = change.uid.ok_or(OverrideProblem::NotSealed)?;
    let sealed = Sealed {
        uid,
        value,
        approved_by,
        expires: expires_text,
    };
    let sealed_here = old
        .get(APPROVAL_SEAL)
        .is_some_and(|seal| key.verify(&sealed, mode, settings, approval, seal));
    if !sealed_here {
        return Err(OverrideProblem::NotSealed);
    }
    Ok(valid)
}
