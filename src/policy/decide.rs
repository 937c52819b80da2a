//! The decision rules (CONTRACT.md, "Decision"), in order.

use std::collections::HashSet;

use super::config::{Mode, Policy, Rule};
use super::{
    Authority, Change, Decision, FinalizerField, FinalizerLists, Operation, Outcome, Removal,
    Requester, Target, builtin, overrides,
};

/// Decides one change under a policy.
pub fn decide(change: &Change<'_>, policy: &Policy) -> Decision {
    // 1. Only UPDATE is judged.
    if change.operation != Operation::Update {
        return Decision {
            outcome: Outcome::NotJudged,
            removed: Vec::new(),
        };
    }

    // 2. What is removed: metadata.finalizers, and spec.finalizers through namespaces/finalize.
    let mut removed = Vec::new();
    push_removed(
        &mut removed,
        change.metadata_finalizers,
        FinalizerField::Metadata,
    );
    if change.target.is_namespace_finalize() {
        push_removed(&mut removed, change.spec_finalizers, FinalizerField::Spec);
    }

    // 3. Nothing removed: allowed silently.
    if removed.is_empty() {
        return Decision {
            outcome: Outcome::NothingRemoved,
            removed,
        };
    }

    // 4. Each removal authorized by a rule or a built-in controller.
    for removal in &mut removed {
        removal.authorized_by = authority(change, policy, &removal.finalizer, removal.field);
    }
    if removed.iter().all(|r| r.authorized_by.is_some()) {
        return Decision {
            outcome: Outcome::Authorized,
            removed,
        };
    }

    // 5. Otherwise an override on the object as it will be stored.
    let settings = &policy.override_settings;
    let parsed = match change.annotations.get(&settings.annotation) {
        None => Err(super::OverrideProblem::Absent),
        Some(value) => overrides::parse(value, &settings.reasons),
    };
    let outcome = match parsed {
        Ok(valid) => Outcome::Override(valid),
        // 6. Otherwise denied (or, in warn mode, allowed with a warning).
        Err(problem) => Outcome::Denied {
            problem,
            enforced: policy.mode == Mode::Enforce,
        },
    };
    Decision { outcome, removed }
}

/// Appends the names in `lists.old` that are absent from `lists.new`, once each.
fn push_removed(out: &mut Vec<Removal>, lists: FinalizerLists<'_>, field: FinalizerField) {
    let FinalizerLists { old, new } = lists;
    if old.is_empty() {
        return;
    }
    // Finalizer lists are short; a set only pays off for long ones.
    let kept: Option<HashSet<&str>> =
        (new.len() > 32).then(|| new.iter().map(String::as_str).collect());
    let is_kept = |name: &str| match &kept {
        Some(set) => set.contains(name),
        None => new.iter().any(|n| n == name),
    };
    let first = out.len();
    for name in old {
        if !is_kept(name) && !out[first..].iter().any(|r| &r.finalizer == name) {
            out.push(Removal {
                finalizer: name.clone(),
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
        && let Some(controller) = builtin::owner(change.requester.username, finalizer, field)
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
    let finalizer_ok = rule.finalizers.iter().any(|p| p.matches(finalizer));
    let requester_ok = rule.users.iter().any(|u| u == requester.username)
        || rule
            .service_accounts
            .iter()
            .any(|sa| sa == requester.username)
        || rule.groups.iter().any(|g| requester.groups.contains(g));
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
    finalizer_ok && requester_ok && namespace_ok && resource_ok
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::policy::{Override, OverrideProblem};

    /// An owned change, built fluently, lent to [`decide`].
    #[derive(Clone)]
    struct Case {
        operation: Operation,
        group: String,
        resource: String,
        subresource: String,
        namespace: Option<String>,
        username: String,
        groups: Vec<String>,
        old: Vec<String>,
        new: Vec<String>,
        spec_old: Vec<String>,
        spec_new: Vec<String>,
        annotations: BTreeMap<String, String>,
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
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
        fn with_override(self, value: &str) -> Self {
            self.annotate("finalizer-guard.io/override", value)
        }
        fn decide(&self, policy: &Policy) -> Decision {
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
            };
            decide(&change, policy)
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
            assert!(d.allowed() && !d.judged_removal());
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
        let old: Vec<String> = (0..1024).map(|i| format!("example.com/f{i}")).collect();
        let new: Vec<String> = old.iter().filter(|f| !f.ends_with('7')).cloned().collect();
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
        assert_eq!(d.label(), "would-deny");
    }
}
