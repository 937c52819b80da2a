//! Audit: the record of each judged finalizer removal, and the audit
//! annotations kube-apiserver adds to its own audit event.
//!
//! Records are one JSON line each on standard output. Logs go to standard
//! error, so a log pipeline can route them apart. Neither ever carries an
//! object body. A review renders its record ([`AuditEntry`]); what writes
//! it out, and refuses a review whose record cannot be written, is the
//! audit log of what a review leaves behind (`trail::audit_log`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::admission::cut::{MAX_AUDITED_CHARS, cut};
use crate::admission::json;
use crate::admission::ledger::Ledger;
use crate::admission::request::Extra;
use crate::policy::text::truncated;
use crate::policy::{
    Authority, Change, Decision, FinalizerField, Mode, Operation, Outcome, OverrideProblem,
    Removal, Target, Verdict,
};

/// Audit annotation values are cut to this many characters.
pub const MAX_AUDIT_VALUE_CHARS: usize = 256;

/// How many removed finalizers a record lists; the others are counted in
/// `removedFinalizersOmitted`, so a record stays small whatever a client sends.
pub const MAX_AUDITED_FINALIZERS: usize = 128;

/// How many of the requester's groups a record lists; the others are
/// counted in `groupsOmitted`.
pub const MAX_AUDITED_GROUPS: usize = 64;

/// How much of the denial message a record keeps (the message is built of
/// cut names already; this bounds it whatever it grows to).
const MAX_AUDITED_MESSAGE_CHARS: usize = 16 * 1024;

/// One finalizer in an audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditedRemoval {
    pub finalizer: String,
    /// `metadata.finalizers` or `spec.finalizers`.
    pub field: FinalizerField,
    /// The rule or built-in controller that allowed it, as `rule NAME` or
    /// `built-in controller NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorized_by: Option<String>,
}

/// One judged finalizer removal: who, what, which decision and why. Never
/// an object body. The review writes it as JSON ([`AuditEntry`]); this is
/// that JSON read back, for whoever reads the log, and tests
/// (`tests/audit_record.rs` holds the two equal field for field). The
/// server never reads it: Events take [`Judged`] and the decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    pub uid: String,
    pub user: String,
    pub groups: Vec<String>,
    /// Groups past the first [`MAX_AUDITED_GROUPS`], not listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub groups_omitted: usize,
    /// `userInfo.extra`, bounded as [`Extra`] keeps it; absent when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
    pub operation: Operation,
    /// `resource` or `resource.group`.
    pub resource: String,
    /// The object's kind and apiVersion (`request.kind`).
    pub object_kind: String,
    pub object_api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_uid: Option<String>,
    pub removed_finalizers: Vec<AuditedRemoval>,
    /// Removed finalizers past the first [`MAX_AUDITED_FINALIZERS`], not listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub removed_finalizers_omitted: usize,
    pub decision: Verdict,
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_detail: Option<String>,
    /// Two-person rule: who approved the override (for an override, or an approval written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_expires: Option<String>,
    /// For an override: what the removed finalizers were protecting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protected: Option<Ledger>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub dry_run: bool,
    /// Whether the webhook could tell who posted the review: `true` when
    /// the caller presented a client certificate verified against
    /// `--client-ca` (kube-apiserver, configured to), `false` otherwise
    /// (without `--client-ca`, anyone who reaches the port could have).
    /// Absent from records of older versions and from `check`, which serves
    /// no one: read as unauthenticated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authenticated: Option<bool>,
    /// The cluster the webhook serves (`serve --cluster-name`), when named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

/// What identifies the request and the object, besides the change itself.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// `request.uid`.
    pub uid: &'a str,
    /// `request.kind`: group, version, kind.
    pub kind: (&'a str, &'a str, &'a str),
    /// The object's own uid, from `oldObject`.
    pub object_uid: Option<&'a str>,
    pub dry_run: bool,
    /// `userInfo.extra`, bounded ([`Extra`]).
    pub extra: Option<&'a Extra>,
}

/// What a judged removal was about, as its audit record names it (each
/// string cut as the record cuts it): the facts Events and the review's
/// span take from the review itself, never from the line written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// `request.uid`.
    pub uid: String,
    pub user: String,
    /// `resource` or `resource.group`.
    pub resource: String,
    pub object_kind: String,
    pub object_api_version: String,
    pub namespace: Option<String>,
    pub name: String,
    pub object_uid: Option<String>,
    pub dry_run: bool,
    /// The cluster the webhook serves (`serve --cluster-name`), when named.
    pub cluster: Option<String>,
}

impl Judged {
    /// The facts of `subject` and `change`, cut as the record cuts them.
    pub fn of(subject: Subject<'_>, change: &Change<'_>) -> Judged {
        let target = &change.target;
        let (group, version, kind) = subject.kind;
        let object_api_version = if group.is_empty() {
            cut(version).into_owned()
        } else {
            cut(&format!("{}/{}", cut(group), cut(version))).into_owned()
        };
        Judged {
            uid: cut(subject.uid).into_owned(),
            user: cut(change.requester.username).into_owned(),
            resource: cut(&qualified_resource(target)).into_owned(),
            object_kind: cut(kind).into_owned(),
            object_api_version,
            namespace: target.object_namespace().map(|ns| cut(ns).into_owned()),
            name: cut(target.name).into_owned(),
            object_uid: subject.object_uid.map(|uid| cut(uid).into_owned()),
            dry_run: subject.dry_run,
            cluster: None,
        }
    }
}

/// The removals a record lists: the first [`MAX_AUDITED_FINALIZERS`].
pub fn listed(decision: &Decision) -> impl Iterator<Item = &Removal> {
    decision.removed.iter().take(MAX_AUDITED_FINALIZERS)
}

/// One audit record, rendered by the review that judged it: the fields of
/// its JSON line after `time` and `kind`, each string escaped once, from
/// the request as read. The audit thread adds the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    fields: String,
    judged: Judged,
}

impl AuditEntry {
    pub fn new(
        subject: Subject<'_>,
        change: &Change<'_>,
        decision: &Decision,
        mode: Mode,
        ledger: Option<&Ledger>,
        message: Option<&str>,
    ) -> AuditEntry {
        let judged = Judged::of(subject, change);
        let listed = decision.removed.len().min(MAX_AUDITED_FINALIZERS);
        let mut out = String::with_capacity(
            512 + message.map_or(0, |m| m.len().min(4 * MAX_AUDITED_MESSAGE_CHARS)) + 64 * listed,
        );
        write_requester(&mut out, &judged, change.requester.groups);
        write_extra(&mut out, subject.extra);
        write_object(&mut out, &judged, change);
        write_removals(&mut out, decision);
        write_outcome(&mut out, decision, mode, ledger, message);
        out.push_str(if judged.dry_run {
            ",\"dryRun\":true"
        } else {
            ",\"dryRun\":false"
        });
        AuditEntry {
            fields: out,
            judged,
        }
    }

    /// Adds whether the review's caller was authenticated (the record's
    /// last field): the server's records say it, always.
    pub fn set_authenticated(&mut self, authenticated: bool) {
        debug_assert!(!self.fields.contains(",\"authenticated\":"));
        self.fields.push_str(if authenticated {
            ",\"authenticated\":true"
        } else {
            ",\"authenticated\":false"
        });
    }

    /// Adds the name of the cluster the webhook serves (`--cluster-name`),
    /// after whether the caller was authenticated: the record's last field.
    pub fn set_cluster(&mut self, cluster: &str) {
        debug_assert!(!self.fields.contains(",\"cluster\":"));
        let cluster = truncated(cluster, MAX_AUDITED_CHARS);
        json::field(&mut self.fields, "cluster", &cluster);
        self.judged.cluster = Some(cluster.into_owned());
    }

    /// Whether the request was a dry run.
    pub fn dry_run(&self) -> bool {
        self.judged.dry_run
    }

    /// What the removal was about: the request, the requester, the object.
    pub fn judged(&self) -> &Judged {
        &self.judged
    }

    /// The record's fields, as JSON object members.
    pub fn fields(&self) -> &str {
        &self.fields
    }

    /// The record, read back from its JSON, as a log reader reads it (the
    /// server never does: what it needs is [`AuditEntry::judged`]).
    pub fn record(&self) -> serde_json::Result<AuditRecord> {
        serde_json::from_str(&format!("{{{}}}", self.fields))
    }

    /// The record's fields and what it was about, for the writer that
    /// stamps and writes it.
    pub fn into_parts(self) -> (String, Judged) {
        (self.fields, self.judged)
    }

    /// The audit line (without the newline), stamped `time`.
    pub fn line_at(&self, time: jiff::Timestamp) -> String {
        let mut line = String::with_capacity(self.fields.len() + 72);
        write_line(&mut line, time, &self.fields);
        line
    }
}

/// `"uid":...,"user":...,"groups":[...]`, and how many groups are not listed.
fn write_requester(out: &mut String, judged: &Judged, groups: &[Cow<'_, str>]) {
    json::key(out, "uid");
    json::string(out, &judged.uid);
    json::field(out, "user", &judged.user);
    out.push_str(",\"groups\":[");
    for (i, g) in groups.iter().take(MAX_AUDITED_GROUPS).enumerate() {
        if i > 0 {
            out.push(',');
        }
        json::string(out, &cut(g));
    }
    out.push(']');
    if groups.len() > MAX_AUDITED_GROUPS {
        let _ = write!(
            out,
            ",\"groupsOmitted\":{}",
            groups.len() - MAX_AUDITED_GROUPS
        );
    }
}

/// `"extra":{...}`, unless there is none: keys in order, each string
/// escaped (and already cut, [`Extra`]).
fn write_extra(out: &mut String, extra: Option<&Extra>) {
    let Some(Extra(extra)) = extra.filter(|e| !e.0.is_empty()) else {
        return;
    };
    out.push_str(",\"extra\":{");
    for (i, (key, values)) in extra.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json::string(out, key);
        out.push_str(":[");
        for (j, value) in values.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            json::string(out, value);
        }
        out.push(']');
    }
    out.push('}');
}

/// The operation, and the object written: `resource` to `objectUid`.
fn write_object(out: &mut String, judged: &Judged, change: &Change<'_>) {
    json::field(out, "operation", change.operation.as_str());
    json::field(out, "resource", &judged.resource);
    json::field(out, "objectKind", &judged.object_kind);
    json::field(out, "objectApiVersion", &judged.object_api_version);
    if !change.target.subresource.is_empty() {
        json::field(out, "subresource", &cut(change.target.subresource));
    }
    if let Some(namespace) = &judged.namespace {
        json::field(out, "namespace", namespace);
    }
    json::field(out, "name", &judged.name);
    if let Some(uid) = &judged.object_uid {
        json::field(out, "objectUid", uid);
    }
}

/// `"removedFinalizers":[...]`, and how many are not listed.
fn write_removals(out: &mut String, decision: &Decision) {
    out.push_str(",\"removedFinalizers\":[");
    for (i, r) in listed(decision).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('{');
        json::key(out, "finalizer");
        json::string(out, &cut(&r.finalizer));
        json::field(out, "field", r.field.path());
        if let Some(authority) = &r.authorized_by {
            let (what, name) = authority.parts();
            out.push_str(",\"authorizedBy\":\"");
            json::contents(out, what);
            json::contents(out, &cut(name));
            out.push('"');
        }
        out.push('}');
    }
    out.push(']');
    let omitted = decision
        .removed
        .len()
        .saturating_sub(MAX_AUDITED_FINALIZERS);
    if omitted > 0 {
        let _ = write!(out, ",\"removedFinalizersOmitted\":{omitted}");
    }
}

/// What was decided and on what grounds: `decision` to `message`.
fn write_outcome(
    out: &mut String,
    decision: &Decision,
    mode: Mode,
    ledger: Option<&Ledger>,
    message: Option<&str>,
) {
    json::field(out, "decision", decision.verdict().as_str());
    json::field(out, "mode", mode.as_str());
    if let Some(used) = decision.override_used() {
        json::field(out, "overrideReason", &cut(&used.reason));
        json::field(out, "overrideDetail", &cut(&used.detail));
    }
    let evidence = &decision.evidence;
    if let Some(by) = &evidence.approved_by {
        json::field(out, "approvedBy", &cut(by));
    }
    if let Some(expires) = &evidence.override_expires {
        json::field(out, "overrideExpires", &cut(expires));
    }
    if let Some(ledger) = ledger {
        out.push(',');
        json::key(out, "protected");
        out.push_str(&serde_json::to_string(ledger).expect("a ledger always serializes"));
    }
    if let Some(message) = message {
        json::field(
            out,
            "message",
            &truncated(message, MAX_AUDITED_MESSAGE_CHARS),
        );
    }
}

/// `{"time":...,"kind":"FinalizerRemoval",FIELDS}`: an audit line, without
/// its newline.
pub fn write_line(out: &mut String, time: jiff::Timestamp, fields: &str) {
    let _ = write!(
        out,
        "{{\"time\":\"{time}\",\"kind\":\"FinalizerRemoval\",{fields}}}"
    );
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn qualified_resource<'a>(target: &Target<'a>) -> Cow<'a, str> {
    if target.group.is_empty() {
        Cow::Borrowed(target.resource)
    } else {
        Cow::Owned(format!("{}.{}", target.resource, target.group))
    }
}

/// Writes the audit annotations as a JSON object: plain qualified names
/// without `/`, at most 63 characters, which kube-apiserver prefixes with
/// the webhook's name. Values are cut to 256 characters.
pub fn write_annotations(
    out: &mut String,
    decision: &Decision,
    mode: Mode,
    ledger: Option<&Ledger>,
) {
    out.push('{');
    json::key(out, "decision");
    json::string(out, decision.verdict().as_str());
    annotate_removals(out, decision);
    annotate_authorities(out, decision);
    annotate_outcome(out, decision, mode);
    let evidence = &decision.evidence;
    for (key, value) in [
        ("approved-by", &evidence.approved_by),
        ("override-expires", &evidence.override_expires),
    ] {
        if let Some(value) = value {
            annotate(out, key, value);
        }
    }
    if let Some(ledger) = ledger {
        annotate(out, "protected", &ledger.summary());
    }
    out.push('}');
}

/// `,"key":"value"`, the value cut to [`MAX_AUDIT_VALUE_CHARS`].
fn annotate(out: &mut String, key: &str, value: &str) {
    json::field(out, key, &truncated(value, MAX_AUDIT_VALUE_CHARS));
}

/// The finalizers removed, and those removed unauthorized, a list per field.
fn annotate_removals(out: &mut String, decision: &Decision) {
    let mut names = String::with_capacity(64);
    for (field, removed_key, unauthorized_key) in [
        (
            FinalizerField::Metadata,
            "removed-finalizers",
            "unauthorized-finalizers",
        ),
        (
            FinalizerField::Spec,
            "removed-spec-finalizers",
            "unauthorized-spec-finalizers",
        ),
    ] {
        for (key, only_unauthorized) in [(removed_key, false), (unauthorized_key, true)] {
            names.clear();
            for r in decision
                .removed
                .iter()
                .filter(|r| r.field == field && (!only_unauthorized || r.authorized_by.is_none()))
            {
                // Past what the value keeps, the rest would only be cut.
                if names.len() > 4 * MAX_AUDIT_VALUE_CHARS {
                    break;
                }
                if !names.is_empty() {
                    names.push(',');
                }
                names.push_str(&r.finalizer);
            }
            if !names.is_empty() {
                annotate(out, key, &names);
            }
        }
    }
}

/// `authorized-by`: each rule or built-in controller that allowed a removal, once.
fn annotate_authorities(out: &mut String, decision: &Decision) {
    let mut names = String::new();
    let mut authorities: Vec<&Authority> = Vec::new();
    for authority in decision
        .removed
        .iter()
        .filter_map(|r| r.authorized_by.as_ref())
    {
        if !authorities.contains(&authority) {
            if !names.is_empty() {
                names.push_str(", ");
            }
            let (what, name) = authority.parts();
            names.push_str(what);
            names.push_str(name);
            authorities.push(authority);
        }
    }
    if !names.is_empty() {
        annotate(out, "authorized-by", &names);
    }
}

/// What the outcome adds: the override used, or the mode and the problem found.
fn annotate_outcome(out: &mut String, decision: &Decision, mode: Mode) {
    match &decision.outcome {
        Outcome::Override(o) => {
            annotate(out, "override-reason", &o.reason);
            annotate(out, "override-detail", &o.detail);
        }
        Outcome::Denied { problem, .. } => {
            annotate(out, "mode", mode.as_str());
            if *problem != OverrideProblem::Absent {
                annotate(out, "override-problem", &problem.to_string());
            }
        }
        Outcome::ApprovalRefused { problem, .. } => {
            annotate(out, "mode", mode.as_str());
            annotate(out, "approval-problem", &problem.to_string());
        }
        Outcome::TooManyNames { field, .. } => {
            annotate(out, "mode", mode.as_str());
            annotate(out, "too-many-names", field.path());
        }
        Outcome::NotJudged
        | Outcome::NothingRemoved
        | Outcome::Authorized
        | Outcome::ApprovalRecorded => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_entry_is_the_record_serialized() {
        let policy = crate::policy::Policy::embedded_default();
        for example in [
            &include_bytes!("../../examples/reviews/pod-strip-finalizers.json")[..],
            include_bytes!("../../examples/reviews/pod-strip-finalizers-override.json"),
            include_bytes!("../../examples/reviews/namespace-finalize-stuck.json"),
            include_bytes!("../../examples/reviews/deployment-foreground-deletion-gc.json"),
        ] {
            let entry = crate::admission::review(&policy, example)
                .unwrap()
                .audit
                .unwrap();
            let record = entry.record().unwrap();
            assert_eq!(record.authenticated, None);
            assert_eq!(
                format!("{{{}}}", entry.fields()),
                serde_json::to_string(&record).unwrap()
            );
            for authenticated in [false, true] {
                let mut marked = entry.clone();
                marked.set_authenticated(authenticated);
                let record = marked.record().unwrap();
                assert_eq!(record.authenticated, Some(authenticated));
                assert_eq!(
                    format!("{{{}}}", marked.fields()),
                    serde_json::to_string(&record).unwrap()
                );
            }
            let line: serde_json::Value =
                serde_json::from_str(&entry.line_at(jiff::Timestamp::UNIX_EPOCH)).unwrap();
            assert_eq!(line["time"], "1970-01-01T00:00:00Z");
            assert_eq!(line["kind"], "FinalizerRemoval");
        }
    }
}
