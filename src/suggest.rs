//! `policy suggest`: rules for the controllers seen in warn mode's `would-deny`
//! evidence.
//!
//! Three kinds of evidence are told apart by their content, line by line or
//! file by file:
//! - the webhook's own audit records (`kind: FinalizerRemoval`, one JSON line each);
//! - recordings written by `serve --record-dir` (`kind: Recording`, one per file);
//! - kube-apiserver's audit log (`audit.k8s.io/v1` Events), whose
//!   `finalizers.finalizer-guard.io/*` annotations say what was decided.
//!
//! Only `would-deny` evidence counts. Each identity is either a controller or
//! a person ([`Identity::classify`]): a controller gets one rule, a person a
//! comment line, never a rule: overrides are how people remove finalizers.
//!
//! Parsing ([`parse_line`], [`parse_recording`]) and suggesting ([`suggest`],
//! [`render`]) are pure; only [`read_path`] touches files.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::BufRead;
use std::path::Path;

use serde_json::Value;

use crate::cluster::WEBHOOK_NAME;
use crate::policy::{
    self, Change, FinalizerField, FinalizerLists, Operation, Policy, Requester, Target,
};

/// The kinds of evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    WebhookAudit,
    Recording,
    ApiserverAudit,
}

impl Source {
    pub fn describe(self) -> &'static str {
        match self {
            Source::WebhookAudit => "webhook audit records",
            Source::Recording => "recordings",
            Source::ApiserverAudit => "kube-apiserver audit events",
        }
    }
}

/// One `would-deny` removal: who removed which unauthorized finalizers, where, when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub username: String,
    pub groups: Vec<String>,
    pub finalizers: Vec<(String, FinalizerField)>,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: Option<String>,
    pub name: String,
    pub time: Option<jiff::Timestamp>,
    /// kube-apiserver's audit ID: its events repeat per stage.
    pub audit_id: Option<String>,
}

/// What one line (or file) is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Evidence of a kind this command reads, `Some` when it is a `would-deny`.
    Evidence(Source, Option<Box<Seen>>),
    /// Not evidence.
    Other,
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

fn time(value: &Value) -> Option<jiff::Timestamp> {
    value.as_str()?.parse().ok()
}

fn split_list(value: Option<&str>) -> Vec<String> {
    value
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// One line of a log: a webhook audit record, a kube-apiserver audit event, or neither.
pub fn parse_line(line: &str) -> Parsed {
    let Ok(value) = serde_json::from_str::<Value>(line) else {
        return Parsed::Other;
    };
    if value["kind"] == "FinalizerRemoval" && value.get("decision").is_some() {
        return Parsed::Evidence(Source::WebhookAudit, webhook_record(&value).map(Box::new));
    }
    if value["kind"] == "Event"
        && value["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("audit.k8s.io/"))
    {
        return Parsed::Evidence(
            Source::ApiserverAudit,
            apiserver_event(&value).map(Box::new),
        );
    }
    Parsed::Other
}

fn webhook_record(value: &Value) -> Option<Seen> {
    if value["decision"] != "would-deny" {
        return None;
    }
    let finalizers: Vec<(String, FinalizerField)> = value["removedFinalizers"]
        .as_array()?
        .iter()
        .filter(|r| r.get("authorizedBy").is_none_or(Value::is_null))
        .filter_map(|r| {
            let field = if r["field"] == "spec.finalizers" {
                FinalizerField::Spec
            } else {
                FinalizerField::Metadata
            };
            Some((r["finalizer"].as_str()?.to_string(), field))
        })
        .collect();
    if finalizers.is_empty() {
        return None;
    }
    let resource = text(&value["resource"]);
    let (resource, group) = match resource.split_once('.') {
        Some((r, g)) => (r.to_string(), g.to_string()),
        None => (resource, String::new()),
    };
    Some(Seen {
        username: text(&value["user"]),
        groups: strings(&value["groups"]),
        finalizers,
        group,
        resource,
        subresource: text(&value["subresource"]),
        namespace: value["namespace"].as_str().map(String::from),
        name: text(&value["name"]),
        time: time(&value["time"]),
        audit_id: None,
    })
}

fn apiserver_event(value: &Value) -> Option<Seen> {
    let annotations = value["annotations"].as_object()?;
    let annotation = |key: &str| {
        annotations
            .get(&format!("{WEBHOOK_NAME}/{key}"))
            .and_then(Value::as_str)
    };
    if annotation("decision") != Some("would-deny") {
        return None;
    }
    let finalizers: Vec<(String, FinalizerField)> =
        split_list(annotation("unauthorized-finalizers"))
            .into_iter()
            .map(|f| (f, FinalizerField::Metadata))
            .chain(
                split_list(annotation("unauthorized-spec-finalizers"))
                    .into_iter()
                    .map(|f| (f, FinalizerField::Spec)),
            )
            .collect();
    if finalizers.is_empty() {
        return None;
    }
    let object = &value["objectRef"];
    Some(Seen {
        username: text(&value["user"]["username"]),
        groups: strings(&value["user"]["groups"]),
        finalizers,
        group: text(&object["apiGroup"]),
        resource: text(&object["resource"]),
        subresource: text(&object["subresource"]),
        namespace: object["namespace"].as_str().map(String::from),
        name: text(&object["name"]),
        time: time(&value["requestReceivedTimestamp"]),
        audit_id: value["auditID"].as_str().map(String::from),
    })
}

/// A recording file's content, parsed; `Other` unless it is a recording.
pub fn parse_recording(value: &Value) -> Parsed {
    if value["kind"] != crate::recording::KIND
        || value["apiVersion"] != crate::recording::API_VERSION
    {
        return Parsed::Other;
    }
    Parsed::Evidence(Source::Recording, recording(value).map(Box::new))
}

/// A recording names the removed finalizers, not which were unauthorized:
/// those a built-in controller owns are left out, and `--merge`'s rules
/// drop the ones it already covers.
fn recording(value: &Value) -> Option<Seen> {
    if value["decision"] != "would-deny" {
        return None;
    }
    let request = &value["review"]["request"];
    let username = text(&request["userInfo"]["username"]);
    let builtins = Policy::embedded_default();
    let removed = |field: FinalizerField, old: &Value, new: &Value| {
        let new = strings(new);
        strings(old)
            .into_iter()
            .filter(|f| !new.contains(f))
            .filter(|f| builtins.builtin_owner(&username, f, field).is_none())
            .map(|f| (f, field))
            .collect::<Vec<_>>()
    };
    let mut finalizers = removed(
        FinalizerField::Metadata,
        &request["oldObject"]["metadata"]["finalizers"],
        &request["object"]["metadata"]["finalizers"],
    );
    if request["subResource"] == "finalize" {
        finalizers.extend(removed(
            FinalizerField::Spec,
            &request["oldObject"]["spec"]["finalizers"],
            &request["object"]["spec"]["finalizers"],
        ));
    }
    if finalizers.is_empty() {
        return None;
    }
    Some(Seen {
        username: username.clone(),
        groups: strings(&request["userInfo"]["groups"]),
        finalizers,
        group: text(&request["resource"]["group"]),
        resource: text(&request["resource"]["resource"]),
        subresource: text(&request["subResource"]),
        namespace: request["namespace"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(String::from),
        name: text(&request["name"]),
        time: time(&value["recordedAt"]),
        audit_id: None,
    })
}

/// What was read from the paths.
#[derive(Debug, Default)]
pub struct Evidence {
    pub seen: Vec<Seen>,
    /// Evidence entries read, per kind (would-deny or not).
    pub read: BTreeMap<Source, usize>,
    audit_ids: HashSet<String>,
}

impl Evidence {
    /// Adds one parsed line or file; `false` when it was not evidence.
    pub fn add(&mut self, parsed: Parsed) -> bool {
        match parsed {
            Parsed::Other => false,
            Parsed::Evidence(source, seen) => {
                *self.read.entry(source).or_default() += 1;
                if let Some(seen) = seen {
                    // kube-apiserver writes an event per stage of one request.
                    let fresh = match &seen.audit_id {
                        Some(id) => self.audit_ids.insert(id.clone()),
                        None => true,
                    };
                    if fresh {
                        self.seen.push(*seen);
                    }
                }
                true
            }
        }
    }
}

/// Reads a file or a folder (recursively) into `evidence`. A file with no
/// evidence of any kind is an error: the wrong path, most likely.
pub fn read_path(path: &Path, evidence: &mut Evidence) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        entries.sort();
        let before: usize = evidence.read.values().sum();
        for entry in entries {
            if entry.is_dir() {
                read_path(&entry, evidence)?;
            } else if read_file(&entry, evidence)? == 0 {
                eprintln!("note: {}: no evidence in it, skipped", entry.display());
            }
        }
        if evidence.read.values().sum::<usize>() == before {
            return Err(format!(
                "{}: no webhook audit records, recordings or kube-apiserver audit events in this folder",
                path.display()
            ));
        }
        return Ok(());
    }
    if read_file(path, evidence)? == 0 {
        return Err(format!(
            "{}: neither webhook audit records (JSON lines), a recording, nor a kube-apiserver audit log",
            path.display()
        ));
    }
    Ok(())
}

/// How many evidence entries the file held.
fn read_file(path: &Path, evidence: &mut Evidence) -> Result<usize, String> {
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(err)?;
    let mut reader = std::io::BufReader::new(file);
    let mut first = String::new();
    reader.read_line(&mut first).map_err(err)?;
    let mut found = 0;
    // A recording is one pretty-printed JSON document; logs are JSON lines.
    if first.trim() == "{" {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut reader, &mut rest).map_err(err)?;
        if let Ok(value) = serde_json::from_str::<Value>(&format!("{first}{rest}")) {
            found += usize::from(evidence.add(parse_recording(&value)));
        }
        return Ok(found);
    }
    found += usize::from(evidence.add(parse_line(&first)));
    for line in reader.lines() {
        let line = line.map_err(err)?;
        found += usize::from(evidence.add(parse_line(&line)));
    }
    Ok(found)
}

/// Who removed a finalizer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Identity {
    /// `system:serviceaccount:NS:NAME`, as `NS:NAME`.
    ServiceAccount(String),
    /// Another identity of software: `system:*` users (the control plane,
    /// nodes), and anyone in the `system:nodes` group.
    SystemUser(String),
    /// Anyone else: a person, who gets an override, never a rule.
    Person(String),
}

impl Identity {
    /// Service accounts and `system:` identities are software; every other
    /// username (alice, alice@example.com, an OIDC subject) is taken for a
    /// person. A controller running under a personal-looking identity (a
    /// client certificate's CN, say) is reported as a person: give it a
    /// ServiceAccount, or write its rule by hand.
    pub fn classify(username: &str, groups: &[String]) -> Identity {
        if let Some(sa) = username.strip_prefix("system:serviceaccount:")
            && sa.split_once(':').is_some()
        {
            return Identity::ServiceAccount(sa.to_string());
        }
        if username.starts_with("system:") || groups.iter().any(|g| g == "system:nodes") {
            return Identity::SystemUser(username.to_string());
        }
        Identity::Person(username.to_string())
    }
}

/// What one identity was seen doing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Activity {
    /// Removals (requests).
    pub count: usize,
    pub finalizers: BTreeMap<(String, FinalizerField), usize>,
    /// `resource` or `resource.group`.
    pub resources: BTreeSet<String>,
    pub namespaces: BTreeSet<String>,
    pub first: Option<jiff::Timestamp>,
    pub last: Option<jiff::Timestamp>,
}

impl Activity {
    fn add(&mut self, seen: &Seen, finalizers: &[(String, FinalizerField)]) {
        self.count += 1;
        for f in finalizers {
            *self.finalizers.entry(f.clone()).or_default() += 1;
        }
        self.resources.insert(if seen.group.is_empty() {
            seen.resource.clone()
        } else {
            format!("{}.{}", seen.resource, seen.group)
        });
        if let Some(ns) = &seen.namespace {
            self.namespaces.insert(ns.clone());
        }
        if let Some(t) = seen.time {
            self.first = Some(self.first.map_or(t, |f| f.min(t)));
            self.last = Some(self.last.map_or(t, |l| l.max(t)));
        }
    }

    fn when(&self) -> String {
        match (self.first, self.last) {
            (Some(f), Some(l)) if f == l => format!("seen {f}"),
            (Some(f), Some(l)) => format!("first seen {f}, last {l}"),
            _ => "time unknown".into(),
        }
    }
}

/// The suggestions: one rule per controller identity, a summary per person.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Suggestions {
    pub controllers: BTreeMap<Identity, Activity>,
    pub people: BTreeMap<String, Activity>,
    /// Would-deny removals the `--merge` policy already allows.
    pub already_covered: usize,
}

/// Whether `policy` already lets `seen`'s requester remove `finalizer` there.
fn covered(policy: &Policy, seen: &Seen, finalizer: &str, field: FinalizerField) -> bool {
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
    let none = BTreeMap::new();
    let change = Change {
        operation: Operation::Update,
        target: Target {
            group: &seen.group,
            resource: &seen.resource,
            subresource: &seen.subresource,
            namespace: seen.namespace.as_deref(),
            name: &seen.name,
        },
        requester: Requester {
            username: &seen.username,
            groups: &groups,
        },
        metadata_finalizers: if field == FinalizerField::Metadata {
            lists
        } else {
            FinalizerLists::default()
        },
        spec_finalizers: if field == FinalizerField::Spec {
            lists
        } else {
            FinalizerLists::default()
        },
        annotations: &none,
        old_annotations: &none,
        deleting: true,
        now: jiff::Timestamp::UNIX_EPOCH,
        uid: None,
        seal_key: None,
    };
    policy::decide(&change, policy)
        .removed
        .iter()
        .all(|r| r.authorized_by.is_some())
}

/// Groups the evidence by identity; with `base`, drops what it already allows.
pub fn suggest(seen: &[Seen], base: Option<&Policy>) -> Suggestions {
    let mut out = Suggestions::default();
    for s in seen {
        let finalizers: Vec<(String, FinalizerField)> = s
            .finalizers
            .iter()
            .filter(|(f, field)| base.is_none_or(|p| !covered(p, s, f, *field)))
            .cloned()
            .collect();
        if finalizers.is_empty() {
            out.already_covered += 1;
            continue;
        }
        match Identity::classify(&s.username, &s.groups) {
            Identity::Person(name) => out.people.entry(name).or_default().add(s, &finalizers),
            software => out
                .controllers
                .entry(software)
                .or_default()
                .add(s, &finalizers),
        }
    }
    out
}

/// Domains whose finalizers belong to Kubernetes itself: never widened to a prefix.
fn reserved(domain: &str) -> bool {
    ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|d| domain == *d || domain.ends_with(&format!(".{d}")))
}

/// The finalizer patterns for one identity: names sharing a `domain/` prefix
/// become `domain/*` when there are two or more of them.
pub fn patterns<'a>(finalizers: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut by_prefix: BTreeMap<Option<&str>, BTreeSet<&str>> = BTreeMap::new();
    for f in finalizers {
        let prefix = f.split_once('/').map(|(d, _)| d).filter(|d| !reserved(d));
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

fn yaml_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| yaml_string(s)).collect();
    format!("[{}]", quoted.join(", "))
}

/// A rule name from an identity, unique among `taken`.
fn rule_name(identity: &Identity, taken: &mut BTreeSet<String>) -> String {
    let base = match identity {
        Identity::ServiceAccount(sa) => sa.replace(':', "-"),
        Identity::SystemUser(u) | Identity::Person(u) => u.replace(':', "-"),
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

/// The suggested rules as YAML sequence items at `indent`, each after its comment.
pub fn rules_yaml(s: &Suggestions, taken: &mut BTreeSet<String>, indent: &str) -> String {
    let mut out = String::new();
    for (identity, activity) in &s.controllers {
        let names: Vec<&str> = activity
            .finalizers
            .keys()
            .map(|(f, _)| f.as_str())
            .collect();
        let counts: Vec<String> = activity
            .finalizers
            .iter()
            .map(|((f, _), n)| format!("{f} x{n}"))
            .collect();
        out.push_str(&format!(
            "{indent}# suggested from {} would-deny removal(s), {}: {}\n",
            activity.count,
            activity.when(),
            counts.join(", ")
        ));
        out.push_str(&format!(
            "{indent}- name: {}\n",
            yaml_string(&rule_name(identity, taken))
        ));
        out.push_str(&format!(
            "{indent}  finalizers: {}\n",
            list(&patterns(names))
        ));
        match identity {
            Identity::ServiceAccount(sa) => out.push_str(&format!(
                "{indent}  serviceAccounts: {}\n",
                list(std::slice::from_ref(sa))
            )),
            Identity::SystemUser(u) | Identity::Person(u) => out.push_str(&format!(
                "{indent}  users: {}\n",
                list(std::slice::from_ref(u))
            )),
        }
        let resources: Vec<String> = activity.resources.iter().cloned().collect();
        out.push_str(&format!("{indent}  resources: {}\n", list(&resources)));
    }
    out
}

/// The people: one comment line each.
pub fn people_comments(s: &Suggestions) -> String {
    let mut out = String::new();
    if s.people.is_empty() {
        return out;
    }
    out.push_str("# People seen removing finalizers no rule allows (never made rules: an override, with its reason, is how a person releases an object):\n");
    for (person, activity) in &s.people {
        let what: Vec<String> = activity
            .finalizers
            .iter()
            .map(|((f, _), n)| format!("{f} x{n}"))
            .collect();
        let resources: Vec<&str> = activity.resources.iter().map(String::as_str).collect();
        out.push_str(&format!(
            "#   {person}: stripped {} in {} removal(s) from {}; {}\n",
            what.join(", "),
            activity.count,
            resources.join(", "),
            activity.when()
        ));
    }
    out
}

/// The policy YAML: the suggestions alone, or `base` (its text) with them added.
pub fn render(s: &Suggestions, base: Option<(&str, &Policy)>) -> String {
    let mut taken: BTreeSet<String> = base
        .map(|(_, p)| p.rules.iter().map(|r| r.label.clone()).collect())
        .unwrap_or_default();
    let mut header = format!(
        "# finalizer-guard policy suggest: {} rule(s) for controllers",
        s.controllers.len()
    );
    if s.already_covered > 0 {
        header.push_str(&format!(
            "; {} would-deny removal(s) the policy already allows",
            s.already_covered
        ));
    }
    header.push('\n');
    let people = people_comments(s);
    match base {
        None => {
            let rules = rules_yaml(s, &mut taken, "  ");
            let body = if rules.is_empty() {
                "rules: []\n".to_string()
            } else {
                format!("rules:\n{rules}")
            };
            format!("{header}{people}{body}")
        }
        Some((text, policy)) => {
            if s.controllers.is_empty() {
                return format!("{header}{people}{text}");
            }
            let merged = insert_rules(text, s, &mut taken.clone())
                .filter(|m| {
                    Policy::from_yaml(m)
                        .is_ok_and(|p| p.rules.len() == policy.rules.len() + s.controllers.len())
                })
                .unwrap_or_else(|| rewrite(text, s, &mut taken));
            format!("{header}{people}{merged}")
        }
    }
}

/// Adds the rules to the policy's text where its top-level `rules:` is,
/// keeping every comment; `None` when the text is laid out otherwise.
fn insert_rules(text: &str, s: &Suggestions, taken: &mut BTreeSet<String>) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|l| {
        let t = l.trim_end();
        t == "rules:" || t == "rules: []"
    });
    let Some(at) = at else {
        let mut out = text.trim_end().to_string();
        out.push_str("\nrules:\n");
        out.push_str(&rules_yaml(s, taken, "  "));
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
    out.push(rules_yaml(s, taken, &indent).trim_end().to_string());
    out.extend(lines[insert..].iter().map(|l| l.to_string()));
    Some(out.join("\n") + "\n")
}

/// The fallback: the policy re-serialized with the rules added (its comments are lost).
fn rewrite(text: &str, s: &Suggestions, taken: &mut BTreeSet<String>) -> String {
    let mut value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).unwrap_or_default();
    let rules = value
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
    if let serde_yaml_ng::Value::Sequence(existing) = rules
        && !existing.is_empty()
    {
        let existing = serde_yaml_ng::to_string(&existing).unwrap_or_default();
        for line in existing.lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out.push_str(&rules_yaml(s, taken, "  "));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CONTROLLER: &str = "system:serviceaccount:widgets:widget-controller";

    fn apiserver(id: &str, user: &str, decision: &str, unauthorized: &str) -> String {
        json!({
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
            "auditID": id, "stage": "ResponseComplete", "verb": "update",
            "user": {"username": user, "groups": ["system:authenticated"]},
            "objectRef": {"resource": "widgets", "namespace": "team-a", "name": "w1", "apiGroup": "example.com", "apiVersion": "v1"},
            "requestReceivedTimestamp": "2026-11-23T19:00:00.5Z",
            "annotations": {
                "finalizers.finalizer-guard.io/decision": decision,
                "finalizers.finalizer-guard.io/unauthorized-finalizers": unauthorized,
            },
        })
        .to_string()
    }

    #[test]
    fn lines_are_told_apart_by_content() {
        let table: Vec<(String, Option<Source>, bool)> = vec![
            (
                apiserver("1", CONTROLLER, "would-deny", "example.com/a"),
                Some(Source::ApiserverAudit),
                true,
            ),
            (
                apiserver("2", CONTROLLER, "authorized", ""),
                Some(Source::ApiserverAudit),
                false,
            ),
            (
                json!({"kind": "Event", "apiVersion": "audit.k8s.io/v1", "annotations": {"authorization.k8s.io/decision": "allow"}}).to_string(),
                Some(Source::ApiserverAudit),
                false,
            ),
            (
                json!({"time": "2026-11-23T19:00:00Z", "kind": "FinalizerRemoval", "user": "alice", "groups": ["developers"],
                    "operation": "UPDATE", "resource": "configmaps", "namespace": "team-a", "name": "c",
                    "removedFinalizers": [{"finalizer": "example.com/x", "field": "metadata.finalizers"},
                                          {"finalizer": "example.com/y", "field": "metadata.finalizers", "authorizedBy": "rule r"}],
                    "decision": "would-deny", "mode": "warn", "dryRun": false}).to_string(),
                Some(Source::WebhookAudit),
                true,
            ),
            (
                json!({"kind": "FinalizerRemoval", "decision": "override", "removedFinalizers": []}).to_string(),
                Some(Source::WebhookAudit),
                false,
            ),
            ("not json".into(), None, false),
            (json!({"level": "info", "msg": "started"}).to_string(), None, false),
        ];
        for (line, source, would_deny) in table {
            match parse_line(&line) {
                Parsed::Evidence(s, seen) => {
                    assert_eq!(Some(s), source, "{line}");
                    assert_eq!(seen.is_some(), would_deny, "{line}");
                }
                Parsed::Other => assert_eq!(source, None, "{line}"),
            }
        }
        let Parsed::Evidence(_, Some(seen)) = parse_line(&json!({"kind": "FinalizerRemoval", "user": "alice", "resource": "widgets.example.com",
            "removedFinalizers": [{"finalizer": "example.com/x", "field": "metadata.finalizers"},
                                  {"finalizer": "example.com/y", "field": "metadata.finalizers", "authorizedBy": "rule r"}],
            "decision": "would-deny"}).to_string()) else { panic!() };
        assert_eq!(
            seen.finalizers,
            [("example.com/x".to_string(), FinalizerField::Metadata)]
        );
        assert_eq!(
            (seen.group.as_str(), seen.resource.as_str()),
            ("example.com", "widgets")
        );
    }

    #[test]
    fn a_recording() {
        let value = json!({
            "apiVersion": "finalizer-guard.io/v1alpha1", "kind": "Recording",
            "recordedAt": "2026-11-23T19:00:00Z", "mode": "warn", "decision": "would-deny", "allowed": true,
            "review": {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Namespace"},
                "resource": {"group": "", "version": "v1", "resource": "namespaces"},
                "subResource": "finalize", "name": "team-a", "namespace": "team-a", "operation": "UPDATE",
                "userInfo": {"username": CONTROLLER, "groups": ["system:serviceaccounts"]},
                "object": {"metadata": {"name": "team-a", "finalizers": ["a.example.com/x"]}, "spec": {"finalizers": []}},
                "oldObject": {"metadata": {"name": "team-a", "finalizers": ["a.example.com/x"]}, "spec": {"finalizers": ["kubernetes", "example.com/ns"]}},
            }},
        });
        let Parsed::Evidence(Source::Recording, Some(seen)) = parse_recording(&value) else {
            panic!()
        };
        assert_eq!(
            seen.finalizers,
            [
                ("kubernetes".to_string(), FinalizerField::Spec),
                ("example.com/ns".to_string(), FinalizerField::Spec)
            ]
        );
        assert_eq!(parse_recording(&json!({"kind": "Other"})), Parsed::Other);
    }

    #[test]
    fn who_is_a_person() {
        let g = |groups: &[&str]| groups.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            Identity::classify(CONTROLLER, &g(&["system:serviceaccounts"])),
            Identity::ServiceAccount("widgets:widget-controller".into())
        );
        assert_eq!(
            Identity::classify("system:kube-scheduler", &[]),
            Identity::SystemUser("system:kube-scheduler".into())
        );
        assert_eq!(
            Identity::classify("node-7", &g(&["system:nodes"])),
            Identity::SystemUser("node-7".into())
        );
        for person in ["alice", "alice@example.com", "https://idp#1234"] {
            assert_eq!(
                Identity::classify(person, &g(&["system:authenticated", "system:masters"])),
                Identity::Person(person.into())
            );
        }
    }

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
    }

    fn evidence(lines: &[String]) -> Evidence {
        let mut e = Evidence::default();
        for l in lines {
            e.add(parse_line(l));
        }
        e
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

    const SHIPPED: &str = "mode: warn\n# Kubernetes' own controllers.\nbuiltinControllers: true\nrules: []\n# Examples:\n# - name: cert-manager\noverride:\n  annotation: finalizer-guard.io/override\n";

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
}
