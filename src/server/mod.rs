//! The server: TLS webhook port, plain admin port, hot reload, graceful drain.

mod reload;
pub mod routes;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::audit::AuditLog;
use crate::error::{Error, Result};
use crate::events::EventSink;
use crate::metrics::Metrics;
use crate::policy::{Mode, Policy};
use crate::recording::Recorder;
use crate::{certs, doctor};

/// Most connections the admin port serves at once: probes and scrapes need a
/// handful, and a flood there must not take the file descriptors the webhook
/// port needs.
const ADMIN_MAX_CONNECTIONS: usize = 128;

/// How long a drain waits for queued audit records to be written out.
const AUDIT_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// handshake, its first request's; on a kept-alive HTTP/1.1 connection,
    /// each next one's (so an idle connection is closed after it too).
    pub header_timeout: Duration,
    /// How long a client may take to send a request's body.
    pub body_timeout: Duration,
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
    /// This replica's name, for Events' reportingInstance.
    pub instance: String,
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
    } = config;
    if limits.max_inflight_body_bytes < limits.max_body_bytes {
        return Err(Error::Config(format!(
            "--max-inflight-body-bytes ({}) is less than --max-body-bytes ({}): the largest accepted body could never be read",
            limits.max_inflight_body_bytes, limits.max_body_bytes
        )));
    }

    let (initial_policy, policy_bytes) = match &policy {
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
            let text = String::from_utf8_lossy(&bytes);
            let parsed = Policy::from_yaml(&text).map_err(|source| Error::Policy {
                path: path.clone(),
                source,
            })?;
            (parsed, bytes)
        }
        None => (Policy::embedded_default(), Vec::new()),
    };
    log_policy(
        &initial_policy,
        policy.as_deref().map(|p| p.display().to_string()),
    );
    if let Err(blocked) = doctor_allows(&initial_policy) {
        return Err(Error::BlocksBuiltinControllers(blocked));
    }
    let recorder = match record {
        Some(RecordConfig {
            dir,
            max_files,
            max_bytes,
        }) => {
            tracing::info!(dir = %dir.display(), max_files, max_bytes, "recording judged finalizer removals");
            Some(Recorder::start(dir, max_files, max_bytes)?)
        }
        None => None,
    };

    let (certified, cert_fingerprint, dev_ca) = match &tls {
        Some((cert, key)) => {
            let (certified, fingerprint) = tls::load_files(cert, key)?;
            tracing::info!(cert = %cert.display(), key = %key.display(), "serving certificate loaded");
            (certified, fingerprint, None)
        }
        None => {
            let (certified, ca_path) = dev_certificate(&dev_cert_dir)?;
            (certified, Vec::new(), Some(ca_path))
        }
    };
    let store = tls::CertStore::new(certified);
    let client_ca_store = match &client_ca {
        Some(path) => {
            let (verifier, pem) = tls::load_client_ca(path)?;
            tracing::info!(client_ca = %path.display(), "client certificates required on the webhook port");
            Some((tls::ClientCaStore::new(verifier), pem))
        }
        None => None,
    };
    let acceptor = TlsAcceptor::from(Arc::new(tls::server_config(
        store.clone(),
        client_ca_store
            .as_ref()
            .map(|(verifier, _)| verifier.clone()),
    )?));

    let metrics = Metrics::new();
    let events = match events {
        EventsTarget::Off => None,
        target => match events_client(&target).await {
            Ok(client) => Some(EventSink::start(
                client,
                events_queue,
                metrics.events.clone(),
            )),
            Err(e) => {
                tracing::warn!(error = %e, "Events off: no Kubernetes API configuration");
                None
            }
        },
    };
    let state = Arc::new(AppState {
        policy: ArcSwap::from_pointee(initial_policy),
        metrics,
        ready: AtomicBool::new(false),
        limits,
        recorder,
        events,
        body_budget: Arc::new(Semaphore::new(kib(limits.max_inflight_body_bytes))),
        audit: AuditLog::stdout().map_err(|e| Error::io("audit thread", e))?,
        instance: std::env::var("HOSTNAME").unwrap_or_else(|_| "finalizer-guard".into()),
    });
    if let Some(expiry) = store.expiry() {
        state.metrics.certificate_expiry.set(expiry);
    }

    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| Error::Bind {
            addr: listen,
            source,
        })?;
    let admin_listener = TcpListener::bind(admin_listen)
        .await
        .map_err(|source| Error::Bind {
            addr: admin_listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind {
        addr: listen,
        source,
    })?;
    let admin_addr = admin_listener.local_addr().map_err(|source| Error::Bind {
        addr: admin_listen,
        source,
    })?;

    let (stop, stopped) = watch::channel(false);
    let tasks = vec![
        tokio::spawn(serve(
            listener,
            Some(acceptor),
            routes::webhook(state.clone()),
            limits,
            shutdown_timeout,
            stopped.clone(),
        )),
        tokio::spawn(serve(
            admin_listener,
            None,
            routes::admin(state.clone()),
            Limits {
                max_connections: ADMIN_MAX_CONNECTIONS,
                ..limits
            },
            shutdown_timeout,
            stopped.clone(),
        )),
    ];
    if let Some(path) = policy {
        tokio::spawn(reload::watch_policy(
            path,
            policy_bytes,
            state.clone(),
            reload_interval,
            stopped.clone(),
        ));
    }
    if let (Some(path), Some((verifier, pem))) = (client_ca, client_ca_store) {
        tokio::spawn(reload::watch_client_ca(
            path,
            pem,
            verifier,
            state.clone(),
            reload_interval,
            stopped.clone(),
        ));
    }
    if let Some((cert, key)) = tls {
        tokio::spawn(reload::watch_certificate(
            cert,
            key,
            cert_fingerprint,
            store,
            state.clone(),
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
        dev_ca,
        stop,
        tasks,
        shutdown_delay,
    })
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

async fn events_client(target: &EventsTarget) -> std::result::Result<kube::Client, String> {
    match target {
        EventsTarget::Off => Err("off".into()),
        EventsTarget::Cluster => kube::Client::try_default().await.map_err(|e| e.to_string()),
        EventsTarget::ApiServer(url) => {
            kube::Client::try_from(kube::Config::new(url.clone())).map_err(|e| e.to_string())
        }
    }
}

/// Resolves once the server is told to stop.
pub(crate) async fn stopped_signal(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
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

/// Runs `doctor` on a policy. In enforce mode a policy that would block a
/// built-in controller is refused; in warn mode it is served, loudly.
pub(crate) fn doctor_allows(policy: &Policy) -> std::result::Result<(), String> {
    let blocked = doctor::check(policy);
    if blocked.is_empty() {
        return Ok(());
    }
    let list = blocked
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    match policy.mode {
        Mode::Enforce => Err(list),
        Mode::Warn => {
            for b in &blocked {
                tracing::error!(
                    controller = b.controller,
                    username = b.username,
                    finalizer = b.finalizer,
                    "policy would block a built-in controller: enforcing it would break the cluster"
                );
            }
            Ok(())
        }
    }
}

/// Dev mode: a CA and a serving certificate for localhost and the default
/// Service names, generated at start; the CA is written where clients can find it.
fn dev_certificate(dir: &std::path::Path) -> Result<(rustls::sign::CertifiedKey, PathBuf)> {
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
    let certified = tls::certified_key(bundle.cert_pem.as_bytes(), bundle.key_pem.as_bytes())?;
    Ok((certified, ca_path))
}

/// Accepts connections (TLS ones when `tls` is set) and serves HTTP/1.1 and
/// HTTP/2 on them until stopped, then lets open connections finish (up to
/// `drain`). At most `limits.max_connections` are open at once: the others
/// wait in the listen backlog, not in memory.
async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    limits: Limits,
    drain: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(250);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = stopped_signal(&mut stopped) => break,
        };
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
        let _ = tcp.set_nodelay(true);
        let connection = Connection {
            builder: builder.clone(),
            router: router.clone(),
            watcher: graceful.watcher(),
            header_timeout: limits.header_timeout,
            peer,
        };
        let tls = tls.clone();
        let handshake_timeout = limits.handshake_timeout;
        tokio::spawn(async move {
            let _slot = slot;
            let Some(acceptor) = tls else {
                return connection.serve(tcp).await;
            };
            match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => connection.serve(tls).await,
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?drain,
            "connections still open after the drain timeout; closing them"
        );
    }
}

/// One accepted connection, ready to be served.
struct Connection {
    builder: auto::Builder<TokioExecutor>,
    router: Router,
    watcher: Watcher,
    header_timeout: Duration,
    peer: SocketAddr,
}

impl Connection {
    /// Serves HTTP on `io` until the client or a drain closes it.
    ///
    /// hyper's header timeout starts only once it knows the protocol, which
    /// takes the client's first bytes: a client silent after the handshake,
    /// or stopping inside the HTTP/2 preface, would hold its connection
    /// slot forever. So a connection whose first request has not begun
    /// within the header timeout is closed here.
    async fn serve<I>(self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            builder,
            router,
            watcher,
            header_timeout,
            peer,
        } = self;
        let started = Arc::new(AtomicBool::new(false));
        let service = {
            let started = started.clone();
            hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                started.store(true, Ordering::Relaxed);
                router.clone().oneshot(request)
            })
        };
        let connection = watcher.watch(
            builder
                .serve_connection_with_upgrades(TokioIo::new(io), service)
                .into_owned(),
        );
        tokio::pin!(connection);
        let ended = tokio::select! {
            ended = connection.as_mut() => ended,
            () = tokio::time::sleep(header_timeout) => {
                if !started.load(Ordering::Relaxed) {
                    tracing::debug!(%peer, "no request within the header timeout; closing");
                    return;
                }
                connection.await
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
