//! `--merge`: the suggested rules added to a policy's text, keeping its
//! comments where its layout allows, and the rules of it the evidence
//! shows their controller outside of widened in place.

use std::collections::{BTreeMap, BTreeSet};

use super::identities::Identity;
use super::reach::{Reach, namespace_list, reach};
use super::rules::{Suggestions, removals};
use super::yaml::{comment, indented, list};
use crate::policy::Policy;
use crate::policy::config::Rule;

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

/// One rule of the `--merge` policy widened.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Edit {
    /// Its index among the policy's rules.
    index: usize,
    /// Its namespaces after: `None`, every namespace.
    namespaces: Option<Vec<String>>,
    /// What is said of it (unescaped).
    why: String,
}

/// The widenings of `policy`'s rules: each rule's namespaces with those the
/// evidence shows it in, as far as [`reach`] decides from all of them.
fn edits(s: &Suggestions, policy: &Policy) -> Vec<Edit> {
    let mut out = Vec::new();
    for (&index, w) in &s.widenings {
        let (Some(rule), Some(identity)) = (policy.rules.get(index), &w.identity) else {
            continue;
        };
        let before: Vec<String> = rule.namespaces.clone().unwrap_or_default();
        let all: BTreeSet<&str> = before
            .iter()
            .map(String::as_str)
            .chain(w.namespaces.iter().map(String::as_str))
            .collect();
        let bound = match identity {
            Identity::ServiceAccount(sa) => w
                .resources
                .iter()
                .find_map(|r| s.bindings.cluster_wide(sa, r)),
            _ => None,
        };
        let reach = reach(identity, &all, bound);
        let namespaces = match &reach {
            Reach::Namespaces(ns, _) => Some(ns.iter().cloned().collect()),
            Reach::ClusterScoped | Reach::ClusterWide(_) => None,
        };
        let why = format!(
            "rule \"{}\" ({}): {} in {}, outside its namespaces {}: {}; {}",
            w.rule,
            identity.username(),
            removals(w.would_deny, w.denied),
            namespace_list(w.namespaces.iter().map(String::as_str)),
            namespace_list(before.iter().map(String::as_str)),
            if namespaces.is_none() {
                "widened to every namespace"
            } else {
                "namespaces added"
            },
            reach.why()
        );
        out.push(Edit {
            index,
            namespaces,
            why,
        });
    }
    out
}

/// The `--merge` policy with the widenings the evidence calls for.
pub(super) struct Widened {
    /// Its text widened: edited in place (its comments kept), else
    /// re-serialized; or as it was, with no widening.
    pub texts: Vec<String>,
    /// Its rules, widened.
    pub rules: Vec<Rule>,
    /// What is said of each widened rule (unescaped).
    pub why: Vec<String>,
}

/// `policy` (its `text`) with the rules the evidence shows their controller
/// outside of widened ([`edits`]).
pub(super) fn widened(s: &Suggestions, text: &str, policy: &Policy) -> Widened {
    let edits = edits(s, policy);
    let mut rules = policy.rules.clone();
    for edit in &edits {
        rules[edit.index].namespaces.clone_from(&edit.namespaces);
    }
    let texts: Vec<String> = if edits.is_empty() {
        vec![text.to_string()]
    } else {
        widen_in_place(text, &edits)
            .into_iter()
            .chain(widen_rewritten(text, &edits))
            .collect()
    };
    let why = edits.into_iter().map(|edit| edit.why).collect();
    Widened { texts, rules, why }
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
        let mut stop = starts.get(n + 1).copied().unwrap_or(end);
        // Comments and blank lines before the next item belong to it.
        while stop > start + 1 {
            let t = lines[stop - 1].trim_start();
            if t.is_empty() || t.starts_with('#') {
                stop -= 1;
            } else {
                break;
            }
        }
        items.push((start, stop));
    }
    Some((indent, items))
}

/// The policy's text with each edited rule's `namespaces` rewritten (or
/// removed) where it is written, a comment above the rule saying why, and
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
        let written = edit
            .namespaces
            .as_ref()
            .map(|ns| format!("{}namespaces: {}", " ".repeat(key_indent), list(ns)));
        replace.insert(key, written);
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
        match &edit.namespaces {
            Some(ns) => {
                let list = ns
                    .iter()
                    .cloned()
                    .map(serde_yaml_ng::Value::String)
                    .collect();
                rule.insert("namespaces".into(), serde_yaml_ng::Value::Sequence(list));
            }
            None => {
                rule.remove("namespaces");
            }
        }
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
    let mut insert = end;
    if !empty {
        while insert > at + 1 {
            let l = lines[insert - 1].trim_start();
            if l.is_empty() || l.starts_with('#') {
                insert -= 1;
            } else {
                break;
            }
        }
    } else {
        insert = at + 1;
    }
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

#[cfg(test)]
mod tests {
    use super::super::fixtures::{
        CONTROLLER, SHIPPED, TENANT_BOT, apiserver, denial, evidence, removal,
    };
    use super::super::render::render;
    use super::super::rules::suggest;
    use super::*;
    use crate::policy;

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
        assert_eq!(policy.rules[0].namespaces, None, "{merged}");
        assert_eq!(policy.rules[1], base.rules[1], "{merged}");
        assert!(
            merged.starts_with(
                "# finalizer-guard policy suggest: 0 rule(s) for controllers, 1 widened\n"
            ),
            "{merged}"
        );
        assert!(
            merged.contains("  # the widget controller\n  # widened by policy suggest: rule \"widgets\" (system:serviceaccount:widgets:widget-controller): 2 denied removal(s) in team-c, outside its namespaces team-a, team-b: widened to every namespace; seen in team-a, team-b, team-c: acts cluster-wide\n  - name: widgets\n    finalizers: [\"example.com/a\"]\n    serviceAccounts: [\"widgets:widget-controller\"]\n    resources: [\"widgets.example.com\"]\n  - name: people\n"),
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
        let text = "mode: enforce\nrules:\n  - namespaces: [team-a]\n    finalizers: [\"example.com/a\"]\n    serviceAccounts: [\"widgets:widget-controller\"]\n";
        let base = Policy::from_yaml(text).unwrap();
        let e = evidence(&[denial("1", CONTROLLER, "team-c", 403)]);
        let merged = render(&suggest(&e.seen, Some(&base)), Some((text, &base)));
        let policy = Policy::from_yaml(&merged).unwrap();
        assert_eq!(policy.rules.len(), 1, "{merged}");
        assert_eq!(policy.rules[0].namespaces, None, "{merged}");
    }
}
