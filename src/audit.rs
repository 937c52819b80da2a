//! Audit: the record of each judged finalizer removal, and the audit
//! annotations kube-apiserver adds to its own audit event.
//!
//! Records are one JSON line each on standard output. Logs go to standard
//! error, so a log pipeline can route them apart. Neither ever carries an
//! object body.
//!
//! A review hands its record to [`AuditLog`], whose own thread renders and
//! writes it, a batch per write: the review's worker thread pays neither the
//! JSON nor the system call, nor a thread switch per record. No record is
//! ever dropped: when the queue is full the review waits for room
//! ([`WhenFull::Wait`]), and a record that cannot be queued at all is written
//! where it stands.

use std::collections::HashMap;
use std::io::{BufWriter, Write};

use kube_core::GroupVersionKind;
use prometheus_client::metrics::counter::Counter;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::ledger::Ledger;
use crate::policy::message::truncate;
use crate::policy::{
    Authority, Change, Decision, FinalizerField, Mode, Operation, Outcome, OverrideProblem, Target,
    Verdict,
};
use crate::queue::{self, Queue, WhenFull};

/// Audit annotation values are cut to this many characters.
const MAX_AUDIT_VALUE_CHARS: usize = 256;

/// One finalizer in an audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditedRemoval {
    pub finalizer: String,
    /// `metadata.finalizers` or `spec.finalizers`.
    pub field: FinalizerField,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorized_by: Option<Authority>,
}

/// One judged finalizer removal: who, what, which decision and why. Never an object body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    pub uid: String,
    pub user: String,
    pub groups: Vec<String>,
    pub operation: Operation,
    /// `resource` or `resource.group`.
    pub resource: String,
    /// The object's kind and apiVersion (`request.kind`).
    pub object_kind: String,
    pub object_api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_uid: Option<String>,
    pub removed_finalizers: Vec<AuditedRemoval>,
    pub decision: Verdict,
    #[serde(serialize_with = "mode_name")]
    pub mode: Mode,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub override_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub override_detail: Option<String>,
    /// Two-person rule: who approved the override (for an override, or an approval written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub override_expires: Option<String>,
    /// For an override: what the removed finalizers were protecting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protected: Option<Ledger>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub dry_run: bool,
}

/// What the outcome adds: the override used, or why the write was refused.
fn outcome_annotations(outcome: &Outcome, mode: Mode) -> Vec<(&'static str, String)> {
    match outcome {
        Outcome::Override(o) => vec![
            ("override-reason", o.reason.clone()),
            ("override-detail", o.detail.clone()),
        ],
        Outcome::Denied { problem, .. } => {
            let mut out = vec![("mode", mode.as_str().to_string())];
            if *problem != OverrideProblem::Absent {
                out.push(("override-problem", problem.to_string()));
            }
            out
        }
        Outcome::ApprovalRefused { problem, .. } => vec![
            ("mode", mode.as_str().to_string()),
            ("approval-problem", problem.to_string()),
        ],
        Outcome::NotJudged
        | Outcome::NothingRemoved
        | Outcome::Authorized
        | Outcome::ApprovalRecorded => Vec::new(),
    }
}

fn mode_name<S: serde::Serializer>(mode: &Mode, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(mode.as_str())
}

/// What identifies the request and the object, besides the change itself.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// `request.uid`.
    pub uid: &'a str,
    /// `request.kind`.
    pub kind: &'a GroupVersionKind,
    /// The object's own uid, from `oldObject`.
    pub object_uid: Option<&'a str>,
    pub dry_run: bool,
}

impl AuditRecord {
    pub fn new(
        subject: Subject<'_>,
        change: &Change<'_>,
        decision: &Decision,
        mode: Mode,
        ledger: Option<Ledger>,
        message: Option<String>,
    ) -> AuditRecord {
        let target = &change.target;
        let kind = subject.kind;
        let used = decision.override_used();
        AuditRecord {
            uid: subject.uid.to_string(),
            user: change.requester.username.to_string(),
            groups: change.requester.groups.to_vec(),
            operation: change.operation,
            resource: qualified_resource(target),
            object_kind: kind.kind.clone(),
            object_api_version: if kind.group.is_empty() {
                kind.version.clone()
            } else {
                format!("{}/{}", kind.group, kind.version)
            },
            subresource: target.subresource.to_string(),
            namespace: target.object_namespace().map(String::from),
            name: target.name.to_string(),
            object_uid: subject.object_uid.map(String::from),
            removed_finalizers: decision
                .removed
                .iter()
                .map(|r| AuditedRemoval {
                    finalizer: r.finalizer.clone(),
                    field: r.field,
                    authorized_by: r.authorized_by.clone(),
                })
                .collect(),
            decision: decision.verdict(),
            mode,
            override_reason: used.map(|o| o.reason.clone()),
            override_detail: used.map(|o| o.detail.clone()),
            approved_by: decision.evidence.approved_by.clone(),
            override_expires: decision.evidence.override_expires.clone(),
            protected: ledger,
            message,
            dry_run: subject.dry_run,
        }
    }
}

fn qualified_resource(target: &Target<'_>) -> String {
    if target.group.is_empty() {
        target.resource.to_string()
    } else {
        format!("{}.{}", target.resource, target.group)
    }
}

/// Audit annotations: plain qualified names without `/`, at most 63 characters,
/// which kube-apiserver prefixes with the webhook's name.
pub fn annotations(
    decision: &Decision,
    mode: Mode,
    ledger: Option<&Ledger>,
) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut put = |key: &str, value: &str| {
        out.insert(key.to_string(), truncate(value, MAX_AUDIT_VALUE_CHARS));
    };
    put("decision", decision.verdict().as_str());
    let join = |field: FinalizerField, only_unauthorized: bool| -> String {
        let names: Vec<&str> = decision
            .removed
            .iter()
            .filter(|r| r.field == field && (!only_unauthorized || r.authorized_by.is_none()))
            .map(|r| r.finalizer.as_str())
            .collect();
        names.join(",")
    };
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
        for (key, names) in [
            (removed_key, join(field, false)),
            (unauthorized_key, join(field, true)),
        ] {
            if !names.is_empty() {
                put(key, &names);
            }
        }
    }
    let mut authorities: Vec<String> = Vec::new();
    for authority in decision
        .removed
        .iter()
        .filter_map(|r| r.authorized_by.as_ref())
    {
        let authority = authority.to_string();
        if !authorities.contains(&authority) {
            authorities.push(authority);
        }
    }
    if !authorities.is_empty() {
        put("authorized-by", &authorities.join(", "));
    }
    for (key, value) in outcome_annotations(&decision.outcome, mode) {
        put(key, &value);
    }
    let evidence = &decision.evidence;
    for (key, value) in [
        ("approved-by", &evidence.approved_by),
        ("override-expires", &evidence.override_expires),
    ] {
        if let Some(value) = value {
            put(key, value);
        }
    }
    if let Some(ledger) = ledger {
        put("protected", &ledger.summary());
    }
    out
}

#[derive(Serialize)]
struct Line<'a> {
    time: String,
    kind: &'static str,
    #[serde(flatten)]
    record: &'a AuditRecord,
}

/// Renders one audit line (without the newline), stamped `time`.
pub fn render_at(record: &AuditRecord, time: jiff::Timestamp) -> String {
    let line = Line {
        time: time.to_string(),
        kind: "FinalizerRemoval",
        record,
    };
    serde_json::to_string(&line).expect("an audit record always serializes")
}

/// Records waiting for the writer thread, at most.
const QUEUE: usize = 4096;

/// Once woken by a record, the writer waits this long for others to join it:
/// under load one wake-up and one write carry many records, instead of a
/// thread switch per review. A line reaches standard output this much later.
const BATCH_WINDOW: std::time::Duration = std::time::Duration::from_millis(2);

enum Message {
    Record(jiff::Timestamp, Box<AuditRecord>),
    Flush(oneshot::Sender<()>),
}

/// Writes audit lines from its own thread.
pub struct AuditLog {
    queue: Queue<Message>,
}

impl AuditLog {
    /// Audit lines on standard output.
    pub fn stdout(dropped: Counter) -> std::io::Result<AuditLog> {
        AuditLog::to(std::io::stdout(), dropped)
    }

    /// Audit lines to `out`. The queue waits rather than drop, so `dropped` stays at 0.
    pub fn to(out: impl Write + Send + 'static, dropped: Counter) -> std::io::Result<AuditLog> {
        let (queue, incoming) = queue::bounded("audit", QUEUE, WhenFull::Wait, dropped);
        std::thread::Builder::new()
            .name("audit".into())
            .spawn(move || write_lines(incoming, out))?;
        Ok(AuditLog { queue })
    }

    /// Queues one record, stamped now; waits for room when the queue is full.
    pub fn emit(&self, record: AuditRecord) {
        let message = Message::Record(jiff::Timestamp::now(), Box::new(record));
        // The writer thread is gone: write this one here rather than lose it.
        if let Err(Message::Record(time, record)) = self.queue.send(message) {
            let mut line = render_at(&record, time);
            line.push('\n');
            let mut out = std::io::stdout().lock();
            if let Err(e) = out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
                tracing::error!(error = %e, uid = %record.uid, "cannot write audit record");
            }
        }
    }

    /// Waits until every record queued before this call is written out.
    pub async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.queue.send_waiting(Message::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }
}

fn write_lines(mut incoming: mpsc::Receiver<Message>, out: impl Write) {
    let mut out = BufWriter::with_capacity(64 * 1024, out);
    let mut waiting: Vec<oneshot::Sender<()>> = Vec::new();
    while let Some(first) = incoming.blocking_recv() {
        if matches!(first, Message::Record(..)) {
            std::thread::sleep(BATCH_WINDOW);
        }
        // Everything queued by now goes out in one write.
        let mut next = Some(first);
        while let Some(message) = next {
            match message {
                Message::Record(time, record) => {
                    let line = render_at(&record, time);
                    let written = out
                        .write_all(line.as_bytes())
                        .and_then(|()| out.write_all(b"\n"));
                    if let Err(e) = written {
                        tracing::error!(error = %e, uid = %record.uid, "cannot write audit record");
                    }
                }
                Message::Flush(done) => waiting.push(done),
            }
            next = incoming.try_recv().ok();
        }
        if let Err(e) = out.flush() {
            tracing::error!(error = %e, "cannot write audit records");
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn record(uid: &str) -> AuditRecord {
        let bytes = include_bytes!("../examples/reviews/pod-strip-finalizers.json");
        let mut reviewed =
            crate::admission::review(&crate::policy::Policy::embedded_default(), bytes).unwrap();
        let mut record = reviewed.audit.take().expect("a judged removal");
        record.uid = uid.into();
        record
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_record_is_written_once_in_order_by_flush() {
        let out = Shared::default();
        let log = AuditLog::to(out.clone(), Counter::default()).unwrap();
        let n = QUEUE * 2 + 7; // more than the queue holds: emit waits, drops nothing
        for i in 0..n {
            log.emit(record(&format!("uid-{i}")));
        }
        log.flush().await;
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let uids: Vec<String> = text
            .lines()
            .map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                assert_eq!(v["kind"], "FinalizerRemoval");
                v["uid"].as_str().unwrap().to_string()
            })
            .collect();
        let want: Vec<String> = (0..n).map(|i| format!("uid-{i}")).collect();
        assert_eq!(uids, want);
    }
}
