//! Starting and running the server: its ports, TLS, the policy, the connections it serves.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use super::reload::{CertificateFiles, ClientCaFile, PolicyFile, Reloadable};
use crate::admission::audit::AuditLog;
use crate::error::{Error, Result};
use crate::offline::doctor;
use crate::offline::doctor::Blocked;
use crate::policy::seal::SealKey;
use crate::policy::{self, Mode, Policy};
use crate::server::certs;
use crate::trail::events::EventSink;
use crate::trail::metrics::Metrics;
use crate::trail::recording::Recorder;

/// Most connections the admin port serves at once: probes and scrapes need a
/// handful, and a flood there must not take the file descriptors the webhook
/// port needs.
const ADMIN_MAX_CONNECTIONS: usize = 128;

/// hyper's HTTP/1.1 read buffer at most: a request's headers fit with room
/// to spare; bodies stream through it.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// HTTP/2 flow-control windows, per stream and per connection: the most
/// body data a peer may send that the handler has not read yet, and so
/// that the body budget does not count.
pub const H2_WINDOW_BYTES: u32 = 64 * 1024;

/// Most bytes of header fields in an HTTP/2 request (an admission review's
/// are a few hundred).
const H2_MAX_HEADER_LIST_BYTES: u32 = 64 * 1024;

/// Most streams open at once on one HTTP/2 connection. An answer a peer
/// does not read (its window kept at 0) stays in memory with its stream,
/// which stays open: this bounds what one connection can make the server
/// hold to this many answers. kube-apiserver calls webhooks over
/// HTTP/1.1, one request per connection at a time; an HTTP/2 client with
/// more to send waits for a stream.
const H2_MAX_STREAMS: u32 = 8;

/// Most answer bytes buffered per HTTP/2 stream ahead of the peer's window.
const H2_SEND_BUFFER_BYTES: usize = 64 * 1024;

/// At the connection cap, how often a new connection looks again for an
/// idle one to take the place of, while every connection is busy.
const EVICT_RETRY: Duration = Duration::from_millis(50);

/// How long a connection asked to close while idle may take to close (send
/// its GOAWAY, flush) before it is dropped; one where a request raced in
/// has the close timeout to answer it.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How long a drain waits for queued audit records to be written out.
const AUDIT_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a drain waits for the Event repeats counted since their last
/// write to be written.
const EVENTS_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Everything `serve` needs, already resolved from flags and environment.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// `None`: the embedded default policy.
    pub policy: Option<PathBuf>,
    /// `None`: dev mode, a generated certificate.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// CA bundle that client certificates must chain to; `None`: no client
    /// certificate is asked for.
    pub client_ca: Option<PathBuf>,
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub limits: Limits,
    /// How often mounted policy and certificate files are re-read.
    pub reload_interval: Duration,
    /// After SIGTERM: how long to keep serving while unready, so endpoints catch up.
    pub shutdown_delay: Duration,
    /// After that: how long in-flight requests may take to finish.
    pub shutdown_timeout: Duration,
    /// Dev mode: where the generated CA is written.
    pub dev_cert_dir: PathBuf,
    /// Where judged removals are recorded for `test`, if anywhere.
    pub record: Option<RecordConfig>,
    /// Where Events for denials and overrides go.
    pub events: EventsTarget,
    /// How many Events may wait to be sent; more are dropped.
    pub events_queue: usize,
    /// Write Events for reviews that came without a verified client
    /// certificate too (see [`AppState::events_unauthenticated`]).
    pub events_unauthenticated: bool,
    /// The cluster's name in every audit record, when given.
    pub cluster_name: Option<String>,
    /// Self-managed certificates (`--certificates-secret`): in place of `tls`.
    pub self_managed: Option<super::self_managed::Settings>,
}

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
    pub body_budget: Arc<Semaphore>,
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
            body_budget: Arc::new(Semaphore::new(kib(limits.max_inflight_body_bytes))),
            large_reviews: Arc::new(Semaphore::new(super::routes::LARGE_REVIEWS)),
            audit,
            instance: std::env::var("HOSTNAME").unwrap_or_else(|_| "finalizer-guard".into()),
            certificates: None,
            events_unauthenticated: false,
            cluster_name: None,
        }
    }
}

/// A running server.
pub struct Handle {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub state: Arc<AppState>,
    /// Dev mode: the generated CA's PEM file.
    pub dev_ca: Option<PathBuf>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    shutdown_delay: Duration,
}

impl Handle {
    /// Starts the drain: unready at once, stop accepting after the delay,
    /// let in-flight requests finish, then stop.
    pub async fn shutdown(self) {
        self.state.ready.store(false, Ordering::Relaxed);
        tracing::info!(delay = ?self.shutdown_delay, "shutting down: unready, still serving during the delay");
        tokio::time::sleep(self.shutdown_delay).await;
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        // Every audit record out before exit, unless standard output is stuck.
        if tokio::time::timeout(AUDIT_FLUSH_TIMEOUT, self.state.audit.flush())
            .await
            .is_err()
        {
            tracing::error!(timeout = ?AUDIT_FLUSH_TIMEOUT, "audit records not written out before exit");
        }
        if let Some(events) = &self.state.events
            && tokio::time::timeout(EVENTS_FLUSH_TIMEOUT, events.flush())
                .await
                .is_err()
        {
            tracing::warn!(timeout = ?EVENTS_FLUSH_TIMEOUT, "Event repeats not written before exit");
        }
        tracing::info!("stopped");
    }
}

/// Loads the policy, binds both ports and starts serving.
pub async fn start(config: ServeConfig) -> Result<Handle> {
    let ServeConfig {
        policy,
        tls,
        client_ca,
        listen,
        admin_listen,
        limits,
        reload_interval,
        shutdown_delay,
        shutdown_timeout,
        dev_cert_dir,
        record,
        events,
        events_queue,
        events_unauthenticated,
        cluster_name,
        self_managed,
    } = config;
    if limits.max_inflight_body_bytes < limits.max_body_bytes {
        return Err(Error::BodyBudget {
            inflight: limits.max_inflight_body_bytes,
            max_body: limits.max_body_bytes,
        });
    }
    let (initial_policy, policy_bytes) = load_policy(policy.as_deref())?;
    let metrics = Metrics::new();
    match policy {
        Some(_) => metrics.policy_in_service(&initial_policy, &policy_bytes, "file"),
        None => metrics.policy_in_service(
            &initial_policy,
            policy::config::DEFAULT_POLICY_YAML.as_bytes(),
            "embedded",
        ),
    }
    let recorder = record
        .map(|record| start_recorder(record, &metrics))
        .transpose()?;
    let authenticated = client_ca.is_some();
    let (manager, initial) = super::self_managed::start(self_managed).await?.unzip();
    let serving = serving_tls(tls.map(Ok).or(initial.map(Err)), client_ca, &dev_cert_dir)?;
    if let Some(expiry) = serving.certificates.expiry() {
        metrics.certificate_expiry.set(expiry);
    }
    let events = start_events(&events, events_queue, &metrics).await;
    let audit =
        AuditLog::stdout(metrics.dropped_in("audit")).map_err(|e| Error::io("audit thread", e))?;
    let mut state = AppState::new(initial_policy, limits, metrics, audit);
    state.recorder = recorder;
    state.events = events;
    state.certificates = Some(serving.certificates.clone());
    state.events_unauthenticated = events_unauthenticated;
    state.cluster_name = cluster_name;
    log_authentication(authenticated, &state);
    let state = Arc::new(state);

    let (listener, addr) = bind(listen).await?;
    let (admin_listener, admin_addr) = bind(admin_listen).await?;
    let (stop, stopped) = watch::channel(false);
    let tasks = serve_ports(
        (listener, serving.acceptor.clone()),
        admin_listener,
        &state,
        limits,
        shutdown_timeout,
        &stopped,
    );
    let mut watched = serving.reloadables();
    if let Some(path) = policy {
        watched.push((Arc::new(PolicyFile(path)), policy_bytes));
    }
    if let Some(manager) = manager {
        let store = serving.certificates.clone();
        tokio::spawn(manager.run(store, state.clone(), stopped.clone()));
    }
    for (source, last) in watched {
        let (state, stopped) = (state.clone(), stopped.clone());
        tokio::spawn(super::reload::watch(
            source,
            last,
            state,
            reload_interval,
            stopped,
        ));
    }

    state.ready.store(true, Ordering::Relaxed);
    tracing::info!(%addr, %admin_addr, "serving: POST /validate over TLS; /metrics on the admin port");
    Ok(Handle {
        addr,
        admin_addr,
        state,
        dev_ca: serving.dev_ca,
        stop,
        tasks,
        shutdown_delay,
    })
}

/// Serves the webhook port (TLS) and the admin port, each in its own task.
fn serve_ports(
    (webhook, acceptor): (TcpListener, TlsAcceptor),
    admin: TcpListener,
    state: &Arc<AppState>,
    limits: Limits,
    drain: Duration,
    stopped: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let admin_limits = Limits {
        max_connections: ADMIN_MAX_CONNECTIONS,
        ..limits
    };
    vec![
        tokio::spawn(serve(
            webhook,
            Some(acceptor),
            super::routes::webhook(state.clone()),
            limits,
            drain,
            stopped.clone(),
        )),
        tokio::spawn(serve(
            admin,
            None,
            super::routes::admin(state.clone()),
            admin_limits,
            drain,
            stopped.clone(),
        )),
    ]
}

/// The policy to start with (`--policy`, or the embedded default) and the
/// file's bytes, which reloads compare with. A policy that would block a
/// built-in controller is refused in enforce mode.
fn load_policy(path: Option<&Path>) -> Result<(Policy, Vec<u8>)> {
    let (policy, bytes) = match path {
        Some(path) => {
            let bytes = crate::error::read(path)?;
            let parsed = policy::from_bytes(&bytes).map_err(|e| Error::policy(path, e))?;
            (parsed, bytes)
        }
        None => (Policy::embedded_default(), Vec::new()),
    };
    log_policy(&policy, path.map(|p| p.display().to_string()));
    doctor_allows(&policy).map_err(Error::BlocksBuiltinControllers)?;
    Ok((policy, bytes))
}

fn start_recorder(record: RecordConfig, metrics: &Metrics) -> Result<Recorder> {
    let RecordConfig {
        dir,
        max_files,
        max_bytes,
    } = record;
    tracing::info!(dir = %dir.display(), max_files, max_bytes, "recording judged finalizer removals");
    Recorder::start(dir, max_files, max_bytes, metrics.dropped_in("recorder"))
}

/// A source of reloads, with the content in service.
type Watched = (Arc<dyn Reloadable>, Vec<u8>);

/// The webhook port's TLS: the acceptor, and what reloads swap and compare with.
struct ServingTls {
    acceptor: TlsAcceptor,
    certificates: Arc<super::tls::CertStore>,
    /// The certificate and key files, and their content; `None` in dev mode, which never reloads.
    files: Option<((PathBuf, PathBuf), Vec<u8>)>,
    /// With `--client-ca`: the file, its store and its content.
    client_ca: Option<(PathBuf, Arc<super::tls::ClientCaStore>, Vec<u8>)>,
    /// Dev mode: the generated CA's PEM file.
    dev_ca: Option<PathBuf>,
}

impl ServingTls {
    /// The certificate files and the client CA, when they come from files.
    fn reloadables(&self) -> Vec<Watched> {
        let mut watched: Vec<Watched> = Vec::new();
        if let Some(((cert, key), fingerprint)) = &self.files {
            let (cert, key, store) = (cert.clone(), key.clone(), self.certificates.clone());
            let files = CertificateFiles { cert, key, store };
            watched.push((Arc::new(files), fingerprint.clone()));
        }
        if let Some((path, store, pem)) = &self.client_ca {
            let (path, store) = (path.clone(), store.clone());
            watched.push((Arc::new(ClientCaFile { path, store }), pem.clone()));
        }
        watched
    }
}

fn serving_tls(
    files: Option<std::result::Result<(PathBuf, PathBuf), super::self_managed::Initial>>,
    client_ca: Option<PathBuf>,
    dev_cert_dir: &Path,
) -> Result<ServingTls> {
    let (certified, seal, files, dev_ca) = match files {
        Some(Err((certified, seal))) => (certified, seal, None, None),
        Some(Ok((cert, key))) => {
            let (certified, seal, fingerprint) = super::tls::load_files(&cert, &key)?;
            tracing::info!(cert = %cert.display(), key = %key.display(), "serving certificate loaded");
            (certified, seal, Some(((cert, key), fingerprint)), None)
        }
        None => {
            let (certified, seal, ca_path) = dev_certificate(dev_cert_dir)?;
            (certified, seal, None, Some(ca_path))
        }
    };
    let certificates = super::tls::CertStore::new(certified, seal);
    let client_ca = match client_ca {
        Some(path) => {
            let (verifier, pem) = super::tls::load_client_ca(&path)?;
            tracing::info!(client_ca = %path.display(), "client certificates required on the webhook port");
            Some((path, super::tls::ClientCaStore::new(verifier), pem))
        }
        None => None,
    };
    let config = super::tls::server_config(
        certificates.clone(),
        client_ca.as_ref().map(|(_, store, _)| store.clone()),
    )?;
    Ok(ServingTls {
        acceptor: TlsAcceptor::from(Arc::new(config)),
        certificates,
        files,
        client_ca,
        dev_ca,
    })
}

/// Events, unless off or no Kubernetes API is configured (then logged, and off).
async fn start_events(
    target: &EventsTarget,
    queue: usize,
    metrics: &Metrics,
) -> Option<Arc<EventSink>> {
    let client = match target {
        EventsTarget::Off => return None,
        EventsTarget::Cluster => kube::Client::try_default().await,
        EventsTarget::ApiServer(url) => kube::Client::try_from(kube::Config::new(url.clone())),
    };
    match client {
        Ok(client) => Some(EventSink::start(
            client,
            queue,
            metrics.events.clone(),
            metrics.dropped_in("events"),
        )),
        Err(e) => {
            tracing::warn!(error = %e, "Events off: no Kubernetes API configuration");
            None
        }
    }
}

/// Binds `addr`; returns the listener and the address it got (for port 0).
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr)> {
    let bound = |source| Error::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bound)?;
    let local = listener.local_addr().map_err(bound)?;
    Ok((listener, local))
}

/// Serves until SIGTERM or Ctrl-C, then drains. A second signal exits at once.
pub async fn run(config: ServeConfig) -> Result<()> {
    let handle = start(config).await?;
    let state = handle.state.clone();
    wait_for_signal().await;
    let drain = handle.shutdown();
    tokio::select! {
        () = drain => {}
        () = wait_for_signal() => {
            tracing::warn!("second signal: exiting without draining");
            // Still write out the audit records already queued, briefly.
            let _ = tokio::time::timeout(Duration::from_secs(1), state.audit.flush()).await;
        }
    }
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// Resolves once the server is told to stop.
pub(crate) async fn stopped_signal(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

/// Says, once, what the evidence of unauthenticated reviews is worth.
fn log_authentication(client_ca: bool, state: &AppState) {
    if client_ca {
        return;
    }
    let events = match (&state.events, state.events_unauthenticated) {
        (None, _) => "",
        (Some(_), false) => {
            "; no Events are written for them (--client-ca, or --events-unauthenticated=true where only kube-apiserver can reach the port)"
        }
        (Some(_), true) => "; Events are written for them (--events-unauthenticated=true)",
    };
    tracing::warn!(
        "no --client-ca: the webhook port cannot tell kube-apiserver from anyone else who reaches it; \
         reviews are answered as usual, audit records and recordings say \"authenticated\": false{events}"
    );
}

fn log_policy(policy: &Policy, source: Option<String>) {
    let source = source.unwrap_or_else(|| "embedded default".into());
    tracing::info!(
        policy = %source,
        mode = policy.mode.as_str(),
        rules = policy.rules.len(),
        builtin_controllers = policy.builtin_controllers,
        override_annotation = %policy.override_settings.annotation,
        "policy loaded"
    );
    if policy.mode == Mode::Warn {
        tracing::warn!(
            "warn mode: unauthorized finalizer removals are ALLOWED and audited as would-deny"
        );
    }
}

/// Runs `doctor` on a policy ([`doctor::servable`], which `policy validate`
/// runs too). In enforce mode a policy that would block a built-in
/// controller is refused; in warn mode it is served, loudly.
pub(crate) fn doctor_allows(policy: &Policy) -> std::result::Result<(), Vec<Blocked>> {
    for b in doctor::servable(policy)? {
        tracing::error!(
            controller = b.controller,
            username = b.username,
            finalizer = b.finalizer,
            "policy would block a built-in controller: enforcing it would break the cluster"
        );
    }
    Ok(())
}

/// Dev mode: a CA and a serving certificate for localhost and the default
/// Service names, generated at start; the CA is written where clients can find it.
fn dev_certificate(dir: &Path) -> Result<(rustls::sign::CertifiedKey, SealKey, PathBuf)> {
    let ca = certs::Authority::generate(30)?;
    let mut names = vec!["localhost".to_string()];
    names.extend(certs::service_names("finalizer-guard", "finalizer-guard"));
    let ips = [
        "127.0.0.1".parse().expect("IPv4 loopback"),
        "::1".parse().expect("IPv6 loopback"),
    ];
    let bundle = ca.issue(&names, &ips, 30)?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let ca_path = dir.join("ca.crt");
    std::fs::write(&ca_path, &bundle.ca_cert_pem).map_err(|e| Error::io(&ca_path, e))?;
    tracing::warn!(
        ca = %ca_path.display(),
        "dev mode: serving a generated certificate (localhost, 127.0.0.1, finalizer-guard.finalizer-guard.svc); \
         pass --tls-cert and --tls-key in a cluster"
    );
    let certified =
        super::tls::certified_key(bundle.cert_pem.as_bytes(), bundle.key_pem.as_bytes())?;
    let seal = super::tls::seal_key(bundle.key_pem.as_bytes())?;
    Ok((certified, seal, ca_path))
}

/// Accepts connections (TLS ones when `tls` is set) and serves HTTP/1.1 and
/// HTTP/2 on them until stopped, then lets open connections finish (up to
/// `drain`) and closes those left. At most `limits.max_connections` are open
/// at once. A new connection that finds every slot taken makes the one idle
/// the longest close (see [`Registry`]); when every one has a request in
/// flight, it waits for a slot, and any further ones wait in the listen
/// backlog, not in memory.
async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    limits: Limits,
    drain: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // What a connection holds that the body budget does not count is
    // bounded here: hyper's read buffer (HTTP/1.1; bodies stream through
    // it), and the data an HTTP/2 peer may send before the handler reads it
    // (the flow-control windows, fixed: an adaptive window grows).
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(READ_BUFFER_BYTES)
        .keep_alive(true);
    // Pings find a peer gone silent while a stream is open; an idle
    // connection, with none open, is closed by `Connection::serve`.
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_send_buf_size(H2_SEND_BUFFER_BYTES)
        .adaptive_window(false)
        .initial_stream_window_size(H2_WINDOW_BYTES)
        .initial_connection_window_size(H2_WINDOW_BYTES)
        .max_header_list_size(H2_MAX_HEADER_LIST_BYTES)
        .keep_alive_interval(Some(limits.header_timeout))
        .keep_alive_timeout(limits.write_timeout);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let registry = Registry::default();
    let mut connections = JoinSet::new();
    loop {
        // Reap the finished, so the set holds only open connections.
        while connections.try_join_next().is_some() {}
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped_signal(&mut stopped) => break,
        };
        // At the cap, the connection idle the longest makes room: idle
        // clients cannot keep the others out. One with a request in flight
        // is never asked; when all are busy, this one waits for a slot.
        let slot = loop {
            if let Ok(slot) = slots.clone().try_acquire_owned() {
                break Some(slot);
            }
            registry.evict_longest_idle();
            tokio::select! {
                slot = slots.clone().acquire_owned() => break slot.ok(),
                () = tokio::time::sleep(EVICT_RETRY) => {}
                () = stopped_signal(&mut stopped) => break None,
            }
        };
        let Some(slot) = slot else { break };
        let activity = registry.register(limits.max_connections);
        let _ = tcp.set_nodelay(true);
        let connection = Connection {
            builder: builder.clone(),
            router: router.clone(),
            idle_timeout: limits.header_timeout,
            // Once asked to close, an idle connection has this long to
            // finish what raced in.
            close_timeout: limits.header_timeout.max(limits.body_timeout),
            drain: (
                limits
                    .max_body_bytes
                    .saturating_mul(super::routes::DRAIN_FACTOR),
                limits.body_timeout,
            ),
            peer,
            client: super::tls::ClientCert::Unverified,
            stopped: stopped.clone(),
            activity: activity.clone(),
        };
        let tcp = super::stall::WriteTimeout::new(tcp, limits.write_timeout);
        let tls = tls.clone();
        let handshake_timeout = limits.handshake_timeout;
        let mut stopping = stopped.clone();
        connections.spawn(async move {
            let _slot = slot;
            let Some(acceptor) = tls else {
                return connection.serve(tcp).await;
            };
            let handshake = tokio::time::timeout(handshake_timeout, acceptor.accept(tcp));
            tokio::select! {
                shaken = handshake => match shaken {
                    Ok(Ok(tls)) => {
                        let client = super::tls::ClientCert::of(&tls);
                        connection.client(client).serve(tls).await
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                },
                () = stopped_signal(&mut stopping) => {}
                () = activity.close.notified() => {
                    tracing::debug!(%peer, "connection cap reached; dropping a connection still in its TLS handshake");
                }
            }
        });
    }
    drop(listener);
    // Each connection saw the stop and closes once its requests are answered.
    let closed = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(drain, closed).await.is_err() {
        tracing::warn!(
            ?drain,
            open = connections.len(),
            "connections still open after the drain timeout; closing them"
        );
        connections.shutdown().await;
    }
}

/// One accepted connection, ready to be served.
struct Connection {
    builder: auto::Builder<TokioExecutor>,
    router: Router,
    /// How long a connection with no request in flight stays open: before
    /// its first request, and between requests, whatever the protocol.
    idle_timeout: Duration,
    /// How long a connection asked to close while idle may take to answer
    /// a request that raced in.
    close_timeout: Duration,
    /// How much of a body nobody read is still read, and for how long.
    drain: (usize, Duration),
    peer: SocketAddr,
    /// Whether the TLS client presented a verified certificate; every
    /// request on the connection carries it.
    client: super::tls::ClientCert,
    /// The server stops: close once the requests in flight are answered.
    stopped: watch::Receiver<bool>,
    /// What its requests are doing, as the port's [`Registry`] sees it.
    activity: Arc<Activity>,
}

/// What a connection's requests are doing: whether one has begun, how many
/// are in flight, and since when none is.
struct Activity {
    started: AtomicBool,
    in_flight: AtomicUsize,
    since: Mutex<tokio::time::Instant>,
    /// Set once the port asked the connection to make room.
    evicted: AtomicBool,
    /// Close now, to make room for a new connection.
    close: Notify,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            started: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            since: Mutex::new(tokio::time::Instant::now()),
            evicted: AtomicBool::new(false),
            close: Notify::new(),
        }
    }

    /// A request begins; it ends when the guard is dropped.
    fn begin(self: &Arc<Self>) -> Busy {
        self.started.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// When the connection went idle; `None` while a request is in flight.
    fn idle_since(&self) -> Option<tokio::time::Instant> {
        let since = *self.since.lock().unwrap_or_else(PoisonError::into_inner);
        (self.in_flight.load(Ordering::Acquire) == 0).then_some(since)
    }
}

/// The open connections of a port, for the one to ask to close when a new
/// connection finds every slot taken.
#[derive(Default)]
struct Registry(Mutex<Vec<Weak<Activity>>>);

impl Registry {
    /// A new connection's activity, tracked while the connection lives.
    fn register(&self, max_connections: usize) -> Arc<Activity> {
        let activity = Arc::new(Activity::new());
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if open.len() >= max_connections.saturating_mul(2) {
            open.retain(|weak| weak.strong_count() > 0);
        }
        open.push(Arc::downgrade(&activity));
        activity
    }

    /// Asks the connection idle the longest (no request in flight; one that
    /// never began a request counts from its accept) to close, unless one
    /// asked before is still idle and closing. A connection with a request
    /// in flight is never asked.
    fn evict_longest_idle(&self) {
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|weak| weak.strong_count() > 0);
        let live = open.iter().filter_map(Weak::upgrade);
        let mut longest: Option<(tokio::time::Instant, Arc<Activity>)> = None;
        for activity in live {
            let Some(since) = activity.idle_since() else {
                continue;
            };
            if activity.evicted.load(Ordering::Relaxed) {
                // Still closing: the slot it frees is on its way.
                return;
            }
            if longest.as_ref().is_none_or(|(oldest, _)| since < *oldest) {
                longest = Some((since, activity));
            }
        }
        if let Some((_, activity)) = longest {
            activity.evicted.store(true, Ordering::Relaxed);
            activity.close.notify_one();
        }
    }
}

/// A request in flight on its connection.
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.since.lock().unwrap_or_else(PoisonError::into_inner) = tokio::time::Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Connection {
    fn client(self, client: super::tls::ClientCert) -> Connection {
        Connection { client, ..self }
    }

    /// Serves HTTP on `io` until the client closes it, it stays idle for
    /// the idle timeout, or the server stops.
    ///
    /// hyper's header timeout starts only once it knows the protocol, which
    /// takes the client's first bytes, and covers only HTTP/1.1; HTTP/2 has
    /// no idle timeout at all. So a connection with no request in flight
    /// for the idle timeout is closed here: at once when it never began a
    /// request (silent after the handshake, or stopped inside the HTTP/2
    /// preface), else gracefully (HTTP/2: GOAWAY, so the client retries
    /// elsewhere what it sent meanwhile).
    async fn serve<I>(self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            builder,
            router,
            idle_timeout,
            close_timeout,
            drain: (drain_bytes, drain_timeout),
            peer,
            client,
            mut stopped,
            activity,
        } = self;
        let service = {
            let activity = activity.clone();
            hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let busy = activity.begin();
                let mut request = request
                    .map(|body| super::drain::Drained::new(body, drain_bytes, drain_timeout));
                request.extensions_mut().insert(client);
                let answer = router.clone().oneshot(request);
                async move {
                    let answer = answer.await;
                    drop(busy);
                    answer
                }
            })
        };
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(io), service)
            .into_owned();
        tokio::pin!(connection);
        let check = tokio::time::sleep(idle_timeout);
        tokio::pin!(check);
        // Once asked to close: until when a request that raced in may finish.
        let mut closing: Option<tokio::time::Instant> = None;
        let mut stopping = false;
        let ended = loop {
            tokio::select! {
                ended = connection.as_mut() => break ended,
                () = check.as_mut(), if !stopping => {
                    let now = tokio::time::Instant::now();
                    if let Some(deadline) = closing {
                        // Idle, it has nothing left to finish.
                        if activity.idle_since().is_none() && now < deadline {
                            check.as_mut().reset(deadline);
                            continue;
                        }
                        tracing::debug!(%peer, "connection not closed in time; dropping it");
                        return;
                    }
                    match activity.idle_since() {
                        None => check.as_mut().reset(now + idle_timeout),
                        Some(since) if now < since + idle_timeout => {
                            check.as_mut().reset(since + idle_timeout);
                        }
                        Some(_) if !activity.started.load(Ordering::Relaxed) => {
                            tracing::debug!(%peer, "no request within the header timeout; closing");
                            return;
                        }
                        Some(_) => {
                            tracing::debug!(%peer, "idle connection; closing");
                            connection.as_mut().graceful_shutdown();
                            closing = Some(now + close_timeout);
                            check.as_mut().reset(now + CLOSE_GRACE);
                        }
                    }
                }
                () = activity.close.notified(), if closing.is_none() => {
                    if !activity.started.load(Ordering::Relaxed) {
                        tracing::debug!(%peer, "connection cap reached; dropping a connection that never began a request");
                        return;
                    }
                    tracing::debug!(%peer, "connection cap reached; closing the connection idle the longest");
                    let now = tokio::time::Instant::now();
                    connection.as_mut().graceful_shutdown();
                    closing = Some(now + close_timeout);
                    check.as_mut().reset(now + CLOSE_GRACE);
                }
                () = stopped_signal(&mut stopped), if closing.is_none() => {
                    // The requests in flight finish, within the drain timeout
                    // (`serve` closes what is left after it).
                    connection.as_mut().graceful_shutdown();
                    closing = Some(tokio::time::Instant::now());
                    stopping = true;
                }
            }
        };
        if let Err(e) = ended {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    }
}

/// Bytes as whole KiB, rounded up: the unit of the body budget's permits.
pub(crate) fn kib(bytes: usize) -> usize {
    bytes.div_ceil(1024)
}
