//! Discovery and the watches: one metadata-only watch per served type,
//! started and stopped as types come and go.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::discovery::{ApiCapabilities, ApiResource, Scope, verbs};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use tokio::sync::{Notify, Semaphore};
use tokio::task::{AbortHandle, JoinSet};

use super::metrics::{OutcomeLabels, ResourceLabels, WatchMetrics};
use super::tracker::{Observed, Shared, WatchedType};
use crate::cluster::select::Resolver;
use crate::output::chain;
use crate::output::escape;
use crate::policy::Policy;

/// Objects per page of a first list.
const PAGE: u32 = 500;
/// Types whose first list runs at once: a page each in memory, and an API
/// server not asked for every type at the same moment.
pub(super) const FIRST_LISTS: usize = 4;
/// After a CRD or an APIService changes, how long to let the next changes
/// come before discovering again.
const SETTLE: Duration = Duration::from_secs(1);
/// How soon a type RBAC refused is listed again, the first time and after.
const FORBIDDEN_FIRST_RETRY: Duration = Duration::from_secs(if cfg!(test) { 0 } else { 20 });
const FORBIDDEN_RETRY: Duration = Duration::from_secs(if cfg!(test) { 0 } else { 300 });
/// How soon a discovery that failed is tried again (or sooner, at
/// `--discovery-interval`).
const DISCOVERY_RETRY: Duration = Duration::from_secs(10);

/// Discovers the served types and keeps one watch running per type.
pub(super) struct Discoverer {
    pub(super) client: Client,
    pub(super) shared: Arc<Shared>,
    pub(super) metrics: Arc<WatchMetrics>,
    pub(super) policy: Arc<ArcSwap<Policy>>,
    pub(super) policy_file: Option<PathBuf>,
    pub(super) interval: Duration,
    /// Turns for the types' first lists.
    pub(super) first_lists: Arc<Semaphore>,
}

/// A running watch: the version it watches, and how to stop it.
pub(super) struct Running {
    pub(super) api_version: String,
    pub(super) handle: AbortHandle,
}

impl Discoverer {
    pub(super) async fn run(self) {
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
    pub(super) async fn reload_policy(&self) {
        match crate::cluster::install::cluster_policy(&self.client, self.policy_file.as_deref())
            .await
        {
            Ok((policy, _)) => self.policy.store(Arc::new(policy)),
            Err(e) => {
                tracing::warn!(error = %escape(&e.to_string()), "cannot read the policy again; keeping the last one");
            }
        }
    }

    pub(super) fn reconcile(
        &self,
        wanted: Vec<WatchedType>,
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

pub(super) fn config() -> watcher::Config {
    watcher::Config::default().page_size(PAGE)
}

/// The types to watch: one version of each, every type that can be listed
/// and watched. `events.events.k8s.io` serves the core `events` again and is
/// left out.
pub(super) fn watchable(served: Vec<(ApiResource, ApiCapabilities)>) -> Vec<WatchedType> {
    served
        .into_iter()
        .filter(|(_, caps)| {
            caps.supports_operation(verbs::LIST) && caps.supports_operation(verbs::WATCH)
        })
        .filter(|(ar, _)| !(ar.group == "events.k8s.io" && ar.plural == "events"))
        .map(|(ar, caps)| WatchedType::new(ar, caps.scope == Scope::Namespaced))
        .collect()
}

/// One type's watch: forever, with backoff after each error.
pub(super) async fn watch_type<K: Observed>(
    shared: Arc<Shared>,
    metrics: Arc<WatchMetrics>,
    kind: Arc<WatchedType>,
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
    // Whether RBAC refused it: the next event says it is permitted now.
    let mut was_forbidden = false;
    while let Some(event) = stream.next().await {
        if failing && matches!(event, Ok(ref e) if !matches!(e, Event::Init)) {
            failing = false;
            shared.recovered(&kind);
            tracing::info!(resource = %escape(&kind.name), "watching again");
        }
        if was_forbidden && event.is_ok() {
            was_forbidden = false;
            if shared.permitted(&kind) {
                tracing::info!(resource = %escape(&kind.name), "permitted to list now: watching");
            }
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
            Err(e) if forbidden(&e) => {
                drop(turn.take());
                was_forbidden = true;
                tokio::time::sleep(refused(&shared, &kind)).await;
            }
            Err(e) => {
                failing = true;
                drop(turn.take());
                failed(&shared, &metrics, &kind, &e);
            }
        }
    }
}

/// RBAC does not let watch list this type (the chart's ClusterRole leaves
/// Secrets out unless watch.secrets): said once, not counted as failing,
/// and tried again quietly: soon the first time (a CRD's read rights often
/// arrive a moment after it, through an aggregated ClusterRole), then
/// rarely. Returns how long to wait.
fn refused(shared: &Shared, kind: &WatchedType) -> Duration {
    let first = shared.forbidden(kind);
    if first {
        tracing::info!(resource = %escape(&kind.name), "not permitted to list (RBAC): not watched; tried again every 5m");
        FORBIDDEN_FIRST_RETRY
    } else {
        FORBIDDEN_RETRY
    }
}

/// A list or watch of this type failed: counted, and said once until it
/// works again (the watcher retries with backoff).
fn failed(shared: &Shared, metrics: &WatchMetrics, kind: &WatchedType, e: &watcher::Error) {
    metrics
        .watch_errors
        .get_or_create(&ResourceLabels {
            resource: escape(&kind.name).into_owned(),
        })
        .inc();
    let why = escape(&chain(e)).into_owned();
    if shared.failed(kind, why.clone()) {
        tracing::warn!(resource = %escape(&kind.name), error = %why, "cannot watch; retrying with backoff");
    }
}

/// The API server refused the request as forbidden (403): RBAC, not a
/// passing failure.
fn forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.is_forbidden(),
        watcher::Error::WatchError(status) => status.is_forbidden(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    /// Runs one type's watch over `errors` (then the stream ends) and says
    /// whether the type is forbidden and failing, and how many watch errors
    /// were counted.
    async fn after(errors: Vec<watcher::Error>) -> (Option<(bool, bool)>, u64) {
        after_events(errors.into_iter().map(Err).collect()).await
    }

    async fn after_events(
        events: Vec<Result<Event<PartialObjectMeta<DynamicObject>>, watcher::Error>>,
    ) -> (Option<(bool, bool)>, u64) {
        let shared = Arc::new(Shared::new(Duration::from_secs(600), 10));
        let metrics = Arc::new(WatchMetrics::new(shared.clone()));
        let kind = super::super::fixtures::widgets();
        shared.watching(&kind);
        watch_type(
            shared.clone(),
            metrics.clone(),
            kind.clone(),
            futures::stream::iter(events),
            None,
            Arc::new(Semaphore::new(1)),
        )
        .await;
        let state = super::super::tracker::lock(&shared.state)
            .types
            .get(&kind.name)
            .map(|t| (t.forbidden, t.failing.is_some()));
        let errors = metrics
            .watch_errors
            .get_or_create(&ResourceLabels {
                resource: kind.name.clone(),
            })
            .get();
        (state, errors)
    }

    #[tokio::test]
    async fn a_type_rbac_forbids_is_left_alone_and_one_that_fails_is_retried() {
        let status = |code: u16, reason: &str| {
            kube::Error::Api(
                kube::core::Status::failure("no", reason)
                    .with_code(code)
                    .boxed(),
            )
        };
        let refused = || watcher::Error::InitialListFailed(status(403, "Forbidden"));
        // Forbidden: not failing, not waited for, no error counted, said
        // once however often it is refused.
        let (state, errors) = after(vec![refused(), refused()]).await;
        assert_eq!(state, Some((true, false)), "forbidden, not failing");
        assert_eq!(errors, 0);
        // Permitted later (an aggregated ClusterRole caught up): watched.
        let (state, _) =
            after_events(vec![Err(refused()), Ok(Event::Init), Ok(Event::InitDone)]).await;
        assert_eq!(state, Some((false, false)), "permitted now");
        // Any other failure: failing, and counted.
        let (state, errors) = after(vec![watcher::Error::InitialListFailed(status(
            500,
            "InternalError",
        ))])
        .await;
        assert_eq!(state, Some((false, true)), "failing");
        assert_eq!(errors, 1);
        assert!(forbidden(&watcher::Error::WatchError(
            kube::core::Status::failure("no", "Forbidden")
                .with_code(403)
                .boxed()
        )));
        assert!(!forbidden(&watcher::Error::NoResourceVersion));
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
        let crds = WatchedType::new(
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
        assert!(
            crds.rediscover && !WatchedType::new(ApiResource::erase::<Pod>(&()), true).rediscover
        );
    }
}
