//! `doctor`: would this policy block Kubernetes' own controllers?
//!
//! Every built-in controller, under each username it runs as, removes each of
//! its own finalizers, decided by the policy core itself: a policy that denies
//! any of them would leave namespaces, volumes or Jobs stuck cluster-wide.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

use super::check::load_policy;
use crate::error::Error;
use crate::output::{Format, Printer};

use crate::policy::builtin::{BUILTIN_CONTROLLERS, BuiltinController, KUBE_CONTROLLER_MANAGER};
use crate::policy::{
    self, Change, FinalizerField, FinalizerLists, Mode, Operation, Policy, Requester, Target,
    Verdict,
};

/// One built-in removal the policy does not allow.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Blocked {
    pub controller: &'static str,
    pub username: &'static str,
    pub finalizer: &'static str,
    pub resource: &'static str,
    /// `Denied`, or in warn mode `WouldDeny`.
    pub verdict: Verdict,
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} controller ({}) removing finalizer {} from {}: {}",
            self.controller,
            self.username,
            crate::output::quoted(self.finalizer),
            self.resource,
            self.verdict
        )
    }
}

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

/// Every built-in removal the policy denies (or, in warn mode, would deny).
pub fn check(policy: &Policy) -> Vec<Blocked> {
    let mut blocked = Vec::new();
    for controller in BUILTIN_CONTROLLERS {
        let usernames = controller
            .usernames
            .iter()
            .copied()
            .chain(std::iter::once(KUBE_CONTROLLER_MANAGER));
        for username in usernames {
            for finalizer in controller.finalizers {
                let verdict = removal(controller, username, finalizer, policy);
                if verdict != Verdict::Authorized {
                    blocked.push(Blocked {
                        controller: controller.name,
                        username,
                        finalizer,
                        resource: controller.example_resource,
                        verdict,
                    });
                }
            }
        }
    }
    blocked
}

/// Whether `serve` takes this policy, as far as the built-in controllers go:
/// the one check behind `serve`'s start, every reload and `policy validate`.
///
/// In enforce mode a policy that would block any built-in controller is
/// refused (`Err`, every blocked removal). In warn mode it is served, and the
/// removals enforcing it would block come back to be reported (`Ok`).
pub fn servable(policy: &Policy) -> Result<Vec<Blocked>, Vec<Blocked>> {
    let blocked = check(policy);
    match policy.mode {
        Mode::Enforce if !blocked.is_empty() => Err(blocked),
        Mode::Enforce | Mode::Warn => Ok(blocked),
    }
}

/// How many removals [`check`] decides.
pub fn checked() -> usize {
    BUILTIN_CONTROLLERS
        .iter()
        .map(|c| (c.usernames.len() + 1) * c.finalizers.len())
        .sum()
}

/// Decides the UPDATE the controller sends when it is done: its finalizer removed.
fn removal(
    controller: &BuiltinController,
    username: &str,
    finalizer: &str,
    policy: &Policy,
) -> Verdict {
    let (resource, group) = controller
        .example_resource
        .split_once('.')
        .unwrap_or((controller.example_resource, ""));
    let cluster_scoped = matches!(
        resource,
        "persistentvolumes"
            | "servicecidrs"
            | "volumeattributesclasses"
            | "customresourcedefinitions"
    );
    let spec = controller.field == FinalizerField::Spec;
    // The groups a real token carries.
    let mut groups: Vec<Cow<str>> = vec!["system:authenticated".into()];
    if let Some((namespace, _)) = username
        .strip_prefix("system:serviceaccount:")
        .and_then(|sa| sa.split_once(':'))
    {
        groups.push("system:serviceaccounts".into());
        groups.push(format!("system:serviceaccounts:{namespace}").into());
    }
    let old = [Cow::Borrowed(finalizer)];
    let removed = FinalizerLists {
        old: &old,
        new: &[],
    };
    let no_annotations = BTreeMap::new();
    let change = Change {
        operation: Operation::Update,
        target: Target {
            group,
            resource,
            subresource: if spec { "finalize" } else { "" },
            namespace: (!cluster_scoped).then_some("doctor"),
            name: "doctor",
        },
        requester: Requester {
            username,
            groups: &groups,
        },
        metadata_finalizers: if spec {
            FinalizerLists::default()
        } else {
            removed
        },
        spec_finalizers: if spec {
            removed
        } else {
            FinalizerLists::default()
        },
        annotations: &no_annotations,
        old_annotations: &no_annotations,
        deleting: true,
        // No approval annotations are written, so the clock is never read.
        now: jiff::Timestamp::UNIX_EPOCH,
        uid: None,
        seal_key: None,
    };
    policy::decide(&change, policy).verdict()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_policy_blocks_no_builtin_controller() {
        assert_eq!(check(&Policy::embedded_default()), vec![]);
    }

    #[test]
    fn switching_builtins_off_without_rules_blocks_them_all() {
        let p = Policy::from_yaml("builtinControllers: false\n").unwrap();
        let blocked = check(&p);
        assert_eq!(blocked.len(), checked());
        let gc = blocked
            .iter()
            .find(|b| b.controller == "garbage-collector" && b.finalizer == "orphan")
            .unwrap();
        assert_eq!(
            gc.to_string(),
            "garbage-collector controller (system:serviceaccount:kube-system:generic-garbage-collector) removing finalizer \"orphan\" from deployments.apps: denied"
        );
        let warn = Policy::from_yaml("mode: warn\nbuiltinControllers: false\n").unwrap();
        assert!(check(&warn).iter().all(|b| b.verdict == Verdict::WouldDeny));
    }

    #[test]
    fn enforce_refuses_what_warn_only_reports() {
        assert_eq!(servable(&Policy::embedded_default()), Ok(vec![]));
        let enforce = Policy::from_yaml("builtinControllers: false\n").unwrap();
        assert_eq!(servable(&enforce), Err(check(&enforce)));
        let warn = Policy::from_yaml("mode: warn\nbuiltinControllers: false\n").unwrap();
        let reported = servable(&warn).unwrap();
        assert_eq!(reported.len(), checked());
    }

    #[test]
    fn rules_can_stand_in_for_the_builtin_table() {
        let p = Policy::from_yaml(
            "builtinControllers: false\nrules:\n  - finalizers: [\"*\"]\n    users: [system:kube-controller-manager, system:apiserver, system:cloud-controller-manager, system:kube-scheduler]\n    groups: [system:serviceaccounts:kube-system]\n",
        )
        .unwrap();
        assert_eq!(check(&p), vec![]);
    }

    #[test]
    fn a_rule_scoped_to_other_namespaces_does_not_cover_the_check() {
        // The check's namespaced removals happen in a namespace no rule names:
        // a rule scoped elsewhere must not stand in for the table.
        let p = Policy::from_yaml(
            "builtinControllers: false\nrules:\n  - finalizers: [\"*\"]\n    users: [system:kube-controller-manager]\n    namespaces: [team-a]\n",
        )
        .unwrap();
        let blocked = check(&p);
        assert!(blocked.iter().any(|b| b.resource == "deployments.apps"));
    }
}
