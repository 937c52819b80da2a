//! `finalizer-guard watch`: the live signal of objects stuck on finalizers.
//!
//! One metadata-only watch per type the API server serves (kube-runtime's
//! watcher over `PartialObjectMetadata`: a paginated first list, then a
//! watch resumed from its resourceVersion, with bookmarks and backoff; a
//! list again only when the API server says that resourceVersion is too
//! old). Discovery runs again every `--discovery-interval`, and at once when
//! a CustomResourceDefinition or an APIService changes, so a new type is
//! watched without a restart. Namespaces are watched whole (they are few):
//! what holds a namespace is its `spec.finalizers`.
//!
//! Only objects being deleted that still hold finalizers are kept, a few
//! strings each: memory grows with what is stuck, not with the cluster.
//! One deleting for longer than `--stuck-after` is counted in
//! `finalizer_guard_stuck_objects{finalizer,resource}` (computed at each
//! scrape) and gets a `FinalizerStuck` Event saying what `unstick` explains
//! (the same code, [`super::explain`]) and the exact command to run.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use clap::Args;
use futures::{Stream, StreamExt};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DynamicObject, TypeMeta};
use kube::core::PartialObjectMeta;
use kube::discovery::{ApiCapabilities, ApiResource, Scope, verbs};
use kube::runtime::events::{Event as StuckEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher::watcher};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;
use tokio::sync::{Notify, Semaphore};
use tokio::task::{AbortHandle, JoinSet};
use unicode_properties::{GeneralCategory, GeneralCategoryGroup, UnicodeGeneralCategory};

use super::explain::{self, FinalizerReport, Probe};
use super::select::Resolver;
use super::{ClusterError, Connection, Found, Identity};
use crate::ledger::Ledger;
use crate::policy::{FinalizerField, Policy};

/// The Events' reason.
pub const REASON: &str = "FinalizerStuck";
/// The Events' reportingController.
pub const REPORTING_CONTROLLER: &str = "finalizer-guard.io/watch";
/// The label value of the finalizers past `--max-finalizers`.
pub const OTHER: &str = "other";
/// How often a stuck object's Event is repeated while it stays stuck: within
/// the Recorder's six-minute memory, so a repeat is one more in the Event's
/// series (its count and last-seen time), never a new Event; and the Event
/// outlives the API server's one-hour Event TTL.
const REPEAT_EVERY: SignedDuration = SignedDuration::from_mins(5);
/// How soon an Event that could not be written is tried again: doubled
/// after each failure, up to [`REPEAT_EVERY`] (an object in a namespace
/// being deleted can never get one: the API server refuses new objects there).
const RETRY_AFTER: SignedDuration = SignedDuration::from_secs(30);
/// How often stuck objects are looked for, to announce them.
const TICK: Duration = Duration::from_secs(1);
/// Objects explained and announced per tick: a cluster-wide outage that
/// sticks thousands of objects at once is announced over minutes, not in a burst.
const ANNOUNCE_PER_TICK: usize = 20;
/// How long one object's explanation and Event may take.
const ANNOUNCE_TIMEOUT: Duration = Duration::from_secs(30);
/// Objects per page of a first list.
const PAGE: u32 = 500;
/// Types whose first list runs at once: a page each in memory, and an API
/// server not asked for every type at the same moment.
const FIRST_LISTS: usize = 4;
/// Kubernetes refuses Event notes longer than this.
const MAX_NOTE_BYTES: usize = 1024;
/// After a CRD or an APIService changes, how long to let the next changes
/// come before discovering again.
const SETTLE: Duration = Duration::from_secs(1);
/// How soon a discovery that failed is tried again (or sooner, at
/// `--discovery-interval`).
const DISCOVERY_RETRY: Duration = Duration::from_secs(10);

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// An object deleting with finalizers for longer than this is stuck: counted in
    /// the gauges, and given a FinalizerStuck Event.
    #[arg(long, default_value = "10m", value_parser = crate::cli::parse_duration, value_name = "DURATION")]
    pub stuck_after: Duration,
    /// Admin address (plain HTTP): /metrics, /healthz, /readyz.
    #[arg(long, default_value = "0.0.0.0:9091", value_name = "ADDR")]
    pub admin_listen: SocketAddr,
    /// Write a FinalizerStuck Event on each stuck object (`--events=false`: metrics and logs only).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub events: bool,
    /// How often the API server's types are discovered again. A new CRD or APIService
    /// is picked up at once anyway; watches resume where they left off and are never
    /// listed again on a timer.
    #[arg(long, default_value = "5m", value_parser = crate::cli::parse_duration, value_name = "DURATION")]
    pub discovery_interval: Duration,
    /// Most distinct finalizer names given a label value of their own; stuck objects'
    /// other finalizers are counted under `other`.
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub max_finalizers: usize,
    /// How long a node must be NotReady before its pods' owners count as gone (as unstick).
    #[arg(long, default_value = "5m", value_parser = crate::cli::parse_duration, value_name = "DURATION")]
    pub not_ready_for: Duration,
    /// Explain owners under this policy file instead of the cluster's (its ConfigMap).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Log format on standard error.
    #[arg(long, value_enum, default_value = "text", value_name = "FORMAT")]
    pub log_format: crate::cli::LogFormat,
    #[command(flatten)]
    pub connection: Connection,
}

/// A type being watched.
#[derive(Debug)]
struct Kind {
    /// `pods`, `widgets.example.com`: the `resource` label, and the key.
    name: String,
    resource: ApiResource,
    namespaced: bool,
    /// A change of one of its objects may add or remove types.
    rediscover: bool,
}

impl Kind {
    fn new(resource: ApiResource, namespaced: bool) -> Kind {
        let name = type_name(&resource);
        let rediscover = matches!(
            name.as_str(),
            "customresourcedefinitions.apiextensions.k8s.io" | "apiservices.apiregistration.k8s.io"
        );
        Kind {
            name,
            resource,
            namespaced,
            rediscover,
        }
    }

    fn is_namespaces(&self) -> bool {
        self.resource.group.is_empty() && self.resource.plural == "namespaces"
    }

    /// Types whose bodies hold nothing `unstick` reads and may hold secrets:
    /// their metadata is all that is read.
    fn metadata_only(&self) -> bool {
        self.resource.group.is_empty()
            && matches!(self.resource.plural.as_str(), "secrets" | "configmaps")
    }

    /// `pod`, `widget.example.com`: as `unstick` takes a type (and kubectl prints one).
    fn command_type(&self) -> String {
        let kind = self.resource.kind.to_lowercase();
        if self.resource.group.is_empty() {
            kind
        } else {
            format!("{kind}.{}", self.resource.group)
        }
    }
}

/// `pods`, `widgets.example.com`: as RBAC and the policy's `resources` name types.
fn type_name(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

/// One object being deleted that still holds finalizers.
#[derive(Debug)]
struct Tracked {
    kind: Arc<Kind>,
    namespace: Option<String>,
    name: String,
    uid: Option<String>,
    /// `metadata.deletionTimestamp`.
    since: Timestamp,
    finalizers: Vec<String>,
    /// A namespace's `spec.finalizers`.
    spec_finalizers: Vec<String>,
    /// When its Event is due again; `None` until it is first announced.
    next: Option<Timestamp>,
    /// Its Event was written.
    sent: bool,
    /// Attempts that failed since the last one that did not.
    failures: u32,
}

impl Tracked {
    /// Every finalizer holding it, each once.
    fn holding(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for f in self.finalizers.iter().chain(&self.spec_finalizers) {
            if !out.contains(&f.as_str()) {
                out.push(f);
            }
        }
        out
    }

    /// `pod/web-0 -n shop`
    fn label(&self) -> String {
        let object = format!("{}/{}", self.kind.command_type(), self.name);
        match &self.namespace {
            Some(ns) if self.kind.namespaced => format!("{object} -n {ns}"),
            _ => object,
        }
    }

    /// The `unstick` command that explains it and, with `--reason`, releases it.
    fn command(&self) -> String {
        let mut words = vec![
            "finalizer-guard".to_string(),
            "unstick".into(),
            shell_word(&format!("{}/{}", self.kind.command_type(), self.name)),
        ];
        if let Some(ns) = self.namespace.as_deref().filter(|_| self.kind.namespaced) {
            words.push("-n".into());
            words.push(shell_word(ns));
        }
        words.join(" ")
    }
}

/// What a type's watch is doing.
#[derive(Debug, Default)]
struct TypeState {
    /// Its first list completed.
    synced: bool,
    /// Why its last attempt failed, and when, until an event shows one
    /// succeeded. A watch that starts again quietly shows nothing, so a
    /// failure counts only for [`FAILING_FOR`]: one that lasts comes back
    /// at least every 30 s (kube-runtime's longest backoff).
    failing: Option<(String, std::time::Instant)>,
}

/// How long a failed list or watch counts as the type's state.
const FAILING_FOR: Duration = Duration::from_secs(90);

impl TypeState {
    fn unwatchable(&self) -> bool {
        self.failing
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() < FAILING_FOR)
    }
}

/// What the watches, the announcer and the scrapes share.
#[derive(Debug)]
struct Shared {
    state: Mutex<Tracker>,
    stuck_after: SignedDuration,
    max_finalizers: usize,
    /// Discovery has succeeded once.
    discovered: AtomicBool,
    /// Ready once: a type added later does not take readiness back (its
    /// first list would otherwise drop the pod from its endpoints, and its
    /// scrapes with it).
    was_ready: AtomicBool,
}

#[derive(Debug, Default)]
struct Tracker {
    /// By uid.
    objects: HashMap<String, Tracked>,
    types: BTreeMap<String, TypeState>,
    /// Finalizer names with a label value of their own, at most `max_finalizers`.
    named: BTreeSet<String>,
    /// (finalizer label, resource) pairs reported so far: kept at 0 once
    /// they are no longer stuck, so a gauge drops back instead of vanishing.
    reported: BTreeSet<(String, String)>,
}

fn lock(m: &Mutex<Tracker>) -> MutexGuard<'_, Tracker> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a watch event says about one object.
trait Observed {
    fn meta(&self) -> &ObjectMeta;
    fn spec_finalizers(&self) -> Vec<String> {
        Vec::new()
    }
}

impl Observed for PartialObjectMeta<DynamicObject> {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
}

impl Observed for Namespace {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn spec_finalizers(&self) -> Vec<String> {
        self.spec
            .as_ref()
            .and_then(|s| s.finalizers.clone())
            .unwrap_or_default()
    }
}

/// The key an object is kept under: its uid (or, should the API server
/// send none, its type, namespace and name).
fn key_of(kind: &Kind, meta: &ObjectMeta) -> String {
    match meta.uid.as_deref().filter(|u| !u.is_empty()) {
        Some(uid) => uid.to_string(),
        None => format!(
            "{}/{}/{}",
            kind.name,
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        ),
    }
}

impl Shared {
    fn new(stuck_after: Duration, max_finalizers: usize) -> Shared {
        Shared {
            state: Mutex::new(Tracker::default()),
            stuck_after: SignedDuration::try_from(stuck_after).unwrap_or(SignedDuration::MAX),
            max_finalizers,
            discovered: AtomicBool::new(false),
            was_ready: AtomicBool::new(false),
        }
    }

    /// Takes in one object as a watch saw it: kept while it is being deleted
    /// and holds finalizers, forgotten otherwise. Returns its key when kept.
    fn observe(
        &self,
        kind: &Arc<Kind>,
        meta: &ObjectMeta,
        spec_finalizers: Vec<String>,
    ) -> Option<String> {
        let key = key_of(kind, meta);
        let finalizers = meta.finalizers.clone().unwrap_or_default();
        let deleting = meta.deletion_timestamp.as_ref().map(|t| t.0);
        let mut state = lock(&self.state);
        match deleting {
            Some(since) if !(finalizers.is_empty() && spec_finalizers.is_empty()) => {
                match state.objects.get_mut(&key) {
                    Some(t) => {
                        t.kind = kind.clone();
                        t.finalizers = finalizers;
                        t.spec_finalizers = spec_finalizers;
                        t.since = since;
                    }
                    None => {
                        state.objects.insert(
                            key.clone(),
                            Tracked {
                                kind: kind.clone(),
                                namespace: meta.namespace.clone(),
                                name: meta.name.clone().unwrap_or_default(),
                                uid: meta.uid.clone(),
                                since,
                                finalizers,
                                spec_finalizers,
                                next: None,
                                sent: false,
                                failures: 0,
                            },
                        );
                    }
                }
                Some(key)
            }
            _ => {
                let gone = state.objects.remove(&key);
                drop(state);
                released(gone);
                None
            }
        }
    }

    fn forget(&self, kind: &Kind, meta: &ObjectMeta) {
        let gone = lock(&self.state).objects.remove(&key_of(kind, meta));
        released(gone);
    }

    /// A first list (or a list again) of `kind` ended: what it did not
    /// show is gone.
    fn listed(&self, kind: &Kind, seen: &HashSet<String>) {
        let mut state = lock(&self.state);
        let mut gone = Vec::new();
        state.objects.retain(|key, t| {
            let keep = t.kind.name != kind.name || seen.contains(key);
            if !keep {
                gone.push(t.label());
            }
            keep
        });
        let type_state = state.types.entry(kind.name.clone()).or_default();
        type_state.synced = true;
        type_state.failing = None;
        drop(state);
        for label in gone {
            tracing::info!(object = %escape(&label), "no longer stuck: gone while the watch was away");
        }
    }

    /// Returns whether this is news (the first failure, or another reason).
    fn failed(&self, kind: &Kind, why: String) -> bool {
        let mut state = lock(&self.state);
        let type_state = state.types.entry(kind.name.clone()).or_default();
        let news = type_state
            .failing
            .as_ref()
            .is_none_or(|(before, _)| *before != why);
        type_state.failing = Some((why, std::time::Instant::now()));
        news
    }

    /// An event came through after a failure: the watch works again.
    fn recovered(&self, kind: &Kind) {
        if let Some(t) = lock(&self.state).types.get_mut(&kind.name) {
            t.failing = None;
        }
    }

    fn watching(&self, kind: &Kind) {
        lock(&self.state)
            .types
            .entry(kind.name.clone())
            .or_default();
    }

    /// A type no longer served: its objects and gauges go.
    fn dropped(&self, name: &str) {
        let mut state = lock(&self.state);
        state.types.remove(name);
        state.objects.retain(|_, t| t.kind.name != name);
        state.reported.retain(|(_, resource)| resource != name);
    }

    /// Ready once discovery has succeeded and every type's watch has
    /// listed once or failed (a type that cannot be watched is reported, in
    /// the logs and `finalizer_guard_unwatchable_types`, not waited for);
    /// then for good.
    fn ready(&self) -> Result<(), String> {
        if self.was_ready.load(Ordering::Relaxed) {
            return Ok(());
        }
        if !self.discovered.load(Ordering::Relaxed) {
            return Err("discovering the API server's types".into());
        }
        let state = lock(&self.state);
        let waiting = state
            .types
            .values()
            .filter(|t| !t.synced && t.failing.is_none())
            .count();
        if waiting > 0 {
            return Err(format!("{waiting} type(s) still listing"));
        }
        self.was_ready.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Stuck objects whose Event is due, oldest first, at most `limit`;
    /// each is marked as announced until `retry` from now (the announcer
    /// sets the real next time once it has tried).
    fn due(&self, now: Timestamp, limit: usize) -> Vec<Due> {
        let mut state = lock(&self.state);
        let mut due: Vec<(&String, &Tracked)> = state
            .objects
            .iter()
            .filter(|(_, t)| {
                now.duration_since(t.since) >= self.stuck_after && t.next.is_none_or(|n| n <= now)
            })
            .collect();
        due.sort_by_key(|(_, t)| t.since);
        let due: Vec<Due> = due
            .into_iter()
            .take(limit)
            .map(|(key, t)| Due {
                key: key.clone(),
                kind: t.kind.clone(),
                namespace: t.namespace.clone(),
                name: t.name.clone(),
                uid: t.uid.clone(),
                since: t.since,
                label: t.label(),
                command: t.command(),
                finalizers: t.holding().iter().map(|f| f.to_string()).collect(),
                first: !t.sent,
                failures: t.failures,
            })
            .collect();
        for d in &due {
            if let Some(t) = state.objects.get_mut(&d.key) {
                t.next = Some(now + RETRY_AFTER);
            }
        }
        due
    }

    /// What became of `key`'s Event, and so when it is due again. Returns
    /// how many attempts in a row have failed.
    fn announced(&self, key: &str, outcome: Announced, now: Timestamp) -> u32 {
        let mut state = lock(&self.state);
        let Some(t) = state.objects.get_mut(key) else {
            return 0;
        };
        let next = match outcome {
            Announced::Sent => {
                t.sent = true;
                t.failures = 0;
                now + REPEAT_EVERY
            }
            Announced::Failed => {
                t.failures = t.failures.saturating_add(1);
                let doubled = 2_i32.saturating_pow(t.failures.min(16) - 1);
                now + (RETRY_AFTER * doubled).min(REPEAT_EVERY)
            }
            // Nothing to repeat: the gauges and the log say it.
            Announced::Off => Timestamp::MAX,
        };
        t.next = Some(next);
        t.failures
    }

    /// The gauges, as of `now`.
    fn gauges(&self, now: Timestamp) -> Gauges {
        let mut state = lock(&self.state);
        let Tracker {
            objects,
            types,
            named,
            reported,
        } = &mut *state;
        let mut stuck: BTreeMap<(String, String), i64> = BTreeMap::new();
        let mut oldest: BTreeMap<String, f64> = BTreeMap::new();
        for t in objects.values() {
            let age = now.duration_since(t.since);
            if age < self.stuck_after {
                continue;
            }
            for finalizer in t.holding() {
                let label = if named.contains(finalizer) {
                    finalizer.to_string()
                } else if named.len() < self.max_finalizers {
                    named.insert(finalizer.to_string());
                    finalizer.to_string()
                } else {
                    OTHER.to_string()
                };
                let seconds = age.as_secs_f64();
                let o = oldest.entry(label.clone()).or_default();
                *o = o.max(seconds);
                *stuck.entry((label, t.kind.name.clone())).or_default() += 1;
            }
        }
        reported.extend(stuck.keys().cloned());
        for pair in reported.iter() {
            stuck.entry(pair.clone()).or_default();
            oldest.entry(pair.0.clone()).or_default();
        }
        Gauges {
            stuck,
            oldest,
            terminating: objects.len(),
            watched: types.len(),
            unwatchable: types.values().filter(|t| t.unwatchable()).count(),
        }
    }
}

/// What became of a stuck object's Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Announced {
    Sent,
    Failed,
    /// `--events=false`.
    Off,
}

/// Logs that an object that was stuck is no longer.
fn released(gone: Option<Tracked>) {
    if let Some(t) = gone.filter(|t| t.next.is_some()) {
        tracing::info!(object = %escape(&t.label()), "no longer stuck");
    }
}

/// A stuck object whose Event is due.
#[derive(Debug, Clone)]
struct Due {
    key: String,
    kind: Arc<Kind>,
    namespace: Option<String>,
    name: String,
    uid: Option<String>,
    since: Timestamp,
    label: String,
    command: String,
    finalizers: Vec<String>,
    /// No Event has been written for it yet.
    first: bool,
    /// Attempts that failed in a row.
    failures: u32,
}

impl Due {
    fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(self.kind.resource.api_version.clone()),
            kind: Some(self.kind.resource.kind.clone()),
            name: Some(self.name.clone()),
            namespace: self.namespace.clone().filter(|_| self.kind.namespaced),
            uid: self.uid.clone(),
            ..ObjectReference::default()
        }
    }
}

/// The gauges at one scrape.
#[derive(Debug, Default, PartialEq)]
struct Gauges {
    /// (finalizer label, resource) -> stuck objects.
    stuck: BTreeMap<(String, String), i64>,
    /// finalizer label -> the oldest stuck object's age, in seconds.
    oldest: BTreeMap<String, f64>,
    terminating: usize,
    watched: usize,
    unwatchable: usize,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StuckLabels {
    finalizer: String,
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FinalizerLabels {
    finalizer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// The gauges are computed from the tracker at each scrape: always what is
/// stuck now, with no timer to keep them up to date.
#[derive(Debug)]
struct StuckCollector(Arc<Shared>);

impl Collector for StuckCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauges = self.0.gauges(Timestamp::now());
        let mut family = encoder.encode_descriptor(
            "stuck_objects",
            "Objects deleting with finalizers for longer than --stuck-after, by finalizer (past --max-finalizers names: other) and resource",
            None,
            MetricType::Gauge,
        )?;
        for ((finalizer, resource), n) in &gauges.stuck {
            let labels = StuckLabels {
                finalizer: escape(finalizer).into_owned(),
                resource: escape(resource).into_owned(),
            };
            ConstGauge::new(*n).encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "stuck_oldest_seconds",
            "How long the oldest stuck object holding the finalizer has been deleting, in seconds (0: none stuck now)",
            None,
            MetricType::Gauge,
        )?;
        for (finalizer, seconds) in &gauges.oldest {
            let labels = FinalizerLabels {
                finalizer: escape(finalizer).into_owned(),
            };
            ConstGauge::new(seconds.floor()).encode(family.encode_family(&labels)?)?;
        }
        for (name, help, value) in [
            (
                "terminating_objects",
                "Objects being deleted that still hold finalizers, stuck or not yet",
                gauges.terminating,
            ),
            ("watched_types", "Types watched", gauges.watched),
            (
                "unwatchable_types",
                "Types whose watch failed its last attempt (retried with backoff)",
                gauges.unwatchable,
            ),
        ] {
            let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(metric)?;
        }
        Ok(())
    }
}

/// The admin port's metrics.
struct Metrics {
    registry: Registry,
    events: Family<OutcomeLabels, Counter>,
    watch_errors: Family<ResourceLabels, Counter>,
    discoveries: Family<OutcomeLabels, Counter>,
}

impl Metrics {
    fn new(shared: Arc<Shared>) -> Metrics {
        let mut registry = Registry::with_prefix("finalizer_guard");
        registry.register_collector(Box::new(StuckCollector(shared)));
        let events = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "stuck_events",
            "FinalizerStuck Events written (a repeat counts again), by outcome: sent, failed",
            events.clone(),
        );
        let watch_errors = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "watch_errors",
            "Failed lists and watches, by resource (each retried with backoff)",
            watch_errors.clone(),
        );
        let discoveries = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "discoveries",
            "Discoveries of the API server's types, by outcome: success, failure",
            discoveries.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register("build_info", "The running version", build);
        Metrics {
            registry,
            events,
            watch_errors,
            discoveries,
        }
    }

    fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// `finalizer-guard watch`: runs until SIGTERM or Ctrl-C (exit 0). Exit 1
/// when it cannot start (the admin port is taken), 2 on usage or connection
/// errors.
pub async fn run(args: WatchArgs) -> Result<i32, ClusterError> {
    let WatchArgs {
        stuck_after,
        admin_listen,
        events,
        discovery_interval,
        max_finalizers,
        not_ready_for,
        policy,
        log_format: _,
        connection,
    } = args;
    if discovery_interval < Duration::from_secs(1) {
        return Err(ClusterError::Usage(
            "--discovery-interval: at least 1s".into(),
        ));
    }
    let session = connection.connect().await?;
    let policy_file = policy;
    let (initial, source) = super::cluster_policy(&session.client, policy_file.as_deref()).await?;
    if let Some(note) = &source.note {
        tracing::warn!("{}", escape(note));
    }
    let listener = match tokio::net::TcpListener::bind(admin_listen).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("error: cannot listen on {admin_listen}: {e}");
            return Ok(1);
        }
    };
    let admin_addr = listener.local_addr().unwrap_or(admin_listen);
    let shared = Arc::new(Shared::new(stuck_after, max_finalizers));
    let metrics = Arc::new(Metrics::new(shared.clone()));
    let policy = Arc::new(ArcSwap::from_pointee(initial));
    tracing::info!(
        %admin_addr,
        user = %escape(&session.identity.username),
        policy = %escape(&source.name),
        stuck_after = %explain::age(stuck_after),
        events,
        "watching every served type's metadata; /metrics on the admin port"
    );

    let mut tasks = JoinSet::new();
    let router = admin(shared.clone(), metrics.clone());
    tasks.spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "the admin port stopped");
        }
    });
    let discovery = Discoverer {
        client: session.client.clone(),
        shared: shared.clone(),
        metrics: metrics.clone(),
        policy: policy.clone(),
        policy_file,
        interval: discovery_interval,
        first_lists: Arc::new(Semaphore::new(FIRST_LISTS)),
    };
    tasks.spawn(discovery.run());
    let recorder = events.then(|| {
        Recorder::new(
            session.client.clone(),
            Reporter {
                controller: REPORTING_CONTROLLER.into(),
                instance: std::env::var("HOSTNAME")
                    .ok()
                    .map(|h| h.chars().take(128).collect()),
            },
        )
    });
    let announcer = Announcer {
        client: session.client.clone(),
        shared,
        metrics,
        policy,
        identity: session.identity.clone(),
        not_ready_for,
        recorder,
    };
    tasks.spawn(announcer.run());
    wait_for_signal().await;
    tracing::info!("stopping");
    tasks.shutdown().await;
    Ok(0)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

#[derive(Clone)]
struct AdminState {
    shared: Arc<Shared>,
    metrics: Arc<Metrics>,
}

fn admin(shared: Arc<Shared>, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(AdminState { shared, metrics })
}

async fn scrape(State(state): State<AdminState>) -> Response {
    match state.metrics.encode() {
        Ok(text) => {
            let mut response = text.into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            response
        }
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn readyz(State(state): State<AdminState>) -> Response {
    match state.shared.ready() {
        Ok(()) => "ok\n".into_response(),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

/// Discovers the served types and keeps one watch running per type.
struct Discoverer {
    client: Client,
    shared: Arc<Shared>,
    metrics: Arc<Metrics>,
    policy: Arc<ArcSwap<Policy>>,
    policy_file: Option<PathBuf>,
    interval: Duration,
    /// Turns for the types' first lists.
    first_lists: Arc<Semaphore>,
}

/// A running watch: the version it watches, and how to stop it.
struct Running {
    api_version: String,
    handle: AbortHandle,
}

impl Discoverer {
    async fn run(self) {
        let rediscover = Arc::new(Notify::new());
        // Dropped with this task: every watch stops with it.
        let mut watches: JoinSet<()> = JoinSet::new();
        let mut running: HashMap<String, Running> = HashMap::new();
        loop {
            let wait = match Resolver::new(&self.client).await {
                Ok(resolver) => {
                    self.metrics
                        .discoveries
                        .get_or_create(&OutcomeLabels { outcome: "success" })
                        .inc();
                    let wanted = watchable(resolver.served());
                    self.reconcile(wanted, &mut running, &mut watches, &rediscover);
                    self.shared.discovered.store(true, Ordering::Relaxed);
                    self.interval
                }
                Err(e) => {
                    self.metrics
                        .discoveries
                        .get_or_create(&OutcomeLabels { outcome: "failure" })
                        .inc();
                    tracing::warn!(error = %escape(&e.to_string()), "discovery failed; the watches running go on");
                    self.interval.min(DISCOVERY_RETRY)
                }
            };
            self.reload_policy().await;
            // Reap the watches that ended (none should: they retry forever).
            while watches.try_join_next().is_some() {}
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = rediscover.notified() => tokio::time::sleep(SETTLE).await,
            }
        }
    }

    /// The policy again: the owners an Event names follow the cluster's.
    async fn reload_policy(&self) {
        match super::cluster_policy(&self.client, self.policy_file.as_deref()).await {
            Ok((policy, _)) => self.policy.store(Arc::new(policy)),
            Err(e) => {
                tracing::warn!(error = %escape(&e.to_string()), "cannot read the policy again; keeping the last one");
            }
        }
    }

    fn reconcile(
        &self,
        wanted: Vec<Kind>,
        running: &mut HashMap<String, Running>,
        watches: &mut JoinSet<()>,
        rediscover: &Arc<Notify>,
    ) {
        let names: HashSet<&str> = wanted.iter().map(|k| k.name.as_str()).collect();
        let gone: Vec<String> = running
            .keys()
            .filter(|name| !names.contains(name.as_str()))
            .cloned()
            .collect();
        for name in gone {
            if let Some(r) = running.remove(&name) {
                r.handle.abort();
            }
            self.shared.dropped(&name);
            tracing::info!(resource = %escape(&name), "no longer served: not watched");
        }
        for kind in wanted {
            if running
                .get(&kind.name)
                .is_some_and(|r| r.api_version == kind.resource.api_version)
            {
                continue;
            }
            if let Some(old) = running.remove(&kind.name) {
                old.handle.abort();
            }
            let kind = Arc::new(kind);
            self.shared.watching(&kind);
            tracing::debug!(resource = %escape(&kind.name), api_version = %escape(&kind.resource.api_version), "watching");
            let notify = kind.rediscover.then(|| rediscover.clone());
            let handle = if kind.is_namespaces() {
                let stream = watcher(Api::<Namespace>::all(self.client.clone()), config());
                watches.spawn(watch_type(
                    self.shared.clone(),
                    self.metrics.clone(),
                    kind.clone(),
                    stream,
                    notify,
                    self.first_lists.clone(),
                ))
            } else {
                let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(
                    self.client.clone(),
                    &kind.resource,
                );
                watches.spawn(watch_type(
                    self.shared.clone(),
                    self.metrics.clone(),
                    kind.clone(),
                    watcher(api, config()),
                    notify,
                    self.first_lists.clone(),
                ))
            };
            running.insert(
                kind.name.clone(),
                Running {
                    api_version: kind.resource.api_version.clone(),
                    handle,
                },
            );
        }
    }
}

fn config() -> watcher::Config {
    watcher::Config::default().page_size(PAGE)
}

/// The types to watch: one version of each, every type that can be listed
/// and watched. `events.events.k8s.io` serves the core `events` again and is
/// left out.
fn watchable(served: Vec<(ApiResource, ApiCapabilities)>) -> Vec<Kind> {
    served
        .into_iter()
        .filter(|(_, caps)| {
            caps.supports_operation(verbs::LIST) && caps.supports_operation(verbs::WATCH)
        })
        .filter(|(ar, _)| !(ar.group == "events.k8s.io" && ar.plural == "events"))
        .map(|(ar, caps)| Kind::new(ar, caps.scope == Scope::Namespaced))
        .collect()
}

/// One type's watch: forever, with backoff after each error.
async fn watch_type<K: Observed>(
    shared: Arc<Shared>,
    metrics: Arc<Metrics>,
    kind: Arc<Kind>,
    stream: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send,
    rediscover: Option<Arc<Notify>>,
    first_lists: Arc<Semaphore>,
) {
    // The first list waits for its turn (nothing is asked before the
    // stream is polled); the turn ends when it is listed, or has failed.
    let mut turn = first_lists.acquire_owned().await.ok();
    let stream = stream.default_backoff();
    futures::pin_mut!(stream);
    // The keys a list in progress has shown.
    let mut listing: Option<HashSet<String>> = None;
    let changed = || {
        if let Some(n) = &rediscover {
            n.notify_one();
        }
    };
    // Whether the last attempt failed: the next event says it works again.
    let mut failing = false;
    while let Some(event) = stream.next().await {
        if failing && matches!(event, Ok(ref e) if !matches!(e, Event::Init)) {
            failing = false;
            shared.recovered(&kind);
            tracing::info!(resource = %escape(&kind.name), "watching again");
        }
        match event {
            Ok(Event::Init) => listing = Some(HashSet::new()),
            Ok(Event::InitApply(object)) => {
                if let Some(key) = shared.observe(&kind, object.meta(), object.spec_finalizers())
                    && let Some(seen) = &mut listing
                {
                    seen.insert(key);
                }
            }
            Ok(Event::InitDone) => {
                shared.listed(&kind, &listing.take().unwrap_or_default());
                drop(turn.take());
            }
            Ok(Event::Apply(object)) => {
                shared.observe(&kind, object.meta(), object.spec_finalizers());
                changed();
            }
            Ok(Event::Delete(object)) => {
                shared.forget(&kind, object.meta());
                changed();
            }
            Err(e) => {
                metrics
                    .watch_errors
                    .get_or_create(&ResourceLabels {
                        resource: escape(&kind.name).into_owned(),
                    })
                    .inc();
                let why = escape(&super::chain(&e)).into_owned();
                failing = true;
                drop(turn.take());
                if shared.failed(&kind, why.clone()) {
                    tracing::warn!(resource = %escape(&kind.name), error = %why, "cannot watch; retrying with backoff");
                }
            }
        }
    }
}

/// Explains stuck objects and writes their Events.
struct Announcer {
    client: Client,
    shared: Arc<Shared>,
    metrics: Arc<Metrics>,
    policy: Arc<ArcSwap<Policy>>,
    identity: Identity,
    not_ready_for: Duration,
    recorder: Option<Recorder>,
}

impl Announcer {
    async fn run(self) {
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
                let Some(recorder) = &self.recorder else {
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
                    tokio::time::timeout(ANNOUNCE_TIMEOUT, self.announce(recorder, &mut probe, &d))
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
                        tracing::warn!(object = %escape(&d.label), error = %escape(&why), "cannot write the FinalizerStuck Event; trying again with backoff");
                    } else {
                        tracing::debug!(object = %escape(&d.label), error = %escape(&why), failures, "cannot write the FinalizerStuck Event");
                    }
                }
            }
        }
    }

    /// Explains one stuck object as `unstick` does and writes (or repeats) its Event.
    async fn announce(
        &self,
        recorder: &Recorder,
        probe: &mut Probe,
        d: &Due,
    ) -> Result<(), String> {
        let note = if d.first {
            match self.explain(probe, d).await? {
                Some(note) => note,
                // Gone or replaced since the watch saw it: the watch will say so.
                None => return Ok(()),
            }
        } else {
            // A repeat is one more in the Event's series: the Recorder keeps
            // the first note. Should its memory have lapsed, this one says
            // as much as a repeat can without reading the object again.
            short_note(d)
        };
        if d.first && d.failures == 0 {
            tracing::warn!(object = %escape(&d.label), note = %note, "stuck");
        }
        let event = StuckEvent {
            type_: EventType::Warning,
            reason: REASON.into(),
            note: Some(note),
            action: "Finalize".into(),
            secondary: None,
        };
        let sent = recorder.publish(&event, &d.reference()).await;
        let outcome = if sent.is_ok() { "sent" } else { "failed" };
        self.metrics
            .events
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        sent.map_err(|e| super::chain(&e))
    }

    /// What `unstick` would explain, as an Event note. `None` when the
    /// object is gone or another took its name.
    async fn explain(&self, probe: &mut Probe, d: &Due) -> Result<Option<String>, String> {
        let Some(found) = self.read(d).await? else {
            return Ok(None);
        };
        let policy = self.policy.load_full();
        let reports = explain::explain(probe, &policy, &found, &[], &self.identity).await;
        let leak = explain::may_leak(&found);
        let blocked_by = explain::namespace_blockers(probe, &found).await;
        Ok(Some(note(d, &reports, &leak, &blocked_by)))
    }

    /// The object as `unstick` reads it: whole, but for Secrets and
    /// ConfigMaps, whose metadata is all it reads.
    async fn read(&self, d: &Due) -> Result<Option<Found>, String> {
        let resource = &d.kind.resource;
        let api: Api<DynamicObject> = match d.namespace.as_deref() {
            Some(ns) if d.kind.namespaced => {
                Api::namespaced_with(self.client.clone(), ns, resource)
            }
            _ => Api::all_with(self.client.clone(), resource),
        };
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
        .map_err(|e| super::chain(&e))?;
        Ok(object
            .filter(|o| d.uid.is_none() || o.metadata.uid == d.uid)
            .map(|object| Found {
                resource: resource.clone(),
                namespaced: d.kind.namespaced,
                object,
            }))
    }
}

/// The Event's note: since when, each finalizer's owner and whether it
/// looks alive, what may leak, what blocks a namespace, and the command.
/// Escaped, and at most [`MAX_NOTE_BYTES`]: the command is never cut.
fn note(d: &Due, reports: &[FinalizerReport], leak: &Ledger, blocked_by: &[String]) -> String {
    let mut parts = vec![format!("Terminating since {}", d.since)];
    for r in reports {
        let field = if r.field == FinalizerField::Spec {
            " (spec.finalizers)"
        } else {
            ""
        };
        parts.push(format!(
            "{}{field}: owner {}; owner alive: {}",
            r.name, r.owner, r.owner_alive
        ));
    }
    parts.push(format!("May leak: {}", leak.summary()));
    for b in blocked_by {
        parts.push(format!("Blocked by: {b}"));
    }
    fit(&parts.join(". "), &d.command)
}

/// A repeat's note, should the Recorder have forgotten the first.
fn short_note(d: &Due) -> String {
    fit(
        &format!(
            "Terminating since {}, held by {}",
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

/// Control and format characters (and the line and paragraph separators)
/// as `\u{…}`: whatever a name or a message from the cluster holds, a log
/// line or an Event note shows it, on one line.
pub fn escape(s: &str) -> Cow<'_, str> {
    let hidden = |c: char| {
        c.is_control()
            || c.general_category_group() == GeneralCategoryGroup::Other
            || matches!(
                c.general_category(),
                GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator
            )
    };
    if !s.contains(hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hidden(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// One word of a shell command: as it is when plain, else single-quoted;
/// escaped either way.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '.' | '-' | '_' | '/' | ':' | '@' | '+' | '=' | ',')
        });
    if plain {
        s.to_string()
    } else {
        format!("'{}'", escape(&s.replace('\'', r"'\''")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn kind_of(resource: ApiResource, namespaced: bool) -> Arc<Kind> {
        Arc::new(Kind::new(resource, namespaced))
    }

    fn widgets() -> Arc<Kind> {
        let gvk = kube::core::GroupVersionKind::gvk("example.com", "v1", "Widget");
        kind_of(ApiResource::from_gvk_with_plural(&gvk, "widgets"), true)
    }

    fn widgets_v2() -> Arc<Kind> {
        let gvk = kube::core::GroupVersionKind::gvk("example.net", "v2", "Widget");
        kind_of(ApiResource::from_gvk_with_plural(&gvk, "widgets"), true)
    }

    fn pods() -> Arc<Kind> {
        kind_of(ApiResource::erase::<Pod>(&()), true)
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn meta(name: &str, uid: &str, deleting: Option<&str>, finalizers: &[&str]) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            uid: Some(uid.into()),
            deletion_timestamp: deleting.map(|t| Time(at(t))),
            finalizers: Some(finalizers.iter().map(|f| f.to_string()).collect()),
            ..ObjectMeta::default()
        }
    }

    const T0: &str = "2026-11-21T07:00:00Z";

    #[test]
    fn only_objects_being_deleted_with_finalizers_are_kept() {
        let shared = Shared::new(Duration::from_secs(600), 10);
        let w = widgets();
        assert!(
            shared
                .observe(&w, &meta("a", "u-a", None, &["x.io/f"]), vec![])
                .is_none()
        );
        assert!(
            shared
                .observe(&w, &meta("b", "u-b", Some(T0), &[]), vec![])
                .is_none()
        );
        assert_eq!(
            shared.observe(&w, &meta("c", "u-c", Some(T0), &["x.io/f"]), vec![]),
            Some("u-c".into())
        );
        // A namespace held by spec.finalizers alone is kept.
        let ns = kind_of(ApiResource::erase::<Namespace>(&()), false);
        assert!(
            shared
                .observe(
                    &ns,
                    &meta("team", "u-ns", Some(T0), &[]),
                    vec!["kubernetes".into()]
                )
                .is_some()
        );
        assert_eq!(lock(&shared.state).objects.len(), 2);
        // Its finalizers removed: forgotten.
        shared.observe(&w, &meta("c", "u-c", Some(T0), &[]), vec![]);
        assert_eq!(lock(&shared.state).objects.len(), 1);
        shared.forget(&ns, &meta("team", "u-ns", None, &[]));
        assert!(lock(&shared.state).objects.is_empty());
    }

    #[test]
    fn a_list_again_forgets_what_it_no_longer_shows() {
        let shared = Shared::new(Duration::from_secs(600), 10);
        let (w, p) = (widgets(), pods());
        shared.observe(&w, &meta("a", "u-a", Some(T0), &["x.io/f"]), vec![]);
        shared.observe(&w, &meta("b", "u-b", Some(T0), &["x.io/f"]), vec![]);
        shared.observe(&p, &meta("p", "u-p", Some(T0), &["x.io/f"]), vec![]);
        shared.watching(&w);
        assert_eq!(
            shared.ready(),
            Err("discovering the API server's types".into())
        );
        shared.discovered.store(true, Ordering::Relaxed);
        assert_eq!(shared.ready(), Err("1 type(s) still listing".into()));
        shared.listed(&w, &HashSet::from(["u-b".to_string()]));
        assert_eq!(shared.ready(), Ok(()));
        // A type added later: ready still.
        shared.watching(&widgets_v2());
        assert_eq!(shared.ready(), Ok(()));
        let state = lock(&shared.state);
        let mut keys: Vec<&String> = state.objects.keys().collect();
        keys.sort();
        assert_eq!(keys, ["u-b", "u-p"], "the pods' watch is not the widgets'");
    }

    #[test]
    fn a_type_that_fails_is_reported_not_waited_for() {
        let shared = Shared::new(Duration::from_secs(600), 10);
        shared.discovered.store(true, Ordering::Relaxed);
        let w = widgets();
        shared.watching(&w);
        assert!(shared.failed(&w, "forbidden".into()));
        assert!(!shared.failed(&w, "forbidden".into()), "said once");
        assert!(shared.failed(&w, "not found".into()));
        assert_eq!(shared.ready(), Ok(()));
        assert_eq!(shared.gauges(at(T0)).unwatchable, 1);
        shared.recovered(&w);
        assert_eq!(shared.gauges(at(T0)).unwatchable, 0);
        assert!(
            shared.failed(&w, "not found".into()),
            "news again after a recovery"
        );
        assert_eq!(shared.gauges(at(T0)).unwatchable, 1);
        shared.listed(&w, &HashSet::new());
        assert_eq!(shared.gauges(at(T0)).unwatchable, 0);
        // A failure long past, with no event since, no longer counts.
        if let Some(long_ago) = std::time::Instant::now().checked_sub(FAILING_FOR) {
            let mut state = lock(&shared.state);
            let t = state.types.get_mut("widgets.example.com").unwrap();
            t.failing = Some(("gone".into(), long_ago));
            assert!(!t.unwatchable());
        }
    }

    #[test]
    fn stuck_after_the_threshold_by_finalizer_and_resource() {
        let shared = Shared::new(Duration::from_secs(600), 10);
        let (w, p) = (widgets(), pods());
        shared.observe(
            &w,
            &meta(
                "a",
                "u-a",
                Some("2026-11-21T07:00:00Z"),
                &["x.io/f", "y.io/g"],
            ),
            vec![],
        );
        shared.observe(
            &w,
            &meta("b", "u-b", Some("2026-11-21T07:05:00Z"), &["x.io/f"]),
            vec![],
        );
        shared.observe(
            &p,
            &meta("c", "u-c", Some("2026-11-21T07:09:00Z"), &["x.io/f"]),
            vec![],
        );
        let g = shared.gauges(at("2026-11-21T07:15:30Z"));
        assert_eq!(g.terminating, 3);
        assert_eq!(
            g.stuck,
            BTreeMap::from([
                (("x.io/f".into(), "widgets.example.com".into()), 2),
                (("y.io/g".into(), "widgets.example.com".into()), 1),
            ]),
            "the pod has been deleting for 6m30s only"
        );
        assert_eq!(g.oldest["x.io/f"], 930.0);
        assert_eq!(g.oldest["y.io/g"], 930.0);

        // Released: the gauges drop back to 0, they do not vanish.
        shared.forget(&w, &meta("a", "u-a", None, &[]));
        shared.forget(&w, &meta("b", "u-b", None, &[]));
        let g = shared.gauges(at("2026-11-21T07:15:30Z"));
        assert_eq!(g.stuck[&("x.io/f".into(), "widgets.example.com".into())], 0);
        assert_eq!(g.stuck[&("y.io/g".into(), "widgets.example.com".into())], 0);
        assert_eq!(g.oldest["x.io/f"], 0.0);
        // A type no longer served takes its series with it.
        shared.dropped("widgets.example.com");
        assert!(shared.gauges(at("2026-11-21T07:15:30Z")).stuck.is_empty());
    }

    #[test]
    fn finalizer_labels_are_capped() {
        let shared = Shared::new(Duration::ZERO, 2);
        let w = widgets();
        for i in 0..50 {
            let f = format!("f{i}.example.com/x");
            shared.observe(
                &w,
                &meta(&format!("o{i}"), &format!("u{i}"), Some(T0), &[&f]),
                vec![],
            );
        }
        let g = shared.gauges(at(T0));
        assert_eq!(g.stuck.len(), 3, "{g:?}");
        assert_eq!(g.stuck[&(OTHER.into(), "widgets.example.com".into())], 48);
        assert_eq!(g.oldest.len(), 3);
        // The names admitted stay: the labels do not move from scrape to scrape.
        let again = shared.gauges(at(T0));
        assert_eq!(g, again);
    }

    #[test]
    fn the_exposition_names_no_object() {
        let shared = Arc::new(Shared::new(Duration::ZERO, 10));
        let w = widgets();
        let mut m = meta("secret-name", "u-1", Some(T0), &["x.io/f\n# HELP evil"]);
        m.namespace = Some("secret-namespace".into());
        shared.observe(&w, &m, vec![]);
        let metrics = Metrics::new(shared.clone());
        metrics
            .events
            .get_or_create(&OutcomeLabels { outcome: "sent" })
            .inc();
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(
                "finalizer_guard_stuck_objects{finalizer=\"x.io/f\\\\u{a}# HELP evil\",resource=\"widgets.example.com\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("finalizer_guard_stuck_oldest_seconds{finalizer="),
            "{text}"
        );
        assert!(
            text.contains("finalizer_guard_terminating_objects 1\n"),
            "{text}"
        );
        assert!(
            text.contains("finalizer_guard_stuck_events_total{outcome=\"sent\"} 1\n"),
            "{text}"
        );
        assert!(
            !text.contains("secret-name") && !text.contains("secret-namespace"),
            "{text}"
        );
        assert!(!text.contains("\n# HELP evil"), "{text}");
    }

    #[test]
    fn due_when_stuck_then_again_after_the_repeat() {
        let shared = Shared::new(Duration::from_secs(600), 10);
        let w = widgets();
        shared.observe(&w, &meta("a", "u-a", Some(T0), &["x.io/f"]), vec![]);
        assert!(shared.due(at("2026-11-21T07:09:59Z"), 10).is_empty());
        let now = at("2026-11-21T07:10:00Z");
        let due = shared.due(now, 10);
        assert_eq!(due.len(), 1);
        assert!(due[0].first);
        assert_eq!(
            due[0].command,
            "finalizer-guard unstick widget.example.com/a -n shop"
        );
        assert_eq!(due[0].label, "widget.example.com/a -n shop");
        // Being announced: not handed out twice.
        assert!(shared.due(now, 10).is_empty());
        shared.announced("u-a", Announced::Sent, now);
        assert!(
            shared
                .due(now + SignedDuration::from_mins(4), 10)
                .is_empty()
        );
        let again = shared.due(now + REPEAT_EVERY, 10);
        assert_eq!(again.len(), 1);
        assert!(!again[0].first);
        // Oldest first, and at most `limit`.
        shared.observe(
            &w,
            &meta("b", "u-b", Some("2026-11-21T06:00:00Z"), &["x.io/f"]),
            vec![],
        );
        shared.observe(
            &w,
            &meta("c", "u-c", Some("2026-11-21T06:30:00Z"), &["x.io/f"]),
            vec![],
        );
        let due = shared.due(at("2026-11-21T08:00:00Z"), 1);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].name, "b");
    }

    #[test]
    fn a_failed_event_is_tried_again_with_backoff_as_a_first() {
        let shared = Shared::new(Duration::ZERO, 10);
        shared.observe(&widgets(), &meta("a", "u-a", Some(T0), &["x.io/f"]), vec![]);
        let mut now = at(T0);
        let mut waits = Vec::new();
        for attempt in 1..=6 {
            let due = shared.due(now, 10);
            assert_eq!(due.len(), 1, "attempt {attempt}");
            assert!(due[0].first, "never written: explained in full when it is");
            assert_eq!(due[0].failures, attempt - 1);
            assert_eq!(shared.announced("u-a", Announced::Failed, now), attempt);
            let next = lock(&shared.state).objects["u-a"].next.unwrap();
            assert!(
                shared
                    .due(next - SignedDuration::from_secs(1), 10)
                    .is_empty()
            );
            waits.push(next.duration_since(now).as_secs());
            now = next;
        }
        assert_eq!(waits, [30, 60, 120, 240, 300, 300]);
        shared.due(now, 10);
        assert_eq!(shared.announced("u-a", Announced::Sent, now), 0);
        let due = shared.due(now + REPEAT_EVERY, 10);
        assert!(!due[0].first && due[0].failures == 0);
        // Off: once, and never again.
        shared.announced("u-a", Announced::Off, now);
        assert!(shared.due(at("2100-01-01T00:00:00Z"), 10).is_empty());
    }

    #[test]
    fn references_and_commands_for_every_scope() {
        let shared = Shared::new(Duration::ZERO, 10);
        let ns = kind_of(ApiResource::erase::<Namespace>(&()), false);
        let cm = kind_of(ApiResource::erase::<ConfigMap>(&()), true);
        let mut m = meta("team-a", "u-ns", Some(T0), &[]);
        m.namespace = None;
        shared.observe(&ns, &m, vec!["kubernetes".into()]);
        shared.observe(&cm, &meta("it's", "u-cm", Some(T0), &["x.io/f"]), vec![]);
        let mut due = shared.due(at(T0), 10);
        due.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(
            due[0].command,
            "finalizer-guard unstick 'configmap/it'\\''s' -n shop"
        );
        assert_eq!(due[1].command, "finalizer-guard unstick namespace/team-a");
        let r = due[1].reference();
        assert_eq!(r.kind.as_deref(), Some("Namespace"));
        assert_eq!(r.namespace, None, "the Recorder writes it to default");
        assert_eq!(r.uid.as_deref(), Some("u-ns"));
        assert_eq!(due[0].reference().namespace.as_deref(), Some("shop"));
        assert!(cm.metadata_only() && !ns.metadata_only() && !widgets().metadata_only());
    }

    #[test]
    fn notes_are_escaped_and_keep_the_command() {
        let shared = Shared::new(Duration::ZERO, 10);
        shared.observe(
            &widgets(),
            &meta("w\u{1b}[2J", "u", Some(T0), &["x.io/f"]),
            vec![],
        );
        let d = shared.due(at(T0), 1).remove(0);
        assert_eq!(
            d.command,
            "finalizer-guard unstick 'widget.example.com/w\\u{1b}[2J' -n shop"
        );
        let reports = vec![FinalizerReport {
            name: "x.io/f".into(),
            field: FinalizerField::Metadata,
            owner: explain::Owner::Unknown,
            owner_alive: explain::Liveness::Unknown("no owner is known".into()),
            removable: explain::Removable::NotDeleting,
        }];
        let leak = Ledger {
            node: Some("worker\n3".into()),
            ..Ledger::default()
        };
        let text = note(
            &d,
            &reports,
            &leak,
            &["APIService v1.x is not Available (\u{2028})".into()],
        );
        assert_eq!(
            text,
            "Terminating since 2026-11-21T07:00:00Z. x.io/f: owner unknown: no built-in controller or policy rule names it; owner alive: cannot tell: no owner is known. May leak: node worker\\u{a}3. Blocked by: APIService v1.x is not Available (\\u{2028}). Explain and release: finalizer-guard unstick 'widget.example.com/w\\u{1b}[2J' -n shop"
        );
        let long = vec!["y".repeat(5000)];
        let text = note(&d, &reports, &leak, &long);
        assert!(text.len() <= MAX_NOTE_BYTES, "{}", text.len());
        assert!(text.ends_with(".... Explain and release: finalizer-guard unstick 'widget.example.com/w\\u{1b}[2J' -n shop"), "{text}");
        let wide = vec!["é".repeat(2000)];
        assert!(note(&d, &reports, &leak, &wide).len() <= MAX_NOTE_BYTES);
    }

    #[test]
    fn escapes_what_hides_or_breaks_a_line() {
        assert!(matches!(escape("plain/name-1"), Cow::Borrowed(_)));
        assert_eq!(
            escape("a\nb\tc\u{200b}d\u{202e}e\u{2029}"),
            "a\\u{a}b\\u{9}c\\u{200b}d\\u{202e}e\\u{2029}"
        );
        assert_eq!(shell_word("web-0"), "web-0");
        assert_eq!(shell_word(""), "''");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("$(x)"), "'$(x)'");
    }

    #[test]
    fn only_types_that_can_be_listed_and_watched() {
        use kube::discovery::ApiCapabilities;
        let caps = |verbs: &[&str]| ApiCapabilities {
            scope: Scope::Namespaced,
            subresources: vec![],
            operations: verbs.iter().map(|v| v.to_string()).collect(),
        };
        let events = ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
            "events",
        );
        let metrics = ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "PodMetrics"),
            "pods",
        );
        let kinds = watchable(vec![
            (
                ApiResource::erase::<Pod>(&()),
                caps(&["list", "watch", "get"]),
            ),
            (events, caps(&["list", "watch"])),
            (metrics, caps(&["list", "get"])),
        ]);
        let names: Vec<&str> = kinds.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["pods"]);
        let crds = Kind::new(
            ApiResource::from_gvk_with_plural(
                &kube::core::GroupVersionKind::gvk(
                    "apiextensions.k8s.io",
                    "v1",
                    "CustomResourceDefinition",
                ),
                "customresourcedefinitions",
            ),
            false,
        );
        assert!(crds.rediscover && !Kind::new(ApiResource::erase::<Pod>(&()), true).rediscover);
    }
}
