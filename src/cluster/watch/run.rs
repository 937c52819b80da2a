//! The watch command: its flags, its admin port, its workers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::announce::Announcer;
use super::discovery::{Discoverer, FIRST_LISTS};
use super::metrics::WatchMetrics;
use super::tracker::Shared;
use crate::cluster::install::{PolicySource, cluster_policy};
use crate::cluster::session::{ClusterError, Connection, Session};
use crate::output::escape;
use crate::server::routes::{AdminPort, admin_port};
use crate::server::wait_for_signal;
use crate::trail::events::EventSink;

/// What `watch`'s `/metrics` serves before it has seen anything: every
/// family it exports, with its `# TYPE` line (the chart's dashboard is
/// checked against it).
pub fn exposition() -> String {
    let shared = Arc::new(Shared::new(Duration::from_secs(600), 1));
    WatchMetrics::new(shared).encode().unwrap_or_default()
}

/// The longest wait between two tries to reach the API server at start.
const MAX_START_PAUSE: Duration = Duration::from_secs(30);

/// `watch`'s settings, from the command line ([`crate::cli::WatchArgs`]).
#[derive(Debug)]
pub struct Watch {
    /// Deleting with finalizers for longer than this is stuck.
    pub stuck_after: Duration,
    /// `/metrics`, `/healthz`, `/readyz` (plain HTTP).
    pub admin_listen: SocketAddr,
    /// Write FinalizerStuck Events (off: metrics and logs only).
    pub events: bool,
    /// Most Events waiting to be written; past it they are dropped, counted.
    pub events_queue: usize,
    /// How often the API server's types are discovered again.
    pub discovery_interval: Duration,
    /// Most finalizer names with a label value of their own.
    pub max_finalizers: usize,
    /// How long a node must be NotReady before its pods' owners count as gone.
    pub not_ready_for: Duration,
    /// The cluster's name on every Event (`--cluster-name`).
    pub cluster_name: Option<String>,
    /// Explain under this policy instead of the cluster's.
    pub policy: Option<PathBuf>,
    pub connection: Connection,
}

/// `finalizer-guard watch`: runs until SIGTERM or Ctrl-C (exit 0). Exit 1
/// when it cannot start (the admin port is taken), 2 on usage errors, a bad
/// kubeconfig or policy, or a refusal by the API server. An API server that
/// cannot be reached, or answers 429 or 5xx, is tried again (1 s doubling to
/// 30 s), the admin port up and `/readyz` saying why it is not ready.
pub async fn run(config: Watch) -> Result<i32, ClusterError> {
    let Watch {
        stuck_after,
        admin_listen,
        events,
        events_queue,
        discovery_interval,
        max_finalizers,
        not_ready_for,
        cluster_name,
        policy: policy_file,
        connection,
    } = config;
    if discovery_interval < Duration::from_secs(1) {
        return Err(ClusterError::Usage(
            "--discovery-interval: at least 1s".into(),
        ));
    }
    // The admin port first: while the API server cannot be reached, the pod
    // is alive and unready (and says why), not restarted in a loop.
    let listener = match tokio::net::TcpListener::bind(admin_listen).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("error: cannot listen on {admin_listen}: {e}");
            return Ok(1);
        }
    };
    let admin_addr = listener.local_addr().unwrap_or(admin_listen);
    let shared = Arc::new(Shared::new(stuck_after, max_finalizers));
    let metrics = Arc::new(WatchMetrics::new(shared.clone()));
    let mut tasks = JoinSet::new();
    let admin = WatchAdmin {
        shared: shared.clone(),
        metrics: metrics.clone(),
    };
    serve_admin(&mut tasks, listener, admin_port(Arc::new(admin)));
    let (session, (initial, source)) = tokio::select! {
        started = connect(&connection, policy_file.as_deref(), &shared) => started?,
        () = wait_for_signal() => {
            tracing::info!("stopping before the API server was reached");
            return Ok(0);
        }
    };
    shared.starting(None);
    if let Some(note) = &source.note {
        tracing::warn!("{}", escape(note));
    }
    let policy = Arc::new(ArcSwap::from_pointee(initial));
    tracing::info!(
        %admin_addr,
        user = %escape(&session.identity.username),
        policy = %escape(&source.name),
        stuck_after = %crate::cluster::liveness::age(stuck_after),
        events,
        "watching every served type's metadata; /metrics on the admin port"
    );
    let workers = Workers {
        session,
        shared,
        metrics,
        policy,
        policy_file,
        discovery_interval,
        not_ready_for,
        events: events.then_some(events_queue),
        cluster_name,
    };
    let events = workers.spawn(&mut tasks);
    wait_for_signal().await;
    tracing::info!("stopping");
    tasks.shutdown().await;
    if let Some(events) = events {
        // The repeats counted and not yet written.
        events.flush().await;
    }
    Ok(0)
}

/// The admin port's server, one task of the set.
fn serve_admin(tasks: &mut JoinSet<()>, listener: tokio::net::TcpListener, router: Router) {
    tasks.spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "the admin port stopped");
        }
    });
}

/// Connects and reads the policy, trying again with backoff while the API
/// server is unreachable or answers 429/5xx (the pod says why on /readyz).
/// Once connected, a retry reads the policy again on the same session.
async fn connect(
    connection: &Connection,
    policy_file: Option<&std::path::Path>,
    shared: &Shared,
) -> Result<(Session, (crate::policy::Policy, PolicySource)), ClusterError> {
    let mut pause = Duration::from_secs(1);
    let mut connected = None;
    loop {
        let session = match connected.take() {
            Some(session) => Ok(session),
            None => connection.connect().await,
        };
        let e = match session {
            Ok(session) => match cluster_policy(&session.client, policy_file).await {
                Ok(found) => return Ok((session, found)),
                Err(e) => {
                    connected = Some(session);
                    e
                }
            },
            Err(e) => e,
        };
        if !e.transient() {
            return Err(e);
        }
        let why = escape(&crate::output::chain(&e)).into_owned();
        tracing::warn!(error = %why, retry_in = ?pause, "starting");
        shared.starting(Some(why));
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_START_PAUSE);
    }
}

/// The three workers once connected: discovery (one watch per served
/// type), the announcer (Events and logs for what is stuck) and, when
/// asked, the Event sink.
struct Workers {
    session: Session,
    shared: Arc<Shared>,
    metrics: Arc<WatchMetrics>,
    policy: Arc<ArcSwap<crate::policy::Policy>>,
    policy_file: Option<PathBuf>,
    discovery_interval: Duration,
    not_ready_for: Duration,
    /// The Event queue's length, when Events are written.
    events: Option<usize>,
    cluster_name: Option<String>,
}

impl Workers {
    /// Spawns discovery and the announcer; returns the Event sink to flush at the end.
    fn spawn(self, tasks: &mut JoinSet<()>) -> Option<Arc<EventSink>> {
        let discovery = Discoverer {
            client: self.session.client.clone(),
            shared: self.shared.clone(),
            metrics: self.metrics.clone(),
            policy: self.policy.clone(),
            policy_file: self.policy_file,
            interval: self.discovery_interval,
            first_lists: Arc::new(Semaphore::new(FIRST_LISTS)),
        };
        tasks.spawn(discovery.run());
        let events = self.events.map(|queue| {
            EventSink::start(
                self.session.client.clone(),
                queue,
                self.metrics.events.clone(),
                self.metrics.dropped_events.clone(),
            )
        });
        let announcer = Announcer {
            client: self.session.client.clone(),
            shared: self.shared,
            policy: self.policy,
            identity: self.session.identity.clone(),
            not_ready_for: self.not_ready_for,
            events: events.clone(),
            instance: std::env::var("HOSTNAME").unwrap_or_else(|_| "finalizer-guard-watch".into()),
            cluster_name: self.cluster_name,
        };
        tasks.spawn(announcer.run());
        events
    }
}

/// What `watch`'s admin port answers.
struct WatchAdmin {
    shared: Arc<Shared>,
    metrics: Arc<WatchMetrics>,
}

impl AdminPort for WatchAdmin {
    fn ready(&self) -> Result<(), String> {
        self.shared
            .ready()
            .map_err(|why| format!("not ready: {why}"))
    }

    fn metrics(&self) -> Option<String> {
        self.metrics.encode().ok()
    }
}
