//! `doctor`: would this policy block Kubernetes' own controllers? The report
//! of [`crate::policy::servable`]'s check, and how it is printed.

use std::path::Path;

use super::check::load_policy;
use crate::error::Error;
use crate::output::{Format, Printer};
use crate::policy::Policy;
use crate::policy::servable::{Blocked, check, checked};

/// What the offline `doctor` reports: the built-in removals the policy
/// would block, of how many it decided.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DoctorReport {
    /// The policy file judged, or `embedded default`.
    pub policy: String,
    pub checked: usize,
    pub blocked: Vec<Blocked>,
}

impl DoctorReport {
    pub fn of(policy_name: String, policy: &Policy) -> DoctorReport {
        DoctorReport {
            policy: policy_name,
            checked: checked(),
            blocked: check(policy),
        }
    }

    /// 0 when every built-in controller may remove its finalizers, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        i32::from(!self.blocked.is_empty())
    }
}

impl crate::output::Report for DoctorReport {
    fn write_text(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let checked = self.checked;
        for b in &self.blocked {
            writeln!(out, "BLOCKED {b}")?;
        }
        if self.blocked.is_empty() {
            writeln!(
                out,
                "ok: all {checked} built-in controller removals are authorized"
            )
        } else {
            writeln!(
                out,
                "{} of {checked} built-in controller removals would be blocked: \
                 set builtinControllers: true or add rules for them",
                self.blocked.len()
            )
        }
    }
}

/// `doctor` (offline): exit 0 when every built-in controller may remove its
/// finalizers under the policy (`None`: the embedded default), 1 otherwise.
pub fn run(policy: Option<&Path>, format: Format) -> crate::error::Result<i32> {
    let loaded = load_policy(policy)?;
    let name = policy.map_or_else(|| "embedded default".into(), |p| p.display().to_string());
    let report = DoctorReport::of(name, &loaded);
    Printer::stdio(format)
        .report(&report)
        .map_err(Error::stdout)?;
    Ok(report.exit_code())
}
