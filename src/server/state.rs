//! What every part of the server shares: the configuration `serve` starts
//! from, the limits, the state every request sees, and the stop signal.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::{Semaphore, watch};

use crate::policy::Policy;
use crate::trail::audit_log::AuditLog;
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

/// Most bytes of body frames read and held, across all requests, while
/// their bodies wait for room in the body budget. A frame is read before
/// its size is known, so it cannot wait inside the budget; past this, a
/// body that finds no room is refused at once (503) rather than wait with
/// its frame in hand. 3,584 HTTP/2 streams each waiting with a 16 KiB frame
/// held 300 MiB.
pub const BODY_WAITING_BYTES: usize = 8 * 1024 * 1024;

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
    /// handshake, its first request's (a connection that never begins one
    /// is closed after it); on a kept-alive HTTP/1.1 connection, each next
    /// one's, from its first byte.
    pub header_timeout: Duration,
    /// How long a connection that has served a request stays open with
    /// none in flight (HTTP/1.1 or HTTP/2). Longer than its clients' own
    /// idle timeout (kube-apiserver's is 90 s), so that the client, not the
    /// server, closes an idle connection: one the server closes as the
    /// client writes its next request to it fails that request, and a POST
    /// is not retried.
    pub idle_timeout: Duration,
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
    /// Most bytes of body frames read and held while their bodies wait for
    /// room in that budget ([`BODY_WAITING_BYTES`] as served).
    pub max_waiting_frame_bytes: usize,
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
    pub body_budget: Arc<Semaphore>,
    /// Reviews of large bodies decided at once (`super::routes::OFFLOAD_BYTES`):
    /// their working memory, on top of the bodies, stays that of a few.
    pub large_reviews: Arc<Semaphore>,
    /// The frames read and held while their bodies wait for room in the
    /// body budget, in KiB permits (`limits.max_waiting_frame_bytes`).
    pub body_waiting: Arc<Semaphore>,
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
    /// Puts the in-flight body budget, and what of it is held now, in the
    /// metrics (the bytes held are counted in KiB, as the budget is paid).
    pub fn body_budget_on_record(&self) {
        let budget = self.limits.max_inflight_body_bytes;
        let held = kib(budget).saturating_sub(self.body_budget.available_permits());
        let held = held.saturating_mul(1024).min(budget);
        let gauge = |bytes: usize| i64::try_from(bytes).unwrap_or(i64::MAX);
        self.metrics.body_bytes_in_flight.set(gauge(held));
        self.metrics.body_budget_bytes.set(gauge(budget));
    }

    /// Unready, with no recorder and no Events: what the routes need and no more.
    pub fn new(policy: Policy, limits: Limits, metrics: Metrics, audit: AuditLog) -> AppState {
        AppState {
            policy: ArcSwap::from_pointee(policy),
            metrics,
            ready: AtomicBool::new(false),
            limits,
            recorder: None,
            events: None,
            body_budget: Arc::new(Semaphore::new(kib(limits.max_inflight_body_bytes))),
            large_reviews: Arc::new(Semaphore::new(LARGE_REVIEWS)),
            body_waiting: Arc::new(Semaphore::new(kib(limits.max_waiting_frame_bytes))),
            audit,
            instance: std::env::var("HOSTNAME").unwrap_or_else(|_| "finalizer-guard".into()),
            certificates: None,
            events_unauthenticated: false,
            cluster_name: None,
        }
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
