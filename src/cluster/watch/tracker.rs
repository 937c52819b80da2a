//! What the watches keep: the objects being deleted that still hold
//! finalizers (a few strings each), each type's state, and from them the
//! gauges and the Events due.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::cluster::read::type_name;
use crate::output::escape;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::discovery::ApiResource;

/// The label value of the finalizers past `--max-finalizers`.
pub const OTHER: &str = "other";
/// How often a stuck object's Event is repeated while it stays stuck: within
/// the Event writer's six-minute series ([`crate::trail::events::SERIES_END`]), so a repeat is one more in the Event's
/// series (its count and last-seen time), never a new Event; and the Event
/// outlives the API server's one-hour Event TTL.
const REPEAT_EVERY: SignedDuration = SignedDuration::from_mins(5);
/// How soon an Event that could not be written is tried again: doubled
/// after each failure, up to [`REPEAT_EVERY`] (an object in a namespace
/// being deleted can never get one: the API server refuses new objects there).
const RETRY_AFTER: SignedDuration = SignedDuration::from_secs(30);

/// A type being watched.
#[derive(Debug)]
pub(super) struct WatchedType {
    /// `pods`, `widgets.example.com`: the `resource` label, and the key.
    pub(super) name: String,
    pub(super) resource: ApiResource,
    pub(super) namespaced: bool,
    /// A change of one of its objects may add or remove types.
    pub(super) rediscover: bool,
}

impl WatchedType {
    pub(super) fn new(resource: ApiResource, namespaced: bool) -> WatchedType {
        let name = type_name(&resource);
        let rediscover = matches!(
            name.as_str(),
            "customresourcedefinitions.apiextensions.k8s.io" | "apiservices.apiregistration.k8s.io"
        );
        WatchedType {
            name,
            resource,
            namespaced,
            rediscover,
        }
    }

    pub(super) fn is_namespaces(&self) -> bool {
        self.resource.group.is_empty() && self.resource.plural == "namespaces"
    }

    /// Types whose bodies hold nothing `unstick` reads and may hold secrets:
    /// their metadata is all that is read.
    pub(super) fn metadata_only(&self) -> bool {
        self.resource.group.is_empty()
            && matches!(self.resource.plural.as_str(), "secrets" | "configmaps")
    }

    /// `pod`, `widget.example.com`: as `unstick` takes a type (and kubectl prints one).
    pub(super) fn command_type(&self) -> String {
        let kind = self.resource.kind.to_lowercase();
        if self.resource.group.is_empty() {
            kind
        } else {
            format!("{kind}.{}", self.resource.group)
        }
    }
}

/// One object being deleted that still holds finalizers.
#[derive(Debug)]
pub(super) struct Tracked {
    pub(super) kind: Arc<WatchedType>,
    pub(super) namespace: Option<String>,
    pub(super) name: String,
    pub(super) uid: Option<String>,
    /// `metadata.deletionTimestamp`.
    pub(super) since: Timestamp,
    pub(super) finalizers: Vec<String>,
    /// A namespace's `spec.finalizers`.
    pub(super) spec_finalizers: Vec<String>,
    /// When its Event is due again; `None` until it is first announced.
    pub(super) next: Option<Timestamp>,
    /// Its Event was written.
    pub(super) sent: bool,
    /// Attempts that failed since the last one that did not.
    pub(super) failures: u32,
}

impl Tracked {
    /// Every finalizer holding it, each once.
    pub(super) fn holding(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for f in self.finalizers.iter().chain(&self.spec_finalizers) {
            if !out.contains(&f.as_str()) {
                out.push(f);
            }
        }
        out
    }

    /// `pod/web-0 -n shop`
    pub(super) fn label(&self) -> String {
        let object = format!("{}/{}", self.kind.command_type(), self.name);
        match &self.namespace {
            Some(ns) if self.kind.namespaced => format!("{object} -n {ns}"),
            _ => object,
        }
    }

    /// The `unstick` command that explains it and, with `--reason`, releases it.
    pub(super) fn command(&self) -> String {
        let object = format!("{}/{}", self.kind.command_type(), self.name);
        let namespace = self.namespace.as_deref().filter(|_| self.kind.namespaced);
        crate::cluster::select::command("unstick", &object, namespace, &[])
    }
}

/// What a type's watch is doing.
#[derive(Debug, Default)]
pub(super) struct TypeState {
    /// Its first list completed.
    pub(super) synced: bool,
    /// Why its last attempt failed, and when, until an event shows one
    /// succeeded. A watch that starts again quietly shows nothing, so a
    /// failure counts only for [`FAILING_FOR`]: one that lasts comes back
    /// at least every 30 s (kube-runtime's longest backoff).
    pub(super) failing: Option<(String, std::time::Instant)>,
    /// RBAC refuses to list it: not failing, not waited for, tried again
    /// quietly now and then ([`Shared::forbidden`]).
    pub(super) forbidden: bool,
}

/// How long a failed list or watch counts as the type's state.
pub(super) const FAILING_FOR: Duration = Duration::from_secs(90);

impl TypeState {
    pub(super) fn unwatchable(&self) -> bool {
        self.failing
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() < FAILING_FOR)
    }
}

/// What the watches, the announcer and the scrapes share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) state: Mutex<Tracker>,
    pub(super) stuck_after: SignedDuration,
    pub(super) max_finalizers: usize,
    /// Discovery has succeeded once.
    pub(super) discovered: AtomicBool,
    /// Ready once: a type added later does not take readiness back (its
    /// first list would otherwise drop the pod from its endpoints, and its
    /// scrapes with it).
    pub(super) was_ready: AtomicBool,
    /// Why the API server has not been reached yet at start.
    starting: Mutex<Option<String>>,
}

#[derive(Debug, Default)]
pub(super) struct Tracker {
    /// By uid.
    pub(super) objects: HashMap<String, Tracked>,
    pub(super) types: BTreeMap<String, TypeState>,
    /// Finalizer names with a label value of their own, at most `max_finalizers`.
    pub(super) named: BTreeSet<String>,
    /// (finalizer label, resource) pairs reported so far: kept at 0 once
    /// they are no longer stuck, so a gauge drops back instead of vanishing.
    pub(super) reported: BTreeSet<(String, String)>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a watch event says about one object.
pub(super) trait Observed {
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
pub(super) fn key_of(kind: &WatchedType, meta: &ObjectMeta) -> String {
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
    pub(super) fn new(stuck_after: Duration, max_finalizers: usize) -> Shared {
        Shared {
            state: Mutex::new(Tracker::default()),
            stuck_after: SignedDuration::try_from(stuck_after).unwrap_or(SignedDuration::MAX),
            max_finalizers,
            discovered: AtomicBool::new(false),
            was_ready: AtomicBool::new(false),
            starting: Mutex::new(None),
        }
    }

    /// Why the API server has not been reached yet at start (`None` once it has).
    pub(super) fn starting(&self, why: Option<String>) {
        *lock(&self.starting) = why;
    }

    /// Takes in one object as a watch saw it: kept while it is being deleted
    /// and holds finalizers, forgotten otherwise. Returns its key when kept.
    pub(super) fn observe(
        &self,
        kind: &Arc<WatchedType>,
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

    pub(super) fn forget(&self, kind: &WatchedType, meta: &ObjectMeta) {
        let gone = lock(&self.state).objects.remove(&key_of(kind, meta));
        released(gone);
    }

    /// A first list (or a list again) of `kind` ended: what it did not
    /// show is gone.
    pub(super) fn listed(&self, kind: &WatchedType, seen: &HashSet<String>) {
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
    pub(super) fn failed(&self, kind: &WatchedType, why: String) -> bool {
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
    pub(super) fn recovered(&self, kind: &WatchedType) {
        if let Some(t) = lock(&self.state).types.get_mut(&kind.name) {
            t.failing = None;
        }
    }

    pub(super) fn watching(&self, kind: &WatchedType) {
        lock(&self.state)
            .types
            .entry(kind.name.clone())
            .or_default();
    }

    /// RBAC refuses to list `kind`: its objects and gauges go, it is
    /// neither failing nor waited for. True the first time (since it was
    /// last permitted): the time to say so.
    pub(super) fn forbidden(&self, kind: &WatchedType) -> bool {
        let mut state = lock(&self.state);
        let type_state = state.types.entry(kind.name.clone()).or_default();
        let news = !type_state.forbidden;
        type_state.forbidden = true;
        type_state.failing = None;
        state.objects.retain(|_, t| t.kind.name != kind.name);
        state
            .reported
            .retain(|(_, resource)| *resource != kind.name);
        news
    }

    /// An event came through for `kind`: whether it was forbidden until now.
    pub(super) fn permitted(&self, kind: &WatchedType) -> bool {
        lock(&self.state)
            .types
            .get_mut(&kind.name)
            .is_some_and(|t| std::mem::take(&mut t.forbidden))
    }

    /// A type no longer served: its objects and gauges go.
    pub(super) fn dropped(&self, name: &str) {
        let mut state = lock(&self.state);
        state.types.remove(name);
        state.objects.retain(|_, t| t.kind.name != name);
        state.reported.retain(|(_, resource)| resource != name);
    }

    /// Ready once discovery has succeeded and every type's watch has
    /// listed once or failed (a type that cannot be watched is reported, in
    /// the logs and `finalizer_guard_unwatchable_types`, not waited for);
    /// then for good.
    pub(super) fn ready(&self) -> Result<(), String> {
        if self.was_ready.load(Ordering::Relaxed) {
            return Ok(());
        }
        if let Some(why) = lock(&self.starting).as_ref() {
            return Err(format!("cannot reach the API server yet: {why}"));
        }
        if !self.discovered.load(Ordering::Relaxed) {
            return Err("discovering the API server's types".into());
        }
        let state = lock(&self.state);
        let waiting = state
            .types
            .values()
            .filter(|t| !t.synced && t.failing.is_none() && !t.forbidden)
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
    pub(super) fn due(&self, now: Timestamp, limit: usize) -> Vec<Due> {
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
    pub(super) fn announced(&self, key: &str, outcome: Announced, now: Timestamp) -> u32 {
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
    pub(super) fn gauges(&self, now: Timestamp) -> Gauges {
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
pub(super) enum Announced {
    Sent,
    Failed,
    /// `--events=false`.
    Off,
}

/// Logs that an object that was stuck is no longer.
pub(super) fn released(gone: Option<Tracked>) {
    if let Some(t) = gone.filter(|t| t.next.is_some()) {
        tracing::info!(object = %escape(&t.label()), "no longer stuck");
    }
}

/// A stuck object whose Event is due.
#[derive(Debug, Clone)]
pub(super) struct Due {
    pub(super) key: String,
    pub(super) kind: Arc<WatchedType>,
    pub(super) namespace: Option<String>,
    pub(super) name: String,
    pub(super) uid: Option<String>,
    pub(super) since: Timestamp,
    pub(super) label: String,
    pub(super) command: String,
    pub(super) finalizers: Vec<String>,
    /// No Event has been written for it yet.
    pub(super) first: bool,
    /// Attempts that failed in a row.
    pub(super) failures: u32,
}

impl Due {
    pub(super) fn reference(&self) -> ObjectReference {
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
pub(super) struct Gauges {
    /// (finalizer label, resource) -> stuck objects.
    pub(super) stuck: BTreeMap<(String, String), i64>,
    /// finalizer label -> the oldest stuck object's age, in seconds.
    pub(super) oldest: BTreeMap<String, f64>,
    pub(super) terminating: usize,
    pub(super) watched: usize,
    pub(super) unwatchable: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::watch::fixtures::*;
    use k8s_openapi::api::core::v1::ConfigMap;
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
    fn a_type_rbac_refuses_is_not_waited_for_nor_unwatchable() {
        let shared = Shared::new(Duration::from_secs(600), 10);
        let (w, p) = (widgets(), pods());
        shared.observe(&w, &meta("a", "u-a", Some(T0), &["x.io/f"]), vec![]);
        shared.watching(&w);
        shared.watching(&p);
        shared.discovered.store(true, Ordering::Relaxed);
        shared.listed(&p, &HashSet::new());
        assert_eq!(shared.ready(), Err("1 type(s) still listing".into()));
        assert!(shared.forbidden(&w), "said the first time");
        assert!(!shared.forbidden(&w), "and not again");
        assert_eq!(shared.ready(), Ok(()));
        assert_eq!(shared.gauges(at(T0)).unwatchable, 0);
        assert!(lock(&shared.state).objects.is_empty(), "its objects go");
        assert!(shared.permitted(&w));
        assert!(!shared.permitted(&w));
        assert!(shared.forbidden(&w), "refused again later: said again");
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
}
