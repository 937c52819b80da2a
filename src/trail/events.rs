//! Kubernetes Events for denials and overrides, so `kubectl describe` and
//! `kubectl get events` show them next to the object.
//!
//! Why not kube-runtime's `events::Recorder` (kube 5.0.0, in the tree): its
//! `publish` awaits one API write per occurrence (a repeat is a PATCH of the
//! series at once, never throttled), its cache of series has no bound but a
//! six-minute age, its key leaves the note out (two requesters denied on one
//! object would be one Event keeping the first note), an update that finds
//! its Event gone fails until the cache forgets it, and it names an Event
//! after the object as is (`system:node.…` is not a valid name). Here a
//! review only hands its occurrence to a bounded queue and never waits for
//! the API server; repeats are written at most every [`SERIES_INTERVAL`];
//! at most 1,024 series are followed, what is forgotten counted;
//! an Event found gone is created again.
//!
//! Sent from a background task through a bounded queue ([`crate::queue`]):
//! an Event never delays or changes a decision, and a review only hands its
//! occurrence over. A full queue drops it (counted); a failing API server
//! fails the write (logged and counted). Dry-run requests send none.
//!
//! Repeats are one Event, as client-go's events broadcaster and kube-runtime's
//! `events::Recorder` make them: the occurrences of the same object, reason
//! and note (the audit record's uid aside, which differs per request) are
//! counted in the Event's `series` (`count`, `lastObservedTime`), and that
//! series is written at most every [`SERIES_INTERVAL`]. A controller retrying
//! a denied removal ten times a second costs the API server one Event write
//! every ten seconds, not ten a second. A series with no repeat for
//! [`SERIES_END`] ends; the next occurrence starts a new Event.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::admission::audit::{self, Judged};
use crate::admission::cut::cut;
use crate::admission::ledger::Ledger;
use crate::policy::is_dns_label;
use crate::policy::text::truncate;
use crate::policy::{Decision, Verdict};
use crate::queue::{self, Queue, WhenFull};
use crate::trail::metrics::EventLabels;

/// The annotation naming the cluster (`--cluster-name` of `serve` and
/// `watch`) on their Events, when it is named ([`Occurrence::in_cluster`]).
pub const CLUSTER_ANNOTATION: &str = "finalizer-guard.io/cluster";

/// `reportingController` of every Event.
pub const REPORTING_CONTROLLER: &str = "finalizer-guard.io/webhook";
/// How long one Event write may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Kubernetes refuses notes longer than this.
pub const MAX_NOTE_BYTES: usize = 1024;
/// Most often one Event's series is written: repeats in between are only counted.
pub const SERIES_INTERVAL: Duration = Duration::from_secs(10);
/// A series with no repeat for this long has ended (client-go's `finishTime`,
/// kube-runtime's cache TTL).
pub const SERIES_END: Duration = Duration::from_secs(6 * 60);
/// Most series followed at once. Past it the series seen longest ago is
/// forgotten (its unwritten repeats counted as dropped).
const MAX_SERIES: usize = 1024;

/// Whether a decision calls for an Event: a denial, an override or a
/// refused approval, outside a dry run.
pub fn calls_for_event(decision: Verdict, dry_run: bool) -> bool {
    !dry_run
        && matches!(
            decision,
            Verdict::Denied | Verdict::Override | Verdict::ApprovalDenied
        )
}

/// One denial, override or refused approval, as the writer receives it: the
/// Event it calls for, and what its repeats share.
#[derive(Debug, Clone)]
pub struct Occurrence {
    /// The Event to create, unless it repeats one already written.
    pub event: Event,
    key: SeriesKey,
}

/// What tells repeats apart: the object, the reason and the note without the
/// one part that differs per request (the audit record's uid).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    namespace: String,
    api_version: String,
    kind: String,
    name: String,
    uid: Option<String>,
    reason: &'static str,
    note: String,
}

/// What an Event says about one object, whoever reports it: the webhook
/// (a denial, an override) or `watch` (an object stuck on finalizers).
#[derive(Debug, Clone)]
pub struct Notice {
    pub regarding: ObjectReference,
    /// `Warning` or `Normal`.
    pub type_: &'static str,
    pub reason: &'static str,
    pub action: &'static str,
    /// At most [`MAX_NOTE_BYTES`] (longer is cut).
    pub note: String,
    /// What repeats of this Event share: the note without what differs
    /// per occurrence. Occurrences of the same object, reason and
    /// `repeats_as` are one Event with a series.
    pub repeats_as: String,
    pub reporting_controller: &'static str,
}

impl Occurrence {
    /// The occurrence of `notice`, reported by `instance` (the pod).
    pub fn new(notice: Notice, instance: &str) -> Occurrence {
        let Notice {
            regarding,
            type_,
            reason,
            action,
            note,
            repeats_as,
            reporting_controller,
        } = notice;
        // Events about cluster-scoped objects live in `default`, as kubectl expects.
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = regarding.name.clone().unwrap_or_default();
        let now = jiff::Timestamp::now();
        let key = SeriesKey {
            namespace: namespace.clone(),
            api_version: regarding.api_version.clone().unwrap_or_default(),
            kind: regarding.kind.clone().unwrap_or_default(),
            name: name.clone(),
            uid: regarding.uid.clone(),
            reason,
            note: repeats_as,
        };
        let event = Event {
            metadata: ObjectMeta {
                name: Some(event_name(&name, now)),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(action.into()),
            reason: Some(reason.into()),
            note: Some(fit_note(note)),
            type_: Some(type_.into()),
            reporting_controller: Some(reporting_controller.into()),
            reporting_instance: Some(instance.chars().take(128).collect()),
            regarding: Some(regarding),
            ..Event::default()
        };
        Occurrence { event, key }
    }

    /// The occurrence with the cluster's name (`--cluster-name`), when it
    /// is named, as the annotation [`CLUSTER_ANNOTATION`]: every Event
    /// `serve` and `watch` write goes through here.
    pub fn in_cluster(mut self, cluster: Option<&str>) -> Occurrence {
        if let Some(cluster) = cluster {
            self.event
                .metadata
                .annotations
                .get_or_insert_default()
                .insert(CLUSTER_ANNOTATION.to_string(), cluster.to_string());
        }
        self
    }
}

/// `note` cut to [`MAX_NOTE_BYTES`] on a character boundary, ending `...`
/// when cut: kube-apiserver refuses a longer one.
fn fit_note(mut note: String) -> String {
    if note.len() <= MAX_NOTE_BYTES {
        return note;
    }
    let mut cut = MAX_NOTE_BYTES - 3;
    while !note.is_char_boundary(cut) {
        cut -= 1;
    }
    note.truncate(cut);
    note.push_str("...");
    note
}

/// A judged removal as an Event tells it: what it was about and what was
/// decided, from the review itself.
#[derive(Debug, Clone, Copy)]
pub struct Judgment<'a> {
    pub judged: &'a Judged,
    pub decision: &'a Decision,
    /// For an override: what the removed finalizers were protecting.
    pub ledger: Option<&'a Ledger>,
}

/// The Event a judged removal calls for, if any: denials and overrides.
pub fn event_for(judgment: Judgment<'_>, instance: &str) -> Option<Occurrence> {
    let judged = judgment.judged;
    if judged.dry_run {
        return None;
    }
    // A namespace kube-apiserver sends is a DNS label; anything else did
    // not come from it, and would reach the Event's request path.
    if judged
        .namespace
        .as_deref()
        .is_some_and(|ns| !is_dns_label(ns))
    {
        tracing::debug!("no Event: the review's namespace is not a DNS label");
        return None;
    }
    let (type_, reason, note, audit_reference) = what_happened(judgment)?;
    let repeats_as = truncate(&note, MAX_NOTE_BYTES / 4);
    let note = match audit_reference {
        Some(reference) => truncate(&(note + &reference), MAX_NOTE_BYTES / 4),
        None => repeats_as.clone(),
    };
    let notice = Notice {
        regarding: ObjectReference {
            api_version: Some(judged.object_api_version.clone()),
            kind: Some(judged.object_kind.clone()),
            name: Some(judged.name.clone()),
            namespace: judged.namespace.clone(),
            uid: judged.object_uid.clone(),
            ..ObjectReference::default()
        },
        type_,
        reason,
        action: "RemoveFinalizers",
        note,
        repeats_as,
        reporting_controller: REPORTING_CONTROLLER,
    };
    Some(Occurrence::new(notice, instance).in_cluster(judged.cluster.as_deref()))
}

/// `text` as an Event's note may show it: see [`crate::output::escape`].
fn shown(text: &str) -> Cow<'static, str> {
    Cow::Owned(crate::output::escape(text).into_owned())
}

/// The Event's type, reason and note for a denial, an override or a refused
/// approval, and what the note adds per request (the audit record's uid);
/// `None` for every other decision. Names are those the audit record lists.
fn what_happened(
    judgment: Judgment<'_>,
) -> Option<(&'static str, &'static str, String, Option<String>)> {
    let Judgment {
        judged,
        decision,
        ledger,
    } = judgment;
    let finalizers: Vec<Cow<'_, str>> = audit::listed(decision)
        .filter(|r| r.authorized_by.is_none())
        .map(|r| shown(&cut(&r.finalizer)))
        .collect();
    // What `kubectl describe` prints: a name's control, format and line
    // characters escaped, as every line the tools print is.
    let user = shown(&judged.user);
    Some(match decision.verdict() {
        Verdict::Denied => (
            "Warning",
            "FinalizerRemovalDenied",
            format!("{user} may not remove finalizers {}", finalizers.join(", ")),
            Some(format!(
                "; see finalizer-guard's audit record {}",
                shown(&judged.uid)
            )),
        ),
        Verdict::Override => {
            let (reason, detail) = decision
                .override_used()
                .map(|o| (shown(&cut(&o.reason)), shown(&cut(&o.detail))))
                .unwrap_or_default();
            let approved = decision
                .evidence
                .approved_by
                .as_deref()
                .map(|a| format!(", approved by {}", shown(&cut(a))))
                .unwrap_or_default();
            let protected = shown(
                &ledger
                    .map(Ledger::summary)
                    .unwrap_or_else(|| "nothing recorded on the object".into()),
            );
            (
                "Warning",
                "FinalizerOverride",
                format!(
                    "{user} removed finalizers {} by override ({reason}: {detail}){approved}; clean up by hand: {protected}",
                    finalizers.join(", "),
                ),
                None,
            )
        }
        Verdict::ApprovalDenied => (
            "Warning",
            "OverrideApprovalDenied",
            format!("{user} may not write an override approval"),
            None,
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

/// One Event and its repeats.
#[derive(Debug)]
struct Series {
    /// The Event as first seen: its name, note and first occurrence.
    event: Event,
    /// Occurrences so far, the first included.
    count: i32,
    /// The count the last write carried (0: none yet).
    attempted: i32,
    /// When the last write was made.
    attempted_at: Option<Instant>,
    /// Whether the API server has the Event (its create succeeded).
    created: bool,
    /// The last occurrence, by the monotonic clock and by the wall clock.
    last_seen: Instant,
    last_observed: jiff::Timestamp,
}

impl Series {
    /// Occurrences no write has carried yet.
    fn owed(&self) -> i32 {
        self.count - self.attempted
    }

    /// The series as the API server is to have it; none for a single occurrence.
    fn series(&self) -> Option<EventSeries> {
        (self.count > 1).then_some(EventSeries {
            count: self.count,
            last_observed_time: MicroTime(self.last_observed),
        })
    }

    /// The write that brings the API server up to date.
    fn write(&self) -> Write {
        match (self.created, self.series()) {
            (true, Some(series)) => Write::Update {
                namespace: self.event.metadata.namespace.clone().unwrap_or_default(),
                name: self.event.metadata.name.clone().unwrap_or_default(),
                series,
            },
            (_, series) => {
                let mut event = self.event.clone();
                event.series = series;
                Write::Create(Box::new(event))
            }
        }
    }
}

/// A write the API server is owed.
#[derive(Debug, Clone, PartialEq)]
enum Write {
    /// A new Event, with its series when repeats came before it was created.
    Create(Box<Event>),
    /// The series of an Event already created.
    Update {
        namespace: String,
        name: String,
        series: EventSeries,
    },
}

/// What became of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    Ok,
    /// The Event to update is gone (expired or deleted): create it again.
    Gone,
    Failed,
}

/// The series being followed, at most [`MAX_SERIES`]. Pure: the clocks come in.
#[derive(Debug, Default)]
struct Repeats {
    series: HashMap<Arc<SeriesKey>, Series>,
    /// The series with occurrences no write has carried yet: the only ones
    /// an occurrence or a timer has to look at.
    owed: HashSet<Arc<SeriesKey>>,
    /// When ended series were last swept out.
    swept: Option<Instant>,
}

impl Repeats {
    /// Counts an occurrence. Returns whether it repeats an Event already
    /// followed, and how many unwritten repeats of a forgotten series were
    /// lost to make room for it.
    fn observe(
        &mut self,
        occurrence: Occurrence,
        now: Instant,
        wall: jiff::Timestamp,
    ) -> (bool, u64) {
        let Occurrence { event, key } = occurrence;
        if let Some(series) = self.series.get_mut(&key)
            && series.last_seen + SERIES_END > now
        {
            series.count = series.count.saturating_add(1);
            series.last_seen = now;
            series.last_observed = wall;
            // The first repeat since the last write: a write is owed again.
            if series.owed() == 1
                && let Some((key, _)) = self.series.get_key_value(&key)
            {
                self.owed.insert(key.clone());
            }
            return (true, 0);
        }
        let lost = self.make_room(&key, now);
        let key = Arc::new(key);
        self.owed.insert(key.clone());
        self.series.insert(
            key,
            Series {
                event,
                count: 1,
                attempted: 0,
                attempted_at: None,
                created: false,
                last_seen: now,
                last_observed: wall,
            },
        );
        (false, lost)
    }

    /// Sweeps out ended series (at most once an interval) and, when still
    /// full, forgets the one seen longest ago, preferring one with nothing
    /// left to write. Returns the repeats it lost.
    fn make_room(&mut self, coming: &SeriesKey, now: Instant) -> u64 {
        if self.swept.is_none_or(|at| at + SERIES_INTERVAL <= now) {
            self.series
                .retain(|_, s| s.owed() > 0 || s.last_seen + SERIES_END > now);
            self.swept = Some(now);
        }
        // The ended series of this key, if still there, is replaced.
        if self.series.len() < MAX_SERIES || self.series.contains_key(coming) {
            return 0;
        }
        let oldest = self
            .series
            .iter()
            .min_by_key(|(_, s)| (s.owed() > 0, s.last_seen))
            .map(|(k, s)| (k.clone(), s.owed()));
        match oldest {
            Some((key, owed)) => {
                self.series.remove(&key);
                self.owed.remove(&key);
                u64::try_from(owed).unwrap_or_default()
            }
            None => 0,
        }
    }

    /// The writes due at `now`: a new Event at once, a series at most every
    /// [`SERIES_INTERVAL`]; with `drain`, every write owed. Each is marked
    /// made; [`Repeats::written`] says how it went.
    fn due(&mut self, now: Instant, drain: bool) -> Vec<(Arc<SeriesKey>, Write)> {
        let mut due = Vec::new();
        self.owed.retain(|key| {
            let Some(series) = self.series.get_mut(key) else {
                return false;
            };
            let ready = series
                .attempted_at
                .is_none_or(|at| at + SERIES_INTERVAL <= now);
            if !(ready || drain) {
                return true;
            }
            due.push((key.clone(), series.write()));
            series.attempted = series.count;
            series.attempted_at = Some(now);
            false
        });
        due
    }

    /// When the next write falls due, if any is owed.
    fn next_due(&self) -> Option<Instant> {
        self.owed
            .iter()
            .filter_map(|key| self.series.get(key))
            .map(|s| {
                s.attempted_at
                    .map_or(s.last_seen, |at| at + SERIES_INTERVAL)
            })
            .min()
    }

    /// Takes note of how a write went. An Event found gone is created again,
    /// at once: the returned write. A failed write is not retried on its own;
    /// the next repeat writes the whole count.
    fn written(&mut self, key: &SeriesKey, write: &Write, result: Written) -> Option<Write> {
        let series = self.series.get_mut(key)?;
        match (write, result) {
            (Write::Create(_), Written::Ok) => series.created = true,
            (Write::Update { .. }, Written::Gone) => {
                series.created = false;
                return Some(series.write());
            }
            _ => {}
        }
        None
    }
}

/// What the writer task receives.
enum Item {
    Occurred(Box<Occurrence>),
    /// Write everything owed now, then answer (a drain).
    Flush(oneshot::Sender<()>),
}

/// Sends Events in the background.
pub struct EventSink {
    queue: Queue<Item>,
}

impl EventSink {
    /// Starts the writing task. `outcomes` counts Events sent, series
    /// updated, repeats counted and writes failed; `dropped` the occurrences
    /// the full queue refused and the unwritten repeats of forgotten series.
    pub fn start(
        client: kube::Client,
        capacity: usize,
        outcomes: Family<EventLabels, Counter>,
        dropped: Counter,
    ) -> Arc<EventSink> {
        let (queue, incoming) =
            queue::bounded::<Item>("events", capacity, WhenFull::Drop, dropped.clone());
        let writer = Writer {
            client,
            outcomes,
            dropped,
            repeats: Repeats::default(),
        };
        tokio::spawn(writer.run(incoming));
        Arc::new(EventSink { queue })
    }

    /// Queues an occurrence; drops it (counted) if the queue is full.
    pub fn send(&self, occurrence: Occurrence) {
        // A dropping queue never hands the item back.
        let _ = self.queue.send(Item::Occurred(Box::new(occurrence)));
    }

    /// Writes every repeat counted and not yet written, once what is queued
    /// before it has been taken in.
    pub async fn flush(&self) {
        let (done, flushed) = oneshot::channel();
        if self.queue.send_waiting(Item::Flush(done)).await.is_ok() {
            let _ = flushed.await;
        }
    }
}

/// The task that counts occurrences and writes Events.
struct Writer {
    client: kube::Client,
    outcomes: Family<EventLabels, Counter>,
    dropped: Counter,
    repeats: Repeats,
}

impl Writer {
    async fn run(mut self, mut incoming: mpsc::Receiver<Item>) {
        loop {
            let next = self.repeats.next_due();
            let item = tokio::select! {
                item = incoming.recv() => item,
                () = sleep_until(next) => {
                    self.write_due(false).await;
                    continue;
                }
            };
            match item {
                Some(Item::Occurred(occurrence)) => {
                    let (repeat, lost) =
                        self.repeats
                            .observe(*occurrence, Instant::now(), jiff::Timestamp::now());
                    if repeat {
                        self.count("repeated");
                    }
                    self.dropped.inc_by(lost);
                    self.write_due(false).await;
                }
                Some(Item::Flush(done)) => {
                    self.write_due(true).await;
                    let _ = done.send(());
                }
                None => {
                    self.write_due(true).await;
                    return;
                }
            }
        }
    }

    /// Makes the writes due (every one owed, with `drain`).
    async fn write_due(&mut self, drain: bool) {
        for (key, write) in self.repeats.due(Instant::now(), drain) {
            let result = self.send(&write).await;
            if let Some(again) = self.repeats.written(&key, &write, result) {
                let result = self.send(&again).await;
                self.repeats.written(&key, &again, result);
            }
        }
    }

    /// One write to the API server, counted: `sent`, `updated` or `failed`.
    async fn send(&self, write: &Write) -> Written {
        let (namespace, sent) = match write {
            Write::Create(event) => {
                let namespace = event.metadata.namespace.clone().unwrap_or_default();
                let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
                let sent =
                    tokio::time::timeout(SEND_TIMEOUT, api.create(&PostParams::default(), event))
                        .await;
                (namespace, sent)
            }
            Write::Update {
                namespace,
                name,
                series,
            } => {
                let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
                let patch = serde_json::json!({ "series": series });
                let sent = tokio::time::timeout(
                    SEND_TIMEOUT,
                    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
                )
                .await;
                (namespace.clone(), sent)
            }
        };
        let update = matches!(write, Write::Update { .. });
        match sent {
            Ok(Ok(_)) => {
                self.count(if update { "updated" } else { "sent" });
                Written::Ok
            }
            Ok(Err(kube::Error::Api(status))) if update && status.code == 404 => {
                tracing::debug!(namespace, "an Event to update is gone; creating it again");
                Written::Gone
            }
            Ok(Err(e)) => {
                if update && matches!(&e, kube::Error::Api(status) if status.code == 403) {
                    tracing::warn!(error = %e, namespace, "cannot update an Event's series: repeats need `patch` on events.k8s.io events");
                } else {
                    tracing::warn!(error = %e, namespace, "cannot write Event");
                }
                self.count("failed");
                Written::Failed
            }
            Err(_) => {
                tracing::warn!(namespace, "writing an Event timed out");
                self.count("failed");
                Written::Failed
            }
        }
    }

    fn count(&self, outcome: &'static str) {
        self.outcomes
            .get_or_create(&EventLabels { decision: outcome })
            .inc();
    }
}

/// Sleeps until `at`; forever without it.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::approval::ApprovalProblem;
    use crate::policy::overrides::Override;
    use crate::policy::{FinalizerField, Outcome, OverrideProblem, Removal};

    /// A judged removal of one finalizer, decided `verdict`.
    #[derive(Clone)]
    struct Case {
        judged: Judged,
        decision: Decision,
        ledger: Option<Ledger>,
    }

    fn outcome(verdict: Verdict) -> Outcome {
        match verdict {
            Verdict::Denied => Outcome::Denied {
                problem: OverrideProblem::Absent,
                enforced: true,
            },
            Verdict::WouldDeny => Outcome::Denied {
                problem: OverrideProblem::Absent,
                enforced: false,
            },
            Verdict::Override => Outcome::Override(Override {
                reason: "node-lost".into(),
                detail: "INC-1".into(),
            }),
            Verdict::ApprovalDenied => Outcome::ApprovalRefused {
                problem: ApprovalProblem::NotAnApprover,
                enforced: true,
            },
            Verdict::ApprovalWouldDeny => Outcome::ApprovalRefused {
                problem: ApprovalProblem::NotAnApprover,
                enforced: false,
            },
            Verdict::Authorized => Outcome::Authorized,
            Verdict::NotJudged => Outcome::NotJudged,
            Verdict::NothingRemoved => Outcome::NothingRemoved,
            Verdict::ApprovalRecorded => Outcome::ApprovalRecorded,
        }
    }

    fn record(verdict: Verdict) -> Case {
        Case {
            judged: Judged {
                uid: "u-1".into(),
                user: "jane".into(),
                resource: "pods".into(),
                object_kind: "Pod".into(),
                object_api_version: "v1".into(),
                namespace: Some("shop".into()),
                name: "web-0".into(),
                object_uid: Some("o-1".into()),
                dry_run: false,
                cluster: None,
            },
            decision: Decision {
                outcome: outcome(verdict),
                removed: vec![Removal {
                    finalizer: "example.com/cleanup".into(),
                    field: FinalizerField::Metadata,
                    authorized_by: None,
                }],
                evidence: Default::default(),
            },
            ledger: Some(Ledger {
                node: Some("worker-3".into()),
                ..Default::default()
            }),
        }
    }

    /// The Event of `case` (shadows [`super::event_for`] in these tests).
    fn event_for(case: &Case, instance: &str) -> Option<Occurrence> {
        super::event_for(
            Judgment {
                judged: &case.judged,
                decision: &case.decision,
                ledger: case.ledger.as_ref(),
            },
            instance,
        )
    }

    fn occurrence(decision: Verdict) -> Occurrence {
        event_for(&record(decision), "pod-1").unwrap()
    }

    #[test]
    fn no_event_for_a_namespace_kube_apiserver_could_not_have_sent() {
        let mut r = record(Verdict::Denied);
        assert!(event_for(&r, "pod").is_some());
        for bad in [
            "payments/events/x",
            "a#b",
            "A",
            "",
            "-a",
            &"a".repeat(64),
            "a?x=1",
        ] {
            r.judged.namespace = Some(bad.to_string());
            assert!(event_for(&r, "pod").is_none(), "{bad:?}");
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
        let e = occurrence(Verdict::Override).event;
        assert_eq!(e.reason.as_deref(), Some("FinalizerOverride"));
        assert_eq!(
            e.note.as_deref(),
            Some(
                "jane removed finalizers example.com/cleanup by override (node-lost: INC-1); clean up by hand: node worker-3"
            )
        );
        assert_eq!(e.regarding.as_ref().unwrap().uid.as_deref(), Some("o-1"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("shop"));
        assert!(e.series.is_none());
        let denied = occurrence(Verdict::Denied).event;
        assert_eq!(denied.reason.as_deref(), Some("FinalizerRemovalDenied"));
        assert_eq!(
            denied.note.as_deref(),
            Some(
                "jane may not remove finalizers example.com/cleanup; see finalizer-guard's audit record u-1"
            )
        );
        assert_eq!(
            occurrence(Verdict::ApprovalDenied).event.reason.as_deref(),
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
        dry.judged.dry_run = true;
        assert!(
            event_for(&dry, "pod-1").is_none(),
            "dry run has no side effects"
        );
        let mut cluster = record(Verdict::Denied);
        cluster.judged.namespace = None;
        assert_eq!(
            event_for(&cluster, "pod-1")
                .unwrap()
                .event
                .metadata
                .namespace
                .as_deref(),
            Some("default")
        );
    }

    #[test]
    fn the_cluster_named_is_an_annotation_of_the_event() {
        let unnamed = occurrence(Verdict::Denied);
        assert_eq!(unnamed.event.metadata.annotations, None);
        let mut named = record(Verdict::Override);
        named.judged.cluster = Some("prod-eu-1".into());
        let event = event_for(&named, "pod-1").unwrap().event;
        let annotations = event.metadata.annotations.unwrap();
        assert_eq!(
            annotations.get(CLUSTER_ANNOTATION).map(String::as_str),
            Some("prod-eu-1")
        );
        assert_eq!(annotations.len(), 1);
    }

    #[test]
    fn a_name_s_control_and_format_characters_reach_the_note_escaped() {
        let mut hostile = record(Verdict::Denied);
        hostile.judged.user = "eve\u{85}\u{1b}[31m\u{202e}".into();
        let note = event_for(&hostile, "pod-1").unwrap().event.note.unwrap();
        for raw in ['\u{85}', '\u{1b}', '\u{202e}'] {
            assert!(!note.contains(raw), "{note:?}");
        }
        assert!(
            note.starts_with("eve\\u{85}\\u{1b}[31m\\u{202e} may not remove"),
            "{note:?}"
        );
    }

    #[test]
    fn the_audit_uid_and_the_ledger_reach_the_note_escaped() {
        let mut denied = record(Verdict::Denied);
        denied.judged.uid = "uid\u{1b}[2J\nforged".into();
        let note = event_for(&denied, "pod-1").unwrap().event.note.unwrap();
        assert!(!note.contains(['\u{1b}', '\n']), "{note:?}");
        assert!(
            note.ends_with("audit record uid\\u{1b}[2J\\u{a}forged"),
            "{note:?}"
        );

        let mut overridden = record(Verdict::Override);
        overridden.ledger = Some(Ledger {
            owners: vec!["Cluster/own\u{1b}[31mRED\nFAKE LINE\u{202e}".into()],
            ..Ledger::default()
        });
        let note = event_for(&overridden, "pod-1").unwrap().event.note.unwrap();
        for raw in ['\u{1b}', '\n', '\u{202e}'] {
            assert!(!note.contains(raw), "{note:?}");
        }
        assert!(
            note.ends_with(
                "clean up by hand: owners Cluster/own\\u{1b}[31mRED\\u{a}FAKE LINE\\u{202e}"
            ),
            "{note:?}"
        );
    }

    #[test]
    fn notes_from_the_request_are_cut_to_the_limit_and_repeat_as_cut() {
        let mut long = record(Verdict::Denied);
        long.judged.user = "x".repeat(2000);
        let cut = event_for(&long, "pod-1").unwrap();
        let note = cut.event.note.as_deref().unwrap();
        assert_eq!(note.chars().count(), MAX_NOTE_BYTES / 4);
        assert!(note.ends_with("..."), "{note}");
        assert!(cut.key.note.chars().count() <= MAX_NOTE_BYTES / 4);
        let instance = "i".repeat(500);
        let e = event_for(&record(Verdict::Denied), &instance)
            .unwrap()
            .event;
        assert_eq!(e.reporting_instance.unwrap().len(), 128);
    }

    #[test]
    fn repeats_are_the_same_object_reason_and_note_whatever_the_request() {
        let first = occurrence(Verdict::Denied);
        let mut again = record(Verdict::Denied);
        again.judged.uid = "u-2".into();
        let again = event_for(&again, "pod-1").unwrap();
        assert_ne!(
            first.event.note, again.event.note,
            "each names its audit record"
        );
        assert_eq!(first.key, again.key);

        let differs = |change: fn(&mut Case)| {
            let mut other = record(Verdict::Denied);
            change(&mut other);
            event_for(&other, "pod-1").unwrap().key != first.key
        };
        assert!(differs(|r| r.judged.user = "bob".into()));
        assert!(differs(
            |r| r.decision.removed[0].finalizer = "example.com/other".into()
        ));
        assert!(
            differs(|r| r.judged.object_uid = Some("o-2".into())),
            "a new object of the same name"
        );
        assert!(differs(|r| r.judged.name = "web-1".into()));
        assert!(differs(|r| r.judged.namespace = Some("other".into())));
        assert!(differs(|r| r.judged.object_kind = "ConfigMap".into()));
        assert!(differs(|r| r.decision.outcome = outcome(Verdict::Override)));
    }

    /// The writes of `due`, without their keys.
    fn due(repeats: &mut Repeats, now: Instant, drain: bool) -> Vec<Write> {
        repeats
            .due(now, drain)
            .into_iter()
            .map(|(_, w)| w)
            .collect()
    }

    fn created(writes: &[Write]) -> &Event {
        match writes {
            [Write::Create(event)] => event,
            other => panic!("expected one create: {other:?}"),
        }
    }

    fn updated(writes: &[Write]) -> &EventSeries {
        match writes {
            [Write::Update { series, .. }] => series,
            other => panic!("expected one update: {other:?}"),
        }
    }

    /// Every write succeeds.
    fn done(repeats: &mut Repeats, now: Instant) -> Vec<Write> {
        let writes = repeats.due(now, false);
        for (key, write) in &writes {
            assert_eq!(repeats.written(key, write, Written::Ok), None);
        }
        writes.into_iter().map(|(_, w)| w).collect()
    }

    fn wall(second: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    #[test]
    fn the_first_occurrence_is_created_at_once_and_repeats_at_most_every_interval() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut repeats = Repeats::default();
        assert_eq!(repeats.next_due(), None);
        assert_eq!(
            repeats.observe(occurrence(Verdict::Denied), t0, wall(0)),
            (false, 0)
        );
        assert_eq!(repeats.next_due(), Some(t0));
        let first = done(&mut repeats, t0);
        assert!(created(&first).series.is_none());
        assert_eq!(repeats.next_due(), None, "nothing owed");

        for i in 1..=4 {
            assert_eq!(
                repeats.observe(occurrence(Verdict::Denied), s(i), wall(i as i64)),
                (true, 0)
            );
            assert!(done(&mut repeats, s(i)).is_empty(), "counted, not written");
        }
        assert_eq!(repeats.next_due(), Some(t0 + SERIES_INTERVAL));
        let series = updated(&done(&mut repeats, t0 + SERIES_INTERVAL)).clone();
        assert_eq!(series.count, 5);
        assert_eq!(series.last_observed_time, MicroTime(wall(4)));
        assert!(done(&mut repeats, s(60)).is_empty(), "no repeat, no write");

        // A repeat long after the last write is written at once.
        repeats.observe(occurrence(Verdict::Denied), s(100), wall(100));
        assert_eq!(updated(&done(&mut repeats, s(100))).count, 6);
        // Another reason on the same object is an Event of its own.
        assert_eq!(
            repeats.observe(occurrence(Verdict::Override), s(101), wall(101)),
            (false, 0)
        );
        assert!(created(&done(&mut repeats, s(101))).series.is_none());
    }

    #[test]
    fn a_retry_storm_is_one_event_written_a_few_times() {
        // Ten denials a second for 60 s, on a simulated clock.
        let t0 = Instant::now();
        let mut repeats = Repeats::default();
        let mut writes = Vec::new();
        for i in 0..600u64 {
            let now = t0 + Duration::from_millis(100 * i);
            repeats.observe(occurrence(Verdict::Denied), now, wall(0));
            writes.extend(done(&mut repeats, now));
        }
        let end = t0 + Duration::from_secs(70);
        assert_eq!(repeats.next_due(), Some(t0 + Duration::from_secs(60)));
        writes.extend(done(&mut repeats, end));
        assert!(matches!(writes[0], Write::Create(_)));
        assert!(
            writes[1..]
                .iter()
                .all(|w| matches!(w, Write::Update { .. }))
        );
        assert_eq!(
            writes.len(),
            7,
            "one create and an update every 10 s: {writes:?}"
        );
        assert_eq!(updated(&writes[6..]).count, 600);
    }

    #[test]
    fn a_drain_writes_what_is_owed_and_nothing_else() {
        let t0 = Instant::now();
        let mut repeats = Repeats::default();
        repeats.observe(occurrence(Verdict::Denied), t0, wall(0));
        repeats.observe(occurrence(Verdict::Override), t0, wall(0));
        assert_eq!(done(&mut repeats, t0).len(), 2);
        repeats.observe(occurrence(Verdict::Denied), t0, wall(1));
        assert!(due(&mut repeats, t0, false).is_empty());
        assert_eq!(updated(&due(&mut repeats, t0, true)).count, 2);
        assert!(due(&mut repeats, t0, true).is_empty());
    }

    #[test]
    fn a_failed_write_is_not_retried_until_a_repeat_and_a_gone_event_is_created_again() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut repeats = Repeats::default();
        repeats.observe(occurrence(Verdict::Denied), t0, wall(0));
        for (key, write) in repeats.due(t0, false) {
            assert_eq!(repeats.written(&key, &write, Written::Failed), None);
        }
        assert_eq!(repeats.next_due(), None, "no retry on its own");
        // The next repeat, an interval later, creates the Event with its series.
        repeats.observe(occurrence(Verdict::Denied), s(1), wall(1));
        assert_eq!(repeats.next_due(), Some(t0 + SERIES_INTERVAL));
        let event = created(&done(&mut repeats, t0 + SERIES_INTERVAL)).clone();
        assert_eq!(event.series.map(|s| s.count), Some(2));

        // The Event expired in the API server: the update finds it gone and
        // it is created again, with the whole count.
        repeats.observe(occurrence(Verdict::Denied), s(30), wall(30));
        let writes = repeats.due(s(30), false);
        let (key, write) = &writes[0];
        assert_eq!(updated(std::slice::from_ref(write)).count, 3);
        let again = repeats
            .written(key, write, Written::Gone)
            .expect("a create");
        let recreated = created(std::slice::from_ref(&again));
        assert_eq!(recreated.metadata.name, event.metadata.name);
        assert_eq!(recreated.series.as_ref().map(|s| s.count), Some(3));
        assert_eq!(repeats.written(key, &again, Written::Ok), None);
        repeats.observe(occurrence(Verdict::Denied), s(50), wall(50));
        assert_eq!(updated(&done(&mut repeats, s(50))).count, 4);
    }

    #[test]
    fn a_series_ends_after_a_quiet_while() {
        let t0 = Instant::now();
        let mut repeats = Repeats::default();
        repeats.observe(occurrence(Verdict::Denied), t0, wall(0));
        done(&mut repeats, t0);
        let later = t0 + SERIES_END;
        assert_eq!(
            repeats.observe(occurrence(Verdict::Denied), later, wall(360)),
            (false, 0),
            "not a repeat: a new Event"
        );
        assert!(created(&done(&mut repeats, later)).series.is_none());
        assert_eq!(repeats.series.len(), 1);
    }

    #[test]
    fn the_series_followed_are_bounded_and_what_is_forgotten_is_counted() {
        let t0 = Instant::now();
        let mut repeats = Repeats::default();
        let on = |i: usize| {
            let mut r = record(Verdict::Denied);
            r.judged.name = format!("web-{i}");
            event_for(&r, "pod-1").unwrap()
        };
        for i in 0..MAX_SERIES {
            let now = t0 + Duration::from_millis(i as u64);
            assert_eq!(repeats.observe(on(i), now, wall(0)), (false, 0));
            done(&mut repeats, now);
        }
        // web-0 has two repeats nobody wrote yet; web-1 has none.
        let now = t0 + Duration::from_secs(1);
        let ms = |n: u64| now + Duration::from_millis(n);
        repeats.observe(on(0), now, wall(1));
        repeats.observe(on(0), now, wall(1));
        assert_eq!(repeats.observe(on(MAX_SERIES), ms(1), wall(1)), (false, 0));
        assert_eq!(repeats.series.len(), MAX_SERIES);
        assert!(
            !repeats.series.keys().any(|k| k.name == "web-1"),
            "the oldest with nothing owed"
        );
        // Only series that owe writes left: the oldest goes, its repeats counted.
        for i in 2..MAX_SERIES {
            repeats.observe(on(i), ms(2), wall(1));
        }
        assert_eq!(
            repeats.observe(on(MAX_SERIES + 1), ms(3), wall(1)),
            (false, 2)
        );
        assert!(!repeats.series.keys().any(|k| k.name == "web-0"));
        assert_eq!(repeats.series.len(), MAX_SERIES);
    }
}
