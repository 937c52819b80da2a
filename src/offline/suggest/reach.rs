//! How far a rule reaches: every namespace, or those it was seen in
//! ([`reach`]); and which rule of `--merge` may be widened instead of
//! repeated ([`widenable`], [`not_widened`]).

use std::collections::BTreeSet;

use super::bindings::Bindings;
use super::evidence::{Seen, object_namespace, resource_name};
use super::identities::Identity;
use super::yaml::{writable, writable_resource};
use crate::policy::Policy;
use crate::policy::config::{FinalizerPattern, Rule};

/// The index of the rule of `policy` that would let `seen`'s requester
/// remove `finalizer` there, were it not scoped to other namespaces: one
/// that names this identity alone (no groups), `finalizer`, and the
/// resource; of several, the first that names its resources (a namespace
/// added to it allows no other resource there). A preset's rules are never
/// widened, and [`not_widened`] says whether the rule found may be.
pub(super) fn widenable(policy: &Policy, seen: &Seen, finalizer: &str) -> Option<usize> {
    let namespace = object_namespace(seen)?;
    if !writable(&namespace) || !writable_resource(&resource_name(seen)) {
        return None;
    }
    let candidates = policy.rules.iter().enumerate().filter(|(_, rule)| {
        let named: Vec<&String> = rule.users.iter().chain(&rule.service_accounts).collect();
        !rule.label.starts_with("preset:")
            && rule.groups.is_empty()
            && named == [&seen.username]
            && rule.finalizers.iter().any(|p| p.matches(finalizer))
            && rule.resources.as_ref().is_none_or(|resources| {
                resources
                    .iter()
                    .any(|r| r.matches(&seen.group, &seen.resource))
            })
            && rule
                .namespaces
                .as_ref()
                .is_some_and(|ns| !ns.contains(&namespace))
    });
    candidates
        .min_by_key(|(i, rule)| (rule.resources.is_none(), *i))
        .map(|(i, _)| i)
}

/// Why `rule` (what [`widenable`] found for `seen`) is not widened, if it
/// is not. Widening reaches no further than the evidence shows: the rule
/// must name its finalizers exactly (no `*`, no prefix), and already treat
/// its identity as a controller of several namespaces (a ServiceAccount's
/// rule reaching a namespace other than its own; another identity's, two
/// or more), or `--bindings` must show a ClusterRoleBinding letting the
/// ServiceAccount update the resource everywhere. Otherwise removals
/// elsewhere are what a tenant can produce.
pub(super) fn not_widened(
    rule: &Rule,
    identity: &Identity,
    seen: &Seen,
    bindings: &Bindings,
) -> Option<String> {
    let mut why = Vec::new();
    let namespaces: &[String] = rule.namespaces.as_deref().unwrap_or_default();
    let (own, bound) = match identity {
        Identity::ServiceAccount(sa) => (
            sa.split_once(':').map(|(ns, _)| ns),
            bindings.cluster_wide(sa, &resource_name(seen)),
        ),
        _ => (None, None),
    };
    let beyond = match own {
        Some(own) => namespaces.iter().any(|ns| ns != own),
        None => namespaces.len() >= 2,
    };
    let elsewhere = if seen.denied {
        "denials"
    } else {
        "would-deny removals"
    };
    if !beyond && bound.is_none() {
        let name = match identity {
            Identity::ServiceAccount(sa) => sa.clone(),
            other => other.username().into_owned(),
        };
        let only = match own {
            Some(_) => "in its own namespace only".to_string(),
            None => format!(
                "in {} only",
                namespace_list(namespaces.iter().map(String::as_str))
            ),
        };
        why.push(format!(
            "rule \"{}\" names {name} {only}; {elsewhere} elsewhere are what a tenant can produce: widen it by hand if it is a controller",
            rule.label
        ));
    }
    let patterns: Vec<String> = rule
        .finalizers
        .iter()
        .filter(|p| matches!(p, FinalizerPattern::Prefix(_)))
        .map(ToString::to_string)
        .collect();
    if !patterns.is_empty() {
        why.push(format!(
            "rule \"{}\" names finalizers by pattern ({}): widening it would allow more than the evidence shows",
            rule.label,
            patterns.join(", ")
        ));
    }
    (!why.is_empty()).then(|| format!("not widened: {}", why.join("; ")))
}

/// How far a suggested rule reaches, and why: what its comment says.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reach {
    /// Objects of cluster-scoped resources: no `namespaces`.
    ClusterScoped,
    /// Every namespace (no `namespaces`), and why.
    ClusterWide(String),
    /// These namespaces alone, and why.
    Namespaces(BTreeSet<String>, String),
}

impl Reach {
    /// The comment above the rule (unescaped).
    pub fn why(&self) -> &str {
        match self {
            Reach::ClusterScoped => "cluster-scoped objects: no namespaces",
            Reach::ClusterWide(why) | Reach::Namespaces(_, why) => why,
        }
    }
}

/// Namespaces named in a comment: the first few, and how many more.
const NAMESPACES_NAMED: usize = 8;

pub(super) fn namespace_list<'a>(namespaces: impl IntoIterator<Item = &'a str>) -> String {
    let all: Vec<&str> = namespaces.into_iter().collect();
    let mut out = all
        .iter()
        .take(NAMESPACES_NAMED)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if all.len() > NAMESPACES_NAMED {
        out.push_str(&format!(" and {} more", all.len() - NAMESPACES_NAMED));
    }
    out
}

/// Whether a controller seen removing a finalizer in `seen_in` (namespaces
/// of namespaced objects) acts cluster-wide, and why. A controller's rule
/// must not break on the next namespace, nor reach where the evidence does
/// not take it:
/// - a ServiceAccount bound by a ClusterRoleBinding (`bound_by`) to a role
///   that may update the resource acts cluster-wide;
/// - so does one seen in two or more namespaces, or in a namespace other
///   than its own: it is no tenant's controller;
/// - a ServiceAccount seen only in its own namespace stays there;
/// - another identity of software (no namespace of its own) acts
///   cluster-wide when seen in two or more namespaces, and stays where it
///   was seen otherwise.
pub fn reach(identity: &Identity, seen_in: &BTreeSet<&str>, bound_by: Option<&str>) -> Reach {
    let own = match identity {
        Identity::ServiceAccount(sa) => sa.split_once(':').map(|(ns, _)| ns),
        _ => None,
    };
    if let (Some(_), Some(binding)) = (own, bound_by) {
        return Reach::ClusterWide(format!(
            "bound by ClusterRoleBinding {binding}: acts cluster-wide"
        ));
    }
    let named = namespace_list(seen_in.iter().copied());
    if seen_in.len() >= 2 {
        return Reach::ClusterWide(format!("seen in {named}: acts cluster-wide"));
    }
    let namespaces: BTreeSet<String> = seen_in.iter().map(|s| s.to_string()).collect();
    match own {
        Some(own) if seen_in.iter().any(|ns| *ns != own) => Reach::ClusterWide(format!(
            "seen in {named}, outside its own namespace {own}: acts cluster-wide"
        )),
        Some(own) => Reach::Namespaces(namespaces, format!("seen only in its own namespace {own}")),
        None => Reach::Namespaces(
            namespaces,
            format!(
                "seen only in {named} (no namespace of its own to tell a tenant's controller by)"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::{CONTROLLER, TENANT_BOT, evidence, removal};
    use super::super::render::render;
    use super::super::rules::{suggest, suggest_with};
    use super::*;

    #[test]
    fn how_far_a_rule_reaches_is_decided_from_the_evidence() {
        let sa = Identity::ServiceAccount("flux-system:source-controller".into());
        let system = Identity::SystemUser("system:kube-scheduler".into());
        let set = |items: &[&'static str]| items.iter().copied().collect::<BTreeSet<&str>>();
        let wide = |why: &str| Reach::ClusterWide(why.into());
        let only = |ns: &str, why: &str| Reach::Namespaces([ns.to_string()].into(), why.into());
        let table = [
            // Two namespaces: cluster-wide.
            (
                &sa,
                set(&["team-a", "team-b"]),
                None,
                wide("seen in team-a, team-b: acts cluster-wide"),
            ),
            // One, not its own: cluster-wide.
            (
                &sa,
                set(&["team-a"]),
                None,
                wide("seen in team-a, outside its own namespace flux-system: acts cluster-wide"),
            ),
            // Its own alone: there.
            (
                &sa,
                set(&["flux-system"]),
                None,
                only("flux-system", "seen only in its own namespace flux-system"),
            ),
            // Its own alone, but a ClusterRoleBinding: cluster-wide.
            (
                &sa,
                set(&["flux-system"]),
                Some("flux-source"),
                wide("bound by ClusterRoleBinding flux-source: acts cluster-wide"),
            ),
            // No namespace of its own: two namespaces, or where it was seen.
            (
                &system,
                set(&["team-a", "team-b"]),
                None,
                wide("seen in team-a, team-b: acts cluster-wide"),
            ),
            (
                &system,
                set(&["team-a"]),
                Some("ignored"),
                only(
                    "team-a",
                    "seen only in team-a (no namespace of its own to tell a tenant's controller by)",
                ),
            ),
        ];
        for (identity, seen_in, bound, want) in table {
            assert_eq!(
                reach(identity, &seen_in, bound),
                want,
                "{identity:?} {seen_in:?}"
            );
        }
        // A long list is cut in the comment.
        let many: Vec<String> = (0..20).map(|i| format!("ns-{i:02}")).collect();
        let many: BTreeSet<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            reach(&sa, &many, None).why(),
            "seen in ns-00, ns-01, ns-02, ns-03, ns-04, ns-05, ns-06, ns-07 and 12 more: acts cluster-wide"
        );
    }

    /// A rule naming a tenant's ServiceAccount in its own namespace, or its
    /// finalizers by pattern, is never widened: removals elsewhere are what
    /// a tenant can produce. It is when the rule already reaches beyond the
    /// ServiceAccount's own namespace, or a ClusterRoleBinding lets it
    /// update the resource everywhere.
    #[test]
    fn widening_reaches_no_further_than_the_evidence() {
        // The attack: a rule for every finalizer of team-a's bot in team-a,
        // and one denial in team-b.
        let text = include_str!("../../../tests/fixtures/suggest/attack/base3.yaml");
        let log = include_str!("../../../tests/fixtures/suggest/attack/e3.log");
        let lines: Vec<String> = log.lines().map(String::from).collect();
        let base = Policy::from_yaml(text).unwrap();
        let e = evidence(&lines);
        let s = suggest(&e.seen, Some(&base));
        assert!(s.widenings.is_empty(), "{s:?}");
        assert!(s.controllers.is_empty(), "{s:?}");
        let merged = render(&s, Some((text, &base)));
        assert_eq!(Policy::from_yaml(&merged).unwrap(), base, "{merged}");
        assert!(
            merged.contains("#   not widened: rule \"tenant-bot\" names team-a:tenant-bot in its own namespace only; denials elsewhere are what a tenant can produce: widen it by hand if it is a controller; rule \"tenant-bot\" names finalizers by pattern (*): widening it would allow more than the evidence shows\n"),
            "{merged}"
        );

        let exact = |namespaces: &str, finalizers: &str| {
            format!(
                "rules:\n  - name: bot\n    finalizers: {finalizers}\n    serviceAccounts: [\"team-a:tenant-bot\"]\n    namespaces: {namespaces}\n"
            )
        };
        let widened = |text: &str, bindings: Bindings, denied: bool| {
            let base = Policy::from_yaml(text).unwrap();
            let e = evidence(&[removal("1", TENANT_BOT, "team-b", "example.com/a", denied)]);
            let s = suggest_with(&e.seen, Some(&base), bindings);
            (s.widenings.len(), s.rules().len(), s.not_suggested)
        };
        for denied in [true, false] {
            // Exact names, but its own namespace alone: not widened.
            let (n, rules, notes) = widened(
                &exact("[team-a]", "[\"example.com/a\"]"),
                Bindings::default(),
                denied,
            );
            assert_eq!(n, 0, "{notes:?}");
            assert!(
                notes.iter().any(|n| n.starts_with(
                    "not widened: rule \"bot\" names team-a:tenant-bot in its own namespace only; "
                )),
                "{notes:?}"
            );
            // A would-deny makes a rule of its own, as without the policy;
            // a denial nothing.
            assert_eq!(rules, usize::from(!denied));
            // A prefix, beyond its own namespace: not widened either.
            let (n, _, notes) = widened(
                &exact("[team-a, team-c]", "[\"example.com/*\"]"),
                Bindings::default(),
                denied,
            );
            assert_eq!(n, 0, "{notes:?}");
            assert!(
                notes.iter().any(|n| n == "not widened: rule \"bot\" names finalizers by pattern (example.com/*): widening it would allow more than the evidence shows"),
                "{notes:?}"
            );
            // Exact names, and a namespace other than its own: widened.
            let (n, rules, notes) = widened(
                &exact("[team-a, team-c]", "[\"example.com/a\"]"),
                Bindings::default(),
                denied,
            );
            assert_eq!((n, rules), (1, 0), "{notes:?}");
            assert!(notes.is_empty(), "{notes:?}");
            // Its own namespace alone, but bound cluster-wide: widened.
            let rbac = Bindings::from_json(&json!({"kind": "List", "items": [
                {"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["patch"]}]},
                {"kind": "ClusterRoleBinding", "metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "r"},
                 "subjects": [{"kind": "ServiceAccount", "name": "tenant-bot", "namespace": "team-a"}]},
            ]}))
            .unwrap();
            let (n, rules, notes) =
                widened(&exact("[team-a]", "[\"example.com/a\"]"), rbac, denied);
            assert_eq!((n, rules), (1, 0), "{notes:?}");
        }
    }

    #[test]
    fn only_a_rule_for_the_controller_alone_is_widened() {
        // A rule naming a group too, or another identity: a rule of its own
        // instead. (A preset's rules reach every namespace, and a file's rule
        // cannot be named `preset:`.)
        for text in [
            "rules:\n  - name: shared\n    finalizers: [\"example.com/a\"]\n    serviceAccounts: [\"widgets:widget-controller\"]\n    groups: [\"oncall\"]\n    namespaces: [team-a]\n",
            "rules:\n  - name: pair\n    finalizers: [\"example.com/a\"]\n    serviceAccounts: [\"widgets:widget-controller\", \"other:thing\"]\n    namespaces: [team-a]\n",
        ] {
            let base = Policy::from_yaml(text).unwrap();
            // (Seen in warn mode: a denial makes no rule of its own.)
            let e = evidence(&[removal("1", CONTROLLER, "team-c", "example.com/a", false)]);
            let s = suggest(&e.seen, Some(&base));
            assert!(s.widenings.is_empty(), "{s:?}");
            let merged = render(&s, Some((text, &base)));
            let policy = Policy::from_yaml(&merged).unwrap();
            assert_eq!(policy.rules[0], base.rules[0], "{merged}");
            assert_eq!(policy.rules.len(), 2, "{merged}");
            assert_eq!(policy.rules[1].namespaces, None, "{merged}");
        }
    }
}
