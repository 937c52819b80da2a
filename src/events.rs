//! Kubernetes Events for denials and overrides, so `kubectl describe` and
//! `kubectl get events` show them next to the object.
//!
//! Sent from a background task through a bounded queue ([`crate::queue`]):
//! an Event never delays or changes a decision. A full queue or a failing
//! API server drops the Event (logged and counted). Dry-run requests send none.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::audit::AuditRecord;
use crate::metrics::EventLabels;
use crate::policy::Verdict;
use crate::policy::message::truncate;
use crate::queue::{self, Queue, WhenFull};

/// `reportingController` of every Event.
pub const REPORTING_CONTROLLER: &str = "finalizer-guard.io/webhook";
/// How long one Event may take to be written.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Kubernetes refuses notes longer than this.
const MAX_NOTE_BYTES: usize = 1024;

/// Whether a decision calls for an Event: a denial, an override or a
/// refused approval, outside a dry run.
pub fn calls_for_event(decision: Verdict, dry_run: bool) -> bool {
    !dry_run
        && matches!(
            decision,
            Verdict::Denied | Verdict::Override | Verdict::ApprovalDenied
        )
}

/// The Event an audit record calls for, if any: denials and overrides.
pub fn event_for(record: &AuditRecord, instance: &str) -> Option<Event> {
    if record.dry_run {
        return None;
    }
    let (type_, reason, note) = what_happened(record)?;
    // Events about cluster-scoped objects live in `default`, as kubectl expects.
    let namespace = record.namespace.clone().unwrap_or_else(|| "default".into());
    let now = jiff::Timestamp::now();
    Some(Event {
        metadata: ObjectMeta {
            name: Some(event_name(&record.name, now)),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some("RemoveFinalizers".into()),
        reason: Some(reason.into()),
        note: Some(truncate(&note, MAX_NOTE_BYTES / 4)),
        type_: Some(type_.into()),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(instance.chars().take(128).collect()),
        regarding: Some(ObjectReference {
            api_version: Some(record.object_api_version.clone()),
            kind: Some(record.object_kind.clone()),
            name: Some(record.name.clone()),
            namespace: record.namespace.clone(),
            uid: record.object_uid.clone(),
            ..ObjectReference::default()
        }),
        ..Event::default()
    })
}

/// The Event's type, reason and note for a denial, an override or a refused
/// approval; `None` for every other decision.
fn what_happened(record: &AuditRecord) -> Option<(&'static str, &'static str, String)> {
    let finalizers: Vec<&str> = record
        .removed_finalizers
        .iter()
        .filter(|r| r.authorized_by.is_none())
        .map(|r| r.finalizer.as_str())
        .collect();
    Some(match record.decision {
        Verdict::Denied => (
            "Warning",
            "FinalizerRemovalDenied",
            format!(
                "{} may not remove finalizers {}; see finalizer-guard's audit record {}",
                record.user,
                finalizers.join(", "),
                record.uid
            ),
        ),
        Verdict::Override => (
            "Warning",
            "FinalizerOverride",
            format!(
                "{} removed finalizers {} by override ({}: {}){}; clean up by hand: {}",
                record.user,
                finalizers.join(", "),
                record.override_reason.as_deref().unwrap_or_default(),
                record.override_detail.as_deref().unwrap_or_default(),
                record
                    .approved_by
                    .as_deref()
                    .map(|a| format!(", approved by {a}"))
                    .unwrap_or_default(),
                record
                    .protected
                    .as_ref()
                    .map(|l| l.summary())
                    .unwrap_or_else(|| "nothing recorded on the object".into()),
            ),
        ),
        Verdict::ApprovalDenied => (
            "Warning",
            "OverrideApprovalDenied",
            format!("{} may not write an override approval", record.user),
        ),
        Verdict::NotJudged
        | Verdict::NothingRemoved
        | Verdict::Authorized
        | Verdict::WouldDeny
        | Verdict::ApprovalRecorded
        | Verdict::ApprovalWouldDeny => return None,
    })
}

/// `OBJECT.TIMESTAMP`, as Kubernetes' own event recorder names Events (the
/// nanosecond time in hex). An Event's name must be a DNS subdomain; object
/// names need not be (a ClusterRole may be called `system:node`), so other
/// characters become `-`.
fn event_name(object: &str, now: jiff::Timestamp) -> String {
    let base: String = object
        .chars()
        .take(200)
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    let base = base.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let base = if base.is_empty() { "object" } else { base };
    format!("{base}.{:x}", now.as_nanosecond())
}

/// Sends Events in the background.
pub struct EventSink {
    queue: Queue<Event>,
}

impl EventSink {
    /// Starts the sending task. `outcomes` counts sent and failed Events,
    /// `dropped` those the full queue refused.
    pub fn start(
        client: kube::Client,
        capacity: usize,
        outcomes: Family<EventLabels, Counter>,
        dropped: Counter,
    ) -> Arc<EventSink> {
        let (queue, mut incoming) =
            queue::bounded::<Event>("events", capacity, WhenFull::Drop, dropped);
        tokio::spawn(async move {
            while let Some(event) = incoming.recv().await {
                let namespace = event
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into());
                let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
                let sent =
                    tokio::time::timeout(SEND_TIMEOUT, api.create(&PostParams::default(), &event))
                        .await;
                let outcome = match sent {
                    Ok(Ok(_)) => "sent",
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, namespace, "cannot write Event");
                        "failed"
                    }
                    Err(_) => {
                        tracing::warn!(namespace, "writing an Event timed out");
                        "failed"
                    }
                };
                outcomes
                    .get_or_create(&EventLabels { decision: outcome })
                    .inc();
            }
        });
        Arc::new(EventSink { queue })
    }

    /// Queues an Event; drops it (counted) if the queue is full.
    pub fn send(&self, event: Event) {
        // A dropping queue never hands the Event back.
        let _ = self.queue.send(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::AuditedRemoval;
    use crate::policy::{FinalizerField, Mode, Operation};

    fn record(decision: Verdict) -> AuditRecord {
        AuditRecord {
            uid: "u-1".into(),
            user: "jane".into(),
            groups: vec![],
            operation: Operation::Update,
            resource: "pods".into(),
            object_kind: "Pod".into(),
            object_api_version: "v1".into(),
            subresource: String::new(),
            namespace: Some("shop".into()),
            name: "web-0".into(),
            object_uid: Some("o-1".into()),
            removed_finalizers: vec![AuditedRemoval {
                finalizer: "example.com/cleanup".into(),
                field: FinalizerField::Metadata,
                authorized_by: None,
            }],
            decision,
            mode: Mode::Enforce,
            override_reason: Some("node-lost".into()),
            override_detail: Some("INC-1".into()),
            approved_by: None,
            override_expires: None,
            protected: Some(crate::ledger::Ledger {
                node: Some("worker-3".into()),
                ..Default::default()
            }),
            message: None,
            dry_run: false,
        }
    }

    #[test]
    fn event_names_are_dns_subdomains() {
        let at = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        assert_eq!(event_name("db-0", at), "db-0.18fae27693b40000");
        assert_eq!(
            event_name("system:node", at),
            "system-node.18fae27693b40000"
        );
        assert_eq!(event_name("-Weird_", at), "weird.18fae27693b40000");
        assert_eq!(event_name("::", at), "object.18fae27693b40000");
        let long = "a".repeat(253);
        assert!(event_name(&long, at).len() <= 253);
    }

    #[test]
    fn events_for_denials_and_overrides_only() {
        let e = event_for(&record(Verdict::Override), "pod-1").unwrap();
        assert_eq!(e.reason.as_deref(), Some("FinalizerOverride"));
        assert_eq!(
            e.note.as_deref(),
            Some(
                "jane removed finalizers example.com/cleanup by override (node-lost: INC-1); clean up by hand: node worker-3"
            )
        );
        assert_eq!(e.regarding.as_ref().unwrap().uid.as_deref(), Some("o-1"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(
            event_for(&record(Verdict::Denied), "pod-1")
                .unwrap()
                .reason
                .as_deref(),
            Some("FinalizerRemovalDenied")
        );
        assert_eq!(
            event_for(&record(Verdict::ApprovalDenied), "pod-1")
                .unwrap()
                .reason
                .as_deref(),
            Some("OverrideApprovalDenied")
        );
        for quiet in [
            Verdict::Authorized,
            Verdict::WouldDeny,
            Verdict::ApprovalWouldDeny,
        ] {
            assert!(event_for(&record(quiet), "pod-1").is_none(), "{quiet}");
        }
        let mut dry = record(Verdict::Denied);
        dry.dry_run = true;
        assert!(
            event_for(&dry, "pod-1").is_none(),
            "dry run has no side effects"
        );
        let mut cluster = record(Verdict::Denied);
        cluster.namespace = None;
        assert_eq!(
            event_for(&cluster, "pod-1")
                .unwrap()
                .metadata
                .namespace
                .as_deref(),
            Some("default")
        );
    }
}
