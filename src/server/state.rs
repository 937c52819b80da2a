//! What every part of the server shares: the configuration `serve` starts
//! from, the limits, the state every request sees, and the stop signal.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::admission::audit::AuditLog;
use crate::policy::Policy;
use crate::trail::events::EventSink;
use crate::trail::metrics::Metrics;
use crate::trail::recording::Recorder;

/// Most large reviews decided at once. A review's working memory (its
/// finalizer lists, what it removed) can approach its body's size: with
/// every body the in-flight budget holds decided at once, 8 bodies of 8 MiB
/// of long finalizer names peaked at 141 MiB, past the chart's limit. The
/// others wait, their bodies already counted in the budget
/// (docs/performance.md, "Memory per review at the largest body").
pub(crate) const LARGE_REVIEWS: usize = 1;

/// Where Kubernetes Events are written.
#[derive(Debug, Clone)]
pub enum EventsTarget {
    Off,
    /// The cluster the webhook runs in (in-cluster configuration, or a kubeconfig).
    Cluster,
    /// An API server at this URL, without credentials (tests).
    ApiServer(http::Uri),
}

#[derive(Debug, Clone)]
pub struct RecordConfig {
    pub dir: PathBuf,
    pub max_files: usize,
    pub max_bytes: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    /// How long a client may take to finish the TLS handshake.
    pub handshake_timeout: Duration,
    /// How long a client may take to send a request's headers: after the
    /// handshake, its first request's; on a kept-alive connection, each next
    /// one's. A connection with no request in flight (HTTP/1.1 or HTTP/2)
    /// is closed after it.
    pub header_timeout: Duration,
    /// How long a client may take to send a request's body.
    pub body_timeout: Duration,
    /// How long a write to a client may make no progress (a client that
    /// does not read its answer) before its connection is closed.
    pub write_timeout: Duration,
    /// Most webhook connections served at once; more wait to be accepted.
    pub max_connections: usize,
    /// Most request body bytes held at once, across all connections: a
    /// request whose body does not fit waits (within the body timeout) for
    /// others to finish. At least `max_body_bytes`.
    pub max_inflight_body_bytes: usize,
}

/// State shared by every request.
pub struct AppState {
    pub policy: ArcSwap<Policy>,
    pub metrics: Metrics,
    pub ready: AtomicBool,
    pub limits: Limits,
    pub recorder: Option<Recorder>,
    pub events: Option<Arc<EventSink>>,
    /// Audit lines on standard output, written from their own thread.
    pub audit: AuditLog,
    /// `limits.max_inflight_body_bytes`, in KiB permits.
    pub body_budget: BodyBudget,
    /// Reviews of large bodies decided at once ([`super::routes::OFFLOAD_BYTES`]):
    /// their working memory, on top of the bodies, stays that of a few.
    pub large_reviews: Arc<Semaphore>,
    /// This replica's name, for Events' reportingInstance.
    pub instance: String,
    /// The serving certificate, whose key seals two-person approvals;
    /// `None` (no approval can be sealed) where routes are served without TLS.
    pub certificates: Option<Arc<super::tls::CertStore>>,
    /// Whether a review whose caller presented no verified client
    /// certificate may cause an Event. Off by default: an Event is written
    /// in the namespace the review names, about the object it names, and
    /// people take it for what happened; a review anyone could have posted
    /// proves nothing. On only where the operator says that the webhook
    /// port is reachable from kube-apiserver alone.
    pub events_unauthenticated: bool,
    /// The name of the cluster this webhook serves (`--cluster-name`), in
    /// every audit record: one log pipeline collects many clusters' records.
    pub cluster_name: Option<String>,
}

impl AppState {
    /// Unready, with no recorder and no Events: what the routes need and no more.
    pub fn new(policy: Policy, limits: Limits, metrics: Metrics, audit: AuditLog) -> AppState {
        AppState {
            policy: ArcSwap::from_pointee(policy),
            metrics,
            ready: AtomicBool::new(false),
            limits,
            recorder: None,
            events: None,
            body_budget: BodyBudget::new(kib(limits.max_inflight_body_bytes)),
            large_reviews: Arc::new(Semaphore::new(LARGE_REVIEWS)),
            audit,
            instance: std::env::var("HOSTNAME").unwrap_or_else(|_| "finalizer-guard".into()),
            certificates: None,
            events_unauthenticated: false,
            cluster_name: None,
        }
    }
}

/// The request bodies' memory budget, in KiB permits, paid as bytes arrive
/// (a client that announces 8 MiB and sends nothing holds nothing).
///
/// A body that needs more than is free waits in line, holding what it has.
/// When every permit held is held by bodies waiting so, none of them can
/// ever finish (each waits for room another holds, until the body timeout
/// refuses them all): the body whose wait would close that circle gives up
/// what it holds at once instead, and the others go on.
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    /// Permits held by bodies, and of those, by bodies waiting for more.
    held: Arc<AtomicUsize>,
    held_waiting: AtomicUsize,
}

/// Why a body got no more of the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetRefusal {
    /// Not within the deadline.
    Timeout,
    /// Its wait would have closed the circle: every permit held, held by
    /// bodies waiting for more.
    Deadlock,
}

/// A body's share of the budget, given back when dropped.
pub struct BudgetPermit {
    permit: OwnedSemaphorePermit,
    held: Arc<AtomicUsize>,
}

impl BudgetPermit {
    pub fn num_permits(&self) -> usize {
        self.permit.num_permits()
    }
}

impl Drop for BudgetPermit {
    fn drop(&mut self) {
        self.held
            .fetch_sub(self.permit.num_permits(), Ordering::SeqCst);
    }
}

impl BodyBudget {
    pub fn new(total: usize) -> BodyBudget {
        BodyBudget {
            permits: Arc::new(Semaphore::new(total)),
            held: Arc::new(AtomicUsize::new(0)),
            held_waiting: AtomicUsize::new(0),
        }
    }

    /// Permits free now.
    pub fn available_permits(&self) -> usize {
        self.permits.available_permits()
    }

    /// Grows `held` (or a new, empty share) to `kib` permits, waiting for
    /// room until `deadline`. `kib` is at most the whole budget (a start-up
    /// check keeps the largest accepted body within it).
    pub async fn grow(
        &self,
        held: Option<BudgetPermit>,
        kib: usize,
        deadline: tokio::time::Instant,
    ) -> Result<BudgetPermit, BudgetRefusal> {
        let have = held.as_ref().map_or(0, BudgetPermit::num_permits);
        let more = u32::try_from(kib.saturating_sub(have)).unwrap_or(u32::MAX);
        let extra = match self.permits.clone().try_acquire_many_owned(more) {
            Ok(extra) => extra,
            Err(tokio::sync::TryAcquireError::Closed) => return Err(BudgetRefusal::Timeout),
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                let waiting = Waiting::join(&self.held_waiting, have);
                if have > 0 && waiting.sum >= self.held.load(Ordering::SeqCst) {
                    // Dropping `held` gives its permits back.
                    return Err(BudgetRefusal::Deadlock);
                }
                let acquired = tokio::time::timeout_at(
                    deadline,
                    self.permits.clone().acquire_many_owned(more),
                )
                .await;
                drop(waiting);
                match acquired {
                    Ok(Ok(extra)) => extra,
                    Ok(Err(_)) | Err(_) => return Err(BudgetRefusal::Timeout),
                }
            }
        };
        self.held.fetch_add(extra.num_permits(), Ordering::SeqCst);
        Ok(match held {
            Some(mut held) => {
                held.permit.merge(extra);
                held
            }
            None => BudgetPermit {
                permit: extra,
                held: self.held.clone(),
            },
        })
    }
}

/// A body's permits counted among those held waiting, while it waits.
struct Waiting<'a> {
    count: &'a AtomicUsize,
    have: usize,
    /// Every waiting body's permits, this one's included, when it joined.
    sum: usize,
}

impl<'a> Waiting<'a> {
    fn join(count: &'a AtomicUsize, have: usize) -> Waiting<'a> {
        let sum = count.fetch_add(have, Ordering::SeqCst) + have;
        Waiting { count, have, sum }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(self.have, Ordering::SeqCst);
    }
}

/// Resolves once the server is told to stop.
pub(crate) async fn stopped_signal(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

/// Bytes as whole KiB, rounded up: the unit of the body budget's permits.
pub(crate) fn kib(bytes: usize) -> usize {
    bytes.div_ceil(1024)
}
