//! For each finalizer of a stuck object: who owns it, whether the owner
//! looks alive, what may leak, and whether you may remove it under the policy.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::Serialize;

use super::liveness::{Liveness, NAMESPACE_FINALIZER, Probe};
use super::owner::{Owner, owner, target_of};
use super::select::FoundObject;
use super::session::SessionUser;
use crate::admission::lean::ledger_of;
use crate::admission::ledger::Ledger;
use crate::policy::{
    self, Accepts, Change, FinalizerField, FinalizerLists, Outcome, OverrideProblem, Policy,
    Requester, approval,
};

/// Whether the person running the command may remove the finalizer, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "answer", rename_all = "kebab-case")]
pub enum Removable {
    /// A rule or a built-in controller authorizes you.
    Authorized { by: String },
    /// With an override annotation you write: `--reason R --detail T`.
    WithOverride {
        annotation: String,
        reasons: Vec<String>,
    },
    /// Two-person rule: with the approval already on the object.
    WithApproval {
        #[serde(rename = "approvedBy")]
        approved_by: String,
        expires: String,
    },
    /// Two-person rule: an approver must approve first (or again), with
    /// one of `reasons` (those that release this finalizer).
    NeedsApproval {
        why: String,
        approvers: String,
        reasons: Vec<String>,
    },
    /// Not while the object is not being deleted.
    NotDeleting,
    /// Something else in the policy refuses it.
    No { why: String },
}

impl std::fmt::Display for Removable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Removable::Authorized { by } => write!(f, "yes, authorized by {by}"),
            Removable::WithOverride {
                annotation,
                reasons,
            } => write!(
                f,
                "only with an override ({annotation}): --reason {} --detail TEXT",
                reasons.join("|")
            ),
            Removable::WithApproval {
                approved_by,
                expires,
            } => write!(
                f,
                "yes, with the approval by {approved_by} (expires {expires})"
            ),
            Removable::NeedsApproval {
                why,
                approvers,
                reasons,
            } => write!(
                f,
                "not yet: {why}; an approver ({approvers}) runs `finalizer-guard approve --reason {}`",
                reasons.join("|")
            ),
            Removable::NotDeleting => f.write_str(
                "no: the object is not being deleted (an override releases only a Terminating object)",
            ),
            Removable::No { why } => write!(f, "no: {why}"),
        }
    }
}

/// One finalizer, explained.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalizerReport {
    pub name: String,
    pub field: FinalizerField,
    pub owner: Owner,
    pub owner_alive: Liveness,
    pub removable: Removable,
}

impl FinalizerReport {
    /// A Namespace's own `kubernetes` finalizer (`spec.finalizers`).
    pub fn is_namespace_finalizer(&self) -> bool {
        self.field == FinalizerField::Spec && self.name == NAMESPACE_FINALIZER
    }

    /// Whether `unstick` leaves it in place: its owner looks alive and it
    /// was not named with `--finalizer` (`named`).
    pub fn held_back(&self, named: &[String]) -> bool {
        matches!(self.owner_alive, Liveness::Alive(_)) && !named.contains(&self.name)
    }
}

/// A removal as the webhook will see it: decided by the webhook's own core.
pub struct Proposed<'a> {
    pub found: &'a FoundObject,
    pub field: FinalizerField,
    pub remove: &'a [String],
    pub identity: &'a SessionUser,
    /// The annotations the write will carry (`object`).
    pub annotations: &'a BTreeMap<String, String>,
}

impl Proposed<'_> {
    pub fn decide(&self, policy: &Policy) -> policy::Decision {
        let old_annotations = self
            .found
            .object
            .metadata
            .annotations
            .clone()
            .unwrap_or_default();
        let old: Vec<String> = match self.field {
            FinalizerField::Metadata => self.found.metadata_finalizers(),
            FinalizerField::Spec => self.found.spec_finalizers(),
        };
        let new: Vec<String> = old
            .iter()
            .filter(|f| !self.remove.contains(f))
            .cloned()
            .collect();
        let (old, new) = (policy::borrowed(&old), policy::borrowed(&new));
        let groups = policy::borrowed(&self.identity.groups);
        let lists = FinalizerLists {
            old: &old,
            new: &new,
        };
        let requester = Requester {
            username: &self.identity.username,
            groups: &groups,
        };
        let target = target_of(self.found, self.field);
        let change = Change {
            annotations: self.annotations,
            old_annotations: &old_annotations,
            deleting: self.found.object.metadata.deletion_timestamp.is_some(),
            now: Timestamp::now(),
            uid: self.found.object.metadata.uid.as_deref(),
            // Only the webhook holds the key: it verifies the seal.
            seal_key: None,
            ..Change::removing(target, requester, self.field, lists)
        };
        policy::decide(&change, policy)
    }
}

/// Whether you may remove `finalizer`, and how.
pub fn removable(
    policy: &Policy,
    found: &FoundObject,
    finalizer: &str,
    field: FinalizerField,
    identity: &SessionUser,
) -> Removable {
    let current = found.annotations();
    let remove = [finalizer.to_string()];
    let proposed = |annotations: &BTreeMap<String, String>| {
        Proposed {
            found,
            field,
            remove: &remove,
            identity,
            annotations,
        }
        .decide(policy)
    };
    let settings = &policy.override_settings;
    let as_is = proposed(&current);
    if let Some(by) = as_is.removed.iter().find_map(|r| r.authorized_by.as_ref()) {
        return Removable::Authorized { by: by.to_string() };
    }
    if settings.require_deletion && found.object.metadata.deletion_timestamp.is_none() {
        return Removable::NotDeleting;
    }
    let accepts = settings.accepts(finalizer);
    if let Accepts::Never { .. } = accepts {
        return Removable::No {
            why: refused_reason(&accepts, ""),
        };
    }
    if let Some(approval_policy) = &settings.approval {
        return under_approval(as_is.outcome, &current, approval_policy, &accepts);
    }
    // Would an override you write do it? Only with a reason that releases it.
    let Some(reason) = accepts.reasons().first() else {
        return Removable::No {
            why: refused_reason(&accepts, ""),
        };
    };
    let mut with_override = current.clone();
    with_override.insert(settings.annotation.clone(), format!("{reason}: check"));
    match proposed(&with_override).outcome {
        Outcome::Override(_) => Removable::WithOverride {
            annotation: settings.annotation.clone(),
            reasons: accepts.reasons().to_vec(),
        },
        Outcome::Denied { problem, .. } => Removable::No {
            why: problem.to_string(),
        },
        other => Removable::No {
            why: unexpected(&other),
        },
    }
}

/// Under the two-person rule: whether the approval the object carries would
/// do (everything but the seal, which the webhook checks), or what is missing.
fn under_approval(
    outcome: Outcome,
    current: &BTreeMap<String, String>,
    approval_policy: &crate::policy::Approval,
    accepts: &Accepts<'_>,
) -> Removable {
    match outcome {
        Outcome::Override(_)
        | Outcome::Denied {
            problem: OverrideProblem::Unverifiable,
            ..
        } => Removable::WithApproval {
            approved_by: current
                .get(approval::APPROVED_BY)
                .cloned()
                .unwrap_or_default(),
            expires: current
                .get(approval::OVERRIDE_EXPIRES)
                .cloned()
                .unwrap_or_default(),
        },
        Outcome::Denied { problem, .. } => Removable::NeedsApproval {
            why: approval_problem(&problem),
            approvers: approval_policy.describe_approvers(),
            reasons: accepts.reasons().to_vec(),
        },
        other => Removable::No {
            why: unexpected(&other),
        },
    }
}

/// Why an override with `reason` does not release a finalizer (`reason`
/// empty: why none does).
pub fn refused_reason(accepts: &Accepts<'_>, reason: &str) -> String {
    match accepts {
        Accepts::Never { entry } => {
            format!("no override releases it: only its rule or controller ({entry})")
        }
        Accepts::Only { reasons, entry } if reason.is_empty() => {
            format!(
                "only an override with {} releases it ({entry})",
                reasons.join(", ")
            )
        }
        Accepts::Only { reasons, entry } => format!(
            "it accepts only {} ({entry}): not attempted with --reason {reason}",
            reasons.join(", ")
        ),
        Accepts::Every(reasons) => format!("an override with {} releases it", reasons.join(", ")),
    }
}

/// A decision that neither authorizes the removal nor asks for an override
/// or an approval, said plainly.
fn unexpected(outcome: &Outcome) -> String {
    match outcome {
        Outcome::NotJudged => "the webhook would not judge this write".into(),
        Outcome::NothingRemoved => "the write would remove no finalizer".into(),
        Outcome::Authorized => "authorized".into(),
        Outcome::Override(o) => format!("allowed by the override ({})", o.reason),
        Outcome::ApprovalRecorded => "the write would record an approval".into(),
        Outcome::ApprovalRefused { problem, .. } => {
            format!("the approval would be refused: {problem}")
        }
        Outcome::Denied { problem, .. } => problem.to_string(),
        Outcome::TooManyNames { field, .. } => {
            format!("{} holds too many names to judge", field.path())
        }
    }
}

/// The two-person rule's problems, said plainly.
pub fn approval_problem(problem: &OverrideProblem) -> String {
    match problem {
        OverrideProblem::Absent | OverrideProblem::NotApprovedEarlier => format!(
            "no approval on the object ({} and {} are missing)",
            approval::APPROVED_BY,
            approval::OVERRIDE_EXPIRES
        ),
        OverrideProblem::Expired(at) => format!("the approval expired at {at}"),
        OverrideProblem::SelfApproved(who) => {
            format!("the approval is your own ({who}): another person must run unstick")
        }
        other => other.to_string(),
    }
}

/// Explains every finalizer of `found`, or only those in `only`.
pub async fn explain(
    probe: &mut Probe,
    policy: &Policy,
    found: &FoundObject,
    only: &[String],
    identity: &SessionUser,
) -> Vec<FinalizerReport> {
    let mut out = Vec::new();
    let lists = [
        (FinalizerField::Metadata, found.metadata_finalizers()),
        (FinalizerField::Spec, found.spec_finalizers()),
    ];
    for (field, names) in lists {
        for name in names {
            if !only.is_empty() && !only.contains(&name) {
                continue;
            }
            if out
                .iter()
                .any(|r: &FinalizerReport| r.name == name && r.field == field)
            {
                continue;
            }
            let owner = owner(policy, found, &name, field);
            let owner_alive = probe.owner_alive(found, &owner).await;
            let removable = removable(policy, found, &name, field, identity);
            out.push(FinalizerReport {
                name,
                field,
                owner,
                owner_alive,
                removable,
            });
        }
    }
    out
}

/// What the object's finalizers were protecting.
pub fn may_leak(found: &FoundObject) -> Ledger {
    let value = serde_json::to_value(&found.object).unwrap_or_default();
    ledger_of(&value)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ApiResource;
    use serde_json::json;

    use super::*;

    fn pod(deleting: bool, annotations: serde_json::Value) -> FoundObject {
        let mut object = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-0", "namespace": "shop", "resourceVersion": "7",
                "finalizers": ["example.com/cleanup"],
                "annotations": annotations,
            },
            "spec": {"nodeName": "worker-3"},
        });
        if deleting {
            object["metadata"]["deletionTimestamp"] = json!("2026-11-21T07:00:00Z");
        }
        FoundObject {
            resource: ApiResource::erase::<Pod>(&()),
            namespaced: true,
            object: serde_json::from_value(object).unwrap(),
        }
    }

    fn who(username: &str) -> SessionUser {
        SessionUser {
            username: username.into(),
            groups: vec!["system:authenticated".into()],
        }
    }

    fn policy(yaml: &str) -> Policy {
        Policy::from_yaml(yaml).unwrap()
    }

    const RULES: &str = "rules:\n  - name: cleanup\n    finalizers: [example.com/*]\n    users: [alice]\n    serviceAccounts: [ops:cleaner]\n";
    const TWO_PERSON: &str = "override:\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n";

    fn may(policy: &Policy, found: &FoundObject, user: &str) -> Removable {
        removable(
            policy,
            found,
            "example.com/cleanup",
            FinalizerField::Metadata,
            &who(user),
        )
    }

    #[test]
    fn who_may_remove_it_and_how() {
        let rules = policy(RULES);
        let stuck = pod(true, json!({}));
        assert_eq!(
            may(&rules, &stuck, "alice"),
            Removable::Authorized {
                by: "rule cleanup".into()
            }
        );
        assert!(matches!(
            may(&rules, &stuck, "bob"),
            Removable::WithOverride { .. }
        ));
        assert_eq!(
            may(&rules, &pod(false, json!({})), "bob"),
            Removable::NotDeleting
        );
        // A rule needs no deletion.
        assert!(matches!(
            may(&rules, &pod(false, json!({})), "alice"),
            Removable::Authorized { .. }
        ));
    }

    #[test]
    fn the_reasons_that_release_each_finalizer_are_said() {
        let narrowed = Policy::from_yaml(
            "override:\n  finalizers:\n    - finalizers: [example.com/cleanup]\n      reasons: [node-lost]\n",
        )
        .unwrap();
        let r = may(&narrowed, &pod(true, json!({})), "oncall");
        assert_eq!(
            r.to_string(),
            "only with an override (finalizer-guard.io/override): --reason node-lost --detail TEXT"
        );
        let never = Policy::from_yaml(
            "override:\n  finalizers:\n    - finalizers: [\"example.com/*\"]\n      never: true\n",
        )
        .unwrap();
        assert_eq!(
            may(&never, &pod(true, json!({})), "oncall").to_string(),
            "no: no override releases it: only its rule or controller (override.finalizers[0])"
        );
        let two_person = Policy::from_yaml(
            "override:\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n  finalizers:\n    - finalizers: [example.com/cleanup]\n      reasons: [controller-uninstalled]\n      approval: required\n",
        )
        .unwrap();
        let r = may(&two_person, &pod(true, json!({})), "oncall").to_string();
        assert!(
            r.ends_with("runs `finalizer-guard approve --reason controller-uninstalled`"),
            "{r}"
        );
    }

    #[test]
    fn the_two_person_rule_is_said_plainly() {
        let p = policy(TWO_PERSON);
        let in_an_hour = (Timestamp::now() + jiff::SignedDuration::from_hours(1)).to_string();
        let approval = |by: &str, expires: &str| {
            json!({
                "finalizer-guard.io/override": "node-lost: INC-1",
                "finalizer-guard.io/approved-by": by,
                "finalizer-guard.io/override-expires": expires,
            })
        };
        let needs = |r: Removable| match r {
            Removable::NeedsApproval { why, approvers, .. } => {
                assert_eq!(approvers, "users sec-lead");
                why
            }
            other => panic!("{other:?}"),
        };
        assert!(needs(may(&p, &pod(true, json!({})), "oncall")).contains("no approval"));
        assert!(
            needs(may(
                &p,
                &pod(true, approval("sec-lead", "2026-01-01T00:00:00Z")),
                "oncall"
            ))
            .contains("expired")
        );
        assert!(
            needs(may(
                &p,
                &pod(true, approval("sec-lead", &in_an_hour)),
                "sec-lead"
            ))
            .contains("your own")
        );
        assert_eq!(
            may(&p, &pod(true, approval("sec-lead", &in_an_hour)), "oncall"),
            Removable::WithApproval {
                approved_by: "sec-lead".into(),
                expires: in_an_hour.clone()
            }
        );
    }

    #[test]
    fn owners_by_table_then_rules() {
        let rules = policy(RULES);
        let found = pod(true, json!({}));
        match owner(
            &rules,
            &found,
            "example.com/cleanup",
            FinalizerField::Metadata,
        ) {
            Owner::Rules { rules } => {
                assert_eq!(rules[0].rule, "cleanup");
                assert_eq!(
                    rules[0].identities,
                    ["user:alice", "serviceaccount:ops:cleaner"]
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            owner(
                &rules,
                &found,
                "batch.kubernetes.io/job-tracking",
                FinalizerField::Metadata
            ),
            Owner::Builtin {
                controller: "job",
                runs_in: "kube-controller-manager"
            }
        ));
        assert!(matches!(
            owner(&rules, &found, "other.io/x", FinalizerField::Metadata),
            Owner::Unknown
        ));
    }

    /// A rule names the finalizer for a controller in other namespaces:
    /// the owner line says to widen it, not "unknown".
    #[test]
    fn a_rule_that_names_the_finalizer_elsewhere_is_named() {
        let gitrepo = |ns: &str| {
            FoundObject {
            resource: ApiResource {
                group: "source.toolkit.fluxcd.io".into(),
                version: "v1".into(),
                api_version: "source.toolkit.fluxcd.io/v1".into(),
                kind: "GitRepository".into(),
                plural: "gitrepositories".into(),
            },
            namespaced: true,
            object: serde_json::from_value(json!({
                "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                "metadata": {"name": "podinfo", "namespace": ns, "finalizers": ["finalizers.fluxcd.io"]},
            }))
            .unwrap(),
        }
        };
        let flux = policy(
            "rules:\n  - name: flux-system-source-controller\n    finalizers: [\"finalizers.fluxcd.io\"]\n    serviceAccounts: [\"flux-system:source-controller\"]\n    namespaces: [\"team-a\", \"team-b\"]\n    resources: [\"gitrepositories.source.toolkit.fluxcd.io\"]\n",
        );
        let here = owner(
            &flux,
            &gitrepo("team-c"),
            "finalizers.fluxcd.io",
            FinalizerField::Metadata,
        );
        assert_eq!(
            here.to_string(),
            "rule flux-system-source-controller lets ServiceAccount flux-system:source-controller remove it in team-a, team-b but not here: widen the rule (namespaces) rather than override"
        );
        let json = serde_json::to_value(&here).unwrap();
        assert_eq!(json["kind"], "elsewhere");
        assert_eq!(json["rules"][0]["namespaces"], json!(["team-a", "team-b"]));
        // Where it does cover: the rule.
        assert!(matches!(
            owner(
                &flux,
                &gitrepo("team-a"),
                "finalizers.fluxcd.io",
                FinalizerField::Metadata
            ),
            Owner::Rules { .. }
        ));
        // Another resource: the resources to widen.
        let pods = policy(
            "rules:\n  - name: pods-only\n    finalizers: [\"finalizers.fluxcd.io\"]\n    users: [ci-bot]\n    resources: [pods]\n",
        );
        assert_eq!(
            owner(
                &pods,
                &gitrepo("team-c"),
                "finalizers.fluxcd.io",
                FinalizerField::Metadata
            )
            .to_string(),
            "rule pods-only lets user ci-bot remove it on pods but not here: widen the rule (resources) rather than override"
        );
        // No rule names it anywhere: unknown, as before.
        assert_eq!(
            owner(
                &flux,
                &gitrepo("team-c"),
                "other.io/x",
                FinalizerField::Metadata
            ),
            Owner::Unknown
        );
    }
}
