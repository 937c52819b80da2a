//! The override annotation: `REASON: DETAIL`, REASON on the approved list.

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
    /// DETAIL is empty: an override must say what happened (an incident, a node).
    EmptyDetail,
    /// Two-person rule: the override was not approved in an earlier request.
    NotApprovedEarlier,
    /// Two-person rule: this request changes the approval it would use.
    ApprovalChanged,
    /// Two-person rule: the approval expired (or its expiry is not a time).
    Expired(String),
    /// Two-person rule: the approver may not use their own approval.
    SelfApproved(String),
    /// `override.requireDeletion`: the object is not being deleted.
    NotDeleting,
}

impl std::fmt::Display for OverrideProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OverrideProblem::Absent => f.write_str("no override annotation"),
            OverrideProblem::Malformed => f.write_str("it must read \"REASON: DETAIL\""),
            OverrideProblem::UnapprovedReason(reason) => {
                write!(f, "reason {reason:?} is not an approved reason")
            }
            OverrideProblem::EmptyDetail => {
                f.write_str("DETAIL is empty: say what happened, e.g. an incident id and the node")
            }
            OverrideProblem::NotApprovedEarlier => f.write_str(
                "it was not approved by an approver in an earlier request (override, approved-by and override-expires must already be on the object)",
            ),
            OverrideProblem::ApprovalChanged => f.write_str("this request changes the approval it would use"),
            OverrideProblem::Expired(at) => write!(f, "the approval expired (override-expires {at:?})"),
            OverrideProblem::NotDeleting => f.write_str(
                "the object is not being deleted: an override only releases an object stuck in Terminating (delete it first)",
            ),
            OverrideProblem::SelfApproved(who) => {
                write!(f, "{who:?} approved it and may not use their own approval: another person must remove the finalizer")
            }
        }
    }
}

/// Parses an override annotation's value against the approved reasons.
pub fn parse(value: &str, approved: &[String]) -> Result<Override, OverrideProblem> {
    let (reason, detail) = value.split_once(':').ok_or(OverrideProblem::Malformed)?;
    let (reason, detail) = (reason.trim(), detail.trim());
    if reason.is_empty() {
        return Err(OverrideProblem::Malformed);
    }
    if !approved.iter().any(|a| a == reason) {
        return Err(OverrideProblem::UnapprovedReason(reason.to_string()));
    }
    if detail.is_empty() {
        return Err(OverrideProblem::EmptyDetail);
    }
    Ok(Override {
        reason: reason.to_string(),
        detail: detail.to_string(),
    })
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
