//! The policy YAML `policy suggest` prints ([`render`]): a comment header
//! saying what was seen and left out, then the suggested rules, alone or
//! merged into the `--merge` policy, read back before they are printed.

use std::collections::BTreeSet;

use super::identities::Identity;
use super::merge::{faithful, widened, with_rules};
use super::rules::{Suggested, Suggestions, removals};
use super::yaml::{comment, indented, list, quoted};
use crate::policy::Policy;
use crate::policy::config::{FinalizerPattern, Rule};

/// A rule name from an identity, unique among `taken`.
fn rule_name(identity: &Identity, taken: &mut BTreeSet<String>) -> String {
    let base = match identity {
        Identity::ServiceAccount(sa) => sa.clone(),
        other => other.username().into_owned(),
    };
    let base: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut name = base.clone();
    let mut n = 2;
    while taken.contains(&name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    taken.insert(name.clone());
    name
}

/// A suggested rule's lines (a sequence item, unindented) and the rule as
/// the policy reads it back; `Err` with why when it does not read back as
/// written, which the escaping and the checks above leave for bugs alone.
fn rule_lines(rule: &Suggested<'_>, name: &str) -> Result<(Vec<String>, Rule), String> {
    let mut lines = vec![
        format!("- name: {}", quoted(name)),
        format!("  finalizers: {}", list(&rule.finalizers)),
    ];
    let (users, service_accounts) = match rule.identity {
        Identity::ServiceAccount(sa) => {
            lines.push(format!(
                "  serviceAccounts: {}",
                list(std::slice::from_ref(sa))
            ));
            (Vec::new(), vec![rule.identity.username().into_owned()])
        }
        other => {
            let user = other.username().into_owned();
            lines.push(format!("  users: {}", list(std::slice::from_ref(&user))));
            (vec![user], Vec::new())
        }
    };
    if let Some(namespaces) = &rule.namespaces {
        lines.push(format!("  namespaces: {}", list(namespaces)));
    }
    lines.push(format!("  resources: {}", list(&rule.resources)));
    let text = format!("rules:\n{}\n", lines.join("\n"));
    let policy = Policy::from_yaml(&text).map_err(|e| e.to_string())?;
    let [read] = policy.rules.as_slice() else {
        return Err("not one rule".into());
    };
    let resources: Vec<String> = read
        .resources
        .iter()
        .flatten()
        .map(|r| match r.group.as_str() {
            "" => r.resource.clone(),
            group => format!("{}.{group}", r.resource),
        })
        .collect();
    let finalizers: Vec<String> = read
        .finalizers
        .iter()
        .map(|p| match p {
            FinalizerPattern::Exact(f) => f.clone(),
            FinalizerPattern::Prefix(prefix) => format!("{prefix}*"),
        })
        .collect();
    let faithful = read.label == name
        && finalizers == rule.finalizers
        && read.users == users
        && read.groups.is_empty()
        && read.service_accounts == service_accounts
        && read.namespaces == rule.namespaces
        && resources == rule.resources;
    if !faithful {
        return Err("it does not read back as written".into());
    }
    Ok((lines, read.clone()))
}

/// Each rule's lines after a comment saying why it reaches as far as it
/// does, added to `lines` and `rules`; a rule that would not read back as
/// written is left a comment.
fn push_rules<'a>(
    suggested: impl IntoIterator<Item = Suggested<'a>>,
    taken: &mut BTreeSet<String>,
    lines: &mut Vec<String>,
    rules: &mut Vec<Rule>,
) {
    for rule in suggested {
        let name = rule_name(rule.identity, taken);
        match rule_lines(&rule, &name) {
            Ok((text, read)) => {
                lines.push(format!("# {}", comment(rule.reach.why())));
                lines.extend(text);
                rules.push(read);
            }
            Err(why) => lines.push(format!(
                "# not suggested for {}: {}",
                comment(&rule.identity.username()),
                comment(&why)
            )),
        }
    }
}

/// The suggested rules, each controller's after a comment line saying what
/// it was seen doing: the lines (unindented) and the rules they hold. A rule
/// that would not read back as written is left a comment.
fn rules_block(s: &Suggestions, taken: &mut BTreeSet<String>) -> (Vec<String>, Vec<Rule>) {
    let mut lines = Vec::new();
    let mut rules = Vec::new();
    for (identity, activity) in &s.controllers {
        let suggested = activity.rules(identity, &s.bindings);
        if suggested.is_empty() {
            continue;
        }
        let counts: Vec<String> = activity
            .finalizers
            .iter()
            .map(|((f, _), n)| format!("{} x{n}", comment(f)))
            .collect();
        lines.push(format!(
            "# suggested from {}, {}: {}",
            activity.removals(),
            activity.when(),
            counts.join(", ")
        ));
        push_rules(suggested, taken, &mut lines, &mut rules);
    }
    (lines, rules)
}

/// The identities that get no rule, and what could not be written: one
/// comment line each.
pub fn people_comments(s: &Suggestions) -> String {
    let mut out = String::new();
    if !s.people.is_empty() {
        out.push_str(PEOPLE);
        out.push('\n');
    }
    for (identity, activity) in &s.people {
        let what: Vec<String> = activity
            .finalizers
            .iter()
            .map(|((f, _), n)| format!("{} x{n}", comment(f)))
            .collect();
        let resources: Vec<String> = activity.resources.iter().map(|r| comment(r)).collect();
        out.push_str(&format!(
            "#   {}{}: stripped {} in {} removal(s) from {}; {}\n",
            comment(&identity.username()),
            identity.why_not(),
            what.join(", "),
            activity.count,
            resources.join(", "),
            activity.when()
        ));
    }
    let left_out: Vec<(&Identity, &String, &usize)> = s
        .controllers
        .iter()
        .flat_map(|(identity, a)| a.left_out.iter().map(move |(what, n)| (identity, what, n)))
        .collect();
    if !left_out.is_empty() {
        out.push_str(LEFT_OUT);
        out.push('\n');
    }
    for (identity, what, n) in left_out {
        out.push_str(&format!(
            "#   {}: {} x{n}\n",
            comment(&identity.username()),
            comment(what)
        ));
    }
    out
}

/// The first line `render` writes.
const HEADER: &str = "# finalizer-guard policy suggest:";
const NOT_SUGGESTED: &str = "# Not suggested (denials anyone can produce, finalizers of Kubernetes' own controllers, names cut in the evidence):";
/// What [`NOT_SUGGESTED`] read before names cut in the evidence were noted
/// there: recognized, so that an older header is replaced too.
const NOT_SUGGESTED_BEFORE: &str =
    "# Not suggested (denials anyone can produce, finalizers of Kubernetes' own controllers):";
const PEOPLE: &str = "# People seen removing finalizers no rule allows (never made rules: an override, with its reason, is how a person releases an object):";
const LEFT_OUT: &str = "# Left out: removals no rule is suggested for (a finalizer, resource or namespace no rule can name, or a cluster-wide rule the evidence does not support):";
/// The header's line above the widened rules.
const WIDENED: &str = "# Widened: rules of this policy the evidence shows their controller outside of (a rule scoped to namespaces breaks on the next one), as far as the evidence shows and no further:";
/// What [`WIDENED`] read before widening was held to the evidence.
const WIDENED_BEFORE: &str = "# Widened: rules of this policy the evidence shows their controller outside of (a rule scoped to namespaces breaks on the next one):";

/// `text` without the comments an earlier `policy suggest` wrote at its top,
/// so that merging again does not pile them up.
fn without_old_header(text: &str) -> &str {
    if !text.starts_with(HEADER) {
        return text;
    }
    let mut rest = text;
    let mut first = true;
    while let Some((line, after)) = rest.split_once('\n') {
        let ours = first
            || line.starts_with("#   ")
            || line == PEOPLE
            || line == LEFT_OUT
            || line == WIDENED
            || line == WIDENED_BEFORE
            || line == NOT_SUGGESTED
            || line == NOT_SUGGESTED_BEFORE
            || line.starts_with("# not merged:");
        if !ours {
            break;
        }
        first = false;
        rest = after;
    }
    rest
}

/// The policy YAML: the suggestions alone, or `base` (its text) with them
/// added. Either is read back before it is printed: when it does not read as
/// `base` (or an empty policy) with exactly the suggested rules added, the
/// rules are printed as comments and the policy is left as it was.
pub fn render(s: &Suggestions, base: Option<(&str, &Policy)>) -> String {
    let mut taken: BTreeSet<String> = base
        .map(|(_, p)| p.rules.iter().map(|r| r.label.clone()).collect())
        .unwrap_or_default();
    let (mut lines, mut rules) = rules_block(s, &mut taken);
    let mut header = header(s, rules.len());
    let empty;
    let (text, policy) = match base {
        Some((text, policy)) => (without_old_header(text), policy),
        None => match Policy::from_yaml("rules: []\n") {
            Ok(p) => {
                empty = p;
                ("", &empty)
            }
            Err(_) => return header,
        },
    };
    let widening = widened(s, text, policy);
    // What a rule could not be widened to in place: rules of their own.
    push_rules(
        widening.beside.iter().cloned(),
        &mut taken,
        &mut lines,
        &mut rules,
    );
    if !widening.why.is_empty() {
        header.push_str(WIDENED);
        header.push('\n');
    }
    for why in &widening.why {
        header.push_str(&format!("#   {}\n", comment(why)));
    }
    let candidates = if rules.is_empty() {
        // Nothing to add: what could not be written stays a comment.
        header.push_str(&indented(&lines, ""));
        if base.is_some() {
            widening.texts
        } else {
            vec!["rules: []\n".to_string()]
        }
    } else if base.is_none() {
        vec![format!("rules:\n{}", indented(&lines, "  "))]
    } else {
        with_rules(&widening.texts, &lines)
    };
    for candidate in candidates {
        if faithful(&candidate, policy, &widening.rules, &rules) {
            return format!("{header}{candidate}");
        }
    }
    let kept = if base.is_some() { text } else { "rules: []\n" };
    let widened = if widening.why.is_empty() {
        ""
    } else {
        " and those widened"
    };
    format!(
        "{header}# not merged: the policy did not read back with exactly these rules added{widened}:\n{}{kept}",
        indented(&lines, "#   ")
    )
}

/// The comments above the policy: how many rules, the identities that get
/// none, and what was not suggested.
fn header(s: &Suggestions, rules: usize) -> String {
    let mut header = format!("{HEADER} {rules} rule(s) for controllers");
    if !s.widenings.is_empty() {
        header.push_str(&format!(", {} widened", s.widenings.len()));
    }
    if s.already_covered > 0 {
        header.push_str(&format!(
            "; {} the policy already allows",
            removals(
                s.already_covered - s.already_covered_denied,
                s.already_covered_denied
            )
        ));
    }
    header.push('\n');
    header.push_str(&people_comments(s));
    let notes = s.notes();
    if !notes.is_empty() {
        header.push_str(NOT_SUGGESTED);
        header.push('\n');
    }
    for note in notes {
        header.push_str(&format!("#   {}\n", comment(&note)));
    }
    header
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::bindings::Bindings;
    use super::super::fixtures::{apiserver, evidence};
    use super::super::rules::suggest;
    use super::*;

    /// What the evidence and `--bindings` name reaches the YAML's comments
    /// escaped: a ClusterRoleBinding's name cannot end the comment line.
    #[test]
    fn a_binding_s_name_cannot_break_out_of_its_comment() {
        let own = "system:serviceaccount:team-a:widget-controller";
        let e = evidence(&[apiserver("1", own, "would-deny", "example.com/a")]);
        let mut s = suggest(&e.seen, None);
        let yaml = render(&s, None);
        assert!(
            yaml.contains("  # seen only in its own namespace team-a\n"),
            "{yaml}"
        );
        assert_eq!(
            Policy::from_yaml(&yaml).unwrap().rules[0].namespaces,
            Some(vec!["team-a".to_string()])
        );
        let evil = "x\nrules: []\n- name: all\n  finalizers: [\"*\"]\u{2028}";
        s.bindings = Bindings::from_json(&json!({"kind": "List", "items": [
            {"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["update"]}]},
            {"kind": "ClusterRoleBinding", "metadata": {"name": evil}, "roleRef": {"kind": "ClusterRole", "name": "r"},
             "subjects": [{"kind": "ServiceAccount", "name": "widget-controller", "namespace": "team-a"}]},
        ]}))
        .unwrap();
        let yaml = render(&s, None);
        assert!(
            yaml.contains("  # bound by ClusterRoleBinding x\\nrules: []\\n- name: all\\n  finalizers: [\"*\"]\\u2028: acts cluster-wide\n"),
            "{yaml}"
        );
        let policy = Policy::from_yaml(&yaml).unwrap();
        assert_eq!(policy.rules.len(), 1, "{yaml}");
        assert_eq!(policy.rules[0].namespaces, None, "{yaml}");
        assert!(yaml.lines().all(|l| !l.contains('\u{2028}')), "{yaml}");
    }
}
