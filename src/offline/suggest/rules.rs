//! What each identity was seen doing ([`suggest_with`]), and the rules made
//! of it ([`Suggestions::rules`]): the finalizers and resources each
//! controller was seen removing, as far as [`reach`] decides.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use super::bindings::Bindings;
use super::evidence::{Seen, object_namespace, resource_name, target};
use super::identities::Identity;
use super::reach::{Reach, not_widened, reach, widenable};
use super::yaml::{writable, writable_finalizer, writable_resource};
use crate::admission::audit;
use crate::policy::config::Rule;
use crate::policy::text::CUT_MARK;
use crate::policy::{self, Change, FinalizerField, FinalizerLists, Policy, Requester};

/// What one identity was seen doing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdentityActivity {
    /// Removals (requests).
    pub count: usize,
    /// Of those, the ones enforce mode denied.
    pub denied: usize,
    pub finalizers: BTreeMap<(String, FinalizerField), usize>,
    /// `resource` or `resource.group`.
    pub resources: BTreeSet<String>,
    /// The namespaces of the objects (none for cluster-scoped objects).
    pub namespaces: BTreeSet<String>,
    pub first: Option<jiff::Timestamp>,
    pub last: Option<jiff::Timestamp>,
    /// Each finalizer removed where, with how many times: what rules are made of.
    pub places: BTreeMap<Place, usize>,
    /// Removals no rule can be written for (a finalizer, resource or
    /// namespace that is not a name, or a cluster-wide rule the evidence
    /// contradicts), as `what` with how many.
    pub left_out: BTreeMap<String, usize>,
}

/// Where one finalizer was removed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Place {
    pub finalizer: String,
    /// `resource` or `resource.group`.
    pub resource: String,
    /// The object's namespace; `None` for a cluster-scoped object (a
    /// Namespace among them, whatever namespace the request names).
    pub namespace: Option<String>,
}

impl Place {
    pub(super) fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} on {} in {ns}", self.finalizer, self.resource),
            None => format!("{} on {} (cluster-scoped)", self.finalizer, self.resource),
        }
    }
}

impl IdentityActivity {
    fn add(&mut self, seen: &Seen, finalizers: &[(String, FinalizerField)]) {
        self.count += 1;
        self.denied += usize::from(seen.denied);
        for f in finalizers {
            *self.finalizers.entry(f.clone()).or_default() += 1;
        }
        self.resources.insert(resource_name(seen));
        if let Some(ns) = object_namespace(seen) {
            self.namespaces.insert(ns);
        }
        if let Some(t) = seen.time {
            self.first = Some(self.first.map_or(t, |f| f.min(t)));
            self.last = Some(self.last.map_or(t, |l| l.max(t)));
        }
    }

    /// `N would-deny removal(s)`, `N denied removal(s)`, or both.
    pub(super) fn removals(&self) -> String {
        removals(self.count - self.denied, self.denied)
    }

    pub(super) fn when(&self) -> String {
        match (self.first, self.last) {
            (Some(f), Some(l)) if f == l => format!("seen {f}"),
            (Some(f), Some(l)) => format!("first seen {f}, last {l}"),
            _ => "time unknown".into(),
        }
    }
}

/// `N would-deny removal(s)`, `N denied removal(s)`, or both (`0
/// would-deny removal(s)` when there are none of either).
pub fn removals(would_deny: usize, denied: usize) -> String {
    match (would_deny, denied) {
        (w, 0) => format!("{w} would-deny removal(s)"),
        (0, d) => format!("{d} denied removal(s)"),
        (w, d) => format!("{w} would-deny and {d} denied removal(s)"),
    }
}

/// The suggestions: one rule per controller identity, a summary per person.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Suggestions {
    /// Software: rules.
    pub controllers: BTreeMap<Identity, IdentityActivity>,
    /// Everyone else: comment lines, never rules.
    pub people: BTreeMap<Identity, IdentityActivity>,
    /// Removals (would-deny or denied) the `--merge` policy already allows.
    pub already_covered: usize,
    /// Of those, the ones enforce mode denied.
    pub already_covered_denied: usize,
    /// Rules of the `--merge` policy to widen, by their index: each names
    /// one controller alone, and the evidence shows it outside the rule's
    /// namespaces.
    pub widenings: BTreeMap<usize, Widening>,
    /// What `--bindings` says of the ServiceAccounts' ClusterRoleBindings.
    pub bindings: Bindings,
    /// Software whose enforce-mode denials made nothing: removals, and why.
    /// Anyone can be denied, so a denial makes no rule of its own.
    pub denied_only: BTreeMap<Identity, usize>,
    /// What was not suggested, and why (unescaped): finalizers of
    /// Kubernetes' own controllers, rules of `--merge` not widened.
    pub not_suggested: BTreeSet<String>,
}

/// A `--merge` rule the evidence shows its controller outside of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Widening {
    /// The rule's label.
    pub rule: String,
    /// The one identity the rule names.
    pub identity: Option<Identity>,
    /// Where the evidence shows it outside the rule's namespaces.
    pub namespaces: BTreeSet<String>,
    /// `resource` or `resource.group`, where it was seen there.
    pub resources: BTreeSet<String>,
    /// Each finalizer removed outside the rule's namespaces, on which
    /// resource, in which namespace: all the widening may allow.
    pub places: BTreeSet<Place>,
    pub would_deny: usize,
    pub denied: usize,
}

/// Whether `policy` already lets `seen`'s requester remove `finalizer` there.
pub(super) fn covered(
    policy: &Policy,
    seen: &Seen,
    finalizer: &str,
    field: FinalizerField,
) -> bool {
    let old = [Cow::Borrowed(finalizer)];
    let groups: Vec<Cow<str>> = seen
        .groups
        .iter()
        .map(|g| Cow::Borrowed(g.as_str()))
        .collect();
    let lists = FinalizerLists {
        old: &old,
        new: &[],
    };
    let requester = Requester {
        username: &seen.username,
        groups: &groups,
    };
    let change = Change::removing(target(seen), requester, field, lists);
    policy::decide(&change, policy)
        .removed
        .iter()
        .all(|r| r.authorized_by.is_some())
}

/// Groups the evidence by identity; with `base`, drops what it already allows.
pub fn suggest(seen: &[Seen], base: Option<&Policy>) -> Suggestions {
    suggest_with(seen, base, Bindings::default())
}

/// [`suggest`], with what `--bindings` says of the ServiceAccounts.
///
/// Enforce-mode denials are evidence anyone can produce (a tenant's
/// ServiceAccount trying removals it is refused): they make no rule of
/// their own, and only widen a rule of `base` under `not_widened`'s
/// conditions. No finalizer of Kubernetes' own controllers gets a rule.
pub fn suggest_with(seen: &[Seen], base: Option<&Policy>, bindings: Bindings) -> Suggestions {
    let mut out = Suggestions {
        bindings,
        ..Suggestions::default()
    };
    // A resource seen in a namespace is namespaced: a removal on it without
    // one is no ground for a rule across every namespace.
    let namespaced: BTreeSet<String> = seen
        .iter()
        .filter(|s| object_namespace(s).is_some())
        .map(resource_name)
        .collect();
    for s in seen {
        let finalizers: Vec<(String, FinalizerField)> = s
            .finalizers
            .iter()
            .filter(|(f, field)| base.is_none_or(|p| !covered(p, s, f, *field)))
            .cloned()
            .collect();
        if finalizers.is_empty() {
            out.already_covered += 1;
            out.already_covered_denied += usize::from(s.denied);
            continue;
        }
        let identity = Identity::classify(&s.username, &s.groups);
        if !identity.is_software() {
            out.people.entry(identity).or_default().add(s, &finalizers);
            continue;
        }
        let finalizers = out.without_builtin(finalizers);
        let finalizers = out.without_cut(s, finalizers);
        if finalizers.is_empty() {
            continue;
        }
        let widen = base.and_then(|p| out.rule_to_widen(p, &identity, s, &finalizers));
        if let (Some(i), Some(p), Some(ns)) = (widen, base, object_namespace(s)) {
            out.widen(&p.rules[i], i, identity, s, ns, &finalizers);
            continue;
        }
        if s.denied {
            *out.denied_only.entry(identity).or_default() += 1;
            continue;
        }
        let activity = out.controllers.entry(identity).or_default();
        activity.place(s, finalizers, &namespaced);
    }
    out
}

impl Suggestions {
    /// `finalizers` but those of Kubernetes' own controllers: never a rule,
    /// whoever removed them; each left out is noted.
    fn without_builtin(
        &mut self,
        finalizers: Vec<(String, FinalizerField)>,
    ) -> Vec<(String, FinalizerField)> {
        let (builtin, finalizers): (Vec<_>, Vec<_>) = finalizers
            .into_iter()
            .partition(|(f, field)| policy::builtin::owners_of(f, *field).next().is_some());
        for (f, field) in &builtin {
            for c in policy::builtin::owners_of(f, *field) {
                self.not_suggested.insert(format!(
                    "{f} belongs to Kubernetes' {} controller: no rule suggested",
                    c.name
                ));
            }
        }
        finalizers
    }

    /// `finalizers` but the names the evidence holds cut ([`cut`]): a rule
    /// for the part of a name left would name another finalizer, or none.
    /// Each left out is noted, with where to read the name in full.
    fn without_cut(
        &mut self,
        s: &Seen,
        finalizers: Vec<(String, FinalizerField)>,
    ) -> Vec<(String, FinalizerField)> {
        let (cut_names, finalizers): (Vec<_>, Vec<_>) =
            finalizers.into_iter().partition(|(f, _)| cut(f));
        for (finalizer, _) in cut_names {
            let place = Place {
                finalizer,
                resource: resource_name(s),
                namespace: object_namespace(s),
            };
            self.not_suggested.insert(format!(
                "{}: the name was cut in the evidence (it ends with {CUT_MARK}, as the webhook cuts an audit annotation's value past {} characters and a name in its audit record past {}): no rule is suggested for a name not known in full; the webhook's own audit record of the request (its standard output) holds every name Kubernetes allows whole: give it too",
                place.describe(),
                audit::MAX_AUDIT_VALUE_CHARS,
                crate::admission::cut::MAX_AUDITED_CHARS,
            ));
        }
        finalizers
    }

    /// The index of a rule of `base` for this controller alone, scoped to
    /// other namespaces, to widen rather than repeat, when it may be; why
    /// not is noted.
    fn rule_to_widen(
        &mut self,
        base: &Policy,
        identity: &Identity,
        s: &Seen,
        finalizers: &[(String, FinalizerField)],
    ) -> Option<usize> {
        let mut rules = finalizers.iter().map(|(f, _)| widenable(base, s, f));
        let first = rules.next()??;
        let i = rules.all(|r| r == Some(first)).then_some(first)?;
        match not_widened(&base.rules[i], identity, s, &self.bindings) {
            Some(why) => {
                self.not_suggested.insert(why);
                None
            }
            None => Some(i),
        }
    }

    /// Records `s`, removing `finalizers`, as evidence for widening `rule`
    /// (the `index`th of the base) to namespace `ns`.
    fn widen(
        &mut self,
        rule: &Rule,
        index: usize,
        identity: Identity,
        s: &Seen,
        ns: String,
        finalizers: &[(String, FinalizerField)],
    ) {
        let w = self.widenings.entry(index).or_default();
        w.rule.clone_from(&rule.label);
        w.identity = Some(identity);
        for (finalizer, _) in finalizers {
            w.places.insert(Place {
                finalizer: finalizer.clone(),
                resource: resource_name(s),
                namespace: Some(ns.clone()),
            });
        }
        w.namespaces.insert(ns);
        w.resources.insert(resource_name(s));
        if s.denied {
            w.denied += 1;
        } else {
            w.would_deny += 1;
        }
    }
}

impl IdentityActivity {
    /// Records where `s` removed `finalizers`: each place a rule can name,
    /// or, left out, why not. A resource seen in a namespace elsewhere
    /// (`namespaced`) gets no cluster-wide rule from a removal without one.
    fn place(
        &mut self,
        s: &Seen,
        finalizers: Vec<(String, FinalizerField)>,
        namespaced: &BTreeSet<String>,
    ) {
        let resource = resource_name(s);
        let namespace = object_namespace(s);
        let mut written = Vec::new();
        for (finalizer, field) in finalizers {
            let place = Place {
                finalizer,
                resource: resource.clone(),
                namespace: namespace.clone(),
            };
            let why = if !writable_finalizer(&place.finalizer)
                || !writable_resource(&place.resource)
                || !place.namespace.as_deref().is_none_or(writable)
            {
                Some("")
            } else if place.namespace.is_none() && namespaced.contains(&place.resource) {
                Some(", though it was seen in a namespace: no cluster-wide rule")
            } else {
                None
            };
            match why {
                Some(why) => {
                    *self
                        .left_out
                        .entry(format!("{}{why}", place.describe()))
                        .or_default() += 1;
                }
                None => {
                    written.push((place.finalizer.clone(), field));
                    *self.places.entry(place).or_default() += 1;
                }
            }
        }
        if !written.is_empty() {
            self.add(s, &written);
        }
    }
}

/// Whether a finalizer name read from the evidence was cut by the webhook
/// ([`truncate`](crate::policy::text::truncate): an audit annotation's value
/// past [`audit::MAX_AUDIT_VALUE_CHARS`], a record's name past
/// [`crate::admission::cut::MAX_AUDITED_CHARS`]), which marks the cut with [`CUT_MARK`]. No
/// finalizer Kubernetes stores ends so: a qualified name ends with a letter
/// or a digit.
fn cut(finalizer: &str) -> bool {
    finalizer.ends_with(CUT_MARK)
}

/// Domains whose finalizers belong to Kubernetes itself: never widened to a prefix.
fn reserved(domain: &str) -> bool {
    ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|d| domain == *d || domain.ends_with(&format!(".{d}")))
}

/// The finalizer patterns for one rule: names sharing a `domain/` prefix
/// become `domain/*` when there are two or more of them, where the domain is
/// a DNS name (it has a dot) and not Kubernetes' own.
pub fn patterns<'a>(finalizers: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut by_prefix: BTreeMap<Option<&str>, BTreeSet<&str>> = BTreeMap::new();
    for f in finalizers {
        let prefix = f
            .split_once('/')
            .map(|(d, _)| d)
            .filter(|d| d.contains('.') && !d.starts_with('.') && !reserved(d));
        by_prefix.entry(prefix).or_default().insert(f);
    }
    let mut out = Vec::new();
    for (prefix, names) in by_prefix {
        match prefix {
            Some(domain) if names.len() > 1 => out.push(format!("{domain}/*")),
            _ => out.extend(names.into_iter().map(String::from)),
        }
    }
    out
}

/// One rule to suggest, before it is named and written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suggested<'a> {
    pub identity: &'a Identity,
    /// Exact names, or `domain/*`.
    pub finalizers: Vec<String>,
    /// `resource` or `resource.group`.
    pub resources: Vec<String>,
    /// `None`: every namespace, and cluster-scoped objects.
    pub namespaces: Option<Vec<String>>,
    /// Why it reaches as far as it does: its comment.
    pub reach: Reach,
}

impl Suggestions {
    /// The rules, in order: each controller's ([`IdentityActivity::rules`]).
    pub fn rules(&self) -> Vec<Suggested<'_>> {
        self.controllers
            .iter()
            .flat_map(|(identity, activity)| activity.rules(identity, &self.bindings))
            .collect()
    }
}

impl IdentityActivity {
    /// `identity`'s rules. A rule covers the finalizers and resources it was
    /// seen removing, and reaches as far as [`reach`] decides from where
    /// `identity` was seen removing each finalizer (and its
    /// ClusterRoleBindings): every namespace, or its own alone.
    /// Resources with the same finalizers and reach share a rule;
    /// cluster-scoped objects get rules of their own, whose resources are
    /// all cluster-scoped.
    pub fn rules<'a>(&'a self, identity: &'a Identity, bindings: &Bindings) -> Vec<Suggested<'a>> {
        // (resource, finalizer) -> the namespaces, `None` for cluster-scoped objects.
        let mut seen_in: BTreeMap<(&str, &str), BTreeSet<Option<&str>>> = BTreeMap::new();
        // finalizer -> the namespaces it was seen in, on any resource.
        let mut finalizer_in: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for place in self.places.keys() {
            seen_in
                .entry((&place.resource, &place.finalizer))
                .or_default()
                .insert(place.namespace.as_deref());
            let namespaces = finalizer_in.entry(&place.finalizer).or_default();
            namespaces.extend(place.namespace.as_deref());
        }
        let sa = match identity {
            Identity::ServiceAccount(sa) => Some(sa.as_str()),
            _ => None,
        };
        // (reach, resource) -> finalizers.
        let mut by_resource: BTreeMap<(Reach, &str), BTreeSet<&str>> = BTreeMap::new();
        for ((resource, finalizer), namespaces) in seen_in {
            if namespaces.contains(&None) {
                by_resource
                    .entry((Reach::ClusterScoped, resource))
                    .or_default()
                    .insert(finalizer);
            }
            if namespaces.iter().any(Option::is_some) {
                let bound = sa.and_then(|sa| bindings.cluster_wide(sa, resource));
                let reach = reach(identity, &finalizer_in[finalizer], bound);
                by_resource
                    .entry((reach, resource))
                    .or_default()
                    .insert(finalizer);
            }
        }
        // (reach, finalizers) -> resources.
        let mut by_scope: BTreeMap<(Reach, BTreeSet<&str>), BTreeSet<&str>> = BTreeMap::new();
        for ((reach, resource), finalizers) in by_resource {
            by_scope
                .entry((reach, finalizers))
                .or_default()
                .insert(resource);
        }
        by_scope
            .into_iter()
            .map(|((reach, finalizers), resources)| Suggested {
                identity,
                finalizers: patterns(finalizers),
                resources: resources.into_iter().map(String::from).collect(),
                namespaces: match &reach {
                    Reach::Namespaces(ns, _) => Some(ns.iter().cloned().collect()),
                    Reach::ClusterScoped | Reach::ClusterWide(_) => None,
                },
                reach,
            })
            .collect()
    }
}

impl Suggestions {
    /// What was not suggested and why, one line each (unescaped): what
    /// `render` writes as comments, and the command as notes.
    pub fn notes(&self) -> Vec<String> {
        let mut out: Vec<String> = self.not_suggested.iter().cloned().collect();
        for (identity, n) in &self.denied_only {
            out.push(format!(
                "{} denied removal(s) by {}: no rule suggested: enforce-mode denials are evidence anyone can produce (a tenant's ServiceAccount trying removals it is refused), so they make no rule of their own, and widen only a rule of --merge naming this identity alone that already reaches beyond its own namespace (or that --bindings shows bound cluster-wide)",
                n,
                identity.username()
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::FinalizerField;
    use crate::policy::Policy;
    use crate::policy::config::FinalizerPattern;

    use super::super::fixtures::{
        CONTROLLER, SHIPPED, TENANT_BOT, apiserver, evidence, removal, tenant,
    };
    use super::super::render::render;
    use super::*;

    #[test]
    fn prefixes_where_one_identity_removes_several() {
        assert_eq!(
            patterns([
                "a.example.com/x",
                "a.example.com/y",
                "b.example.com/z",
                "plain"
            ]),
            ["plain", "a.example.com/*", "b.example.com/z"]
        );
        assert_eq!(
            patterns([
                "kubernetes.io/pv-protection",
                "kubernetes.io/pvc-protection"
            ]),
            [
                "kubernetes.io/pv-protection",
                "kubernetes.io/pvc-protection"
            ]
        );
        // Only a DNS name is a domain to widen.
        assert_eq!(
            patterns(["kube/a", "kube/b", "/c", "/d", ".io/e", ".io/f"]),
            [".io/e", ".io/f", "/c", "/d", "kube/a", "kube/b"]
        );
        assert_eq!(
            patterns(["x.k8s.io/a", "x.k8s.io/b", "k8s.io/c", "k8s.io/d"]),
            ["k8s.io/c", "k8s.io/d", "x.k8s.io/a", "x.k8s.io/b"]
        );
    }

    #[test]
    fn a_software_name_no_rule_can_hold_is_a_comment() {
        let e = evidence(&[
            apiserver(
                "1",
                &format!("{CONTROLLER}\nmode: warn"),
                "would-deny",
                "example.com/a",
            ),
            apiserver(
                "2",
                "system:x\u{2028}mode: warn",
                "would-deny",
                "example.com/a",
            ),
            apiserver(
                "3",
                "system:serviceaccount:ops:a:b",
                "would-deny",
                "example.com/a",
            ),
            apiserver(
                "4",
                CONTROLLER,
                "would-deny",
                "example.com/a\u{85}x,example.com/*,ok.example.com/b",
            ),
        ]);
        let s = suggest(&e.seen, None);
        assert_eq!(s.people.len(), 3, "{s:?}");
        assert!(s.people.keys().all(|i| matches!(i, Identity::Unnamable(_))));
        let yaml = render(&s, None);
        let policy = Policy::from_yaml(&yaml).unwrap();
        assert_eq!(policy.rules.len(), 1, "{yaml}");
        assert_eq!(
            policy.rules[0].finalizers,
            [FinalizerPattern::Exact("ok.example.com/b".into())]
        );
        assert!(
            yaml.contains(&format!(
                "#   {CONTROLLER}\\nmode: warn (not a username a rule can name): stripped"
            )),
            "{yaml}"
        );
        assert!(
            yaml.contains(&format!(
                "#   {CONTROLLER}: example.com/* on widgets.example.com in team-a x1"
            )),
            "{yaml}"
        );
        assert!(
            yaml.contains("example.com/a\\u0085x on widgets.example.com in team-a x1"),
            "{yaml}"
        );
    }

    #[test]
    fn rules_are_scoped_to_where_they_were_seen() {
        let seen = [
            // Its own namespace alone: scoped there.
            tenant("widgets.example.com", Some("team-a"), "example.com/a"),
            tenant("widgets.example.com", Some("team-a"), "example.com/b"),
            // Another namespace: it acts cluster-wide.
            tenant("gadgets.example.com", Some("team-b"), "other.example.org/c"),
            tenant("clusterwidgets.example.com", None, "example.com/d"),
            // A Namespace: the request names it as its own namespace, yet it is cluster-scoped.
            tenant("namespaces", Some("team-a"), "example.com/e"),
            // widgets are namespaced: a removal without a namespace makes no cluster-wide rule.
            tenant("widgets.example.com", None, "example.com/f"),
        ];
        let s = suggest(&seen, None);
        let yaml = render(&s, None);
        let policy = Policy::from_yaml(&yaml).unwrap();
        let scopes: Vec<(Option<Vec<String>>, Vec<String>)> = policy
            .rules
            .iter()
            .map(|r| {
                let resources = r.resources.iter().flatten();
                let resources = resources.map(|r| format!("{}.{}", r.resource, r.group));
                (r.namespaces.clone(), resources.collect())
            })
            .collect();
        let v = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            scopes,
            [
                (None, v(&["clusterwidgets.example.com"])),
                (None, v(&["namespaces."])),
                (None, v(&["gadgets.example.com"])),
                (Some(v(&["team-a"])), v(&["widgets.example.com"])),
            ],
            "{yaml}"
        );
        // Two names of one domain seen in one scope: the domain, there; each
        // rule after a comment saying why it reaches as far as it does.
        assert!(
            yaml.contains("  # seen only in its own namespace team-a\n  - name: \"team-a-operator-4\"\n    finalizers: [\"example.com/*\"]\n    serviceAccounts: [\"team-a:operator\"]\n    namespaces: [\"team-a\"]\n    resources: [\"widgets.example.com\"]\n"),
            "{yaml}"
        );
        assert!(
            yaml.contains("  # seen in team-b, outside its own namespace team-a: acts cluster-wide\n  - name: \"team-a-operator-3\"\n"),
            "{yaml}"
        );
        assert!(
            yaml.contains(
                "  # cluster-scoped objects: no namespaces\n  - name: \"team-a-operator\"\n"
            ),
            "{yaml}"
        );
        assert!(
            yaml.contains("example.com/f on widgets.example.com (cluster-scoped), though it was seen in a namespace: no cluster-wide rule x1"),
            "{yaml}"
        );
        // Everything seen is covered, and a namespace made later where it
        // acts cluster-wide; nothing beyond: not another namespace where it
        // was seen in its own alone, not another resource or scope, not
        // another finalizer's place.
        let later = tenant("gadgets.example.com", Some("team-z"), "other.example.org/c");
        for s in seen[..5].iter().chain([&later]) {
            let (f, field) = &s.finalizers[0];
            assert!(covered(&policy, s, f, *field), "{s:?}\n{yaml}");
        }
        let beyond = [
            tenant("widgets.example.com", Some("team-b"), "example.com/a"),
            tenant("widgets.example.com", None, "example.com/a"),
            tenant("widgets.example.com", None, "example.com/f"),
            tenant("widgets.example.com", Some("team-a"), "other.example.org/c"),
            tenant("gadgets.example.com", Some("team-b"), "example.com/a"),
            tenant("pods", Some("team-a"), "example.com/a"),
            tenant("clusterwidgets.example.com", None, "example.com/a"),
            tenant("namespaces", Some("team-b"), "example.com/d"),
        ];
        for s in &beyond {
            let (f, field) = &s.finalizers[0];
            assert!(!covered(&policy, s, f, *field), "{s:?}\n{yaml}");
        }

        // Merged: the same rules; merged again, nothing more.
        let base = Policy::from_yaml(SHIPPED).unwrap();
        let merged = render(&suggest(&seen, Some(&base)), Some((SHIPPED, &base)));
        let merged_policy = Policy::from_yaml(&merged).unwrap();
        assert_eq!(merged_policy.rules, policy.rules, "{merged}");
        let again = suggest(&seen, Some(&merged_policy));
        assert!(again.rules().is_empty(), "{again:?}");
        assert_eq!(again.already_covered, 5);
        let twice = render(&again, Some((&merged, &merged_policy)));
        assert_eq!(Policy::from_yaml(&twice).unwrap(), merged_policy, "{twice}");
    }

    #[test]
    fn one_rule_per_controller_none_for_people() {
        let e = evidence(&[
            apiserver("1", CONTROLLER, "would-deny", "widgets.example.com/cleanup"),
            // The same request's other stage.
            apiserver("1", CONTROLLER, "would-deny", "widgets.example.com/cleanup"),
            apiserver("2", CONTROLLER, "would-deny", "widgets.example.com/dns"),
            apiserver("3", "alice", "would-deny", "example.com/x"),
        ]);
        assert_eq!(e.seen.len(), 3);
        let s = suggest(&e.seen, None);
        assert_eq!(s.controllers.len(), 1);
        let yaml = render(&s, None);
        let policy = Policy::from_yaml(&yaml).unwrap();
        assert_eq!(policy.rules.len(), 1, "{yaml}");
        let rule = &policy.rules[0];
        assert_eq!(rule.label, "widgets-widget-controller");
        assert_eq!(rule.service_accounts, [CONTROLLER]);
        assert!(rule.users.is_empty() && rule.groups.is_empty());
        assert!(
            yaml.contains("finalizers: [\"widgets.example.com/*\"]"),
            "{yaml}"
        );
        assert!(
            yaml.contains("# suggested from 2 would-deny removal(s), seen 2026-11-23T19:00:00.5Z"),
            "{yaml}"
        );
        assert!(
            yaml.contains(
                "#   alice: stripped example.com/x x1 in 1 removal(s) from widgets.example.com"
            ),
            "{yaml}"
        );
        assert!(!yaml.contains("users:"), "{yaml}");
    }

    /// Denials are evidence anyone can produce: they make no rule of their
    /// own, and the namespaces they were seen in take no rule cluster-wide.
    #[test]
    fn denials_make_no_rule_of_their_own() {
        // Denied alone: nothing, and a note saying so.
        let e = evidence(&[
            removal("1", TENANT_BOT, "team-b", "example.com/a", true),
            removal("2", TENANT_BOT, "team-c", "example.com/a", true),
        ]);
        let s = suggest(&e.seen, None);
        assert!(s.rules().is_empty(), "{s:?}");
        assert_eq!(
            s.denied_only,
            BTreeMap::from([(Identity::ServiceAccount("team-a:tenant-bot".into()), 2)])
        );
        let yaml = render(&s, None);
        assert!(yaml.ends_with("rules: []\n"), "{yaml}");
        assert!(yaml.contains("#   2 denied removal(s) by system:serviceaccount:team-a:tenant-bot: no rule suggested: enforce-mode denials are evidence anyone can produce"), "{yaml}");
        // Seen in its own namespace in warn mode, denied elsewhere: the
        // rule stays in its own namespace.
        let e = evidence(&[
            removal("1", TENANT_BOT, "team-a", "example.com/a", false),
            removal("2", TENANT_BOT, "team-b", "example.com/a", true),
            removal("3", TENANT_BOT, "team-c", "example.com/a", true),
        ]);
        let s = suggest(&e.seen, None);
        let yaml = render(&s, None);
        let policy = Policy::from_yaml(&yaml).unwrap();
        assert_eq!(policy.rules.len(), 1, "{yaml}");
        assert_eq!(
            policy.rules[0].namespaces,
            Some(vec!["team-a".to_string()]),
            "{yaml}"
        );
        assert!(
            yaml.contains("  # seen only in its own namespace team-a\n"),
            "{yaml}"
        );
    }

    /// kube-apiserver's audit event of a review the webhook answered: its
    /// audit annotations as the webhook wrote them, under the webhook's name.
    fn answered(policy: &Policy, review: &[u8], id: &str) -> String {
        let reviewed = crate::admission::review(policy, review).unwrap();
        let body: serde_json::Value = serde_json::from_slice(&reviewed.body).unwrap();
        let mut annotations = serde_json::Map::new();
        for (key, value) in body["response"]["auditAnnotations"].as_object().unwrap() {
            let key = format!("{}/{key}", crate::admission::WEBHOOK_NAME);
            annotations.insert(key, value.clone());
        }
        let mut event: serde_json::Value =
            serde_json::from_str(&apiserver(id, CONTROLLER, "would-deny", "")).unwrap();
        event["annotations"] = annotations.into();
        event["objectRef"] = serde_json::json!({"resource": "pods", "namespace": "team-a", "name": "web-0", "apiVersion": "v1"});
        event.to_string()
    }

    /// A name the webhook cut to fit an audit annotation (`...` at its end)
    /// is not the finalizer's name: no rule names it, nor a prefix of it,
    /// and a note says where the name is whole.
    #[test]
    fn a_name_cut_in_the_evidence_makes_no_rule() {
        let warn = Policy::from_yaml("mode: warn\nrules: []\n").unwrap();
        let long = format!("a.example.com/{}", "x".repeat(250));
        let review = |finalizers: serde_json::Value| {
            crate::admission::ReviewBuilder::pod_update(CONTROLLER)
                .finalizers(finalizers, serde_json::json!([]))
                .to_vec()
        };
        // Cut mid-name, after a whole one; and two names of one domain cut.
        let lines = [
            answered(
                &warn,
                &review(serde_json::json!(["example.com/a", long])),
                "1",
            ),
            answered(
                &warn,
                &review(serde_json::json!([
                    "a.example.com/b",
                    long,
                    "a.example.com/c"
                ])),
                "2",
            ),
        ];
        let e = evidence(&lines);
        let cut: Vec<&str> = e
            .seen
            .iter()
            .flat_map(|s| s.finalizers.iter().map(|(f, _)| f.as_str()))
            .filter(|f| f.ends_with("..."))
            .collect();
        assert_eq!(cut.len(), 2, "{:?}", e.seen);
        assert!(
            cut.iter()
                .all(|f| long.starts_with(f.trim_end_matches("...")))
        );
        let s = suggest(&e.seen, None);
        let yaml = render(&s, None);
        let policy = Policy::from_yaml(&yaml).unwrap();
        let named: Vec<String> = policy
            .rules
            .iter()
            .flat_map(|r| r.finalizers.iter().map(ToString::to_string))
            .collect();
        assert_eq!(named, ["a.example.com/b", "example.com/a"], "{yaml}");
        for f in &cut {
            let note = format!(
                "{f} on pods in team-a: the name was cut in the evidence (it ends with ..., as the webhook cuts an audit annotation's value past 256 characters and a name in its audit record past 512): no rule is suggested for a name not known in full; the webhook's own audit record of the request (its standard output) holds every name Kubernetes allows whole: give it too"
            );
            assert!(s.notes().contains(&note), "{:?}", s.notes());
            assert!(yaml.contains(&format!("#   {note}\n")), "{yaml}");
        }
        // The whole name, from the webhook's own record: its rule.
        let reviewed = crate::admission::review(&warn, &review(serde_json::json!([long]))).unwrap();
        let mut record = reviewed.audit.unwrap();
        record.set_authenticated(true);
        let e = evidence(&[record.line_at(jiff::Timestamp::UNIX_EPOCH)]);
        let s = suggest(&e.seen, None);
        let policy = Policy::from_yaml(&render(&s, None)).unwrap();
        assert_eq!(policy.rules[0].finalizers, [FinalizerPattern::Exact(long)]);
    }

    /// No rule, new or widened, for a finalizer Kubernetes' own
    /// controllers own, whoever removed it and however.
    #[test]
    fn no_rule_for_a_finalizer_of_kubernetes_own_controllers() {
        let log = include_str!("../../../tests/fixtures/suggest/attack/e1.log");
        let denied: Vec<String> = log.lines().map(String::from).collect();
        let allowed: Vec<String> = denied
            .iter()
            .map(|l| {
                l.replace("\"denied\"", "\"would-deny\"")
                    .replace("\"code\": 403", "\"code\": 200")
            })
            .collect();
        let note = "kubernetes.io/pvc-protection belongs to Kubernetes' pvc-protection controller: no rule suggested";
        for lines in [&denied, &allowed] {
            let e = evidence(lines);
            assert_eq!(e.seen.len(), 2);
            let s = suggest(&e.seen, None);
            assert!(s.rules().is_empty(), "{s:?}");
            assert!(s.denied_only.is_empty(), "{s:?}");
            assert_eq!(s.notes(), [note]);
            let yaml = render(&s, None);
            assert!(yaml.contains(&format!("#   {note}\n")), "{yaml}");
            // Not widened either, even a rule naming it that reaches
            // beyond its own namespace.
            let text = "rules:\n  - name: pvc\n    finalizers: [\"kubernetes.io/pvc-protection\"]\n    serviceAccounts: [\"team-a:tenant-bot\"]\n    namespaces: [team-c]\n";
            let base = Policy::from_yaml(text).unwrap();
            let s = suggest(&e.seen, Some(&base));
            assert!(s.widenings.is_empty() && s.rules().is_empty(), "{s:?}");
            // `orphan` and `foregroundDeletion` too.
            let mut gc = e.seen[0].clone();
            gc.finalizers = vec![
                ("orphan".into(), FinalizerField::Metadata),
                ("foregroundDeletion".into(), FinalizerField::Metadata),
            ];
            let s = suggest(&[gc], None);
            assert!(s.rules().is_empty(), "{s:?}");
            assert_eq!(s.not_suggested.len(), 2, "{s:?}");
        }
    }
}
