//! `policy suggest`: rules for the controllers seen in warn mode's `would-deny`
//! evidence and enforce mode's denials.
//!
//! Three kinds of evidence are told apart by their content, line by line or
//! file by file:
//! - the webhook's own audit records (`kind: FinalizerRemoval`, one JSON line each);
//! - recordings written by `serve --record-dir` (`kind: Recording`, one per file);
//! - kube-apiserver's audit log (`audit.k8s.io/v1` Events), whose
//!   `finalizers.finalizer-guard.io/*` annotations say what was decided.
//!
//! The identity is always the one the webhook judged: an event's
//! `impersonatedUser` (username and groups) when there is one, else its
//! `user`. A person working through an impersonating proxy (Rancher's
//! `cattle-impersonation-*` service accounts, say) is that person, never the
//! proxy. The webhook's own records and recordings hold that identity already.
//!
//! Only authenticated evidence counts ([`trusted`]): kube-apiserver's audit
//! events, and the webhook's records and recordings marked
//! `"authenticated": true` (their review came with a client certificate
//! verified against `serve --client-ca`). The webhook's others (marked
//! `false`, or written before the mark) count only where a kube-apiserver
//! audit event given alongside shows the same removal, or with
//! `--trust-unauthenticated`: without `--client-ca` anyone who reaches the
//! webhook port can post a review naming any identity and object.
//!
//! Only removals no rule allowed count: `would-deny` (warn mode) and
//! `denied` (enforce mode; in kube-apiserver's audit log the webhook's
//! denial is a 403 carrying its `decision: denied` annotation, not a
//! failure of another step). Each identity is either a controller or
//! not ([`Identity::classify`]): a controller gets rules, anyone else a
//! comment line, never a rule: overrides are how people remove finalizers.
//! Never a controller, whatever the username: unauthenticated requests
//! (`system:anonymous`, the `system:unauthenticated` group), cluster
//! administrators (`system:admin`, `kube:admin`, `kubernetes-admin`, and
//! every member of `system:masters`, `system:cluster-admins` or
//! `kubeadm:cluster-admins` but kube-apiserver's own `system:apiserver`), and
//! a username no rule can name.
//!
//! A rule names the resources the identity was seen removing those
//! finalizers from ([`Suggestions::rules`]), and reaches as far as [`reach`]
//! decides: every namespace for a controller that acts cluster-wide (a
//! ServiceAccount seen in two or more namespaces, outside its own, or bound
//! by a ClusterRoleBinding given with `--bindings`), its own namespace
//! otherwise, with a comment saying which and why. With `--merge`, a rule of
//! the policy for that identity alone that the evidence shows it outside of
//! is widened in place ([`Widening`]) rather than repeated, when
//! [`not_widened`] finds no reason against it. Enforce mode's denials, which
//! anyone can produce, only ever widen such a rule: they make no rule of
//! their own. No finalizer of Kubernetes' own controllers gets a rule, new
//! or widened. Cluster-scoped
//! objects (a Namespace too) get rules of their own, without `namespaces`,
//! naming only their cluster-scoped resources. A removal without a namespace
//! on a resource seen in one is left out rather than made cluster-wide. Two
//! or more names under one DNS domain, seen in the same scope, become
//! `domain/*` there (never for `kubernetes.io`, `k8s.io` and their
//! subdomains); the comment above the rules lists the exact names seen.
//!
//! Every value read from the evidence is written escaped: YAML values as
//! double-quoted scalars (`\n`, `\u2028`), comments with the same escapes, so
//! nothing a username, finalizer, namespace or resource holds can end a line.
//! A value no rule can hold (whitespace, control or invisible characters) is
//! reported in a comment instead. What is printed is read back first: the
//! base policy (or an empty one) with exactly the suggested rules added.
//!
//! Parsing ([`parse_line`], [`parse_recording`]) and suggesting ([`suggest`],
//! [`render`]) are pure; only [`read_path`] touches files.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::BufRead;
use std::path::Path;

use serde_json::Value;

use crate::cluster::WEBHOOK_NAME;
use crate::files::{self, Found};
use crate::policy::config::{FinalizerPattern, Rule};
use crate::policy::{self, Change, FinalizerField, FinalizerLists, Policy, Requester, Target};

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
    /// Which kind of evidence this came from.
    pub source: Source,
    /// The webhook's records and recordings: whether the review's caller
    /// presented a client certificate verified against `serve --client-ca`
    /// (`None`: the record does not say, as older versions wrote them).
    /// kube-apiserver's audit events: `Some(true)`, the API server
    /// authenticated the user itself.
    pub authenticated: Option<bool>,
    /// Enforce mode denied it (`denied`), rather than warn mode letting it
    /// through (`would-deny`): the controller tried, and its object stayed.
    pub denied: bool,
}

/// What one line (or file) is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Evidence of a kind this command reads, `Some` when it is a `would-deny`.
    Evidence(Source, Option<Box<Seen>>),
    /// A `would-deny` removal that never happened ([`Skip`]): evidence read,
    /// no rule made from it. kube-apiserver's audit ID, when it has one: its
    /// other stages are the same request.
    Skipped(Source, Skip, Option<String>),
    /// Not evidence.
    Other,
}

/// Why a `would-deny` removal is not evidence: nothing was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Skip {
    /// A dry run (`?dryRun=All`, `"dryRun": true`): the webhook judged it, nothing was stored.
    DryRun,
    /// kube-apiserver answered with a failure (`responseStatus.code` not
    /// 2xx): another admission step, or the API server, refused it.
    Failed,
}

impl Skip {
    pub fn describe(self) -> &'static str {
        match self {
            Skip::DryRun => "of dry-run requests (dryRun: nothing was changed)",
            Skip::Failed => {
                "that kube-apiserver answered with a failure (responseStatus.code not 2xx: another admission step or the API server refused them, nothing was removed)"
            }
        }
    }
}

/// `seen`, unless its request was a dry run or failed.
fn judged(source: Source, seen: Option<Seen>, skip: Option<Skip>) -> Parsed {
    match (seen, skip) {
        (Some(seen), Some(why)) => Parsed::Skipped(source, why, seen.audit_id),
        (seen, _) => Parsed::Evidence(source, seen.map(Box::new)),
    }
}

/// Whether a request URI asks for a dry run: a `dryRun` query parameter,
/// whatever its value (kube-apiserver refuses any but `All`).
fn dry_run_uri(uri: &str) -> bool {
    let Some((_, query)) = uri.split_once('?') else {
        return false;
    };
    query.split(['&', ';']).any(|pair| {
        let key = pair.split('=').next().unwrap_or_default().replace('+', " ");
        percent_encoding::percent_decode_str(&key).decode_utf8_lossy() == "dryRun"
    })
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
        let dry = (value["dryRun"] == true).then_some(Skip::DryRun);
        return judged(Source::WebhookAudit, webhook_record(&value), dry);
    }
    if value["kind"] == "Event"
        && value["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("audit.k8s.io/"))
    {
        let seen = apiserver_event(&value);
        // The webhook's denial is kube-apiserver's 403, with the webhook's
        // audit annotations: what enforce refused, not a failure of its own.
        let denial = seen.as_ref().is_some_and(|s| s.denied);
        let answered = |code: u64| (200..300).contains(&code) || (denial && code == 403);
        let failed = value["responseStatus"]["code"]
            .as_u64()
            .is_some_and(|code| !answered(code));
        let skip = if value["requestURI"].as_str().is_some_and(dry_run_uri) {
            Some(Skip::DryRun)
        } else {
            failed.then_some(Skip::Failed)
        };
        return judged(Source::ApiserverAudit, seen, skip);
    }
    Parsed::Other
}

/// Whether a decision is a removal no rule allowed: `would-deny` (warn
/// mode), or `denied` (enforce mode); `None` for any other decision.
fn refused(decision: &Value) -> Option<bool> {
    match decision.as_str()? {
        "would-deny" => Some(false),
        "denied" => Some(true),
        _ => None,
    }
}

fn webhook_record(value: &Value) -> Option<Seen> {
    let denied = refused(&value["decision"])?;
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
        source: Source::WebhookAudit,
        authenticated: value["authenticated"].as_bool(),
        denied,
    })
}

fn apiserver_event(value: &Value) -> Option<Seen> {
    let annotations = value["annotations"].as_object()?;
    let annotation = |key: &str| {
        annotations
            .get(&format!("{WEBHOOK_NAME}/{key}"))
            .and_then(Value::as_str)
    };
    let denied = refused(&Value::from(annotation("decision")?))?;
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
    // The webhook judged the impersonated identity, when there is one.
    let user = match &value["impersonatedUser"] {
        Value::Object(_) => &value["impersonatedUser"],
        _ => &value["user"],
    };
    Some(Seen {
        username: text(&user["username"]),
        groups: strings(&user["groups"]),
        finalizers,
        group: text(&object["apiGroup"]),
        resource: text(&object["resource"]),
        subresource: text(&object["subresource"]),
        namespace: object["namespace"].as_str().map(String::from),
        name: text(&object["name"]),
        time: time(&value["requestReceivedTimestamp"]),
        audit_id: value["auditID"].as_str().map(String::from),
        source: Source::ApiserverAudit,
        authenticated: Some(true),
        denied,
    })
}

/// A recording file's content, parsed; `Other` unless it is a recording.
pub fn parse_recording(value: &Value) -> Parsed {
    if value["kind"] != crate::trail::recording::KIND
        || value["apiVersion"] != crate::trail::recording::API_VERSION
    {
        return Parsed::Other;
    }
    let dry = (value["review"]["request"]["dryRun"] == true).then_some(Skip::DryRun);
    judged(Source::Recording, recording(value), dry)
}

/// A recording names the removed finalizers, not which were unauthorized:
/// those a built-in controller owns are left out, and `--merge`'s rules
/// drop the ones it already covers.
fn recording(value: &Value) -> Option<Seen> {
    let denied = refused(&value["decision"])?;
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
        source: Source::Recording,
        authenticated: value["authenticated"].as_bool(),
        denied,
    })
}

/// What was read from the paths.
#[derive(Debug, Default)]
pub struct Evidence {
    pub seen: Vec<Seen>,
    /// Evidence entries read, per kind (would-deny or not).
    pub read: BTreeMap<Source, usize>,
    /// Would-deny removals that never happened, by why.
    pub skipped: BTreeMap<Skip, usize>,
    audit_ids: HashSet<String>,
    /// Audit IDs of requests that never happened: their other stages are skipped too.
    skipped_ids: HashSet<String>,
}

impl Evidence {
    /// Adds one parsed line or file; `false` when it was not evidence.
    pub fn add(&mut self, parsed: Parsed) -> bool {
        match parsed {
            Parsed::Other => false,
            Parsed::Skipped(source, why, audit_id) => {
                *self.read.entry(source).or_default() += 1;
                let first = match audit_id {
                    // A stage read before (RequestReceived) counted the request: no longer.
                    Some(id) => {
                        self.seen.retain(|s| s.audit_id.as_ref() != Some(&id));
                        self.audit_ids.insert(id.clone());
                        self.skipped_ids.insert(id)
                    }
                    None => true,
                };
                if first {
                    *self.skipped.entry(why).or_default() += 1;
                }
                true
            }
            Parsed::Evidence(source, seen) => {
                *self.read.entry(source).or_default() += 1;
                if let Some(seen) = seen.filter(|s| {
                    s.audit_id
                        .as_ref()
                        .is_none_or(|id| !self.skipped_ids.contains(id))
                }) {
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
/// evidence of any kind is an error: the wrong path, most likely. Only
/// regular files are read (a FIFO or a device is an error), and no folder
/// twice: one reached again through a symlink is skipped, with a note.
pub fn read_path(path: &Path, evidence: &mut Evidence) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.is_dir() {
        let before: usize = evidence.read.values().sum();
        for found in files::walk(path, &|_| true) {
            match found {
                Found::File(entry) => {
                    if read_file(&entry, evidence)? == 0 {
                        eprintln!(
                            "note: {}: no evidence in it, skipped",
                            crate::output::escape(&entry.display().to_string())
                        );
                    }
                }
                Found::Again { path, first } => {
                    let again = format!("{}: {}", path.display(), files::again(&first));
                    eprintln!("note: {}", crate::output::escape(&again));
                }
                Found::Error { path, error } => return Err(format!("{}: {error}", path.display())),
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

/// The longest line of a log, and the largest recording, read: a
/// kube-apiserver audit event at the RequestResponse level carries the
/// request and the response, each an object of up to 3 MiB.
const MAX_EVIDENCE_LINE: usize = 16 * 1024 * 1024;

/// How many evidence entries the file held.
fn read_file(path: &Path, evidence: &mut Evidence) -> Result<usize, String> {
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let file = files::open_regular(path).map_err(err)?;
    let mut reader = std::io::BufReader::new(file);
    let mut lines = Lines::default();
    let Some(first) = lines.next(&mut reader).map_err(err)? else {
        return Ok(0);
    };
    let mut found = 0;
    // A recording is one pretty-printed JSON document; logs are JSON lines.
    if first.trim() == "{" {
        let mut text = first;
        std::io::Read::read_to_string(
            &mut std::io::Read::take(&mut reader, MAX_EVIDENCE_LINE as u64),
            &mut text,
        )
        .map_err(err)?;
        if text.len() >= MAX_EVIDENCE_LINE {
            return Err(format!(
                "{}: a recording larger than {MAX_EVIDENCE_LINE} bytes: not read",
                path.display()
            ));
        }
        if let Ok(value) = serde_json::from_str::<Value>(&text) {
            found += usize::from(evidence.add(parse_recording(&value)));
        }
        return Ok(found);
    }
    found += usize::from(evidence.add(parse_line(&first)));
    while let Some(line) = lines.next(&mut reader).map_err(err)? {
        found += usize::from(evidence.add(parse_line(&line)));
    }
    Ok(found)
}

/// The lines of a file, each at most [`MAX_EVIDENCE_LINE`] bytes: one
/// longer is an error naming it, not a read of the whole file into memory.
#[derive(Default)]
struct Lines {
    number: usize,
}

impl Lines {
    fn next(&mut self, reader: &mut impl BufRead) -> std::io::Result<Option<String>> {
        let mut buf = Vec::new();
        let limit = MAX_EVIDENCE_LINE as u64 + 1;
        std::io::Read::take(&mut *reader, limit).read_until(b'\n', &mut buf)?;
        if buf.is_empty() {
            return Ok(None);
        }
        self.number += 1;
        if buf.len() > MAX_EVIDENCE_LINE {
            return Err(std::io::Error::other(format!(
                "line {} is longer than {MAX_EVIDENCE_LINE} bytes",
                self.number
            )));
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        }
        String::from_utf8(buf).map(Some).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("line {} is not UTF-8", self.number),
            )
        })
    }
}

/// The would-deny removals set aside by [`trusted`], by source: those of
/// reviews marked unauthenticated, and those whose record does not say.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SetAside {
    /// Marked `"authenticated": false`.
    pub unauthenticated: BTreeMap<Source, usize>,
    /// Not marked at all (written by a version before the mark).
    pub unmarked: BTreeMap<Source, usize>,
    /// Unauthenticated or unmarked, kept: kube-apiserver's audit log shows the same removal.
    pub confirmed: usize,
    /// Authenticated records of a removal kube-apiserver's audit log shows
    /// too: the same request, counted once.
    pub same: usize,
}

impl SetAside {
    pub fn is_empty(&self) -> bool {
        self.unauthenticated.is_empty() && self.unmarked.is_empty()
    }

    /// One line per reason, for standard error.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let counts = |by: &BTreeMap<Source, usize>| {
            let each: Vec<String> = by
                .iter()
                .map(|(source, n)| format!("{n} from {}", source.describe()))
                .collect();
            format!(
                "{} would-deny removal(s) ({})",
                by.values().sum::<usize>(),
                each.join(", ")
            )
        };
        let unconfirmed = "not confirmed by a kube-apiserver audit event given alongside";
        let how = "give kube-apiserver's audit log too, or pass --trust-unauthenticated if only kube-apiserver can reach the webhook port";
        if !self.unauthenticated.is_empty() {
            out.push(format!(
                "ignored {} of unauthenticated reviews (\"authenticated\": false: no client certificate verified against serve --client-ca, so anyone who reached the webhook port could have posted them), {unconfirmed}: {how}",
                counts(&self.unauthenticated)
            ));
        }
        if !self.unmarked.is_empty() {
            out.push(format!(
                "ignored {} whose record does not say whether the review was authenticated (written by an older finalizer-guard), {unconfirmed}: {how}",
                counts(&self.unmarked)
            ));
        }
        out
    }
}

/// How far apart kube-apiserver may receive a request and the webhook
/// record its review: the longest webhook timeout kube-apiserver allows is
/// 30 seconds; twice that leaves room for clocks apart.
const SAME_REQUEST: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// How far apart in time two pieces of evidence are (zero when one does not say).
fn apart(a: &Seen, b: &Seen) -> jiff::SignedDuration {
    match (a.time, b.time) {
        (Some(a), Some(b)) => a.duration_since(b).abs(),
        _ => jiff::SignedDuration::ZERO,
    }
}

/// Whether kube-apiserver's audit event `by` shows the removal `seen`: the
/// same identity (username and groups) removing the same finalizers from
/// the same object, at the same time. The webhook's record cannot name the
/// event: the AdmissionReview's `uid` is a fresh UUID per webhook call,
/// never kube-apiserver's `auditID`.
fn confirms(by: &Seen, seen: &Seen) -> bool {
    fn groups(s: &Seen) -> BTreeSet<&str> {
        s.groups.iter().map(String::as_str).collect()
    }
    by.source == Source::ApiserverAudit
        && by.username == seen.username
        && groups(by) == groups(seen)
        && by.group == seen.group
        && by.resource == seen.resource
        && by.subresource == seen.subresource
        && object_namespace(by) == object_namespace(seen)
        && by.name == seen.name
        && seen.finalizers.iter().all(|f| by.finalizers.contains(f))
        && by.denied == seen.denied
        && apart(by, seen) <= SAME_REQUEST
}

/// The evidence `policy suggest` makes rules from. kube-apiserver's audit
/// events are evidence by nature: the API server authenticated the user.
/// The webhook's records and recordings are evidence only when marked
/// authenticated (the caller presented a client certificate verified
/// against `serve --client-ca`): without it anyone who reached the webhook
/// port could have posted the review, naming any identity and object.
/// Those not marked so (marked unauthenticated, or written before the mark
/// existed) are kept only when a kube-apiserver audit event among `seen`
/// shows the same removal ([`confirms`]), or with `trust_unauthenticated`;
/// the rest are set aside, counted.
///
/// One request is one removal: each kube-apiserver event stands for one
/// webhook record at most (the nearest in time), and a record it stands
/// for is counted once, as the event. Fifty forged records of one real
/// removal are one confirmed removal and forty-nine set aside.
pub fn trusted(seen: Vec<Seen>, trust_unauthenticated: bool) -> (Vec<Seen>, SetAside) {
    let mut aside = SetAside::default();
    let (events, records): (Vec<Seen>, Vec<Seen>) = seen
        .into_iter()
        .partition(|s| s.source == Source::ApiserverAudit);
    // The authenticated records first: a forged one must not take their event.
    let (authenticated, others): (Vec<Seen>, Vec<Seen>) = records
        .into_iter()
        .partition(|s| s.authenticated == Some(true));
    let mut used = vec![false; events.len()];
    let mut kept = Vec::with_capacity(events.len() + authenticated.len() + others.len());
    for s in authenticated.into_iter().chain(others) {
        let same = events
            .iter()
            .enumerate()
            .filter(|(i, by)| !used[*i] && confirms(by, &s))
            .min_by_key(|(_, by)| apart(by, &s))
            .map(|(i, _)| i);
        let trusted = trust_unauthenticated || s.authenticated == Some(true);
        match same {
            Some(i) => {
                used[i] = true;
                if trusted {
                    aside.same += 1;
                } else {
                    aside.confirmed += 1;
                }
            }
            None if trusted => kept.push(s),
            None => {
                let by = match s.authenticated {
                    Some(_) => &mut aside.unauthenticated,
                    None => &mut aside.unmarked,
                };
                *by.entry(s.source).or_default() += 1;
            }
        }
    }
    kept.extend(events);
    (kept, aside)
}

/// Usernames of cluster administrators: people, even where they look like
/// software. k3s, RKE2 and OpenShift's `system:admin`, OpenShift's
/// `kube:admin`, kubeadm's `kubernetes-admin`.
const ADMIN_USERS: [&str; 3] = ["system:admin", "kube:admin", "kubernetes-admin"];

/// Groups of cluster administrators. `system:masters` bypasses authorization
/// altogether (break-glass certificates: kubeadm's and k3s' admin, AKS'
/// `masterclient`); OpenShift's `system:cluster-admins`; kubeadm's
/// `kubeadm:cluster-admins`.
const ADMIN_GROUPS: [&str; 3] = [
    "system:masters",
    "system:cluster-admins",
    "kubeadm:cluster-admins",
];

/// kube-apiserver's loopback identity (its own controllers): in
/// `system:masters`, and software all the same.
const APISERVER: &str = "system:apiserver";

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
    /// A cluster administrator ([`ADMIN_USERS`], [`ADMIN_GROUPS`]). Never a rule.
    Administrator(String),
    /// An unauthenticated request: `system:anonymous`, or anyone in
    /// `system:unauthenticated`. Never a rule.
    Anonymous(String),
    /// A username no rule can name: empty, or with whitespace or hidden
    /// characters in it. Never a rule.
    Unnamable(String),
}

impl Identity {
    /// Service accounts and `system:` identities are software; every other
    /// username (alice, alice@example.com, an OIDC subject) is taken for a
    /// person. A controller running under a personal-looking identity (a
    /// client certificate's CN, say) is reported as a person: give it a
    /// ServiceAccount, or write its rule by hand.
    ///
    /// Whatever the username, unauthenticated requests and cluster
    /// administrators are never software: anyone in `system:masters` is an
    /// administrator (but kube-apiserver's own `system:apiserver`), a service
    /// account impersonated into that group too.
    pub fn classify(username: &str, groups: &[String]) -> Identity {
        let member = |names: &[&str]| groups.iter().any(|g| names.contains(&g.as_str()));
        let anonymous = ["system:anonymous", "system:unauthenticated"];
        if anonymous.contains(&username) || member(&anonymous) {
            return Identity::Anonymous(username.to_string());
        }
        if ADMIN_USERS.contains(&username) || (member(&ADMIN_GROUPS) && username != APISERVER) {
            return Identity::Administrator(username.to_string());
        }
        if !writable(username) {
            return Identity::Unnamable(username.to_string());
        }
        if let Some(sa) = username.strip_prefix("system:serviceaccount:")
            && let Some((namespace, name)) = sa.split_once(':')
        {
            return if namespace.is_empty() || name.is_empty() || name.contains(':') {
                Identity::Unnamable(username.to_string())
            } else {
                Identity::ServiceAccount(sa.to_string())
            };
        }
        if username.starts_with("system:") || groups.iter().any(|g| g == "system:nodes") {
            return Identity::SystemUser(username.to_string());
        }
        Identity::Person(username.to_string())
    }

    /// Whether the identity is software, which gets rules.
    pub fn is_software(&self) -> bool {
        matches!(self, Identity::ServiceAccount(_) | Identity::SystemUser(_))
    }

    /// The username, as Kubernetes writes it.
    pub fn username(&self) -> Cow<'_, str> {
        match self {
            Identity::ServiceAccount(sa) => Cow::Owned(format!("system:serviceaccount:{sa}")),
            Identity::SystemUser(u)
            | Identity::Person(u)
            | Identity::Administrator(u)
            | Identity::Anonymous(u)
            | Identity::Unnamable(u) => Cow::Borrowed(u),
        }
    }

    /// Why the identity gets no rule, for its comment line.
    fn why_not(&self) -> &'static str {
        match self {
            Identity::Administrator(_) => " (a cluster administrator)",
            Identity::Anonymous(_) => " (unauthenticated)",
            Identity::Unnamable(_) => " (not a username a rule can name)",
            _ => "",
        }
    }
}

/// What one identity was seen doing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Activity {
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
    fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} on {} in {ns}", self.finalizer, self.resource),
            None => format!("{} on {} (cluster-scoped)", self.finalizer, self.resource),
        }
    }
}

/// The namespace of `seen`'s object, as the policy reads it: `None` for
/// cluster-scoped objects, Namespaces included.
fn object_namespace(seen: &Seen) -> Option<String> {
    target(seen).object_namespace().map(String::from)
}

/// What `seen`'s write was written to.
fn target(seen: &Seen) -> Target<'_> {
    Target {
        group: &seen.group,
        resource: &seen.resource,
        subresource: &seen.subresource,
        namespace: seen.namespace.as_deref(),
        name: &seen.name,
    }
}

/// `resource` or `resource.group`.
fn resource_name(seen: &Seen) -> String {
    if seen.group.is_empty() {
        seen.resource.clone()
    } else {
        format!("{}.{}", seen.resource, seen.group)
    }
}

impl Activity {
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
    fn removals(&self) -> String {
        removals(self.count - self.denied, self.denied)
    }

    fn when(&self) -> String {
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
    pub controllers: BTreeMap<Identity, Activity>,
    /// Everyone else: comment lines, never rules.
    pub people: BTreeMap<Identity, Activity>,
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
    pub would_deny: usize,
    pub denied: usize,
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
/// their own, and only widen a rule of `base` under [`not_widened`]'s
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
        // Kubernetes' own controllers' finalizers: never a rule, whoever removed them.
        let (builtin, finalizers): (Vec<_>, Vec<_>) = finalizers
            .into_iter()
            .partition(|(f, field)| policy::builtin::owners_of(f, *field).next().is_some());
        for (f, field) in &builtin {
            for c in policy::builtin::owners_of(f, *field) {
                out.not_suggested.insert(format!(
                    "{f} belongs to Kubernetes' {} controller: no rule suggested",
                    c.name
                ));
            }
        }
        if finalizers.is_empty() {
            continue;
        }
        // A rule of the base for this controller alone, scoped to other
        // namespaces: widened, not repeated, when it may be.
        let candidate = base.and_then(|p| {
            let mut rules = finalizers.iter().map(|(f, _)| widenable(p, s, f));
            let first = rules.next()??;
            rules.all(|r| r == Some(first)).then_some(first)
        });
        let widen = match (candidate, base) {
            (Some(i), Some(p)) => match not_widened(&p.rules[i], &identity, s, &out.bindings) {
                Some(why) => {
                    out.not_suggested.insert(why);
                    None
                }
                None => Some(i),
            },
            _ => None,
        };
        if let (Some(i), Some(p), Some(ns)) = (widen, base, object_namespace(s)) {
            let w = out.widenings.entry(i).or_default();
            w.rule.clone_from(&p.rules[i].label);
            w.identity = Some(identity);
            w.namespaces.insert(ns);
            w.resources.insert(resource_name(s));
            if s.denied {
                w.denied += 1;
            } else {
                w.would_deny += 1;
            }
            continue;
        }
        if s.denied {
            *out.denied_only.entry(identity).or_default() += 1;
            continue;
        }
        let activity = out.controllers.entry(identity).or_default();
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
                    *activity
                        .left_out
                        .entry(format!("{}{why}", place.describe()))
                        .or_default() += 1;
                }
                None => {
                    written.push((place.finalizer.clone(), field));
                    *activity.places.entry(place).or_default() += 1;
                }
            }
        }
        if !written.is_empty() {
            activity.add(s, &written);
        }
    }
    out
}

/// The index of the rule of `policy` that would let `seen`'s requester
/// remove `finalizer` there, were it not scoped to other namespaces: one
/// that names this identity alone (no groups), `finalizer`, and the
/// resource. A preset's rules are never widened, and [`not_widened`] says
/// whether the rule found may be.
fn widenable(policy: &Policy, seen: &Seen, finalizer: &str) -> Option<usize> {
    let namespace = object_namespace(seen)?;
    if !writable(&namespace) {
        return None;
    }
    policy.rules.iter().position(|rule| {
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
    })
}

/// Why `rule` (what [`widenable`] found for `seen`) is not widened, if it
/// is not. Widening reaches no further than the evidence shows: the rule
/// must name its finalizers exactly (no `*`, no prefix), and already treat
/// its identity as a controller of several namespaces (a ServiceAccount's
/// rule reaching a namespace other than its own; another identity's, two
/// or more), or `--bindings` must show a ClusterRoleBinding letting the
/// ServiceAccount update the resource everywhere. Otherwise removals
/// elsewhere are what a tenant can produce.
fn not_widened(
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

fn namespace_list<'a>(namespaces: impl IntoIterator<Item = &'a str>) -> String {
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

/// What `kubectl get clusterroles,clusterrolebindings -o json` says of the
/// ServiceAccounts: which ClusterRoleBinding lets one update a resource in
/// every namespace. RoleBindings grant one namespace and are not read.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Bindings {
    /// ClusterRole name -> its rules.
    roles: BTreeMap<String, Vec<RbacRule>>,
    /// ServiceAccount `NS:NAME` -> (ClusterRoleBinding, ClusterRole).
    bound: BTreeMap<String, BTreeSet<(String, String)>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct RbacRule {
    groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
    /// `resourceNames`: a rule for some objects only.
    names: bool,
}

impl Bindings {
    /// Reads a List (or one object) of ClusterRoles and ClusterRoleBindings;
    /// `Err` when it holds neither.
    pub fn from_json(value: &Value) -> Result<Bindings, String> {
        let mut out = Bindings::default();
        let items: Vec<&Value> = match value["items"].as_array() {
            Some(items) => items.iter().collect(),
            None => vec![value],
        };
        let mut read = 0;
        for item in items {
            let name = text(&item["metadata"]["name"]);
            match item["kind"].as_str() {
                Some("ClusterRole") => {
                    let rules = item["rules"].as_array().into_iter().flatten();
                    let rules = rules.map(|r| RbacRule {
                        groups: strings(&r["apiGroups"]),
                        resources: strings(&r["resources"]),
                        verbs: strings(&r["verbs"]),
                        names: !strings(&r["resourceNames"]).is_empty(),
                    });
                    out.roles.insert(name, rules.collect());
                    read += 1;
                }
                Some("ClusterRoleBinding") => {
                    read += 1;
                    if item["roleRef"]["kind"] != "ClusterRole" {
                        continue;
                    }
                    let role = text(&item["roleRef"]["name"]);
                    for subject in item["subjects"].as_array().into_iter().flatten() {
                        if subject["kind"] == "ServiceAccount" {
                            let sa = format!(
                                "{}:{}",
                                text(&subject["namespace"]),
                                text(&subject["name"])
                            );
                            let pair = (name.clone(), role.clone());
                            out.bound.entry(sa).or_default().insert(pair);
                        }
                    }
                }
                _ => {}
            }
        }
        if read == 0 {
            return Err("neither ClusterRoles nor ClusterRoleBindings in it (kubectl get clusterroles,clusterrolebindings -o json)".into());
        }
        Ok(out)
    }

    /// The first ClusterRoleBinding (by name) that lets ServiceAccount
    /// `sa` (`NS:NAME`) update or patch every object of `resource`
    /// (`resource` or `resource.group`).
    pub fn cluster_wide(&self, sa: &str, resource: &str) -> Option<&str> {
        let (plural, group) = resource.split_once('.').unwrap_or((resource, ""));
        let any = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
        self.bound.get(sa)?.iter().find_map(|(binding, role)| {
            let rules = self.roles.get(role)?;
            rules
                .iter()
                .any(|r| {
                    !r.names
                        && any(&r.groups, group)
                        && any(&r.resources, plural)
                        && (any(&r.verbs, "update") || any(&r.verbs, "patch"))
                })
                .then_some(binding.as_str())
        })
    }

    /// ClusterRoleBindings of ServiceAccounts whose ClusterRole was not
    /// given: what they grant is not known, so they make nothing cluster-wide.
    pub fn unknown_roles(&self) -> Vec<(&str, &str)> {
        let mut out: Vec<(&str, &str)> = self
            .bound
            .values()
            .flatten()
            .filter(|(_, role)| !self.roles.contains_key(role))
            .map(|(b, r)| (b.as_str(), r.as_str()))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
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

/// Characters never written as themselves: control characters (C0, DEL and
/// C1, NEL among them), the Unicode line and paragraph separators (line
/// breaks to a YAML 1.1 parser), and the invisible format characters that
/// hide or reorder text (zero-width, bidirectional controls, byte order mark,
/// tags), besides the non-characters a YAML parser refuses.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{FFFE}'
                | '\u{FFFF}'
                | '\u{E0000}'..='\u{E007F}'
        )
}

/// `s` with `\`, the hidden characters (and in a quoted scalar, `"`) escaped
/// as YAML's double-quoted scalars (and JSON) write them: `\n`, `\u2028`.
fn escape(s: &str, quote: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' if quote => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if hidden(c) && u32::from(c) > 0xFFFF => {
                out.push_str(&format!("\\U{:08X}", u32::from(c)));
            }
            c if hidden(c) => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// A YAML double-quoted scalar: whatever `s` holds, one value on one line.
fn quoted(s: &str) -> String {
    format!("\"{}\"", escape(s, true))
}

/// Text for a comment: whatever `s` holds, the comment stays one line.
fn comment(s: &str) -> String {
    escape(s, false)
}

/// A name a rule can hold: not empty, no whitespace, nothing hidden.
fn writable(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || hidden(c))
}

/// A finalizer name a rule can hold as an exact name (no `*`).
fn writable_finalizer(f: &str) -> bool {
    writable(f) && !f.contains('*')
}

/// `resource` or `resource.group` as rules write them (lowercase, digits, `-`, `.`).
fn writable_resource(r: &str) -> bool {
    let (resource, group) = r.split_once('.').unwrap_or((r, ""));
    !resource.is_empty()
        && !group.starts_with('.')
        && !group.ends_with('.')
        && r.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quoted(s)).collect();
    format!("[{}]", quoted.join(", "))
}

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
    /// The rules, in order: each controller's ([`Activity::rules`]).
    pub fn rules(&self) -> Vec<Suggested<'_>> {
        self.controllers
            .iter()
            .flat_map(|(identity, activity)| activity.rules(identity, &self.bindings))
            .collect()
    }
}

impl Activity {
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
        for rule in suggested {
            let name = rule_name(identity, taken);
            match rule_lines(&rule, &name) {
                Ok((text, read)) => {
                    lines.push(format!("# {}", comment(rule.reach.why())));
                    lines.extend(text);
                    rules.push(read);
                }
                Err(why) => lines.push(format!(
                    "# not suggested for {}: {}",
                    comment(&identity.username()),
                    comment(&why)
                )),
            }
        }
    }
    (lines, rules)
}

fn indented(lines: &[String], indent: &str) -> String {
    lines.iter().map(|l| format!("{indent}{l}\n")).collect()
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

/// The first line `render` writes.
const HEADER: &str = "# finalizer-guard policy suggest:";
const NOT_SUGGESTED: &str =
    "# Not suggested (denials anyone can produce, finalizers of Kubernetes' own controllers):";
const PEOPLE: &str = "# People seen removing finalizers no rule allows (never made rules: an override, with its reason, is how a person releases an object):";
const LEFT_OUT: &str = "# Left out: removals no rule is suggested for (a finalizer, resource or namespace no rule can name, or a cluster-wide rule the evidence does not support):";

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
            || line == NOT_SUGGESTED
            || line.starts_with("# not merged:");
        if !ours {
            break;
        }
        first = false;
        rest = after;
    }
    rest
}

/// Whether `text` reads as `base` with its rules as `rules` (the widened
/// ones widened) and `added` after them, and nothing else changed.
fn faithful(text: &str, base: &Policy, rules: &[Rule], added: &[Rule]) -> bool {
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

/// The policy YAML: the suggestions alone, or `base` (its text) with them
/// added. Either is read back before it is printed: when it does not read as
/// `base` (or an empty policy) with exactly the suggested rules added, the
/// rules are printed as comments and the policy is left as it was.
pub fn render(s: &Suggestions, base: Option<(&str, &Policy)>) -> String {
    let mut taken: BTreeSet<String> = base
        .map(|(_, p)| p.rules.iter().map(|r| r.label.clone()).collect())
        .unwrap_or_default();
    let (lines, rules) = rules_block(s, &mut taken);
    let mut header = format!("{HEADER} {} rule(s) for controllers", rules.len());
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
    let edits = edits(s, policy);
    let mut kept_rules = policy.rules.clone();
    if !edits.is_empty() {
        header.push_str(WIDENED);
        header.push('\n');
    }
    for edit in &edits {
        kept_rules[edit.index]
            .namespaces
            .clone_from(&edit.namespaces);
        header.push_str(&format!("#   {}\n", comment(&edit.why)));
    }
    // The policy's text with the widenings: edited in place (its comments
    // kept), else re-serialized.
    let texts: Vec<String> = if edits.is_empty() {
        vec![text.to_string()]
    } else {
        widen_in_place(text, &edits)
            .into_iter()
            .chain(widen_rewritten(text, &edits))
            .collect()
    };
    let mut candidates = Vec::new();
    if rules.is_empty() {
        // Nothing to add: what could not be written stays a comment.
        header.push_str(&indented(&lines, ""));
        if base.is_some() {
            candidates = texts;
        } else {
            candidates.push("rules: []\n".to_string());
        }
    } else if base.is_none() {
        candidates.push(format!("rules:\n{}", indented(&lines, "  ")));
    } else {
        for text in &texts {
            candidates.extend(insert_rules(text, &lines));
            candidates.push(rewrite(text, &lines));
        }
    }
    for candidate in candidates {
        if faithful(&candidate, policy, &kept_rules, &rules) {
            return format!("{header}{candidate}");
        }
    }
    let kept = if base.is_some() { text } else { "rules: []\n" };
    let widened = if edits.is_empty() {
        ""
    } else {
        " and those widened"
    };
    format!(
        "{header}# not merged: the policy did not read back with exactly these rules added{widened}:\n{}{kept}",
        indented(&lines, "#   ")
    )
}

/// The header's line above the widened rules.
const WIDENED: &str = "# Widened: rules of this policy the evidence shows their controller outside of (a rule scoped to namespaces breaks on the next one):";

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
    let mut value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).ok()?;
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
    let mut value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).unwrap_or_default();
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
    use super::*;

    #[test]
    fn an_overlong_line_is_an_error_not_a_whole_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut text = String::from("{\"kind\":\"Event\"}\n");
        text.push_str(&"x".repeat(MAX_EVIDENCE_LINE + 10));
        std::fs::write(&path, text).unwrap();
        let e = read_file(&path, &mut Evidence::default()).unwrap_err();
        assert!(e.contains("line 2 is longer than"), "{e}");
        // Lines within the limit, CRLF or not, a last one without a newline.
        std::fs::write(&path, "a\r\nb\nc").unwrap();
        let mut reader = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
        let mut lines = Lines::default();
        let mut got = Vec::new();
        while let Some(line) = lines.next(&mut reader).unwrap() {
            got.push(line);
        }
        assert_eq!(got, ["a", "b", "c"]);
    }
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
                Parsed::Skipped(..) => panic!("{line}"),
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
                Identity::classify(person, &g(&["system:authenticated", "developers"])),
                Identity::Person(person.into())
            );
        }
    }

    #[test]
    fn administrators_and_anonymous_requests_are_never_software() {
        let g = |groups: &[&str]| groups.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let admin = |u: &str| Identity::Administrator(u.into());
        let anonymous = |u: &str| Identity::Anonymous(u.into());
        let table = [
            (
                "system:admin",
                g(&["system:masters", "system:authenticated"]),
                admin("system:admin"),
            ),
            ("system:admin", g(&[]), admin("system:admin")),
            (
                "kube:admin",
                g(&["system:cluster-admins"]),
                admin("kube:admin"),
            ),
            (
                "kubernetes-admin",
                g(&["kubeadm:cluster-admins"]),
                admin("kubernetes-admin"),
            ),
            (
                "masterclient",
                g(&["system:masters"]),
                admin("masterclient"),
            ),
            (
                "system:kube-scheduler",
                g(&["system:masters"]),
                admin("system:kube-scheduler"),
            ),
            (
                CONTROLLER,
                g(&["system:serviceaccounts", "system:masters"]),
                admin(CONTROLLER),
            ),
            ("bob", g(&["system:cluster-admins"]), admin("bob")),
            (
                "system:anonymous",
                g(&["system:unauthenticated"]),
                anonymous("system:anonymous"),
            ),
            ("system:anonymous", g(&[]), anonymous("system:anonymous")),
            (
                "system:unauthenticated",
                g(&[]),
                anonymous("system:unauthenticated"),
            ),
            (
                "system:node:n1",
                g(&["system:unauthenticated"]),
                anonymous("system:node:n1"),
            ),
            (
                CONTROLLER,
                g(&["system:unauthenticated"]),
                anonymous(CONTROLLER),
            ),
            // kube-apiserver's own loopback identity is software.
            (
                "system:apiserver",
                g(&["system:masters"]),
                Identity::SystemUser("system:apiserver".into()),
            ),
        ];
        for (username, groups, want) in table {
            assert_eq!(
                Identity::classify(username, &groups),
                want,
                "{username} {groups:?}"
            );
        }
        let with_groups = |id: &str, user: &str, groups: &[&str]| {
            let mut v: Value =
                serde_json::from_str(&apiserver(id, user, "would-deny", "example.com/a")).unwrap();
            v["user"]["groups"] = json!(groups);
            v.to_string()
        };
        let e = evidence(&[
            with_groups("1", "system:admin", &["system:masters"]),
            with_groups("2", "system:anonymous", &["system:unauthenticated"]),
            with_groups("3", "kube:admin", &["system:cluster-admins"]),
            with_groups("4", CONTROLLER, &["system:masters"]),
        ]);
        let s = suggest(&e.seen, None);
        assert!(s.controllers.is_empty(), "{s:?}");
        let yaml = render(&s, None);
        assert!(Policy::from_yaml(&yaml).unwrap().rules.is_empty(), "{yaml}");
        assert!(
            yaml.contains("#   system:admin (a cluster administrator): stripped example.com/a x1"),
            "{yaml}"
        );
        assert!(
            yaml.contains("#   system:anonymous (unauthenticated): stripped"),
            "{yaml}"
        );
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
    fn values_stay_values_and_comments_stay_one_line() {
        let nasty = [
            "a\nmode: warn",
            "a\r\nb",
            "x\u{85}y",
            "x\u{2028}y\u{2029}z",
            "\"]\n- name: x",
            "back\\slash\\n",
            "\u{202E}lortnoc",
            "\u{0}\u{7}\u{1b}[2J\u{7f}\u{9f}",
            "tab\there",
            "\u{feff}bom\u{200b}",
            "tag\u{E0041}",
            "é ü 日本 🦀",
        ];
        for s in nasty {
            let read: BTreeMap<String, String> =
                serde_yaml_ng::from_str(&format!("key: {}\n", quoted(s))).unwrap();
            assert_eq!(read["key"], s, "{}", quoted(s));
            let text = format!("# {}\nkey: 1\n", comment(s));
            assert_eq!(text.lines().count(), 2, "{text}");
            let read: BTreeMap<String, u32> = serde_yaml_ng::from_str(&text).unwrap();
            assert_eq!(read.len(), 1, "{text}");
            assert!(!quoted(s).chars().any(hidden), "{}", quoted(s));
            assert!(!comment(s).chars().any(hidden), "{}", comment(s));
        }
        assert_eq!(comment("a\nb\\n\u{2028}"), "a\\nb\\\\n\\u2028");
        assert_eq!(quoted("日本 \"x\""), "\"日本 \\\"x\\\"\"");
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
    fn the_impersonated_identity_is_the_one_judged() {
        let proxy = "system:serviceaccount:cattle-impersonation-system:cattle-impersonation-u-7x2k";
        let event = |id: &str, impersonated: Value| {
            let mut v: Value =
                serde_json::from_str(&apiserver(id, proxy, "would-deny", "example.com/a")).unwrap();
            v["impersonatedUser"] = impersonated;
            v.to_string()
        };
        let e = evidence(&[
            // A person, through the proxy: a comment, no rule for anyone.
            event(
                "1",
                json!({"username": "u-7x2k", "groups": ["team-a-admins", "system:authenticated"]}),
            ),
            // A controller, through the proxy: its rule, not the proxy's.
            event(
                "2",
                json!({"username": CONTROLLER, "groups": ["system:serviceaccounts"]}),
            ),
        ]);
        assert_eq!(e.seen[0].username, "u-7x2k");
        assert_eq!(e.seen[0].groups, ["team-a-admins", "system:authenticated"]);
        let s = suggest(&e.seen, None);
        assert_eq!(
            s.controllers.keys().collect::<Vec<_>>(),
            [&Identity::ServiceAccount(
                "widgets:widget-controller".into()
            )]
        );
        assert_eq!(
            s.people.keys().collect::<Vec<_>>(),
            [&Identity::Person("u-7x2k".into())]
        );
        let yaml = render(&s, None);
        assert!(!yaml.contains("cattle-impersonation"), "{yaml}");
        assert_eq!(Policy::from_yaml(&yaml).unwrap().rules.len(), 1, "{yaml}");
        // No impersonation: the user.
        let e = evidence(&[event("3", Value::Null)]);
        assert_eq!(e.seen[0].username, proxy);
    }

    fn seen_at(resource: &str, namespace: Option<&str>, finalizer: &str) -> Seen {
        let (resource, group) = resource.split_once('.').unwrap_or((resource, ""));
        Seen {
            username: CONTROLLER.into(),
            groups: vec!["system:serviceaccounts".into()],
            finalizers: vec![(finalizer.into(), FinalizerField::Metadata)],
            group: group.into(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: namespace.map(String::from),
            name: "o".into(),
            time: None,
            audit_id: None,
            source: Source::ApiserverAudit,
            authenticated: Some(true),
            denied: false,
        }
    }

    #[test]
    fn unauthenticated_evidence_counts_only_when_confirmed_or_trusted() {
        let webhook = |authenticated: Option<bool>, finalizer: &str| Seen {
            source: Source::WebhookAudit,
            authenticated,
            namespace: Some("team-a".into()),
            ..seen_at("widgets.example.com", Some("team-a"), finalizer)
        };
        let seen = vec![
            webhook(Some(true), "example.com/a"),
            webhook(Some(false), "example.com/b"),
            webhook(None, "example.com/c"),
            Seen {
                source: Source::Recording,
                ..webhook(Some(false), "example.com/d")
            },
        ];
        let (kept, aside) = trusted(seen.clone(), false);
        assert_eq!(kept, seen[..1]);
        assert_eq!(
            aside.unauthenticated,
            BTreeMap::from([(Source::WebhookAudit, 1), (Source::Recording, 1)])
        );
        assert_eq!(aside.unmarked, BTreeMap::from([(Source::WebhookAudit, 1)]));
        assert_eq!(aside.lines().len(), 2);
        assert!(
            aside.lines()[0].starts_with(
                "ignored 2 would-deny removal(s) (1 from webhook audit records, 1 from recordings) of unauthenticated reviews"
            ),
            "{:?}",
            aside.lines()
        );

        // Trusted: all of it.
        let (kept, aside) = trusted(seen.clone(), true);
        assert_eq!(kept, seen);
        assert!(aside.is_empty());

        // kube-apiserver shows the removal of b (and c): those are confirmed.
        let apiserver = Seen {
            finalizers: vec![
                ("example.com/b".into(), FinalizerField::Metadata),
                ("example.com/c".into(), FinalizerField::Metadata),
            ],
            ..seen_at("widgets.example.com", Some("team-a"), "x")
        };
        let mut with_log = seen.clone();
        with_log.push(apiserver.clone());
        // One event is one request: it confirms b, and c (another request) stays aside.
        let (kept, aside) = trusted(with_log, false);
        assert_eq!(kept, [seen[0].clone(), apiserver.clone()], "{kept:#?}");
        assert_eq!(aside.confirmed, 1);
        assert_eq!(
            aside.unauthenticated,
            BTreeMap::from([(Source::Recording, 1)])
        );
        assert_eq!(aside.unmarked, BTreeMap::from([(Source::WebhookAudit, 1)]));

        // What differs confirms nothing: the user, a group, the object, the finalizer.
        let differing = [
            Seen {
                username: "system:serviceaccount:team-b:other".into(),
                ..apiserver.clone()
            },
            Seen {
                groups: vec!["system:masters".into()],
                ..apiserver.clone()
            },
            Seen {
                name: "other".into(),
                ..apiserver.clone()
            },
            Seen {
                namespace: Some("team-b".into()),
                ..apiserver.clone()
            },
            Seen {
                finalizers: vec![("example.com/c".into(), FinalizerField::Metadata)],
                ..apiserver.clone()
            },
        ];
        for other in differing {
            let (_, aside) = trusted(
                vec![webhook(Some(false), "example.com/b"), other.clone()],
                false,
            );
            assert_eq!(aside.confirmed, 0, "{other:?}");
        }
    }

    /// One kube-apiserver event confirms one webhook record, of its time:
    /// fifty forged records of one real removal are not fifty removals, and
    /// the webhook's record of a request and kube-apiserver's event of it
    /// are one removal.
    #[test]
    fn one_request_is_one_removal() {
        let at = |s: &str| Some(s.parse::<jiff::Timestamp>().unwrap());
        let event = Seen {
            time: at("2026-11-23T19:00:00Z"),
            audit_id: Some("a-1".into()),
            ..seen_at("widgets.example.com", Some("team-a"), "example.com/a")
        };
        let record = |authenticated: Option<bool>, time: &str| Seen {
            source: Source::WebhookAudit,
            authenticated,
            time: at(time),
            ..event.clone()
        };
        let mut forged: Vec<Seen> = (0..50)
            .map(|_| record(Some(false), "2026-11-23T19:00:01Z"))
            .collect();
        forged.push(event.clone());
        let (kept, aside) = trusted(forged, false);
        assert_eq!(kept, std::slice::from_ref(&event));
        assert_eq!(aside.confirmed, 1);
        assert_eq!(
            aside.unauthenticated,
            BTreeMap::from([(Source::WebhookAudit, 49)])
        );

        // The record and the event of one request: counted once; the
        // authenticated record takes it before an unauthenticated one.
        let (kept, aside) = trusted(
            vec![
                record(Some(false), "2026-11-23T19:00:00Z"),
                record(Some(true), "2026-11-23T19:00:01Z"),
                event.clone(),
            ],
            false,
        );
        assert_eq!(kept, std::slice::from_ref(&event));
        assert_eq!((aside.same, aside.confirmed), (1, 0));
        assert_eq!(
            aside.unauthenticated,
            BTreeMap::from([(Source::WebhookAudit, 1)])
        );
        let (kept, aside) = trusted(
            vec![record(None, "2026-11-23T19:00:00Z"), event.clone()],
            true,
        );
        assert_eq!((kept.len(), aside.same), (1, 1));

        // An hour apart: another request, confirmed by nothing.
        let (kept, aside) = trusted(
            vec![record(Some(false), "2026-11-23T20:00:00Z"), event.clone()],
            false,
        );
        assert_eq!(kept, std::slice::from_ref(&event));
        assert_eq!(aside.confirmed, 0);
        let (kept, aside) = trusted(
            vec![record(Some(true), "2026-11-23T20:00:00Z"), event.clone()],
            false,
        );
        assert_eq!((kept.len(), aside.same), (2, 0));
    }

    /// `seen_at`, by the ServiceAccount team-a:operator.
    fn tenant(resource: &str, namespace: Option<&str>, finalizer: &str) -> Seen {
        Seen {
            username: "system:serviceaccount:team-a:operator".into(),
            ..seen_at(resource, namespace, finalizer)
        }
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

    fn evidence(lines: &[String]) -> Evidence {
        let mut e = Evidence::default();
        for l in lines {
            e.add(parse_line(l));
        }
        e
    }

    /// A dry run, or a request kube-apiserver answered with a failure,
    /// removed nothing: read, counted as skipped, no rule made from it.
    #[test]
    fn dry_runs_and_failed_requests_are_not_evidence() {
        let event = |id: &str, uri: &str, code: Option<u16>, stage: &str| {
            let mut e: Value =
                serde_json::from_str(&apiserver(id, CONTROLLER, "would-deny", "example.com/a"))
                    .unwrap();
            e["requestURI"] = json!(uri);
            e["stage"] = json!(stage);
            if let Some(code) = code {
                e["responseStatus"] = json!({"code": code});
            }
            e.to_string()
        };
        let record = |dry: bool| {
            json!({"time": "2026-11-23T19:00:00Z", "kind": "FinalizerRemoval", "uid": "u1",
                "user": CONTROLLER, "groups": [], "operation": "UPDATE", "resource": "widgets.example.com",
                "subresource": "", "namespace": "team-a", "name": "w1",
                "removedFinalizers": [{"finalizer": "example.com/a", "field": "metadata.finalizers"}],
                "decision": "would-deny", "mode": "warn", "dryRun": dry, "authenticated": true})
            .to_string()
        };
        let uri = "/apis/example.com/v1/namespaces/team-a/widgets/w1";
        let e = evidence(&[
            event(
                "1",
                &format!("{uri}?dryRun=All"),
                Some(200),
                "ResponseComplete",
            ),
            event(
                "2",
                &format!("{uri}?fieldManager=x&dry%52un=All"),
                None,
                "ResponseComplete",
            ),
            // Its first stage has no status yet; the last says it failed.
            event("3", uri, None, "RequestReceived"),
            event("3", uri, Some(403), "ResponseComplete"),
            event("4", uri, Some(500), "ResponseComplete"),
            event("4", uri, None, "RequestReceived"),
            record(true),
        ]);
        assert_eq!(e.seen, [], "{:#?}", e.seen);
        assert_eq!(
            e.skipped,
            BTreeMap::from([(Skip::DryRun, 3), (Skip::Failed, 2)])
        );
        assert!(suggest(&e.seen, None).rules().is_empty());
        // A request that succeeded, and a record that is no dry run, are evidence.
        let e = evidence(&[
            event(
                "5",
                &format!("{uri}?fieldManager=dryRunner"),
                Some(200),
                "ResponseComplete",
            ),
            record(false),
        ]);
        assert_eq!(e.seen.len(), 2);
        assert!(e.skipped.is_empty());
        let value: Value = json!({"kind": crate::trail::recording::KIND, "apiVersion": crate::trail::recording::API_VERSION,
            "decision": "would-deny", "review": {"request": {"dryRun": true, "userInfo": {"username": CONTROLLER},
            "resource": {"group": "example.com", "resource": "widgets"}, "namespace": "team-a", "name": "w1",
            "oldObject": {"metadata": {"finalizers": ["example.com/a"]}}, "object": {"metadata": {}}}}});
        assert!(matches!(
            parse_recording(&value),
            Parsed::Skipped(Source::Recording, Skip::DryRun, None)
        ));
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

    /// kube-apiserver's event of the webhook denying `user`'s removal of
    /// `example.com/a` from a widget in `ns` (enforce): a 403.
    fn denial(id: &str, user: &str, ns: &str, code: u64) -> String {
        let mut e: Value =
            serde_json::from_str(&apiserver(id, user, "denied", "example.com/a")).unwrap();
        e["objectRef"]["namespace"] = ns.into();
        e["responseStatus"] = json!({"metadata": {}, "status": "Failure", "reason": "Forbidden", "code": code,
            "message": "admission webhook \"finalizers.finalizer-guard.io\" denied the request: finalizer-guard denied removing finalizer \"example.com/a\""});
        e.to_string()
    }

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

    #[test]
    fn cluster_role_bindings_read_as_kubectl_prints_them() {
        let role = |name: &str, rules: Value| json!({"kind": "ClusterRole", "metadata": {"name": name}, "rules": rules});
        let binding = |name: &str, role: &str, ns: &str, sa: &str| {
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]})
        };
        let list = json!({"kind": "List", "items": [
            role("writer", json!([{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "patch"]}])),
            role("reader", json!([{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list", "watch"]}])),
            role("named", json!([{"apiGroups": ["example.com"], "resources": ["widgets"], "resourceNames": ["w1"], "verbs": ["update"]}])),
            role("finalizers-only", json!([{"apiGroups": ["example.com"], "resources": ["widgets/finalizers"], "verbs": ["update"]}])),
            role("everything", json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])),
            binding("b-writer", "writer", "ops", "writer"),
            binding("b-reader", "reader", "ops", "reader"),
            binding("b-named", "named", "ops", "named"),
            binding("b-finalizers", "finalizers-only", "ops", "finalizers"),
            binding("b-admin", "everything", "ops", "admin"),
            binding("b-missing", "not-given", "ops", "missing"),
            {"kind": "RoleBinding", "metadata": {"name": "rb", "namespace": "ops"}, "roleRef": {"kind": "ClusterRole", "name": "everything"},
             "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": "ops"}]},
        ]});
        let b = Bindings::from_json(&list).unwrap();
        let table = [
            ("ops:writer", "widgets.example.com", Some("b-writer")),
            ("ops:writer", "gadgets.example.com", None),
            ("ops:reader", "widgets.example.com", None),
            ("ops:named", "widgets.example.com", None),
            ("ops:finalizers", "widgets.example.com", None),
            ("ops:admin", "pods", Some("b-admin")),
            ("ops:missing", "widgets.example.com", None),
            // A RoleBinding grants one namespace: not read.
            ("ops:tenant", "widgets.example.com", None),
            ("other:writer", "widgets.example.com", None),
        ];
        for (sa, resource, want) in table {
            assert_eq!(b.cluster_wide(sa, resource), want, "{sa} {resource}");
        }
        assert_eq!(b.unknown_roles(), [("b-missing", "not-given")]);
        assert!(Bindings::from_json(&json!({"kind": "List", "items": []})).is_err());
        assert!(Bindings::from_json(&json!({"kind": "ConfigMap"})).is_err());
    }

    /// Enforce mode's denials are evidence: kube-apiserver's 403 carrying
    /// the webhook's `denied` annotations, the webhook's `denied` records,
    /// and recordings of denials. A `would-deny` answered with a failure is
    /// still a request that failed for another reason.
    #[test]
    fn denials_are_evidence_of_what_enforce_refused() {
        let e = evidence(&[
            denial("1", CONTROLLER, "team-c", 403),
            denial("2", CONTROLLER, "team-c", 403),
            apiserver("3", CONTROLLER, "would-deny", "example.com/a"),
        ]);
        assert_eq!(e.seen.len(), 3);
        assert_eq!(e.seen.iter().filter(|s| s.denied).count(), 2);
        assert!(e.skipped.is_empty(), "{:?}", e.skipped);
        // A would-deny that failed, and a denial answered otherwise than by the webhook.
        let mut failed: Value =
            serde_json::from_str(&apiserver("4", CONTROLLER, "would-deny", "example.com/a"))
                .unwrap();
        failed["responseStatus"] = json!({"code": 409});
        let e = evidence(&[failed.to_string(), denial("5", CONTROLLER, "team-c", 500)]);
        assert!(e.seen.is_empty());
        assert_eq!(e.skipped.get(&Skip::Failed), Some(&2));
        // The webhook's own record of a denial.
        let record = json!({"kind": "FinalizerRemoval", "user": CONTROLLER, "resource": "widgets.example.com", "namespace": "team-c",
            "removedFinalizers": [{"finalizer": "example.com/a", "field": "metadata.finalizers"}],
            "decision": "denied", "mode": "enforce", "dryRun": false, "authenticated": true});
        let Parsed::Evidence(Source::WebhookAudit, Some(seen)) = parse_line(&record.to_string())
        else {
            panic!()
        };
        assert!(seen.denied);
        // Other decisions are not removals no rule allowed.
        for decision in ["approval-denied", "override", "authorized"] {
            let mut r = record.clone();
            r["decision"] = decision.into();
            assert!(
                matches!(parse_line(&r.to_string()), Parsed::Evidence(_, None)),
                "{decision}"
            );
        }
        // Denials make no rule of their own: the rule is the would-deny's,
        // and the denial is a note.
        let e = evidence(&[
            denial("1", CONTROLLER, "team-c", 403),
            apiserver("3", CONTROLLER, "would-deny", "example.com/a"),
        ]);
        let yaml = render(&suggest(&e.seen, None), None);
        assert!(
            yaml.contains("# suggested from 1 would-deny removal(s)"),
            "{yaml}"
        );
        assert!(
            yaml.contains(
                "# seen in team-a, outside its own namespace widgets: acts cluster-wide\n"
            ),
            "{yaml}"
        );
        assert!(
            yaml.contains("#   1 denied removal(s) by system:serviceaccount:widgets:widget-controller: no rule suggested: "),
            "{yaml}"
        );
    }

    /// kube-apiserver's event of `user`'s removal of `finalizer` from a
    /// widget in `ns`, warn mode letting it through (`would-deny`), or
    /// enforce denying it.
    fn removal(id: &str, user: &str, ns: &str, finalizer: &str, denied: bool) -> String {
        let decision = if denied { "denied" } else { "would-deny" };
        let mut e: Value = serde_json::from_str(&apiserver(id, user, decision, finalizer)).unwrap();
        e["objectRef"]["namespace"] = ns.into();
        if denied {
            e["responseStatus"] = json!({"code": 403});
        }
        e.to_string()
    }

    const TENANT_BOT: &str = "system:serviceaccount:team-a:tenant-bot";

    /// A rule naming a tenant's ServiceAccount in its own namespace, or its
    /// finalizers by pattern, is never widened: removals elsewhere are what
    /// a tenant can produce. It is when the rule already reaches beyond the
    /// ServiceAccount's own namespace, or a ClusterRoleBinding lets it
    /// update the resource everywhere.
    #[test]
    fn widening_reaches_no_further_than_the_evidence() {
        // The attack: a rule for every finalizer of team-a's bot in team-a,
        // and one denial in team-b.
        let text = include_str!("../../tests/fixtures/suggest/attack/base3.yaml");
        let log = include_str!("../../tests/fixtures/suggest/attack/e3.log");
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

    /// No rule, new or widened, for a finalizer Kubernetes' own
    /// controllers own, whoever removed it and however.
    #[test]
    fn no_rule_for_a_finalizer_of_kubernetes_own_controllers() {
        let log = include_str!("../../tests/fixtures/suggest/attack/e1.log");
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

    /// `presets:` rules come after the file's own: a merge compares the
    /// file's rules, and keeps `presets:`.
    #[test]
    fn merged_into_a_policy_with_presets() {
        let text = include_str!("../../tests/fixtures/suggest/attack/base4.yaml");
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
