//! The decision rules (docs/policy.md, the decision rules), in order.

use std::collections::HashSet;

use super::change::{Change, FinalizerLists, Operation, Requester, Target};
use super::config::{Accepts, Mode, OverrideSettings, Policy, Rule};
use super::decision::{Authority, Decision, DecisionEvidence, Outcome, Removal};
use super::field::FinalizerField;
use super::overrides::{OverrideProblem, Refusal};
use super::{approval, overrides};

/// Decides one change under a policy.
pub fn decide(change: &Change<'_>, policy: &Policy) -> Decision {
    let settings = &policy.override_settings;
    let enforced = policy.mode == Mode::Enforce;

    // 1. Only UPDATE is judged.
    let judged = change.operation == Operation::Update;

    // 2. What is removed, and who may remove each (4.).
    let removed = if judged {
        removals(change, policy)
    } else {
        Vec::new()
    };

    // Two-person rule: only approvers write approvals, on CREATE and UPDATE.
    // A refused write keeps what it removed on record (in warn mode it is
    // allowed, and the removal must still be audited and counted).
    let mut approval_written = false;
    if let Some(approval) = &settings.approval
        && matches!(change.operation, Operation::Create | Operation::Update)
        && approval::writes_approval(change, settings)
    {
        if let Err(problem) = approval::check_write(change, policy.mode, settings, approval) {
            return decided(
                change,
                policy,
                Outcome::ApprovalRefused { problem, enforced },
                removed,
            );
        }
        approval_written = true;
    }

    // 1. and 3. Not judged, or nothing removed: allowed silently (an
    // approval written is still recorded).
    if !judged || removed.is_empty() {
        let outcome = match (approval_written, judged) {
            (true, _) => Outcome::ApprovalRecorded,
            (false, false) => Outcome::NotJudged,
            (false, true) => Outcome::NothingRemoved,
        };
        return decided(change, policy, outcome, removed);
    }

    // 4. Each removal authorized by a rule or a built-in controller.
    if removed.iter().all(|r| r.authorized_by.is_some()) {
        return decided(change, policy, Outcome::Authorized, removed);
    }

    // 5. and 6. Otherwise an override, or denied.
    let outcome = override_outcome(change, policy, &removed);
    decided(change, policy, outcome, removed)
}

/// What an UPDATE removes (rule 2): from metadata.finalizers, and from
/// spec.finalizers through namespaces/finalize; each with what authorizes
/// its removal (rule 4), if anything does.
fn removals(change: &Change<'_>, policy: &Policy) -> Vec<Removal> {
    let mut removed = Vec::new();
    push_removed(
        &mut removed,
        change.metadata_finalizers,
        FinalizerField::Metadata,
    );
    if change.target.is_namespace_finalize() {
        push_removed(&mut removed, change.spec_finalizers, FinalizerField::Spec);
    }
    for removal in &mut removed {
        removal.authorized_by = authority(change, policy, &removal.finalizer, removal.field);
    }
    removed
}

/// Some removals are unauthorized (rule 5): an override on the object as it
/// will be stored (or under the two-person rule, one approved earlier by
/// someone else) that releases them all, on an object being deleted; else
/// (rule 6) denied, or in warn mode allowed with a warning.
fn override_outcome(change: &Change<'_>, policy: &Policy, removed: &[Removal]) -> Outcome {
    let settings = &policy.override_settings;
    let parsed = match (
        &settings.approval,
        change.annotations.get(&settings.annotation),
    ) {
        (Some(approval), _) => approval::check_override(change, policy.mode, settings, approval),
        (None, None) => Err(OverrideProblem::Absent),
        (None, Some(value)) => overrides::parse(value, &settings.reasons),
    };
    // `override.finalizers`: the override's reason must release every
    // removed finalizer nothing else authorizes, or the write is denied.
    let parsed = parsed.and_then(|valid| {
        let refusals = refusals(settings, removed, &valid.reason);
        if refusals.is_empty() {
            Ok(valid)
        } else {
            Err(OverrideProblem::NotAccepted(refusals))
        }
    });
    // An override releases only an object being deleted: one forgotten on a
    // live object must not authorize every later removal, by anyone.
    let parsed = parsed.and_then(|valid| {
        if settings.require_deletion && !change.deleting {
            Err(OverrideProblem::NotDeleting)
        } else {
            Ok(valid)
        }
    });
    match parsed {
        Ok(valid) => Outcome::Override(valid),
        Err(problem) => Outcome::Denied {
            problem,
            enforced: policy.mode == Mode::Enforce,
        },
    }
}

/// The unauthorized removals that an override with `reason` does not release.
fn refusals(settings: &OverrideSettings, removed: &[Removal], reason: &str) -> Vec<Refusal> {
    if settings.finalizers.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<Refusal> = Vec::new();
    for removal in removed.iter().filter(|r| r.authorized_by.is_none()) {
        let accepts = settings.accepts(&removal.finalizer);
        // A name removed from both lists is refused once.
        if !accepts.reason(reason) && !out.iter().any(|r| r.finalizer == removal.finalizer) {
            let entry = match accepts {
                Accepts::Only { entry, .. } | Accepts::Never { entry } => entry,
                // Not reached: a valid override's reason is on override.reasons.
                Accepts::Every(_) => "override.reasons",
            };
            out.push(Refusal {
                finalizer: removal.finalizer.clone(),
                accepted: accepts.reasons().to_vec(),
                entry: entry.to_string(),
            });
        }
    }
    out
}

/// The decision, with the evidence read for it.
fn decided(
    change: &Change<'_>,
    policy: &Policy,
    outcome: Outcome,
    removed: Vec<Removal>,
) -> Decision {
    let settings = &policy.override_settings;
    // Two-person rule: the approval used (from oldObject) or written (in object).
    let approval = match (&settings.approval, &outcome) {
        (Some(_), Outcome::Override(_)) => Some(change.old_annotations),
        (Some(_), Outcome::ApprovalRecorded | Outcome::ApprovalRefused { .. }) => {
            Some(change.annotations)
        }
        _ => None,
    };
    let rejected_override = match &outcome {
        Outcome::Denied { problem, .. }
            if *problem != OverrideProblem::Absent && settings.approval.is_none() =>
        {
            change.annotations.get(&settings.annotation).cloned()
        }
        _ => None,
    };
    let evidence = DecisionEvidence {
        rejected_override,
        approved_by: approval.and_then(|a| a.get(approval::APPROVED_BY).cloned()),
        override_expires: approval.and_then(|a| a.get(approval::OVERRIDE_EXPIRES).cloned()),
    };
    Decision {
        outcome,
        removed,
        evidence,
    }
}

/// Appends the names in `lists.old` that are absent from `lists.new`, once each.
fn push_removed(out: &mut Vec<Removal>, lists: FinalizerLists<'_>, field: FinalizerField) {
    let FinalizerLists { old, new } = lists;
    if old.is_empty() {
        return;
    }
    // An update keeps the other names in their order: walking both lists in
    // step settles all but the removed ones in one pass. Only the names found
    // out of step are looked up in the whole new list (in any order, with
    // duplicates), so the result does not depend on the order.
    let mut next = new.iter().peekable();
    let mut out_of_step: Vec<&str> = Vec::new();
    for name in old {
        if next.peek().is_some_and(|n| *n == name) {
            next.next();
        } else {
            out_of_step.push(name);
        }
    }
    if out_of_step.is_empty() {
        return;
    }
    // A set only pays off when many names must be looked up in a long list.
    let lookups = out_of_step.len().saturating_mul(new.len());
    let kept: Option<HashSet<&str>> = (lookups > 4096).then(|| new.iter().map(|n| &**n).collect());
    let is_kept = |name: &str| match &kept {
        Some(set) => set.contains(name),
        None => new.iter().any(|n| n == name),
    };
    // Each removed name once, even when `old` repeats it: a scan of those
    // found so far while they are few, a set beyond.
    let first = out.len();
    let mut seen: Option<HashSet<&str>> = (out_of_step.len() > 16).then(HashSet::new);
    for name in out_of_step {
        if is_kept(name) {
            continue;
        }
        let first_time = match &mut seen {
            Some(set) => set.insert(name),
            None => !out[first..].iter().any(|r| r.finalizer == name),
        };
        if first_time {
            out.push(Removal {
                finalizer: name.to_string(),
                field,
                authorized_by: None,
            });
        }
    }
}

fn authority(
    change: &Change<'_>,
    policy: &Policy,
    finalizer: &str,
    field: FinalizerField,
) -> Option<Authority> {
    if policy.builtin_controllers
        && let Some(controller) = policy.builtin_owner(change.requester.username, finalizer, field)
    {
        return Some(Authority::Builtin(controller.name));
    }
    policy
        .rules
        .iter()
        .find(|rule| covers(rule, &change.requester, &change.target, finalizer))
        .map(|rule| Authority::Rule(rule.label.clone()))
}

/// Whether `rule` lets `requester` remove `finalizer` from `target`.
fn covers(rule: &Rule, requester: &Requester<'_>, target: &Target<'_>, finalizer: &str) -> bool {
    let requester_ok = rule.users.iter().any(|u| u == requester.username)
        || rule
            .service_accounts
            .iter()
            .any(|sa| sa == requester.username)
        || rule
            .groups
            .iter()
            .any(|g| requester.groups.iter().any(|have| have == g));
    requester_ok && in_scope(rule, target, finalizer)
}

/// Whether `rule` is about `finalizer` on `target`, whoever asks.
fn in_scope(rule: &Rule, target: &Target<'_>, finalizer: &str) -> bool {
    let finalizer_ok = rule.finalizers.iter().any(|p| p.matches(finalizer));
    let namespace_ok = match &rule.namespaces {
        None => true,
        Some(namespaces) => target
            .object_namespace()
            .is_some_and(|ns| namespaces.iter().any(|n| n == ns)),
    };
    let resource_ok = match &rule.resources {
        None => true,
        Some(resources) => resources
            .iter()
            .any(|r| r.matches(target.group, target.resource)),
    };
    finalizer_ok && namespace_ok && resource_ok
}

/// The rules that let someone remove `finalizer` from `target`: its owners,
/// as far as the policy knows them.
pub fn rules_for<'p>(policy: &'p Policy, target: &Target<'_>, finalizer: &str) -> Vec<&'p Rule> {
    policy
        .rules
        .iter()
        .filter(|rule| in_scope(rule, target, finalizer))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::collections::BTreeMap;

    use super::*;
    use crate::policy::overrides::{Override, OverrideProblem};

    /// An owned change, built fluently, lent to [`decide`].
    #[derive(Clone)]
    struct Case {
        operation: Operation,
        group: String,
        resource: String,
        subresource: String,
        namespace: Option<String>,
        username: String,
        groups: Vec<Cow<'static, str>>,
        old: Vec<Cow<'static, str>>,
        new: Vec<Cow<'static, str>>,
        spec_old: Vec<Cow<'static, str>>,
        spec_new: Vec<Cow<'static, str>>,
        annotations: BTreeMap<String, String>,
        old_annotations: BTreeMap<String, String>,
        deleting: bool,
        uid: Option<String>,
        now: jiff::Timestamp,
        seal_key: Option<crate::policy::seal::SealKey>,
    }

    fn strings(items: &[&str]) -> Vec<Cow<'static, str>> {
        items.iter().map(|s| Cow::Owned(s.to_string())).collect()
    }

    fn pod_update(user: &str) -> Case {
        Case {
            operation: Operation::Update,
            group: String::new(),
            resource: "pods".into(),
            subresource: String::new(),
            namespace: Some("team-a".into()),
            username: user.into(),
            groups: strings(&["system:authenticated"]),
            old: Vec::new(),
            new: Vec::new(),
            spec_old: Vec::new(),
            spec_new: Vec::new(),
            annotations: BTreeMap::new(),
            old_annotations: BTreeMap::new(),
            // Most cases are objects stuck in Terminating.
            deleting: true,
            uid: Some("uid-1".into()),
            now: "2026-11-21T08:00:00Z".parse().unwrap(),
            seal_key: Some(crate::policy::seal::SealKey::derive(b"test key")),
        }
    }

    impl Case {
        fn removing(mut self, old: &[&str], new: &[&str]) -> Self {
            self.old = strings(old);
            self.new = strings(new);
            self
        }
        fn spec(mut self, old: &[&str], new: &[&str]) -> Self {
            self.spec_old = strings(old);
            self.spec_new = strings(new);
            self
        }
        fn operation(mut self, op: Operation) -> Self {
            self.operation = op;
            self
        }
        fn resource(mut self, group: &str, resource: &str, subresource: &str) -> Self {
            self.group = group.into();
            self.resource = resource.into();
            self.subresource = subresource.into();
            self
        }
        fn namespace(mut self, ns: Option<&str>) -> Self {
            self.namespace = ns.map(String::from);
            self
        }
        fn groups(mut self, groups: &[&str]) -> Self {
            self.groups = strings(groups);
            self
        }
        fn annotate(mut self, key: &str, value: &str) -> Self {
            self.annotations.insert(key.into(), value.into());
            self
        }
        /// The object is not being deleted.
        fn live(mut self) -> Self {
            self.deleting = false;
            self
        }
        fn with_override(self, value: &str) -> Self {
            self.annotate("finalizer-guard.io/override", value)
        }
        fn decide(&self, policy: &Policy) -> Decision {
            self.with_change(|change| decide(change, policy))
        }
        fn with_change<R>(&self, f: impl FnOnce(&Change<'_>) -> R) -> R {
            let change = Change {
                operation: self.operation,
                target: Target {
                    group: &self.group,
                    resource: &self.resource,
                    subresource: &self.subresource,
                    namespace: self.namespace.as_deref(),
                    name: "obj",
                },
                requester: Requester {
                    username: &self.username,
                    groups: &self.groups,
                },
                metadata_finalizers: FinalizerLists {
                    old: &self.old,
                    new: &self.new,
                },
                spec_finalizers: FinalizerLists {
                    old: &self.spec_old,
                    new: &self.spec_new,
                },
                annotations: &self.annotations,
                old_annotations: &self.old_annotations,
                deleting: self.deleting,
                uid: self.uid.as_deref(),
                now: self.now,
                seal_key: self.seal_key.as_ref(),
            };
            f(&change)
        }
    }

    fn policy(yaml: &str) -> Policy {
        Policy::from_yaml(yaml).unwrap()
    }

    fn contract_policy() -> Policy {
        policy(
            r#"
rules:
  - name: cleanup
    finalizers: ["example.com/cleanup", "storage.example.com/*"]
    users: ["alice"]
    groups: ["platform-admins"]
    serviceAccounts: ["ops:cleanup-controller"]
  - name: team-a-widgets
    finalizers: ["widgets.example.com/finalizer"]
    serviceAccounts: ["team-a:widget-operator"]
    namespaces: ["team-a"]
    resources: ["widgets.example.com"]
"#,
        )
    }

    fn denied(problem: OverrideProblem) -> Outcome {
        Outcome::Denied {
            problem,
            enforced: true,
        }
    }

    #[test]
    fn only_update_is_judged() {
        let p = contract_policy();
        for op in [Operation::Create, Operation::Delete, Operation::Connect] {
            let d = pod_update("mallory")
                .operation(op)
                .removing(&["x"], &[])
                .decide(&p);
            assert_eq!(d.outcome, Outcome::NotJudged);
            assert!(d.allowed() && !d.audited());
        }
    }

    #[test]
    fn removed_is_a_set_difference() {
        let p = contract_policy();
        let cases: &[(&[&str], &[&str], &[&str])] = &[
            (&[], &[], &[]),
            (&["a"], &["a"], &[]),
            (&["a", "b"], &["b", "a"], &[]),           // reordered
            (&["a", "a", "b"], &["a", "b", "b"], &[]), // duplicates
            (&["a"], &["a", "new"], &[]),              // added
            (&["a", "b"], &[], &["a", "b"]),           // absent, null or []
            (&["a", "b", "a"], &["b"], &["a"]),        // duplicate removed once
            (&["a", "b", "c"], &["c"], &["a", "b"]),
        ];
        for (old, new, want) in cases {
            let d = pod_update("mallory").removing(old, new).decide(&p);
            let got: Vec<&str> = d.removed.iter().map(|r| r.finalizer.as_str()).collect();
            assert_eq!(&got, want, "old {old:?} new {new:?}");
            if want.is_empty() {
                assert_eq!(d.outcome, Outcome::NothingRemoved);
            }
        }
    }

    #[test]
    fn long_lists_use_the_same_difference() {
        let old: Vec<Cow<str>> = (0..1024)
            .map(|i| Cow::Owned(format!("example.com/f{i}")))
            .collect();
        let new: Vec<Cow<str>> = old.iter().filter(|f| !f.ends_with('7')).cloned().collect();
        let mut out = Vec::new();
        push_removed(
            &mut out,
            FinalizerLists {
                old: &old,
                new: &new,
            },
            FinalizerField::Metadata,
        );
        assert_eq!(out.len(), old.iter().filter(|f| f.ends_with('7')).count());

        // Everything removed, every name twice: each once, in first-seen order.
        let twice: Vec<Cow<str>> = old.iter().chain(old.iter()).cloned().collect();
        let names = |new: &[Cow<str>], old: &[Cow<str>]| {
            let mut out = Vec::new();
            push_removed(
                &mut out,
                FinalizerLists { old, new },
                FinalizerField::Metadata,
            );
            out.into_iter().map(|r| r.finalizer).collect::<Vec<_>>()
        };
        assert_eq!(names(&[], &twice), old);

        // The kept names reversed: nothing is in step, nothing is removed.
        let reversed: Vec<Cow<str>> = old.iter().rev().cloned().collect();
        assert!(names(&reversed, &old).is_empty());
        let reversed_minus_one: Vec<Cow<str>> = reversed[1..].to_vec();
        assert_eq!(
            names(&reversed_minus_one, &twice),
            vec![old[1023].to_string()]
        );
    }

    #[test]
    fn rules_authorize_by_user_group_and_service_account() {
        let p = contract_policy();
        let by_user = pod_update("alice")
            .removing(&["example.com/cleanup"], &[])
            .decide(&p);
        assert_eq!(by_user.outcome, Outcome::Authorized);
        assert_eq!(
            by_user.removed[0].authorized_by,
            Some(Authority::Rule("cleanup".into()))
        );

        let by_group = pod_update("bob")
            .groups(&["system:authenticated", "platform-admins"])
            .removing(&["storage.example.com/volume"], &[])
            .decide(&p);
        assert_eq!(by_group.outcome, Outcome::Authorized);

        let by_sa = pod_update("system:serviceaccount:ops:cleanup-controller")
            .removing(&["example.com/cleanup"], &[])
            .decide(&p);
        assert_eq!(by_sa.outcome, Outcome::Authorized);
    }

    #[test]
    fn spoofed_identities_are_not_covered() {
        let p = contract_policy();
        for user in [
            "system:serviceaccount:other:cleanup-controller", // same name, other namespace
            "system:serviceaccount:ops:cleanup-controller2",
            "alice2",
            "Alice",
            "ops:cleanup-controller", // the policy's short form is not a username
            "system:serviceaccount:kube-system:generic-garbage-collector-evil",
        ] {
            let d = pod_update(user)
                .groups(&["platform-admins-x", "system:serviceaccounts"])
                .removing(&["example.com/cleanup", "foregroundDeletion"], &[])
                .decide(&p);
            assert_eq!(d.outcome, denied(OverrideProblem::Absent), "{user}");
        }
    }

    #[test]
    fn a_rule_covers_only_its_finalizers() {
        let p = contract_policy();
        let d = pod_update("alice")
            .removing(
                &["example.com/cleanup", "other.io/x", "storage.example.com"],
                &[],
            )
            .decide(&p);
        assert_eq!(d.outcome, denied(OverrideProblem::Absent));
        let unauthorized: Vec<&str> = d.unauthorized().map(|r| r.finalizer.as_str()).collect();
        assert_eq!(unauthorized, ["other.io/x", "storage.example.com"]);
    }

    #[test]
    fn namespace_and_resource_scopes() {
        let p = contract_policy();
        let operator = "system:serviceaccount:team-a:widget-operator";
        let widget = |ns: Option<&str>, group: &str, resource: &str| {
            pod_update(operator)
                .resource(group, resource, "")
                .namespace(ns)
                .removing(&["widgets.example.com/finalizer"], &[])
                .decide(&p)
                .outcome
        };
        assert_eq!(
            widget(Some("team-a"), "example.com", "widgets"),
            Outcome::Authorized
        );
        assert_eq!(
            widget(Some("team-b"), "example.com", "widgets"),
            denied(OverrideProblem::Absent)
        );
        assert_eq!(
            widget(None, "example.com", "widgets"),
            denied(OverrideProblem::Absent)
        );
        assert_eq!(
            widget(Some("team-a"), "other.com", "widgets"),
            denied(OverrideProblem::Absent)
        );
        assert_eq!(
            widget(Some("team-a"), "", "pods"),
            denied(OverrideProblem::Absent)
        );
    }

    #[test]
    fn a_namespace_object_is_cluster_scoped() {
        let p = policy(
            "rules:\n  - finalizers: [example.com/ns]\n    users: [alice]\n    namespaces: [team-a]\n",
        );
        // The apiserver reports a Namespace's own name as request.namespace.
        let d = pod_update("alice")
            .resource("", "namespaces", "")
            .namespace(Some("team-a"))
            .removing(&["example.com/ns"], &[])
            .decide(&p);
        assert_eq!(d.outcome, denied(OverrideProblem::Absent));
    }

    #[test]
    fn builtin_controllers_remove_their_own_finalizers() {
        let p = contract_policy();
        let gc = "system:serviceaccount:kube-system:generic-garbage-collector";
        let d = pod_update(gc)
            .removing(&["foregroundDeletion", "orphan"], &[])
            .decide(&p);
        assert_eq!(d.outcome, Outcome::Authorized);
        assert_eq!(
            d.removed[0].authorized_by,
            Some(Authority::Builtin("garbage-collector"))
        );

        let kcm = pod_update("system:kube-controller-manager")
            .removing(&["kubernetes.io/pvc-protection"], &[])
            .decide(&p);
        assert_eq!(kcm.outcome, Outcome::Authorized);

        let not_its_own = pod_update(gc)
            .removing(&["example.com/cleanup"], &[])
            .decide(&p);
        assert_eq!(not_its_own.outcome, denied(OverrideProblem::Absent));
    }

    #[test]
    fn builtin_identities_act_as_their_controller_only() {
        let p = policy(
            "builtinIdentities:\n  - controller: service\n    users: [\"eks:cloud-controller-manager\"]\n  - controller: kube-controller-manager\n    serviceAccounts: [\"kube-system:managed-kcm\"]\n",
        );
        let ccm = "eks:cloud-controller-manager";
        let d = pod_update(ccm)
            .removing(&["service.kubernetes.io/load-balancer-cleanup"], &[])
            .decide(&p);
        assert_eq!(
            d.removed[0].authorized_by,
            Some(Authority::Builtin("service"))
        );
        let d = pod_update(ccm).removing(&["orphan"], &[]).decide(&p);
        assert_eq!(d.outcome, denied(OverrideProblem::Absent));
        let d = pod_update("system:serviceaccount:kube-system:managed-kcm")
            .removing(&["orphan"], &[])
            .decide(&p);
        assert_eq!(
            d.removed[0].authorized_by,
            Some(Authority::Builtin("garbage-collector"))
        );
        // Not without the policy's word.
        let d = pod_update(ccm)
            .removing(&["service.kubernetes.io/load-balancer-cleanup"], &[])
            .decide(&contract_policy());
        assert_eq!(d.outcome, denied(OverrideProblem::Absent));
        let err = Policy::from_yaml("builtinIdentities:\n  - controller: nope\n    users: [x]\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("builtinIdentities[0].controller: \"nope\""),
            "{err}"
        );
    }

    #[test]
    fn builtin_controllers_can_be_switched_off() {
        let p = policy("builtinControllers: false\n");
        let d = pod_update("system:kube-controller-manager")
            .removing(&["orphan"], &[])
            .decide(&p);
        assert_eq!(d.outcome, denied(OverrideProblem::Absent));
    }

    #[test]
    fn namespace_finalize_guards_spec_finalizers() {
        let p = contract_policy();
        let stuck = |user: &str, sub: &str| {
            pod_update(user)
                .resource("", "namespaces", sub)
                .namespace(Some("stuck"))
                .spec(&["kubernetes"], &[])
                .decide(&p)
        };
        let d = stuck("admin", "finalize");
        assert_eq!(d.outcome, denied(OverrideProblem::Absent));
        assert_eq!(d.removed[0].field, FinalizerField::Spec);

        let controller = stuck(
            "system:serviceaccount:kube-system:namespace-controller",
            "finalize",
        );
        assert_eq!(controller.outcome, Outcome::Authorized);

        // Outside the finalize subresource the apiserver ignores spec.finalizers.
        assert_eq!(stuck("admin", "").outcome, Outcome::NothingRemoved);
        assert_eq!(stuck("admin", "status").outcome, Outcome::NothingRemoved);
    }

    #[test]
    fn overrides() {
        let p = contract_policy();
        let strip = pod_update("oncall").removing(&["example.com/cleanup"], &[]);
        let valid = strip
            .clone()
            .with_override("node-lost: INC-4711 server-1 powered off")
            .decide(&p);
        assert_eq!(
            valid.outcome,
            Outcome::Override(Override {
                reason: "node-lost".into(),
                detail: "INC-4711 server-1 powered off".into()
            })
        );
        assert!(valid.allowed());

        let cases = [
            ("node-lost", OverrideProblem::Malformed),
            ("node-lost:", OverrideProblem::EmptyDetail),
            (
                "bored: x",
                OverrideProblem::UnapprovedReason("bored".into()),
            ),
        ];
        for (value, problem) in cases {
            assert_eq!(
                strip.clone().with_override(value).decide(&p).outcome,
                denied(problem),
                "{value}"
            );
        }

        let other_key = strip
            .clone()
            .annotate("finalizer-guard.io/overide", "node-lost: x")
            .decide(&p);
        assert_eq!(other_key.outcome, denied(OverrideProblem::Absent));
    }

    #[test]
    fn an_override_releases_only_an_object_being_deleted() {
        let p = contract_policy();
        let live = pod_update("oncall")
            .removing(&["example.com/cleanup"], &[])
            .with_override("node-lost: INC-4711 server-1 powered off")
            .live();
        // An override forgotten on a live object authorizes nothing later.
        assert_eq!(
            live.decide(&p).outcome,
            denied(OverrideProblem::NotDeleting)
        );
        // Rules still apply to live objects.
        let alice = pod_update("alice")
            .removing(&["example.com/cleanup"], &[])
            .live();
        assert_eq!(alice.decide(&p).outcome, Outcome::Authorized);
        // The policy may lift the rule.
        let lifted = policy("override:\n  requireDeletion: false\n");
        assert!(matches!(live.decide(&lifted).outcome, Outcome::Override(_)));
    }

    #[test]
    fn override_is_not_consulted_when_everything_is_authorized() {
        let p = contract_policy();
        let d = pod_update("alice")
            .removing(&["example.com/cleanup"], &[])
            .with_override("bogus")
            .decide(&p);
        assert_eq!(d.outcome, Outcome::Authorized);
    }

    #[test]
    fn custom_override_annotation_and_reasons() {
        let p = policy("override:\n  annotation: example.com/break-glass\n  reasons: [drill]\n");
        let strip = pod_update("oncall").removing(&["x"], &[]);
        assert!(matches!(
            strip
                .clone()
                .annotate("example.com/break-glass", "drill: game day")
                .decide(&p)
                .outcome,
            Outcome::Override(_)
        ));
        assert_eq!(
            strip.with_override("node-lost: x").decide(&p).outcome,
            denied(OverrideProblem::Absent)
        );
    }

    #[test]
    fn warn_mode_allows_what_it_would_deny() {
        let p = policy("mode: warn\n");
        let d = pod_update("mallory").removing(&["x"], &[]).decide(&p);
        assert_eq!(
            d.outcome,
            Outcome::Denied {
                problem: OverrideProblem::Absent,
                enforced: false
            }
        );
        assert!(d.allowed());
        assert_eq!(d.verdict(), crate::policy::decision::Verdict::WouldDeny);
    }

    mod per_finalizer {
        use super::*;
        use crate::policy::overrides::Refusal;

        const POLICY: &str = r#"
rules:
  - name: cleanup
    finalizers: ["example.com/cleanup"]
    users: ["alice"]
override:
  finalizers:
    - finalizers: ["kubernetes.io/pvc-protection", "kubernetes.io/pv-protection"]
      reasons: [node-lost]
    - finalizers: ["vault.example.com/*"]
      never: true
"#;

        fn strip(names: &[&str], value: &str) -> Decision {
            pod_update("oncall")
                .removing(names, &[])
                .with_override(value)
                .decide(&policy(POLICY))
        }

        fn refused(finalizer: &str, accepted: &[&str], entry: usize) -> Refusal {
            Refusal {
                finalizer: finalizer.into(),
                accepted: accepted.iter().map(|s| s.to_string()).collect(),
                entry: format!("override.finalizers[{entry}]"),
            }
        }

        #[test]
        fn a_finalizer_takes_only_its_reasons() {
            let pvc = "kubernetes.io/pvc-protection";
            assert!(matches!(
                strip(&[pvc], "node-lost: INC-1 worker-3 gone").outcome,
                Outcome::Override(_)
            ));
            let d = strip(&[pvc], "controller-unavailable: INC-1 kcm down");
            assert_eq!(
                d.outcome,
                denied(OverrideProblem::NotAccepted(vec![refused(
                    pvc,
                    &["node-lost"],
                    0
                )]))
            );
            let message = pod_update("oncall")
                .removing(&[pvc], &[])
                .with_override("controller-unavailable: INC-1 kcm down")
                .with_change(|c| crate::policy::message::denial(c, &d, &policy(POLICY)));
            assert!(
                message.contains(
                    "is not valid: \"kubernetes.io/pvc-protection\" accepts only node-lost (override.finalizers[0])"
                ),
                "{message}"
            );
            assert!(message.contains("REASON one of: node-lost."), "{message}");
        }

        #[test]
        fn finalizers_no_entry_matches_take_every_reason() {
            for reason in crate::policy::config::DEFAULT_OVERRIDE_REASONS {
                let d = strip(&["example.com/other"], &format!("{reason}: INC-1"));
                assert!(matches!(d.outcome, Outcome::Override(_)), "{reason}");
            }
        }

        #[test]
        fn never_is_released_only_by_its_rule_or_controller() {
            let vault = "vault.example.com/lease";
            for reason in crate::policy::config::DEFAULT_OVERRIDE_REASONS {
                let d = strip(&[vault], &format!("{reason}: INC-1"));
                assert_eq!(
                    d.outcome,
                    denied(OverrideProblem::NotAccepted(vec![refused(vault, &[], 1)])),
                    "{reason}"
                );
            }
            let message = pod_update("oncall")
                .removing(&[vault], &[])
                .with_change(|c| {
                    let d = decide(c, &policy(POLICY));
                    crate::policy::message::denial(c, &d, &policy(POLICY))
                });
            assert!(
                message.ends_with(
                    "no override releases \"vault.example.com/lease\": only its rule or controller (override.finalizers[1]). No override releases it: only its rule or controller."
                ),
                "{message}"
            );
        }

        #[test]
        fn every_removed_finalizer_must_accept_the_override() {
            // One accepts node-lost, the other does not: the whole write is denied.
            let d = strip(
                &["example.com/other", "vault.example.com/lease"],
                "node-lost: INC-1",
            );
            assert_eq!(
                d.outcome,
                denied(OverrideProblem::NotAccepted(vec![refused(
                    "vault.example.com/lease",
                    &[],
                    1
                )]))
            );
            let d = strip(
                &["kubernetes.io/pvc-protection", "example.com/other"],
                "controller-uninstalled: INC-1",
            );
            assert!(
                matches!(&d.outcome, Outcome::Denied { problem: OverrideProblem::NotAccepted(r), .. } if r.len() == 1),
                "{:?}",
                d.outcome
            );
            // What a rule authorizes needs no override: only the rest is judged.
            let d = pod_update("alice")
                .removing(
                    &["example.com/cleanup", "kubernetes.io/pvc-protection"],
                    &[],
                )
                .with_override("node-lost: INC-1")
                .decide(&policy(POLICY));
            assert!(matches!(d.outcome, Outcome::Override(_)), "{:?}", d.outcome);
        }

        #[test]
        fn names_match_exactly() {
            // Another case or trailing space is another finalizer, which no
            // controller and no entry knows: it takes every reason, and the
            // real one keeps its own.
            for name in [
                "Kubernetes.io/pvc-protection",
                "kubernetes.io/pvc-protection ",
                "kubernetes.io/pvc-protection2",
            ] {
                let d = strip(&[name], "controller-unavailable: INC-1");
                assert!(matches!(d.outcome, Outcome::Override(_)), "{name:?}");
            }
            let d = strip(
                &[
                    "kubernetes.io/pvc-protection",
                    "Kubernetes.io/pvc-protection",
                ],
                "controller-unavailable: INC-1",
            );
            assert!(!d.allowed());
        }

        #[test]
        fn the_builtin_controller_still_removes_a_never_finalizer() {
            let p = policy(
                "override:\n  finalizers:\n    - finalizers: [\"kubernetes.io/*\", orphan, foregroundDeletion]\n      never: true\n",
            );
            let d = pod_update("system:serviceaccount:kube-system:pvc-protection-controller")
                .removing(&["kubernetes.io/pvc-protection"], &[])
                .decide(&p);
            assert_eq!(d.outcome, Outcome::Authorized);
            let d = pod_update("oncall")
                .removing(&["kubernetes.io/pvc-protection"], &[])
                .with_override("node-lost: x")
                .decide(&p);
            assert!(!d.allowed());
        }

        #[test]
        fn warn_mode_would_deny_naming_the_finalizer() {
            let p = policy(&format!("mode: warn\n{POLICY}"));
            let c = pod_update("oncall")
                .removing(&["vault.example.com/lease"], &[])
                .with_override("node-lost: INC-1");
            let d = c.decide(&p);
            assert_eq!(d.verdict(), crate::policy::decision::Verdict::WouldDeny);
            let warning = c
                .with_change(|change| crate::policy::message::would_deny_warning(change, &d))
                .unwrap();
            assert!(
                warning.contains("no override releases \"vault.example.com/lease\""),
                "{warning}"
            );
        }
    }

    mod two_person {
        use super::*;
        use crate::policy::approval::{APPROVED_BY, ApprovalProblem, OVERRIDE_EXPIRES};
        use crate::policy::seal::{APPROVAL_SEAL, SealKey, Sealed};

        const OVERRIDE: &str = "finalizer-guard.io/override";
        const TWO_PERSON: &str = "override:\n  approval:\n    users: [sec-lead]\n    groups: [security]\n    maxAge: 2h\n";

        fn policy() -> Policy {
            super::policy(TWO_PERSON)
        }

        /// `annotations` with the seal the test key gives them on `uid` under `p`.
        fn sealed_under(
            p: &Policy,
            uid: &str,
            mut annotations: BTreeMap<String, String>,
        ) -> BTreeMap<String, String> {
            let seal = SealKey::derive(b"test key").seal(
                &Sealed {
                    uid,
                    value: &annotations[OVERRIDE],
                    approved_by: &annotations[APPROVED_BY],
                    expires: &annotations[OVERRIDE_EXPIRES],
                },
                p.mode,
                &p.override_settings,
                p.override_settings.approval.as_ref().unwrap(),
            );
            annotations.insert(APPROVAL_SEAL.into(), seal);
            annotations
        }

        /// An approval as the webhook admitted it: sealed for the test pod.
        fn sealed(by: &str, expires: &str) -> BTreeMap<String, String> {
            sealed_under(&policy(), "uid-1", approval(by, expires))
        }

        /// The three annotations an approver writes; `now` is 08:00.
        fn approval(by: &str, expires: &str) -> BTreeMap<String, String> {
            [
                (OVERRIDE, "node-lost: INC-4711 worker-3 powered off"),
                (APPROVED_BY, by),
                (OVERRIDE_EXPIRES, expires),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
        }

        /// An approver (or not) annotating a pod, finalizers untouched.
        fn annotate(user: &str, groups: &[&str], annotations: BTreeMap<String, String>) -> Case {
            let mut c = pod_update(user)
                .groups(groups)
                .removing(&["example.com/cleanup"], &["example.com/cleanup"]);
            c.annotations = annotations;
            c
        }

        /// Someone stripping the finalizer of a pod already carrying `old` annotations.
        fn strip(user: &str, old: BTreeMap<String, String>) -> Case {
            let mut c = pod_update(user).removing(&["example.com/cleanup"], &[]);
            c.annotations = old.clone();
            c.old_annotations = old;
            c
        }

        fn refused(problem: ApprovalProblem) -> Outcome {
            Outcome::ApprovalRefused {
                problem,
                enforced: true,
            }
        }

        #[test]
        fn an_approver_writes_an_approval() {
            // Without the seal: refused, and the approver is told the seal.
            let unsealed = approval("sec-lead", "2026-11-21T09:30:00Z");
            let d = annotate("sec-lead", &[], unsealed).decide(&policy());
            let Outcome::ApprovalRefused {
                problem: ApprovalProblem::Unsealed { seal },
                enforced: true,
            } = &d.outcome
            else {
                panic!("{:?}", d.outcome)
            };
            let with_seal = sealed("sec-lead", "2026-11-21T09:30:00Z");
            assert_eq!(seal, &with_seal[APPROVAL_SEAL]);
            // With it: recorded.
            let d = annotate("sec-lead", &[], with_seal).decide(&policy());
            assert_eq!(d.outcome, Outcome::ApprovalRecorded);
            assert!(d.allowed() && d.audited());
            let by_group = annotate(
                "carol",
                &["security"],
                sealed("carol", "2026-11-21T10:00:00Z"),
            )
            .decide(&policy());
            assert_eq!(by_group.outcome, Outcome::ApprovalRecorded);
            // Another object's seal is not this one's.
            let other = sealed_under(
                &policy(),
                "uid-2",
                approval("sec-lead", "2026-11-21T09:30:00Z"),
            );
            let d = annotate("sec-lead", &[], other).decide(&policy());
            assert!(
                matches!(
                    d.outcome,
                    Outcome::ApprovalRefused {
                        problem: ApprovalProblem::Unsealed { .. },
                        ..
                    }
                ),
                "{:?}",
                d.outcome
            );
        }

        #[test]
        fn no_seal_is_ever_told_to_someone_who_is_not_an_approver() {
            for user in [
                "mallory",
                "system:serviceaccount:kube-system:job-controller",
            ] {
                let d = annotate(user, &[], approval("sec-lead", "2026-11-21T09:00:00Z"))
                    .decide(&policy());
                assert_eq!(d.outcome, refused(ApprovalProblem::NotAnApprover), "{user}");
            }
        }

        #[test]
        fn approval_writes_are_guarded() {
            let p = policy();
            let cases = [
                (
                    "mallory",
                    approval("mallory", "2026-11-21T09:00:00Z"),
                    refused(ApprovalProblem::NotAnApprover),
                ),
                (
                    "mallory",
                    approval("sec-lead", "2026-11-21T09:00:00Z"),
                    refused(ApprovalProblem::NotAnApprover),
                ),
                (
                    "sec-lead",
                    approval("carol", "2026-11-21T09:00:00Z"),
                    refused(ApprovalProblem::SignedForSomeoneElse("carol".into())),
                ),
                (
                    "sec-lead",
                    approval("sec-lead", "2026-11-21T10:00:01Z"),
                    refused(ApprovalProblem::BeyondMaxAge {
                        expires: "2026-11-21T10:00:01Z".into(),
                        max_age: "2h".into(),
                    }),
                ),
                (
                    "sec-lead",
                    approval("sec-lead", "2026-11-21T07:59:59Z"),
                    refused(ApprovalProblem::AlreadyExpired(
                        "2026-11-21T07:59:59Z".into(),
                    )),
                ),
                (
                    "sec-lead",
                    approval("sec-lead", "tomorrow"),
                    refused(ApprovalProblem::BadExpiry("tomorrow".into())),
                ),
            ];
            for (user, annotations, want) in cases {
                assert_eq!(
                    annotate(user, &[], annotations.clone()).decide(&p).outcome,
                    want,
                    "{user} {annotations:?}"
                );
            }
            let mut incomplete = approval("sec-lead", "2026-11-21T09:00:00Z");
            incomplete.remove(OVERRIDE_EXPIRES);
            assert_eq!(
                annotate("sec-lead", &[], incomplete).decide(&p).outcome,
                refused(ApprovalProblem::Incomplete(OVERRIDE_EXPIRES))
            );
            // A CREATE carrying an approval is a write too.
            let create = annotate("mallory", &[], approval("mallory", "2026-11-21T09:00:00Z"))
                .operation(Operation::Create);
            assert_eq!(
                create.decide(&p).outcome,
                refused(ApprovalProblem::NotAnApprover)
            );
            // Removing an approval is anyone's right.
            let mut withdraw = annotate("mallory", &[], BTreeMap::new());
            withdraw.old_annotations = approval("sec-lead", "2026-11-21T09:00:00Z");
            assert_eq!(withdraw.decide(&p).outcome, Outcome::NothingRemoved);
        }

        #[test]
        fn another_person_removes_while_the_approval_is_valid() {
            let d = strip("oncall", sealed("sec-lead", "2026-11-21T09:00:00Z")).decide(&policy());
            assert!(
                matches!(d.outcome, Outcome::Override(ref o) if o.reason == "node-lost"),
                "{d:?}"
            );
        }

        #[test]
        fn an_approval_the_webhook_did_not_seal_releases_nothing() {
            // Copied from a template a controller copies (a Job's pod
            // template), expiry in 2999: no seal, and beyond maxAge.
            let forged = approval("sec-lead", "2999-01-01T00:00:00Z");
            let d = strip("mallory", forged).decide(&policy());
            assert_eq!(
                d.outcome,
                denied(OverrideProblem::BeyondMaxAge {
                    expires: "2999-01-01T00:00:00Z".into(),
                    max_age: "2h".into()
                })
            );
            // Within maxAge but unsealed.
            let d =
                strip("mallory", approval("sec-lead", "2026-11-21T09:00:00Z")).decide(&policy());
            assert_eq!(d.outcome, denied(OverrideProblem::NotSealed));
            // A seal forged by hand, or copied from another object.
            let mut bogus = approval("sec-lead", "2026-11-21T09:00:00Z");
            bogus.insert(APPROVAL_SEAL.into(), "v1.AAAA".into());
            assert_eq!(
                strip("mallory", bogus).decide(&policy()).outcome,
                denied(OverrideProblem::NotSealed)
            );
            let elsewhere = sealed_under(
                &policy(),
                "uid-of-another-pod",
                approval("sec-lead", "2026-11-21T09:00:00Z"),
            );
            assert_eq!(
                strip("mallory", elsewhere).decide(&policy()).outcome,
                denied(OverrideProblem::NotSealed)
            );
            // A new object that took the name: another uid.
            let mut recreated = strip("mallory", sealed("sec-lead", "2026-11-21T09:00:00Z"));
            recreated.uid = Some("uid-9".into());
            assert_eq!(
                recreated.decide(&policy()).outcome,
                denied(OverrideProblem::NotSealed)
            );
        }

        #[test]
        fn approvals_from_before_enforce_or_another_approval_policy_do_not_count() {
            let warn = super::policy(&format!("mode: warn\n{TWO_PERSON}"));
            let in_warn =
                sealed_under(&warn, "uid-1", approval("sec-lead", "2026-11-21T09:00:00Z"));
            // Sealed in warn mode: good there, nothing once enforced.
            assert!(matches!(
                strip("oncall", in_warn.clone()).decide(&warn).outcome,
                Outcome::Override(_)
            ));
            assert_eq!(
                strip("oncall", in_warn).decide(&policy()).outcome,
                denied(OverrideProblem::NotSealed)
            );
            // Approvers or maxAge changed since.
            let wider = super::policy(
                "override:\n  approval:\n    users: [sec-lead, eve]\n    groups: [security]\n    maxAge: 2h\n",
            );
            assert_eq!(
                strip("oncall", sealed("sec-lead", "2026-11-21T09:00:00Z"))
                    .decide(&wider)
                    .outcome,
                denied(OverrideProblem::NotSealed)
            );
        }

        #[test]
        fn without_the_key_an_approval_is_unverifiable() {
            let mut c = strip("oncall", sealed("sec-lead", "2026-11-21T09:00:00Z"));
            c.seal_key = None;
            assert_eq!(
                c.decide(&policy()).outcome,
                denied(OverrideProblem::Unverifiable)
            );
            let mut w = annotate(
                "sec-lead",
                &[],
                approval("sec-lead", "2026-11-21T09:30:00Z"),
            );
            w.seal_key = None;
            assert_eq!(
                w.decide(&policy()).outcome,
                refused(ApprovalProblem::NoSealKey)
            );
        }

        #[test]
        fn max_age_holds_at_use_time_too() {
            // An approval for 2h, used at 08:00 under a policy now saying 1h.
            let shorter = super::policy(
                "override:\n  approval:\n    users: [sec-lead]\n    groups: [security]\n    maxAge: 1h\n",
            );
            let annotations = sealed_under(
                &shorter,
                "uid-1",
                approval("sec-lead", "2026-11-21T09:30:00Z"),
            );
            assert_eq!(
                strip("oncall", annotations).decide(&shorter).outcome,
                denied(OverrideProblem::BeyondMaxAge {
                    expires: "2026-11-21T09:30:00Z".into(),
                    max_age: "1h".into()
                })
            );
        }

        #[test]
        fn the_seal_is_part_of_the_approval() {
            // Changing or adding only the seal is an approval write.
            let mut c = strip("mallory", sealed("sec-lead", "2026-11-21T09:00:00Z"));
            c.annotations
                .insert(APPROVAL_SEAL.into(), "v1.other".into());
            assert_eq!(
                c.decide(&policy()).outcome,
                refused(ApprovalProblem::NotAnApprover)
            );
        }

        #[test]
        fn an_approval_releases_only_the_finalizers_that_accept_its_reason() {
            let p = super::policy(
                "override:\n  approval:\n    users: [sec-lead]\n    groups: [security]\n    maxAge: 2h\n  finalizers:\n    - finalizers: [example.com/cleanup]\n      reasons: [controller-uninstalled]\n      approval: required\n    - finalizers: [\"vault.io/*\"]\n      never: true\n",
            );
            // A node-lost approval, sealed under this very policy.
            let approved = sealed_under(&p, "uid-1", approval("sec-lead", "2026-11-21T09:00:00Z"));
            let d = strip("oncall", approved.clone()).decide(&p);
            assert!(
                matches!(&d.outcome, Outcome::Denied { problem: OverrideProblem::NotAccepted(r), .. } if r[0].finalizer == "example.com/cleanup"),
                "{:?}",
                d.outcome
            );
            // The same approval, reused for another finalizer of the object:
            // each removed finalizer is judged by its own entry.
            let mut other = strip("oncall", approved.clone());
            other.old = strings(&["example.com/other", "vault.io/lease"]);
            other.new = strings(&[]);
            let d = other.decide(&p);
            assert!(
                matches!(&d.outcome, Outcome::Denied { problem: OverrideProblem::NotAccepted(r), .. } if r.len() == 1 && r[0].finalizer == "vault.io/lease"),
                "{:?}",
                d.outcome
            );
            other.old = strings(&["example.com/other"]);
            assert!(matches!(other.decide(&p).outcome, Outcome::Override(_)));
        }

        #[test]
        fn the_approver_cannot_use_their_own_approval() {
            let d = strip("sec-lead", sealed("sec-lead", "2026-11-21T09:00:00Z")).decide(&policy());
            assert_eq!(
                d.outcome,
                denied(OverrideProblem::SelfApproved("sec-lead".into()))
            );
        }

        #[test]
        fn an_expired_approval_is_denied() {
            let mut c = strip("oncall", sealed("sec-lead", "2026-11-21T09:00:00Z"));
            c.now = "2026-11-21T09:00:00Z".parse().unwrap();
            assert_eq!(
                c.decide(&policy()).outcome,
                denied(OverrideProblem::Expired("2026-11-21T09:00:00Z".into()))
            );
        }

        #[test]
        fn a_one_shot_annotate_and_strip_is_denied() {
            let p = policy();
            // By a non-approver: the write itself is refused.
            let mut c = strip("mallory", BTreeMap::new());
            c.annotations = approval("mallory", "2026-11-21T09:00:00Z");
            assert_eq!(
                c.decide(&p).outcome,
                refused(ApprovalProblem::NotAnApprover)
            );
            // By an approver: the approval is fine, but it was not there before.
            let mut c = strip("sec-lead", BTreeMap::new());
            c.annotations = sealed("sec-lead", "2026-11-21T09:00:00Z");
            assert_eq!(
                c.decide(&p).outcome,
                denied(OverrideProblem::NotApprovedEarlier)
            );
            // The single-person annotation alone is a guarded write, not an override.
            let mut c = strip("oncall", BTreeMap::new());
            c.annotations.insert(OVERRIDE.into(), "node-lost: x".into());
            let d = c.decide(&p);
            assert_eq!(d.outcome, refused(ApprovalProblem::NotAnApprover));
            // The removal that came with the refused write stays on record,
            // unauthorized: in warn mode it is allowed, audited and counted.
            let names: Vec<&str> = d.removed.iter().map(|r| r.finalizer.as_str()).collect();
            assert_eq!(names, ["example.com/cleanup"]);
            assert_eq!(d.unauthorized().count(), 1);
            let warn = super::policy(
                "mode: warn\noverride:\n  approval:\n    users: [sec-lead]\n    maxAge: 2h\n",
            );
            let d = c.decide(&warn);
            assert!(d.allowed() && d.audited());
            assert_eq!(d.unauthorized().count(), 1);
        }

        #[test]
        fn an_approval_on_a_live_object_releases_nothing() {
            let d = strip("oncall", sealed("sec-lead", "2026-11-21T09:00:00Z"))
                .live()
                .decide(&policy());
            assert_eq!(d.outcome, denied(OverrideProblem::NotDeleting));
        }

        #[test]
        fn changing_the_approval_while_stripping_is_denied() {
            let mut c = strip("oncall", sealed("sec-lead", "2026-11-21T09:00:00Z"));
            c.annotations
                .insert(OVERRIDE_EXPIRES.into(), "2026-11-21T09:30:00Z".into());
            // The extension is a write by a non-approver: refused before anything else.
            assert_eq!(
                c.decide(&policy()).outcome,
                refused(ApprovalProblem::NotAnApprover)
            );
        }
    }
}
