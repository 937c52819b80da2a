//! `--merge`: the suggested rules added to a policy's text, keeping its
//! comments where its layout allows, and the rules of it the evidence
//! shows their controller outside of widened as far as the evidence goes
//! and no further: in place, or by a rule beside it.

use std::collections::{BTreeMap, BTreeSet};

use super::identities::Identity;
use super::reach::{Reach, namespace_list};
use super::rules::{Place, Suggested, Suggestions, Widening, removals};
use super::yaml::{comment, indented, list};
use crate::policy::Policy;
use crate::policy::config::{FinalizerPattern, Rule};

/// Whether `text` reads as `base` with its rules as `rules` (the widened
/// ones widened) and `added` after them, and nothing else changed.
pub(super) fn faithful(text: &str, base: &Policy, rules: &[Rule], added: &[Rule]) -> bool {
    let Ok(read) = Policy::from_yaml(text) else {
        return false;
    };
    // The presets' rules come after the file's own: compared apart.
    let preset = |r: &&Rule| r.label.starts_with("preset:");
    let (read_presets, read_own): (Vec<&Rule>, Vec<&Rule>) = read.rules.iter().partition(preset);
    let (presets, own): (Vec<&Rule>, Vec<&Rule>) = rules.iter().partition(preset);
    let (kept, new) = read_own.split_at(read_own.len().min(own.len()));
    read.mode == base.mode
        && read.builtin_controllers == base.builtin_controllers
        && read.builtin_identities == base.builtin_identities
        && read.override_settings == base.override_settings
        && read_presets == presets
        && kept == own
        && new.iter().copied().eq(added)
}

/// One rule of the `--merge` policy widened in place.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Edit {
    /// Its index among the policy's rules.
    index: usize,
    /// Its namespaces after: the rule's, and those the evidence shows.
    namespaces: Vec<String>,
    /// What is said of it (unescaped).
    why: String,
}

/// The namespaces `w` adds to `rule` where the rule would allow more than
/// the evidence shows there (its other resources, every resource when it
/// names none, its other finalizers), and why; none when it would not.
fn beyond_evidence(rule: &Rule, w: &Widening) -> (BTreeSet<String>, String) {
    let all = || w.namespaces.clone();
    let added = namespace_list(w.namespaces.iter().map(String::as_str));
    let Some(resources) = &rule.resources else {
        let why = format!("it names no resources, so every resource in {added} would be allowed");
        return (all(), why);
    };
    if let Some(pattern) = rule
        .finalizers
        .iter()
        .find(|p| matches!(p, FinalizerPattern::Prefix(_)))
    {
        return (all(), format!("it names finalizers by pattern ({pattern})"));
    }
    let mut partial = BTreeSet::new();
    let mut unseen = Vec::new();
    for namespace in &w.namespaces {
        for finalizer in &rule.finalizers {
            for resource in resources {
                let place = Place {
                    finalizer: finalizer.to_string(),
                    resource: resource.to_string(),
                    namespace: Some(namespace.clone()),
                };
                if !w.places.contains(&place) {
                    partial.insert(namespace.clone());
                    unseen.push(place.describe());
                }
            }
        }
    }
    let more = match unseen.len().saturating_sub(UNSEEN_NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    unseen.truncate(UNSEEN_NAMED);
    let why = format!(
        "it would allow what the evidence does not show there: {}{more}",
        unseen.join(", ")
    );
    (partial, why)
}

/// Removals not seen named in a comment: the first few, and how many more.
const UNSEEN_NAMED: usize = 4;

/// The rules that allow exactly what `w` shows, for a rule that cannot be
/// widened in place without allowing more ([`beyond_evidence`]): each
/// names finalizers, resources and namespaces all of whose combinations
/// were seen, by name (no `*`).
fn beside<'a>(identity: &'a Identity, w: &Widening, before: &str) -> Vec<Suggested<'a>> {
    // (resource, finalizer) -> namespaces.
    let mut seen_in: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
    for place in &w.places {
        if let Some(ns) = &place.namespace {
            seen_in
                .entry((&place.resource, &place.finalizer))
                .or_default()
                .insert(ns);
        }
    }
    // (namespaces, resource) -> finalizers.
    let mut by_resource: BTreeMap<(BTreeSet<&str>, &str), BTreeSet<&str>> = BTreeMap::new();
    for ((resource, finalizer), namespaces) in seen_in {
        by_resource
            .entry((namespaces, resource))
            .or_default()
            .insert(finalizer);
    }
    // (namespaces, finalizers) -> resources.
    let mut by_scope: BTreeMap<(BTreeSet<&str>, BTreeSet<&str>), BTreeSet<&str>> = BTreeMap::new();
    for ((namespaces, resource), finalizers) in by_resource {
        by_scope
            .entry((namespaces, finalizers))
            .or_default()
            .insert(resource);
    }
    by_scope
        .into_iter()
        .map(|((namespaces, finalizers), resources)| {
            let finalizers: Vec<String> = finalizers.into_iter().map(String::from).collect();
            let resources: Vec<String> = resources.into_iter().map(String::from).collect();
            let why = format!(
                "widens rule \"{}\" to what the evidence shows: {} on {} in {} (seen in the evidence; the rule's own namespaces: {before})",
                w.rule,
                finalizers.join(", "),
                resources.join(", "),
                namespace_list(namespaces.iter().copied()),
            );
            let namespaces: BTreeSet<String> = namespaces.into_iter().map(String::from).collect();
            Suggested {
                identity,
                finalizers,
                resources,
                namespaces: Some(namespaces.iter().cloned().collect()),
                reach: Reach::Namespaces(namespaces, why),
            }
        })
        .collect()
}

/// The widenings of `policy`'s rules, each held to the evidence: a
/// namespace seen is added to the rule's (its `namespaces` are never
/// dropped: removals in namespaces make no rule for every namespace, nor
/// for cluster-scoped objects) where that allows nothing there the
/// evidence does not show ([`beyond_evidence`]); what was seen in the
/// others gets rules beside it for exactly that ([`beside`]).
fn edits<'a>(s: &'a Suggestions, policy: &Policy) -> (Vec<Edit>, Vec<Suggested<'a>>, Vec<String>) {
    let (mut edits, mut added, mut whys) = (Vec::new(), Vec::new(), Vec::new());
    for (&index, w) in &s.widenings {
        let (Some(rule), Some(identity)) = (policy.rules.get(index), &w.identity) else {
            continue;
        };
        let before: Vec<String> = rule.namespaces.clone().unwrap_or_default();
        let rules_own = namespace_list(before.iter().map(String::as_str));
        let bound = match identity {
            Identity::ServiceAccount(sa) => w
                .resources
                .iter()
                .find_map(|r| s.bindings.cluster_wide(sa, r)),
            _ => None,
        };
        let bound = match bound {
            Some(binding) => format!(
                " (bound by ClusterRoleBinding {binding}, yet widened only as far as the evidence shows)"
            ),
            None => String::new(),
        };
        let mut why = format!(
            "rule \"{}\" ({}): {} in {}, outside its namespaces {rules_own}",
            w.rule,
            identity.username(),
            removals(w.would_deny, w.denied),
            namespace_list(w.namespaces.iter().map(String::as_str)),
        );
        let (partial, beyond) = beyond_evidence(rule, w);
        let (exact, partial): (BTreeSet<&String>, BTreeSet<&String>) =
            w.namespaces.iter().partition(|ns| !partial.contains(*ns));
        if !exact.is_empty() {
            let seen = namespace_list(exact.iter().map(|ns| ns.as_str()));
            why.push_str(&format!(
                ": {seen} added{bound}; its namespaces now {rules_own} (the rule's) and {seen} (seen in the evidence), no further (to let it act in every namespace, remove its namespaces by hand)"
            ));
            let namespaces: BTreeSet<String> = before
                .iter()
                .chain(exact.iter().copied())
                .cloned()
                .collect();
            edits.push(Edit {
                index,
                namespaces: namespaces.into_iter().collect(),
                why: why.clone(),
            });
        }
        if !partial.is_empty() {
            let seen = namespace_list(partial.iter().map(|ns| ns.as_str()));
            let there = Widening {
                places: w
                    .places
                    .iter()
                    .filter(|p| p.namespace.as_ref().is_some_and(|ns| partial.contains(ns)))
                    .cloned()
                    .collect(),
                ..w.clone()
            };
            let rules = beside(identity, &there, &rules_own);
            let bound = if exact.is_empty() { bound.as_str() } else { "" };
            why.push_str(&format!(
                "{}not widened in place to {seen}, as {beyond}{bound}; {} rule(s) added beside it for what was seen in {seen} (seen in the evidence), and no more",
                if exact.is_empty() { ": " } else { "; " },
                rules.len()
            ));
            added.extend(rules);
        }
        whys.push(why);
    }
    (edits, added, whys)
}

/// The `--merge` policy with the widenings the evidence calls for.
pub(super) struct Widened<'a> {
    /// Its text widened: edited in place (its comments kept), else
    /// re-serialized; or as it was, with no widening in place.
    pub texts: Vec<String>,
    /// Its rules, widened.
    pub rules: Vec<Rule>,
    /// The rules to add beside those that could not be widened in place
    /// without allowing more than the evidence shows.
    pub beside: Vec<Suggested<'a>>,
    /// What is said of each widened rule (unescaped).
    pub why: Vec<String>,
}

/// `policy` (its `text`) with the rules the evidence shows their controller
/// outside of widened ([`edits`]).
pub(super) fn widened<'a>(s: &'a Suggestions, text: &str, policy: &Policy) -> Widened<'a> {
    let (edits, beside, why) = edits(s, policy);
    let mut rules = policy.rules.clone();
    for edit in &edits {
        rules[edit.index].namespaces = Some(edit.namespaces.clone());
    }
    let texts: Vec<String> = if edits.is_empty() {
        vec![text.to_string()]
    } else {
        widen_in_place(text, &edits)
            .into_iter()
            .chain(widen_rewritten(text, &edits))
            .collect()
    };
    Widened {
        texts,
        rules,
        beside,
        why,
    }
}

/// Each of the policy's `texts` with the rule lines added: where its
/// `rules:` is (its comments kept), and re-serialized.
pub(super) fn with_rules(texts: &[String], lines: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for text in texts {
        out.extend(insert_rules(text, lines));
        out.push(rewrite(text, lines));
    }
    out
}

/// The line range of each item of the top-level `rules:` block sequence,
/// and the items' indent; `None` when the text is laid out otherwise.
fn rule_items(lines: &[&str]) -> Option<(usize, Vec<(usize, usize)>)> {
    let at = lines.iter().position(|l| l.trim_end() == "rules:")?;
    let next_key = |l: &str| !l.is_empty() && !l.starts_with([' ', '#', '-']);
    let mut end = at + 1;
    while end < lines.len() && !next_key(lines[end]) {
        end += 1;
    }
    let indent_of = |l: &str| l.len() - l.trim_start().len();
    let item = |l: &str| {
        let t = l.trim_start();
        t == "-" || t.starts_with("- ")
    };
    let first = (at + 1..end).find(|&i| item(lines[i]))?;
    let indent = indent_of(lines[first]);
    let starts: Vec<usize> = (first..end)
        .filter(|&i| item(lines[i]) && indent_of(lines[i]) == indent)
        .collect();
    let mut items = Vec::new();
    for (n, &start) in starts.iter().enumerate() {
        // Comments and blank lines before the next item belong to it.
        let stop =
            before_trailing_comments(lines, starts.get(n + 1).copied().unwrap_or(end), start);
        items.push((start, stop));
    }
    Some((indent, items))
}

/// The policy's text with each edited rule's `namespaces` rewritten where
/// it is written, a comment above the rule saying why, and
/// every other line kept; `None` when a rule is laid out otherwise (its
/// `namespaces` the item's first key, or a flow list over several lines).
fn widen_in_place(text: &str, edits: &[Edit]) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let (indent, items) = rule_items(&lines)?;
    let indent_of = |l: &str| l.len() - l.trim_start().len();
    // line index -> what replaces it (`None`: removed); comments before items.
    let mut replace: BTreeMap<usize, Option<String>> = BTreeMap::new();
    let mut before: BTreeMap<usize, String> = BTreeMap::new();
    for edit in edits {
        let &(start, stop) = items.get(edit.index)?;
        let key = (start + 1..stop).find(|&i| {
            let t = lines[i].trim_start();
            (t.starts_with("namespaces:") || t.starts_with("\"namespaces\":"))
                && indent_of(lines[i]) > indent
        })?;
        let key_indent = indent_of(lines[key]);
        let value = lines[key].trim_start().split_once(':')?.1.trim();
        let mut last = key;
        if value.is_empty() {
            // A block sequence: its items, indented at least as the key.
            while last + 1 < stop {
                let l = lines[last + 1];
                let t = l.trim_start();
                let deeper = indent_of(l) > key_indent;
                let item = indent_of(l) == key_indent && (t == "-" || t.starts_with("- "));
                if !t.is_empty() && (deeper || item) {
                    last += 1;
                } else {
                    break;
                }
            }
        } else if value.starts_with('[') && !value.ends_with(']') {
            return None;
        }
        let written = format!(
            "{}namespaces: {}",
            " ".repeat(key_indent),
            list(&edit.namespaces)
        );
        replace.insert(key, Some(written));
        for i in key + 1..=last {
            replace.insert(i, None);
        }
        before.insert(
            start,
            format!(
                "{}# widened by policy suggest: {}",
                " ".repeat(indent),
                comment(&edit.why)
            ),
        );
    }
    let mut out = String::with_capacity(text.len() + 256);
    for (i, line) in lines.iter().enumerate() {
        if let Some(c) = before.get(&i) {
            out.push_str(c);
            out.push('\n');
        }
        match replace.get(&i) {
            Some(Some(l)) => {
                out.push_str(l);
                out.push('\n');
            }
            Some(None) => {}
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    Some(out)
}

/// The fallback: the policy re-serialized with each edited rule's
/// `namespaces` rewritten (its comments are lost).
fn widen_rewritten(text: &str, edits: &[Edit]) -> Option<String> {
    let mut value: serde_yaml_ng::Value = crate::yaml::from_str(text, &crate::yaml::POLICY).ok()?;
    let rules = value.get_mut("rules")?.as_sequence_mut()?;
    for edit in edits {
        let rule = rules.get_mut(edit.index)?.as_mapping_mut()?;
        let list = edit
            .namespaces
            .iter()
            .cloned()
            .map(serde_yaml_ng::Value::String)
            .collect();
        rule.insert("namespaces".into(), serde_yaml_ng::Value::Sequence(list));
    }
    serde_yaml_ng::to_string(&value).ok()
}

/// Adds the rule lines to the policy's text where its top-level `rules:` is,
/// keeping every comment; `None` when the text is laid out otherwise.
fn insert_rules(text: &str, rules: &[String]) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|l| {
        let t = l.trim_end();
        t == "rules:" || t == "rules: []"
    });
    let Some(at) = at else {
        let mut out = text.trim_end().to_string();
        out.push_str("\nrules:\n");
        out.push_str(&indented(rules, "  "));
        return Some(out);
    };
    // The next top-level key: not blank, indented, a comment or a sequence item.
    let next_key = |l: &str| !l.is_empty() && !l.starts_with([' ', '#', '-']);
    // The block runs until the next top-level key.
    let mut end = at + 1;
    let mut indent = None;
    while end < lines.len() && !next_key(lines[end]) {
        if indent.is_none() && lines[end].trim_start().starts_with("- ") {
            let n = lines[end].len() - lines[end].trim_start().len();
            indent = Some(" ".repeat(n));
        }
        end += 1;
    }
    let empty = lines[at].trim_end() == "rules: []";
    if empty && indent.is_some() {
        return None;
    }
    let indent = indent.unwrap_or_else(|| "  ".into());
    // After the last item line, before trailing comments and blank lines.
    let insert = if empty {
        at + 1
    } else {
        before_trailing_comments(&lines, end, at)
    };
    let mut out: Vec<String> = lines[..at].iter().map(|l| l.to_string()).collect();
    out.push("rules:".into());
    out.extend(lines[at + 1..insert].iter().map(|l| l.to_string()));
    out.push(indented(rules, &indent).trim_end().to_string());
    out.extend(lines[insert..].iter().map(|l| l.to_string()));
    Some(out.join("\n") + "\n")
}

/// The fallback: the policy re-serialized with the rules added (its comments are lost).
fn rewrite(text: &str, rules: &[String]) -> String {
    let mut value: serde_yaml_ng::Value =
        crate::yaml::from_str(text, &crate::yaml::POLICY).unwrap_or_default();
    let existing = value
        .get("rules")
        .cloned()
        .unwrap_or(serde_yaml_ng::Value::Sequence(Vec::new()));
    if let serde_yaml_ng::Value::Mapping(map) = &mut value {
        map.remove("rules");
    }
    let mut out = String::new();
    if !matches!(&value, serde_yaml_ng::Value::Mapping(m) if m.is_empty()) {
        out.push_str(&serde_yaml_ng::to_string(&value).unwrap_or_default());
    }
    out.push_str("rules:\n");
    if let serde_yaml_ng::Value::Sequence(existing) = existing
        && !existing.is_empty()
    {
        let existing = serde_yaml_ng::to_string(&existing).unwrap_or_default();
        for line in existing.lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out.push_str(&indented(rules, "  "));
    out
}

/// `stop`, moved back over the comment and blank lines that end
/// `lines[..stop]`, never to `floor` or before it.
fn before_trailing_comments(lines: &[&str], mut stop: usize, floor: usize) -> usize {
    while stop > floor + 1 {
        let t = lines[stop - 1].trim_start();
        if t.is_empty() || t.starts_with('#') {
            stop -= 1;
        } else {
            break;
        }
    }
    stop
}

#[cfg(test)]
mod tests {
    use super::super::bindings::Bindings;
    use super::super::evidence::Seen;
    use super::super::fixtures::{
        CONTROLLER, SHIPPED, TENANT_BOT, apiserver, denial, evidence, removal, seen_at,
    };
    use super::super::render::render;
    use super::super::rules::{covered, suggest, suggest_with};
    use super::*;
    use crate::policy::{self, FinalizerField};

    #[test]
    fn a_merge_that_does_not_read_back_as_intended_is_not_printed_as_one() {
        let e = evidence(&[apiserver(
            "1",
            CONTROLLER,
            "would-deny",
            "widgets.example.com/a",
        )]);
        // The text and the policy disagree (mode): whatever is inserted, the
        // result does not read as that policy with the rule added.
        let policy = Policy::from_yaml("mode: enforce\nrules: []\n").unwrap();
        let text = "mode: warn\nrules: []\n";
        let out = render(&suggest(&e.seen, Some(&policy)), Some((text, &policy)));
        assert!(
            out.contains("# not merged: the policy did not read back with exactly these rules added:\n#   # suggested from 1"),
            "{out}"
        );
        assert!(
            out.contains("\n#   - name: \"widgets-widget-controller\"\n"),
            "{out}"
        );
        assert!(out.ends_with("\nmode: warn\nrules: []\n"), "{out}");
        assert!(Policy::from_yaml(&out).unwrap().rules.is_empty(), "{out}");
    }

    #[test]
    fn merged_into_the_shipped_policy_keeping_its_comments() {
        let e = evidence(&[apiserver(
            "1",
            CONTROLLER,
            "would-deny",
            "widgets.example.com/cleanup",
        )]);
        let base = Policy::from_yaml(SHIPPED).unwrap();
        let s = suggest(&e.seen, Some(&base));
        let merged = render(&s, Some((SHIPPED, &base)));
        let policy = Policy::from_yaml(&merged).unwrap();
        assert_eq!(policy.rules.len(), 1, "{merged}");
        assert_eq!(policy.mode, policy::Mode::Warn);
        assert!(
            merged.contains("# Examples:\n# - name: cert-manager"),
            "{merged}"
        );

        // Merged again: the rule is there, nothing is added twice.
        let again = suggest(&e.seen, Some(&policy));
        assert!(again.controllers.is_empty());
        assert_eq!(again.already_covered, 1);
        let twice = render(&again, Some((&merged, &policy)));
        assert_eq!(Policy::from_yaml(&twice).unwrap().rules.len(), 1);
    }

    #[test]
    fn merged_after_existing_rules_with_a_unique_name() {
        let text = "rules:\n  - name: widgets-widget-controller\n    finalizers: [other.example.com/x]\n    users: [bob]\n  # trailing comment\noverride:\n  reasons: [node-lost]\n";
        let base = Policy::from_yaml(text).unwrap();
        let e = evidence(&[apiserver(
            "1",
            CONTROLLER,
            "would-deny",
            "widgets.example.com/cleanup",
        )]);
        let merged = render(&suggest(&e.seen, Some(&base)), Some((text, &base)));
        let policy = Policy::from_yaml(&merged).unwrap();
        assert_eq!(policy.rules.len(), 2, "{merged}");
        assert_eq!(policy.rules[1].label, "widgets-widget-controller-2");
        assert_eq!(policy.override_settings.reasons, ["node-lost"]);
        assert!(merged.contains("# trailing comment"));

        // Flow-style rules: re-serialized, still valid.
        let flow = "rules: [{finalizers: [a/b], users: [bob]}]\n";
        let base = Policy::from_yaml(flow).unwrap();
        let merged = render(&suggest(&e.seen, Some(&base)), Some((flow, &base)));
        assert_eq!(
            Policy::from_yaml(&merged).unwrap().rules.len(),
            2,
            "{merged}"
        );
    }

    /// `presets:` rules come after the file's own: a merge compares the
    /// file's rules, and keeps `presets:`.
    #[test]
    fn merged_into_a_policy_with_presets() {
        let text = include_str!("../../../tests/fixtures/suggest/attack/base4.yaml");
        let base = Policy::from_yaml(text).unwrap();
        assert!(base.rules.iter().any(|r| r.label.starts_with("preset:")));
        let e = evidence(&[removal("1", TENANT_BOT, "team-a", "example.com/a", false)]);
        let merged = render(&suggest(&e.seen, Some(&base)), Some((text, &base)));
        assert!(!merged.contains("# not merged"), "{merged}");
        assert!(merged.contains("\npresets: [flux]\n"), "{merged}");
        let policy = Policy::from_yaml(&merged).unwrap();
        let own: Vec<&str> = policy
            .rules
            .iter()
            .map(|r| r.label.as_str())
            .filter(|l| !l.starts_with("preset:"))
            .collect();
        assert_eq!(own, ["x", "team-a-tenant-bot"], "{merged}");
        assert_eq!(policy.rules.len(), base.rules.len() + 1, "{merged}");
    }

    /// The enforce policy the warn-mode evidence made: the controller's rule
    /// scoped to the namespaces it was seen in.
    const SCOPED: &str = "mode: enforce\nrules:\n  # the widget controller\n  - name: widgets\n    finalizers: [\"example.com/a\"]\n    serviceAccounts: [\"widgets:widget-controller\"]\n    namespaces:\n      - team-a\n      - team-b\n    resources: [\"widgets.example.com\"]\n  - name: people\n    finalizers: [\"example.com/*\"]\n    groups: [\"oncall\"]\n    namespaces: [\"team-a\"]\n# the end\n";

    #[test]
    fn a_denied_controller_s_rule_is_widened_in_place() {
        let base = Policy::from_yaml(SCOPED).unwrap();
        let e = evidence(&[
            denial("1", CONTROLLER, "team-c", 403),
            denial("2", CONTROLLER, "team-c", 403),
            // A person denied: never a rule, never a widening.
            denial("3", "alice", "team-c", 403),
        ]);
        let s = suggest(&e.seen, Some(&base));
        assert_eq!(s.widenings.len(), 1, "{s:?}");
        assert!(s.controllers.is_empty(), "{s:?}");
        let merged = render(&s, Some((SCOPED, &base)));
        let policy = Policy::from_yaml(&merged).unwrap();
        assert_eq!(policy.rules.len(), 2, "{merged}");
        assert_eq!(
            policy.rules[0].namespaces,
            Some(vec!["team-a".into(), "team-b".into(), "team-c".into()]),
            "{merged}"
        );
        assert_eq!(policy.rules[1], base.rules[1], "{merged}");
        assert!(
            merged.starts_with(
                "# finalizer-guard policy suggest: 0 rule(s) for controllers, 1 widened\n"
            ),
            "{merged}"
        );
        assert!(
            merged.contains("  # the widget controller\n  # widened by policy suggest: rule \"widgets\" (system:serviceaccount:widgets:widget-controller): 2 denied removal(s) in team-c, outside its namespaces team-a, team-b: team-c added; its namespaces now team-a, team-b (the rule's) and team-c (seen in the evidence), no further (to let it act in every namespace, remove its namespaces by hand)\n  - name: widgets\n    finalizers: [\"example.com/a\"]\n    serviceAccounts: [\"widgets:widget-controller\"]\n    namespaces: [\"team-a\", \"team-b\", \"team-c\"]\n    resources: [\"widgets.example.com\"]\n  - name: people\n"),
            "{merged}"
        );
        assert!(merged.ends_with("# the end\n"), "{merged}");
        // Merged again: nothing more, and the text settles.
        let again = suggest(&e.seen, Some(&policy));
        assert!(
            again.widenings.is_empty() && again.controllers.is_empty(),
            "{again:?}"
        );
        assert_eq!(
            (again.already_covered, again.already_covered_denied),
            (2, 2)
        );
        let twice = render(&again, Some((&merged, &policy)));
        assert!(twice.starts_with("# finalizer-guard policy suggest: 0 rule(s) for controllers; 2 denied removal(s) the policy already allows\n"), "{twice}");
        assert_eq!(Policy::from_yaml(&twice).unwrap(), policy);

        // Where `namespaces` cannot be edited in place: re-serialized.
        let text = "mode: enforce\nrules:\n  - namespaces: [team-a]\n    finalizers: [\"example.com/a\"]\n    serviceAccounts: [\"widgets:widget-controller\"]\n    resources: [widgets.example.com]\n";
        let base = Policy::from_yaml(text).unwrap();
        let e = evidence(&[denial("1", CONTROLLER, "team-c", 403)]);
        let merged = render(&suggest(&e.seen, Some(&base)), Some((text, &base)));
        one_rule_for_team_a_and_team_c(&merged);
    }

    /// The policy `merged` holds, after checking it has one rule, for
    /// namespaces team-a and team-c.
    fn one_rule_for_team_a_and_team_c(merged: &str) -> Policy {
        let policy = Policy::from_yaml(merged).unwrap();
        assert_eq!(policy.rules.len(), 1, "{merged}");
        assert_eq!(
            policy.rules[0].namespaces,
            Some(vec!["team-a".into(), "team-c".into()]),
            "{merged}"
        );
        policy
    }

    /// Whether `policy` lets `user` remove `finalizer` from a `resource`
    /// object in `namespace` (`None`: cluster-scoped), by the webhook's own
    /// decision.
    fn allows(
        policy: &Policy,
        user: &str,
        resource: &str,
        namespace: Option<&str>,
        finalizer: &str,
    ) -> bool {
        let seen = Seen {
            username: user.into(),
            ..seen_at(resource, namespace, finalizer)
        };
        covered(policy, &seen, finalizer, FinalizerField::Metadata)
    }

    const OP: &str = "system:serviceaccount:team-a:op";

    /// The rule names no resources: a namespace added to it would let its
    /// ServiceAccount remove the finalizer from anything there, and its
    /// `namespaces` dropped from anything anywhere, cluster-scoped objects
    /// too. One denial in team-c allows that removal there, and nothing more.
    #[test]
    fn widening_allows_no_more_than_the_evidence_shows() {
        let text = "mode: enforce\nrules:\n  - name: team-a-op\n    finalizers: [\"example.com/cleanup\"]\n    serviceAccounts: [\"team-a:op\"]\n    namespaces: [team-a, team-b]\n";
        let base = Policy::from_yaml(text).unwrap();
        let e = evidence(&[removal("1", OP, "team-c", "example.com/cleanup", true)]);
        let s = suggest(&e.seen, Some(&base));
        assert_eq!(s.widenings.len(), 1, "{s:?}");
        let merged = render(&s, Some((text, &base)));
        let policy = Policy::from_yaml(&merged).unwrap();
        let f = "example.com/cleanup";
        let table = [
            // Seen: allowed now.
            ("widgets.example.com", Some("team-c"), true),
            // The rule's own, as before.
            ("widgets.example.com", Some("team-a"), true),
            ("secrets", Some("team-b"), true),
            // Nothing the evidence does not show.
            ("persistentvolumes", None, false),
            ("secrets", Some("kube-system"), false),
            ("secrets", Some("team-c"), false),
            ("widgets.example.com", Some("team-d"), false),
            ("clusterwidgets.example.com", None, false),
        ];
        for (resource, ns, want) in table {
            assert_eq!(
                allows(&base, OP, resource, ns, f),
                ns.is_some_and(|ns| ns == "team-a" || ns == "team-b"),
                "before: {resource} {ns:?}"
            );
            assert_eq!(
                allows(&policy, OP, resource, ns, f),
                want,
                "{resource} {ns:?}\n{merged}"
            );
        }
        // The rule is as it was; a rule beside it allows what was seen.
        assert_eq!(policy.rules[0], base.rules[0], "{merged}");
        assert_eq!(policy.rules.len(), 2, "{merged}");
        assert!(
            merged.contains("#   rule \"team-a-op\" (system:serviceaccount:team-a:op): 1 denied removal(s) in team-c, outside its namespaces team-a, team-b: not widened in place to team-c, as it names no resources, so every resource in team-c would be allowed; 1 rule(s) added beside it for what was seen in team-c (seen in the evidence), and no more\n"),
            "{merged}"
        );
        assert!(
            merged.ends_with("    namespaces: [team-a, team-b]\n  # widens rule \"team-a-op\" to what the evidence shows: example.com/cleanup on widgets.example.com in team-c (seen in the evidence; the rule's own namespaces: team-a, team-b)\n  - name: \"team-a-op-2\"\n    finalizers: [\"example.com/cleanup\"]\n    serviceAccounts: [\"team-a:op\"]\n    namespaces: [\"team-c\"]\n    resources: [\"widgets.example.com\"]\n"),
            "{merged}"
        );
        // Merged again: nothing more, and the text settles.
        let again = suggest(&e.seen, Some(&policy));
        assert!(again.widenings.is_empty(), "{again:?}");
        let twice = render(&again, Some((&merged, &policy)));
        assert_eq!(Policy::from_yaml(&twice).unwrap(), policy, "{twice}");
        // Seen in team-d later: the rule beside, which names its resource,
        // takes it in place.
        let e = evidence(&[removal("2", OP, "team-d", f, true)]);
        let s = suggest(&e.seen, Some(&policy));
        let third = render(&s, Some((&merged, &policy)));
        let third = Policy::from_yaml(&third).unwrap();
        assert_eq!(third.rules.len(), 2, "{third:?}");
        assert_eq!(
            third.rules[1].namespaces,
            Some(vec!["team-c".into(), "team-d".into()])
        );
    }

    /// Widened in place only where that allows nothing unseen: every
    /// finalizer and resource the rule names, in each namespace added.
    /// Otherwise a rule beside it names what was seen, by name and place.
    #[test]
    fn a_rule_naming_more_than_was_seen_is_not_widened_in_place() {
        let rule = |finalizers: &str, resources: &str| {
            format!(
                "rules:\n  - name: op\n    finalizers: {finalizers}\n    serviceAccounts: [\"team-a:op\"]\n    namespaces: [team-a, team-b]\n    resources: {resources}\n"
            )
        };
        let seen = |ns: &str, resource: &str, finalizer: &str| Seen {
            username: OP.into(),
            denied: true,
            ..seen_at(resource, Some(ns), finalizer)
        };
        let widgets = "widgets.example.com";
        let gadgets = "gadgets.example.com";
        let one_finalizer_two_resources = rule(
            "[example.com/a]",
            "[widgets.example.com, gadgets.example.com]",
        );
        // (rule, evidence, the rule's namespaces after, removals allowed
        // after, removals still denied)
        type Case<'a> = (
            String,
            Vec<Seen>,
            &'a [&'a str],
            Vec<(&'a str, &'a str, &'a str)>,
            Vec<(&'a str, &'a str, &'a str)>,
        );
        let table: Vec<Case> = vec![
            // A finalizer not seen in team-c.
            (
                rule("[example.com/a, example.com/b]", "[widgets.example.com]"),
                vec![seen("team-c", widgets, "example.com/a")],
                &["team-a", "team-b"],
                vec![("team-c", widgets, "example.com/a")],
                vec![("team-c", widgets, "example.com/b")],
            ),
            // A resource not seen in team-c.
            (
                one_finalizer_two_resources.clone(),
                vec![seen("team-c", widgets, "example.com/a")],
                &["team-a", "team-b"],
                vec![("team-c", widgets, "example.com/a")],
                vec![("team-c", gadgets, "example.com/a")],
            ),
            // Both seen in team-c, one in team-d alone: in place for
            // team-c, beside it for team-d, which gets no more than it showed.
            (
                one_finalizer_two_resources.clone(),
                vec![
                    seen("team-c", widgets, "example.com/a"),
                    seen("team-c", gadgets, "example.com/a"),
                    seen("team-d", widgets, "example.com/a"),
                ],
                &["team-a", "team-b", "team-c"],
                vec![
                    ("team-c", widgets, "example.com/a"),
                    ("team-c", gadgets, "example.com/a"),
                    ("team-d", widgets, "example.com/a"),
                ],
                vec![("team-d", gadgets, "example.com/a")],
            ),
        ];
        for (text, seen, namespaces, allowed, denied) in table {
            let base = Policy::from_yaml(&text).unwrap();
            let s = suggest(&seen, Some(&base));
            assert_eq!(s.widenings.len(), 1, "{s:?}");
            let merged = render(&s, Some((&text, &base)));
            assert!(!merged.contains("# not merged"), "{merged}");
            let policy = Policy::from_yaml(&merged).unwrap();
            let namespaces: Vec<String> = namespaces.iter().map(|s| s.to_string()).collect();
            assert_eq!(policy.rules[0].namespaces, Some(namespaces), "{merged}");
            assert_eq!(policy.rules.len(), 2, "{merged}");
            assert!(
                merged.contains(" as it would allow what the evidence does not show there: "),
                "{merged}"
            );
            for (ns, resource, f) in allowed {
                assert!(
                    allows(&policy, OP, resource, Some(ns), f),
                    "{ns} {resource} {f}\n{merged}"
                );
            }
            for (ns, resource, f) in denied {
                assert!(
                    !allows(&policy, OP, resource, Some(ns), f),
                    "{ns} {resource} {f}\n{merged}"
                );
            }
        }
    }

    /// A ClusterRoleBinding lets a rule be widened, as far as the evidence
    /// shows: never to every namespace.
    #[test]
    fn a_binding_widens_to_the_namespaces_seen_alone() {
        let text = "rules:\n  - name: op\n    finalizers: [\"example.com/a\"]\n    serviceAccounts: [\"team-a:op\"]\n    namespaces: [team-a]\n    resources: [widgets.example.com]\n";
        let base = Policy::from_yaml(text).unwrap();
        let rbac = Bindings::from_json(&serde_json::json!({"kind": "List", "items": [
            {"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["patch"]}]},
            {"kind": "ClusterRoleBinding", "metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "r"},
             "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "team-a"}]},
        ]}))
        .unwrap();
        let e = evidence(&[removal("1", OP, "team-c", "example.com/a", true)]);
        let s = suggest_with(&e.seen, Some(&base), rbac);
        let merged = render(&s, Some((text, &base)));
        let policy = one_rule_for_team_a_and_team_c(&merged);
        assert!(
            merged.contains(": team-c added (bound by ClusterRoleBinding b, yet widened only as far as the evidence shows); its namespaces now team-a (the rule's) and team-c (seen in the evidence)"),
            "{merged}"
        );
        let w = "widgets.example.com";
        assert!(allows(&policy, OP, w, Some("team-c"), "example.com/a"));
        assert!(!allows(&policy, OP, w, Some("team-d"), "example.com/a"));
    }
}
