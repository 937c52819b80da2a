//! The announcer: explains each stuck object as `unstick` does (the same
//! code: [`crate::cluster::explain`] and [`ObjectReport`]'s explanation) and
//! hands its `FinalizerStuck` Event to the webhook's Event writer
//! ([`crate::trail::events`]): repeats are one Event with a series.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use jiff::Timestamp;
use kube::Client;
use kube::api::{DynamicObject, TypeMeta};

use super::tracker::{Announced, Due, Shared};
use crate::cluster::explain::{self};
use crate::cluster::liveness::Probe;
use crate::cluster::object::ObjectApi;
use crate::cluster::report::ObjectReport;
use crate::cluster::select::FoundObject;
use crate::cluster::session::SessionUser;
use crate::output::escape;
use crate::policy::Policy;
use crate::trail::events::{EventSink, MAX_NOTE_BYTES, Notice, Occurrence};

/// The Events' reason.
pub const REASON: &str = "FinalizerStuck";
/// The Events' reportingController.
pub const REPORTING_CONTROLLER: &str = "finalizer-guard.io/watch";
/// How often stuck objects are looked for, to announce them.
const TICK: Duration = Duration::from_secs(1);
/// Objects explained and announced per tick: a cluster-wide outage that
/// sticks thousands of objects at once is announced over minutes, not in a burst.
const ANNOUNCE_PER_TICK: usize = 20;
/// How long one object's explanation may take.
const ANNOUNCE_TIMEOUT: Duration = Duration::from_secs(30);

/// Explains stuck objects and hands their Events to the writer.
pub(super) struct Announcer {
    pub(super) client: Client,
    pub(super) shared: Arc<Shared>,
    pub(super) policy: Arc<ArcSwap<Policy>>,
    pub(super) identity: SessionUser,
    pub(super) not_ready_for: Duration,
    /// `None` with `--events=false`.
    pub(super) events: Option<Arc<EventSink>>,
    /// `reportingInstance`: the pod's name.
    pub(super) instance: String,
    /// `--cluster-name`: an annotation of every Event.
    pub(super) cluster_name: Option<String>,
}

impl Announcer {
    pub(super) async fn run(self) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let due = self.shared.due(Timestamp::now(), ANNOUNCE_PER_TICK);
            if due.is_empty() {
                continue;
            }
            // Liveness read afresh for each batch: a node or a controller may have come back.
            let mut probe = Probe::new(self.client.clone(), self.not_ready_for);
            for d in due {
                let Some(events) = &self.events else {
                    tracing::warn!(
                        object = %escape(&d.label),
                        finalizers = %escape(&d.finalizers.join(", ")),
                        since = %d.since,
                        command = %d.command,
                        "stuck"
                    );
                    self.shared
                        .announced(&d.key, Announced::Off, Timestamp::now());
                    continue;
                };
                let announced =
                    tokio::time::timeout(ANNOUNCE_TIMEOUT, self.announce(events, &mut probe, &d))
                        .await
                        .unwrap_or_else(|_| Err("timed out".into()));
                let outcome = if announced.is_ok() {
                    Announced::Sent
                } else {
                    Announced::Failed
                };
                let failures = self.shared.announced(&d.key, outcome, Timestamp::now());
                if let Err(why) = announced {
                    // Said once; the retries (with backoff) are counted.
                    if failures == 1 {
                        tracing::warn!(object = %escape(&d.label), error = %escape(&why), "cannot explain a stuck object; trying again with backoff");
                    } else {
                        tracing::debug!(object = %escape(&d.label), error = %escape(&why), failures, "cannot explain a stuck object");
                    }
                }
            }
        }
    }

    /// Explains one stuck object as `unstick` does and hands its Event (or
    /// a repeat of it) to the writer.
    async fn announce(&self, events: &EventSink, probe: &mut Probe, d: &Due) -> Result<(), String> {
        let note = if d.first {
            match self.explain(probe, d).await? {
                Some(note) => note,
                // Gone or replaced since the watch saw it: the watch will say so.
                None => return Ok(()),
            }
        } else {
            // A repeat is one more in the Event's series, which keeps the
            // first note. Should the series have ended, this one says as
            // much as a repeat can without reading the object again.
            short_note(d)
        };
        if d.first && d.failures == 0 {
            tracing::warn!(object = %escape(&d.label), note = %note, "stuck");
        }
        events.send(occurrence(
            d,
            note,
            &self.instance,
            self.cluster_name.as_deref(),
        ));
        Ok(())
    }

    /// What `unstick` would explain, as an Event note. `None` when the
    /// object is gone or another took its name.
    async fn explain(&self, probe: &mut Probe, d: &Due) -> Result<Option<String>, String> {
        let Some(found) = self.read(d).await? else {
            return Ok(None);
        };
        let policy = self.policy.load_full();
        let mut report = ObjectReport::new(&found);
        report.finalizers = explain::explain(probe, &policy, &found, &[], &self.identity).await;
        report.blocked_by = crate::cluster::liveness::namespace_blockers(probe, &found).await;
        Ok(Some(note(&report, &d.command)))
    }

    /// The object as `unstick` reads it: whole, but for Secrets and
    /// ConfigMaps, whose metadata is all it reads.
    async fn read(&self, d: &Due) -> Result<Option<FoundObject>, String> {
        let resource = &d.kind.resource;
        let namespace = d.namespace.as_deref().filter(|_| d.kind.namespaced);
        let api = ObjectApi::new(&self.client, resource, namespace);
        let object = if d.kind.metadata_only() {
            api.get_metadata_opt(&d.name).await.map(|o| {
                o.map(|meta| DynamicObject {
                    types: Some(TypeMeta {
                        api_version: resource.api_version.clone(),
                        kind: resource.kind.clone(),
                    }),
                    metadata: meta.metadata,
                    data: serde_json::Value::Object(serde_json::Map::new()),
                })
            })
        } else {
            api.get_opt(&d.name).await
        }
        .map_err(|e| e.to_string())?;
        Ok(object
            .filter(|o| d.uid.is_none() || o.metadata.uid == d.uid)
            .map(|object| FoundObject {
                resource: resource.clone(),
                namespaced: d.kind.namespaced,
                object,
            }))
    }
}

/// The FinalizerStuck Event of `d` with `note`, reported by `instance` in
/// the cluster named `cluster` (`--cluster-name`, as `serve` names it).
pub(super) fn occurrence(
    d: &Due,
    note: String,
    instance: &str,
    cluster: Option<&str>,
) -> Occurrence {
    let notice = Notice {
        regarding: d.reference(),
        type_: "Warning",
        reason: REASON,
        action: "Finalize",
        note,
        // One series per object and set of finalizers holding it.
        repeats_as: d.finalizers.join(", "),
        reporting_controller: REPORTING_CONTROLLER,
    };
    Occurrence::new(notice, instance).in_cluster(cluster)
}

/// The Event's note: `unstick`'s explanation on one line (what holds it,
/// each finalizer's owner and whether it looks alive, what may leak, what
/// blocks a namespace), then the command. Escaped, and at most
/// [`MAX_NOTE_BYTES`]: the command is never cut.
pub(super) fn note(report: &ObjectReport, command: &str) -> String {
    fit(&report.explanation_note(), command)
}

/// A repeat's note, should the series have ended.
pub(super) fn short_note(d: &Due) -> String {
    fit(
        &format!(
            "{}: Terminating since {}, held by {}",
            d.label,
            d.since,
            d.finalizers.join(", ")
        ),
        &d.command,
    )
}

/// `body` escaped, cut to leave room for `. Explain and release: COMMAND`.
fn fit(body: &str, command: &str) -> String {
    let tail = format!(". Explain and release: {command}");
    let body = escape(body);
    let room = MAX_NOTE_BYTES.saturating_sub(tail.len());
    if body.len() <= room {
        return format!("{body}{tail}");
    }
    let mut cut = room.saturating_sub(3);
    while !body.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...{tail}", &body[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::ledger::Ledger;
    use crate::cluster::explain::FinalizerReport;
    use crate::cluster::watch::fixtures::*;
    use crate::policy::FinalizerField;
    /// The report `unstick` makes of the object `d` names, with what it
    /// explained.
    fn explained(d: &Due, leak: Ledger, blocked_by: Vec<String>) -> ObjectReport {
        let found = FoundObject {
            resource: d.kind.resource.clone(),
            namespaced: d.kind.namespaced,
            object: DynamicObject {
                types: None,
                metadata: meta(&d.name, "u", Some(T0), &["x.io/f"]),
                data: serde_json::json!({}),
            },
        };
        let mut report = ObjectReport::new(&found);
        report.stuck_for = Some("12m".into());
        report.finalizers = vec![FinalizerReport {
            name: "x.io/f".into(),
            field: FinalizerField::Metadata,
            owner: crate::cluster::owner::Owner::Unknown,
            owner_alive: crate::cluster::liveness::Liveness::Unknown("no owner is known".into()),
            removable: explain::Removable::NotDeleting,
        }];
        report.may_leak = leak;
        report.blocked_by = blocked_by;
        report
    }

    #[test]
    fn notes_are_unsticks_explanation_escaped_and_keep_the_command() {
        let shared = Shared::new(Duration::ZERO, 10);
        shared.observe(
            &widgets(),
            &meta("w\u{1b}[2J", "u", Some(T0), &["x.io/f"]),
            vec![],
        );
        let d = shared.due(at(T0), 1).remove(0);
        assert_eq!(
            d.command,
            "finalizer-guard unstick $'widget.example.com/w\\x1b[2J' -n shop"
        );
        let leak = Ledger {
            node: Some("worker\n3".into()),
            ..Ledger::default()
        };
        let report = explained(
            &d,
            leak.clone(),
            vec!["APIService v1.x is not Available (\u{2028})".into()],
        );
        assert_eq!(
            note(&report, &d.command),
            "widget.example.com/w\\u{1b}[2J -n shop: Terminating for 12m. blocked by: APIService v1.x is not Available (\\u{2028}). may leak: node worker\\u{a}3. x.io/f; owner: unknown: no built-in controller or policy rule names it; owner alive: cannot tell: no owner is known. Explain and release: finalizer-guard unstick $'widget.example.com/w\\x1b[2J' -n shop"
        );
        let text = note(
            &explained(&d, leak.clone(), vec!["y".repeat(5000)]),
            &d.command,
        );
        assert!(text.len() <= MAX_NOTE_BYTES, "{}", text.len());
        assert!(text.ends_with(".... Explain and release: finalizer-guard unstick $'widget.example.com/w\\x1b[2J' -n shop"), "{text}");
        let wide = explained(&d, leak, vec!["é".repeat(2000)]);
        assert!(note(&wide, &d.command).len() <= MAX_NOTE_BYTES);
        assert!(short_note(&d).starts_with("widget.example.com/w\\u{1b}[2J -n shop: Terminating since 2026-11-21T07:00:00Z, held by x.io/f. Explain"));
    }

    #[test]
    fn the_event_names_the_cluster_as_serve_s_events_do() {
        let shared = Shared::new(Duration::ZERO, 10);
        shared.observe(&widgets(), &meta("w", "u", Some(T0), &["x.io/f"]), vec![]);
        let d = shared.due(at(T0), 1).remove(0);
        let named = occurrence(&d, "held".into(), "watch-0", Some("prod-eu-1"));
        let body = serde_json::to_value(&named.event).unwrap();
        assert_eq!(
            body["metadata"]["annotations"],
            serde_json::json!({"finalizer-guard.io/cluster": "prod-eu-1"}),
            "{body}"
        );
        assert_eq!(body["reason"], REASON);
        assert_eq!(body["reportingController"], REPORTING_CONTROLLER);
        assert_eq!(body["reportingInstance"], "watch-0");
        assert_eq!(body["regarding"]["name"], "w");
        // The webhook's own Events carry the same annotation, from the same code.
        assert_eq!(
            crate::trail::events::CLUSTER_ANNOTATION,
            "finalizer-guard.io/cluster"
        );
        let unnamed = occurrence(&d, "held".into(), "watch-0", None);
        let body = serde_json::to_value(&unnamed.event).unwrap();
        assert!(body["metadata"].get("annotations").is_none(), "{body}");
    }
}
