//! What people read: the denial message, the warnings.
//!
//! A denial must let the person who hit it act without reading any docs: which
//! finalizers, on which object, for whom, and exactly how to override.

use std::fmt::{self, Write};

use super::approval::{APPROVED_BY, ApprovalProblem, OVERRIDE_EXPIRES};
use super::change::{Change, Target};
use super::config::{Accepts, Approval, OverrideSettings, Policy};
use super::decision::{Decision, Outcome, Removal};
use super::field::FinalizerField;
use super::overrides::OverrideProblem;
use super::text::{truncate, truncated};

/// kube-apiserver may cut warnings longer than this.
pub const MAX_WARNING_CHARS: usize = 256;

/// How much of an override annotation's value a message quotes.
const MAX_QUOTED_CHARS: usize = 200;

/// How many removed finalizers of each field a message names; the rest are
/// counted (`and 699,990 more`). A review may remove any number, and a
/// message, a warning, an Event and an audit record must stay small whatever
/// a client sends.
pub const MAX_NAMED_FINALIZERS: usize = 16;

/// How much of one finalizer name a message quotes: a valid one (a DNS
/// subdomain prefix, `/`, a 63-character name) is never cut.
const MAX_FINALIZER_CHARS: usize = 317;

/// How much of a name taken from the request (the object's name, its
/// namespace, resource and group, the requester) a message quotes: far more
/// than Kubernetes lets any of them be, far less than a body can carry.
const MAX_NAME_CHARS: usize = 512;

/// `s` quoted as `{:?}` quotes it. Most names are printable ASCII with no
/// quote or backslash, which Debug writes unchanged between quotes; only
/// the others go through Debug's escaping.
struct Quoted<'a>(&'a str);

impl<'a> Quoted<'a> {
    /// `s` quoted, cut to `max` characters (marked `...`) when longer.
    fn cut(s: &'a str, max: usize) -> Cut<'a> {
        Cut(truncated(s, max))
    }

    fn plain(&self) -> bool {
        self.0
            .bytes()
            .all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\')
    }

    /// Appends the quoted string to `out`.
    fn push_to(&self, out: &mut String) {
        if self.plain() {
            out.push('"');
            out.push_str(self.0);
            out.push('"');
        } else {
            let _ = write!(out, "{:?}", self.0);
        }
    }
}

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.plain() {
            f.write_char('"')?;
            f.write_str(self.0)?;
            f.write_char('"')
        } else {
            fmt::Debug::fmt(self.0, f)
        }
    }
}

/// A string from the request, quoted, cut to a bounded length.
struct Cut<'a>(std::borrow::Cow<'a, str>);

impl Cut<'_> {
    fn push_to(&self, out: &mut String) {
        Quoted(&self.0).push_to(out);
    }
}

impl fmt::Display for Cut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Quoted(&self.0).fmt(f)
    }
}

/// `pods "web-0" in namespace "team-a"`, `widgets.example.com "w1"`, `persistentvolumes "pv-1"`.
pub fn describe_object(target: &Target<'_>) -> String {
    let mut s = String::with_capacity(64);
    s.push_str(&truncated(target.resource, MAX_NAME_CHARS));
    if !target.group.is_empty() {
        s.push('.');
        s.push_str(&truncated(target.group, MAX_NAME_CHARS));
    }
    s.push(' ');
    Quoted::cut(target.name, MAX_NAME_CHARS).push_to(&mut s);
    if let Some(ns) = target.object_namespace() {
        s.push_str(" in namespace ");
        Quoted::cut(ns, MAX_NAME_CHARS).push_to(&mut s);
    }
    s
}

/// `finalizer "a"`, `finalizers "a", "b"`, `spec.finalizers "kubernetes"`,
/// each field once; past [`MAX_NAMED_FINALIZERS`] names of a field, the
/// rest counted: `finalizers "f0", ..., "f15" and 699,984 more`.
pub fn describe_finalizers<'a>(removals: impl Iterator<Item = &'a Removal> + Clone) -> String {
    let mut s = String::with_capacity(64);
    for field in [FinalizerField::Metadata, FinalizerField::Spec] {
        let names = removals.clone().filter(|r| r.field == field);
        let count = names.clone().count();
        if count == 0 {
            continue;
        }
        if !s.is_empty() {
            s.push_str(" and ");
        }
        let noun = match (field, count) {
            (FinalizerField::Metadata, 1) => "finalizer",
            (FinalizerField::Metadata, _) => "finalizers",
            (FinalizerField::Spec, _) => "spec.finalizers",
        };
        s.push_str(noun);
        for (i, removal) in names.take(MAX_NAMED_FINALIZERS).enumerate() {
            s.push_str(if i == 0 { " " } else { ", " });
            Quoted::cut(&removal.finalizer, MAX_FINALIZER_CHARS).push_to(&mut s);
        }
        if count > MAX_NAMED_FINALIZERS {
            let _ = write!(s, " and {} more", Thousands(count - MAX_NAMED_FINALIZERS));
        }
    }
    s
}

/// A count with thousands separators: `699,990`.
pub struct Thousands(pub usize);

impl fmt::Display for Thousands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.0.to_string();
        for (i, digit) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                f.write_char(',')?;
            }
            f.write_char(digit)?;
        }
        Ok(())
    }
}

/// The denial message (status.message of a 403).
pub fn denial(change: &Change<'_>, decision: &Decision, policy: &Policy) -> String {
    let settings = &policy.override_settings;
    if let (Outcome::ApprovalRefused { problem, .. }, Some(approval)) =
        (&decision.outcome, &settings.approval)
    {
        return approval_denial(change, settings, problem, approval);
    }
    if let Outcome::TooManyNames { field, .. } = &decision.outcome {
        return too_many_names(change, *field, "cannot judge");
    }
    // Room for the usual message without growing.
    let mut msg = String::with_capacity(512);
    let _ = write!(
        msg,
        "finalizer-guard denied removing {} from {}: requester {} is not authorized to remove {} by any rule or built-in controller.",
        describe_finalizers(decision.unauthorized()),
        describe_object(&change.target),
        Quoted::cut(change.requester.username, MAX_NAME_CHARS),
        it_or_them(decision),
    );
    push_unusable_override(&mut msg, decision, settings);
    push_how_to_override(&mut msg, decision, settings);
    msg
}

/// `it` for one unauthorized removal, `them` for more.
fn it_or_them(decision: &Decision) -> &'static str {
    if decision.unauthorized().count() == 1 {
        "it"
    } else {
        "them"
    }
}

/// Why a write of the two-person approval annotations is denied.
fn approval_denial(
    change: &Change<'_>,
    settings: &OverrideSettings,
    problem: &ApprovalProblem,
    approval: &Approval,
) -> String {
    format!(
        "finalizer-guard denied writing the override approval ({}, {APPROVED_BY}, {OVERRIDE_EXPIRES}) on {} by {}: {problem}. \
         Approvers: {}; an approval names its approver in {APPROVED_BY} and expires at most {:#} ahead.",
        settings.annotation,
        describe_object(&change.target),
        Quoted::cut(change.requester.username, MAX_NAME_CHARS),
        approval.describe_approvers(),
        approval.max_age,
    )
}

/// Why the override on the object, if there is one, cannot be used.
fn push_unusable_override(msg: &mut String, decision: &Decision, settings: &OverrideSettings) {
    let Outcome::Denied { problem, .. } = &decision.outcome else {
        return;
    };
    if *problem == OverrideProblem::Absent {
        return;
    }
    if settings.approval.is_some() {
        let _ = write!(
            msg,
            " The override on the object cannot be used: {problem}."
        );
    } else {
        let value = decision
            .evidence
            .rejected_override
            .as_deref()
            .unwrap_or_default();
        let _ = write!(
            msg,
            " The override annotation {}: {} is not valid: {problem}.",
            settings.annotation,
            Quoted(&truncate(value, MAX_QUOTED_CHARS))
        );
    }
}

/// How to override: the reasons that release every unauthorized removal
/// (and under the two-person rule, who approves), or why no one override can.
fn push_how_to_override(msg: &mut String, decision: &Decision, settings: &OverrideSettings) {
    let mut narrowed = narrowed_reasons(settings, decision);
    if matches!(
        decision.outcome,
        Outcome::Denied {
            problem: OverrideProblem::NotAccepted(_),
            ..
        }
    ) {
        // Said already, as why the override is not valid.
        narrowed.said.clear();
    }
    if narrowed.reasons.is_empty() {
        msg.push_str(&narrowed.said);
        if narrowed.never_all {
            let _ = write!(
                msg,
                " No override releases {}: only its rule or controller.",
                it_or_them(decision)
            );
        } else {
            msg.push_str(
                " No one override releases them all: remove them in separate writes, each with a reason it accepts.",
            );
        }
        return;
    }
    match &settings.approval {
        None => {
            let _ = write!(
                msg,
                " To override in an emergency, annotate the object with {}: \"REASON: DETAIL\", REASON one of: {}.{}",
                settings.annotation,
                narrowed.reasons.join(", "),
                narrowed.said,
            );
        }
        Some(approval) => {
            let _ = write!(
                msg,
                " To override in an emergency, an approver ({}) first annotates the object with {}: \"REASON: DETAIL\" \
                 (REASON one of: {}), {APPROVED_BY}: their username and {OVERRIDE_EXPIRES}: an RFC 3339 time at most {:#} ahead; \
                 then another person removes the finalizer.{}",
                approval.describe_approvers(),
                settings.annotation,
                narrowed.reasons.join(", "),
                approval.max_age,
                narrowed.said,
            );
        }
    }
}

/// The reasons that release every unauthorized finalizer of a denial, and
/// what `override.finalizers` says of them.
struct Narrowed<'a> {
    /// The reasons that release them all (`override.reasons`, narrowed).
    reasons: Vec<&'a str>,
    /// ` "x" takes only node-lost (override.finalizers[0]); ...`, or ''.
    said: String,
    /// No override releases any of them.
    never_all: bool,
}

fn narrowed_reasons<'a>(settings: &'a OverrideSettings, decision: &Decision) -> Narrowed<'a> {
    let mut reasons: Vec<&str> = settings.reasons.iter().map(String::as_str).collect();
    let mut said = String::new();
    let mut never = 0;
    let mut total = 0;
    let mut shown = 0;
    for removal in decision.unauthorized() {
        total += 1;
        let accepts = settings.accepts(&removal.finalizer);
        reasons.retain(|r| accepts.reason(r));
        let line = match accepts {
            Accepts::Every(_) => continue,
            Accepts::Never { entry } => {
                never += 1;
                format!(
                    "no override releases {}: only its rule or controller ({entry})",
                    Quoted::cut(&removal.finalizer, MAX_NAME_CHARS)
                )
            }
            Accepts::Only { reasons, entry } => format!(
                "{} accepts only {} ({entry})",
                Quoted::cut(&removal.finalizer, MAX_NAME_CHARS),
                reasons.join(", ")
            ),
        };
        shown += 1;
        if shown <= 3 {
            said.push(' ');
            said.push_str(&line);
            said.push('.');
        }
    }
    if shown > 3 {
        let _ = write!(said, " And {} more the policy narrows.", shown - 3);
    }
    Narrowed {
        reasons,
        said,
        never_all: total > 0 && never == total,
    }
}

/// The warning returned with an override.
pub fn override_warning(change: &Change<'_>, decision: &Decision) -> Option<String> {
    let Outcome::Override(o) = &decision.outcome else {
        return None;
    };
    Some(truncate(
        &format!(
            "finalizer-guard: override {} removed {} from {}; clean up what {} guarded by hand ({})",
            Quoted(&o.reason),
            describe_finalizers(decision.unauthorized()),
            describe_object(&change.target),
            if decision.unauthorized().count() == 1 {
                "it"
            } else {
                "they"
            },
            o.detail,
        ),
        MAX_WARNING_CHARS,
    ))
}

/// The warning returned in warn mode instead of a denial.
pub fn would_deny_warning(change: &Change<'_>, decision: &Decision) -> Option<String> {
    if let Outcome::ApprovalRefused {
        enforced: false,
        problem,
    } = &decision.outcome
    {
        return Some(truncate(
            &format!(
                "finalizer-guard (warn mode) would deny writing the override approval on {}: {problem}",
                describe_object(&change.target)
            ),
            MAX_WARNING_CHARS,
        ));
    }
    if let Outcome::TooManyNames {
        enforced: false,
        field,
    } = &decision.outcome
    {
        return Some(truncate(
            &too_many_names(change, *field, "(warn mode) would deny: it cannot judge"),
            MAX_WARNING_CHARS,
        ));
    }
    let Outcome::Denied {
        enforced: false,
        problem,
    } = &decision.outcome
    else {
        return None;
    };
    let why = match problem {
        OverrideProblem::Absent => String::new(),
        other => format!(" (override annotation not valid: {other})"),
    };
    Some(truncate(
        &format!(
            "finalizer-guard (warn mode) would deny: {} may not remove {} from {}{why}",
            Quoted::cut(change.requester.username, MAX_NAME_CHARS),
            describe_finalizers(decision.unauthorized()),
            describe_object(&change.target),
        ),
        MAX_WARNING_CHARS,
    ))
}

/// Why an UPDATE whose finalizer list is too long to read is denied.
fn too_many_names(change: &Change<'_>, field: FinalizerField, verb: &str) -> String {
    format!(
        "finalizer-guard {verb} the write to {} by {}: {} holds more than {} names, too many to tell which it removes.",
        describe_object(&change.target),
        Quoted::cut(change.requester.username, MAX_NAME_CHARS),
        field.path(),
        Thousands(super::change::MAX_LIST_NAMES),
    )
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::collections::BTreeMap;

    use super::*;
    use crate::policy::change::{FinalizerLists, Operation, Requester};
    use crate::policy::decide;

    fn strings<'a>(items: &[&'a str]) -> Vec<Cow<'a, str>> {
        items.iter().map(|s| Cow::Borrowed(*s)).collect()
    }

    fn render(
        target: Target<'_>,
        old: &[&str],
        spec_old: &[&str],
        annotations: &BTreeMap<String, String>,
        policy: &Policy,
    ) -> (Decision, String, Option<String>, Option<String>) {
        let (old, spec_old, groups) = (
            strings(old),
            strings(spec_old),
            strings(&["system:authenticated"]),
        );
        let change = Change {
            operation: Operation::Update,
            target,
            requester: Requester {
                username: "alice@example.com",
                groups: &groups,
            },
            metadata_finalizers: FinalizerLists {
                old: &old,
                new: &[],
            },
            spec_finalizers: FinalizerLists {
                old: &spec_old,
                new: &[],
            },
            annotations,
            old_annotations: annotations,
            deleting: true,
            now: jiff::Timestamp::UNIX_EPOCH,
            uid: None,
            seal_key: None,
        };
        let d = decide(&change, policy);
        let msg = denial(&change, &d, policy);
        (
            d.clone(),
            msg,
            override_warning(&change, &d),
            would_deny_warning(&change, &d),
        )
    }

    fn pod() -> Target<'static> {
        Target {
            group: "",
            resource: "pods",
            subresource: "",
            namespace: Some("team-a"),
            name: "web-0",
        }
    }

    #[test]
    fn denial_names_finalizers_object_requester_and_override() {
        let p = Policy::embedded_default();
        let (_, msg, ..) = render(
            pod(),
            &["example.com/a", "example.com/b"],
            &[],
            &BTreeMap::new(),
            &p,
        );
        assert_eq!(
            msg,
            "finalizer-guard denied removing finalizers \"example.com/a\", \"example.com/b\" from pods \"web-0\" in namespace \"team-a\": \
requester \"alice@example.com\" is not authorized to remove them by any rule or built-in controller. \
To override in an emergency, annotate the object with finalizer-guard.io/override: \"REASON: DETAIL\", \
REASON one of: node-lost, controller-unavailable, controller-uninstalled, apiservice-unavailable."
        );
    }

    #[test]
    fn denial_quotes_an_invalid_override() {
        let p = Policy::embedded_default();
        let mut a = BTreeMap::new();
        a.insert(
            "finalizer-guard.io/override".to_string(),
            "because: I said so".to_string(),
        );
        let (_, msg, ..) = render(pod(), &["example.com/a"], &[], &a, &p);
        assert!(
            msg.contains(
                "The override annotation finalizer-guard.io/override: \"because: I said so\" is not valid: reason \"because\" is not an approved reason."
            ),
            "{msg}"
        );
        assert!(
            msg.contains("removing finalizer \"example.com/a\""),
            "{msg}"
        );
    }

    #[test]
    fn spec_finalizers_and_cluster_scoped_objects() {
        let p = Policy::embedded_default();
        let ns = Target {
            group: "",
            resource: "namespaces",
            subresource: "finalize",
            namespace: Some("stuck"),
            name: "stuck",
        };
        let (_, msg, ..) = render(ns, &[], &["kubernetes"], &BTreeMap::new(), &p);
        assert!(
            msg.starts_with("finalizer-guard denied removing spec.finalizers \"kubernetes\" from namespaces \"stuck\":"),
            "{msg}"
        );
        let crd = Target {
            group: "example.com",
            resource: "widgets",
            subresource: "",
            namespace: None,
            name: "w1",
        };
        assert_eq!(describe_object(&crd), "widgets.example.com \"w1\"");
    }

    #[test]
    fn override_warning_is_short() {
        let p = Policy::embedded_default();
        let mut a = BTreeMap::new();
        let detail = format!("INC-4711 {}", "x".repeat(400));
        a.insert(
            "finalizer-guard.io/override".to_string(),
            format!("node-lost: {detail}"),
        );
        let (d, _, warning, would) = render(pod(), &["example.com/a"], &[], &a, &p);
        assert_eq!(d.verdict(), crate::policy::decision::Verdict::Override);
        let warning = warning.unwrap();
        assert!(warning.starts_with("finalizer-guard: override \"node-lost\" removed finalizer \"example.com/a\" from pods \"web-0\""));
        assert!(warning.chars().count() <= MAX_WARNING_CHARS);
        assert!(would.is_none());
    }

    #[test]
    fn a_message_names_the_first_finalizers_and_counts_the_rest() {
        let p = Policy::embedded_default();
        let names: Vec<String> = (0..700_000).map(|i| format!("f{i}")).collect();
        let old: Vec<&str> = names.iter().map(String::as_str).collect();
        let (_, msg, ..) = render(pod(), &old, &[], &BTreeMap::new(), &p);
        assert!(
            msg.starts_with(
                "finalizer-guard denied removing finalizers \"f0\", \"f1\", \"f2\", \"f3\", \"f4\", \"f5\", \"f6\", \"f7\", \"f8\", \"f9\", \"f10\", \"f11\", \"f12\", \"f13\", \"f14\", \"f15\" and 699,984 more from pods \"web-0\""
            ),
            "{msg}"
        );
        assert!(msg.contains("finalizer-guard.io/override"), "{msg}");
        assert!(msg.len() < 1024, "{} bytes", msg.len());
        // Sixteen are named whole; the next one is counted.
        let (_, msg, ..) = render(pod(), &old[..17], &[], &BTreeMap::new(), &p);
        assert!(msg.contains("\"f15\" and 1 more from"), "{msg}");
        let (_, msg, ..) = render(pod(), &old[..16], &[], &BTreeMap::new(), &p);
        assert!(msg.contains("\"f15\" from"), "{msg}");
        // A name no API server would accept is cut, as is the requester's.
        let huge = "x".repeat(1_000_000);
        let (_, msg, ..) = render(pod(), &[&huge], &[], &BTreeMap::new(), &p);
        assert!(msg.len() < 2048, "{} bytes", msg.len());
        assert!(msg.contains("xxx...\" from pods"), "{msg}");
    }

    #[test]
    fn thousands_are_grouped() {
        for (n, want) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (699_990, "699,990"),
            (1_234_567, "1,234,567"),
        ] {
            assert_eq!(Thousands(n).to_string(), want);
        }
    }

    #[test]
    fn warn_mode_warning() {
        let p = Policy::from_yaml("mode: warn\n").unwrap();
        let (d, _, over, would) = render(pod(), &["example.com/a"], &[], &BTreeMap::new(), &p);
        assert!(d.allowed());
        assert!(over.is_none());
        assert_eq!(
            would.unwrap(),
            "finalizer-guard (warn mode) would deny: \"alice@example.com\" may not remove finalizer \"example.com/a\" from pods \"web-0\" in namespace \"team-a\""
        );
    }

    #[test]
    fn quoted_is_debug() {
        for s in [
            "",
            "web-0",
            "jane@example.com",
            "system:serviceaccount:kube-system:generic-garbage-collector",
            "quote \" backslash \\ tab \t newline \n",
            "\u{0}\u{1b}[31m\u{7f}",
            "é 漢字 \u{2028} \u{200b} \u{301} 🦀",
            "~ and space",
        ] {
            assert_eq!(Quoted(s).to_string(), format!("{s:?}"), "{s:?}");
            let mut pushed = String::new();
            Quoted(s).push_to(&mut pushed);
            assert_eq!(pushed, format!("{s:?}"), "{s:?}");
        }
    }

    #[test]
    fn truncate_counts_characters() {
        assert_eq!(truncate("abc", 3), "abc");
        assert_eq!(truncate("abcdef", 5), "ab...");
        assert_eq!(truncate("ééééé", 4), "é...");
    }
}
