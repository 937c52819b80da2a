//! The override annotation: `REASON: DETAIL`, REASON on the approved list,
//! DETAIL with at least one visible character, and no control or format
//! character anywhere: what a person reads in a warning, an Event or an
//! incident ticket is what was written, on one line.

use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

use crate::output::hidden;

/// A valid override.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    pub reason: String,
    pub detail: String,
}

/// Why no valid override applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OverrideProblem {
    /// The object carries no override annotation.
    Absent,
    /// The value is not `REASON: DETAIL`.
    Malformed,
    /// REASON is not on the approved list.
    UnapprovedReason(String),
    /// DETAIL has no visible character: an override must say what happened
    /// (an incident, a node), readably.
    EmptyDetail,
    /// The value holds a control or format character (a newline, a
    /// zero-width space, a bidirectional mark): refused, never shown.
    ControlCharacter(char),
    /// Two-person rule: the override was not approved in an earlier request.
    NotApprovedEarlier,
    /// Two-person rule: this request changes the approval it would use.
    ApprovalChanged,
    /// Two-person rule: the approval expired (or its expiry is not a time).
    Expired(String),
    /// Two-person rule: the approver may not use their own approval.
    SelfApproved(String),
    /// Two-person rule: `override-expires` is further ahead than `maxAge`.
    BeyondMaxAge { expires: String, max_age: String },
    /// Two-person rule: the approval does not carry this webhook's seal for
    /// this object under the policy in force, so no approver's write of it
    /// was admitted (a copied template, a write in warn mode or before the
    /// approval policy, another object's approval).
    NotSealed,
    /// Two-person rule: no key to verify the seal with (an offline check
    /// without the webhook's serving key).
    Unverifiable,
    /// `override.requireDeletion`: the object is not being deleted.
    NotDeleting,
    /// `override.finalizers`: a valid override, whose reason does not
    /// release these removed finalizers (each unauthorized otherwise). A
    /// write that removes several is allowed only if every one accepts it.
    NotAccepted(Vec<Refusal>),
}

/// A removed finalizer that an override's reason does not release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub finalizer: String,
    /// Empty: no override releases it (`never: true`).
    pub accepted: Vec<String>,
    /// The `override.finalizers` entry that says so.
    pub entry: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = super::text::truncated(&self.finalizer, 253);
        if self.accepted.is_empty() {
            write!(
                f,
                "no override releases {name:?}: only its rule or controller ({})",
                self.entry
            )
        } else {
            write!(
                f,
                "{name:?} accepts only {} ({})",
                self.accepted.join(", "),
                self.entry
            )
        }
    }
}

/// How many refusals a message names; the rest are counted.
const SHOWN_REFUSALS: usize = 3;

impl std::fmt::Display for OverrideProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OverrideProblem::Absent => f.write_str("no override annotation"),
            OverrideProblem::Malformed => f.write_str("it must read \"REASON: DETAIL\""),
            OverrideProblem::UnapprovedReason(reason) => {
                write!(f, "reason {reason:?} is not an approved reason")
            }
            OverrideProblem::EmptyDetail => f.write_str(
                "DETAIL is empty or has no visible character: say what happened, e.g. an incident id and the node",
            ),
            OverrideProblem::ControlCharacter(c) => write!(
                f,
                "it holds the control or format character U+{:04X}: write \"REASON: DETAIL\" as plain text on one line",
                u32::from(*c)
            ),
            OverrideProblem::BeyondMaxAge { expires, max_age } => write!(
                f,
                "the approval's override-expires {expires:?} is more than maxAge {max_age} ahead"
            ),
            OverrideProblem::NotSealed => f.write_str(
                "the approval does not carry this webhook's seal for this object (finalizer-guard.io/approval-seal): \
                 only an approval an approver wrote through the webhook, under the approval policy and mode in force, counts; \
                 approve it again (finalizer-guard approve)",
            ),
            OverrideProblem::Unverifiable => f.write_str(
                "the approval's seal cannot be verified without the webhook's serving key (--tls-key)",
            ),
            OverrideProblem::NotApprovedEarlier => f.write_str(
                "it was not approved by an approver in an earlier request (override, approved-by and override-expires must already be on the object)",
            ),
            OverrideProblem::ApprovalChanged => f.write_str("this request changes the approval it would use"),
            OverrideProblem::Expired(at) => write!(f, "the approval expired (override-expires {at:?})"),
            OverrideProblem::NotDeleting => f.write_str(
                "the object is not being deleted: an override only releases an object stuck in Terminating (delete it first)",
            ),
            OverrideProblem::NotAccepted(refusals) => {
                for (i, r) in refusals.iter().take(SHOWN_REFUSALS).enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{r}")?;
                }
                if refusals.len() > SHOWN_REFUSALS {
                    write!(f, "; and {} more", refusals.len() - SHOWN_REFUSALS)?;
                }
                Ok(())
            }
            OverrideProblem::SelfApproved(who) => {
                write!(f, "{who:?} approved it and may not use their own approval: another person must remove the finalizer")
            }
        }
    }
}

/// Parses an override annotation's value against the approved reasons.
pub fn parse(value: &str, approved: &[String]) -> Result<Override, OverrideProblem> {
    if let Some(c) = value.chars().find(|c| hidden(*c)) {
        return Err(OverrideProblem::ControlCharacter(c));
    }
    let (reason, detail) = value.split_once(':').ok_or(OverrideProblem::Malformed)?;
    let (reason, detail) = (reason.trim(), detail.trim());
    if reason.is_empty() {
        return Err(OverrideProblem::Malformed);
    }
    if !approved.iter().any(|a| a == reason) {
        return Err(OverrideProblem::UnapprovedReason(reason.to_string()));
    }
    if !detail.chars().any(is_visible) {
        return Err(OverrideProblem::EmptyDetail);
    }
    Ok(Override {
        reason: reason.to_string(),
        detail: detail.to_string(),
    })
}

/// A character a person sees: a letter, digit, punctuation or symbol, but
/// not one of those drawn as blank space (Hangul fillers, the blank
/// Braille pattern).
fn is_visible(c: char) -> bool {
    if c.is_ascii() {
        // Letters, digits, punctuation and symbols: all but space and the
        // controls.
        return c.is_ascii_graphic();
    }
    const BLANK: [char; 5] = ['\u{115F}', '\u{1160}', '\u{3164}', '\u{FFA0}', '\u{2800}'];
    matches!(
        c.general_category_group(),
        GeneralCategoryGroup::Letter
            | GeneralCategoryGroup::Number
            | GeneralCategoryGroup::Punctuation
            | GeneralCategoryGroup::Symbol
    ) && !BLANK.contains(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approved() -> Vec<String> {
        ["node-lost", "controller-unavailable"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn table() {
        let ok = |r: &str, d: &str| {
            Ok(Override {
                reason: r.into(),
                detail: d.into(),
            })
        };
        let cases: &[(&str, Result<Override, OverrideProblem>)] = &[
            (
                "node-lost: INC-4711 server-1 powered off",
                ok("node-lost", "INC-4711 server-1 powered off"),
            ),
            ("node-lost:INC-1", ok("node-lost", "INC-1")),
            (
                "  controller-unavailable :  x: y ",
                ok("controller-unavailable", "x: y"),
            ),
            ("node-lost", Err(OverrideProblem::Malformed)),
            ("", Err(OverrideProblem::Malformed)),
            (": detail", Err(OverrideProblem::Malformed)),
            ("node-lost:", Err(OverrideProblem::EmptyDetail)),
            ("node-lost:   ", Err(OverrideProblem::EmptyDetail)),
            // Invisible details: readable by nobody.
            (
                "node-lost: \u{200B}",
                Err(OverrideProblem::ControlCharacter('\u{200B}')),
            ),
            (
                "node-lost: \u{3164}\u{2800}",
                Err(OverrideProblem::EmptyDetail),
            ),
            ("node-lost: \u{301}", Err(OverrideProblem::EmptyDetail)),
            ("node-lost: \u{3000}", Err(OverrideProblem::EmptyDetail)),
            // Control and format characters, anywhere: never shown raw.
            (
                "node-lost: INC-1\nmode: warn",
                Err(OverrideProblem::ControlCharacter('\n')),
            ),
            (
                "node-lost: INC-1\r",
                Err(OverrideProblem::ControlCharacter('\r')),
            ),
            (
                "node-lost:\tINC-1",
                Err(OverrideProblem::ControlCharacter('\t')),
            ),
            (
                "node-lost: INC-\u{202E}1",
                Err(OverrideProblem::ControlCharacter('\u{202E}')),
            ),
            (
                "node-lost: INC-1\u{2028}",
                Err(OverrideProblem::ControlCharacter('\u{2028}')),
            ),
            (
                "node-lost: a\u{7F}",
                Err(OverrideProblem::ControlCharacter('\u{7F}')),
            ),
            // Any script, and symbols, are visible.
            ("node-lost: 障害 INC-1", ok("node-lost", "障害 INC-1")),
            ("node-lost: 🔥", ok("node-lost", "🔥")),
            ("node-lost: #", ok("node-lost", "#")),
            (
                "Node-Lost: x",
                Err(OverrideProblem::UnapprovedReason("Node-Lost".into())),
            ),
            (
                "because: x",
                Err(OverrideProblem::UnapprovedReason("because".into())),
            ),
            (
                "node lost: x",
                Err(OverrideProblem::UnapprovedReason("node lost".into())),
            ),
        ];
        for (value, want) in cases {
            assert_eq!(&parse(value, &approved()), want, "{value:?}");
        }
    }
}
