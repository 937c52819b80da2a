//! Starting and running the server: its ports, TLS, the policy, the reloads, the drain.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use super::connections::serve;
use super::reload::{CertificateFiles, ClientCaFile, Reloadable, WatchedPolicyFile, doctor_allows};
use super::state::{AppState, EventsTarget, Limits, RecordConfig};
use crate::error::{Error, Result};
use crate::pki::certificates as certs;
use crate::policy::seal::SealKey;
use crate::policy::{self, Mode, Policy};
use crate::trail::audit_log::AuditLog;
use crate::trail::events::EventSink;
use crate::trail::metrics::Metrics;
use crate::trail::recording::Recorder;

/// Most connections the admin port serves at once: probes and scrapes need a
/// handful, and a flood there must not take the file descriptors the webhook
/// port needs.
const ADMIN_MAX_CONNECTIONS: usize = 128;

/// How long a drain waits for queued audit records to be written out.
const AUDIT_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a drain waits for the Event repeats counted since their last
/// write to be written.
const EVENTS_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// A running server.
pub struct Handle {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub state: Arc<AppState>,
    /// Dev mode: the generated CA's PEM file.
    pub dev_ca: Option<PathBuf>,
    stop: watch::Sender<bool>,
    /// Told at the start of a drain: the certificates Secret is left to the
    /// pods that stay (a draining pod that rotated or re-created it would
    /// only race its successors).
    draining: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    shutdown_delay: Duration,
}

impl Handle {
    /// Starts the drain: unready at once, stop accepting after the delay,
    /// let in-flight requests finish, then stop.
    pub async fn shutdown(self) {
        self.state.ready.store(false, Ordering::Relaxed);
        let _ = self.draining.send(true);
        tracing::info!(delay = ?self.shutdown_delay, "shutting down: unready, still serving during the delay");
        tokio::time::sleep(self.shutdown_delay).await;
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        // Every audit record out before exit, unless standard output is
        // stuck: then those not written are counted and named.
        let flushed = tokio::time::timeout(AUDIT_FLUSH_TIMEOUT, self.state.audit.flush())
            .await
            .is_ok();
        if self.state.audit.log_at_exit() > 0 || !flushed {
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
    let metrics = metrics_for(&initial_policy, policy.is_some().then_some(&policy_bytes));
    let recorder = record
        .map(|record| start_recorder(record, &metrics))
        .transpose()?;
    let authenticated = client_ca.is_some();
    let (manager, initial) = super::self_managed::start(self_managed).await?.unzip();
    let serving = serving_tls(tls.map(Ok).or(initial.map(Err)), client_ca, &dev_cert_dir)?;
    serving.expiries(&metrics);
    let events = start_events(&events, events_queue, &metrics).await;
    let audit = AuditLog::stdout(metrics.dropped_in("audit"), metrics.audit_refused.clone())
        .map_err(|e| Error::io("audit thread", e))?;
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
        watched.push((Arc::new(WatchedPolicyFile(path)), policy_bytes));
    }
    let (draining, draining_told) = watch::channel(false);
    if let Some(manager) = manager {
        let store = serving.certificates.clone();
        tokio::spawn(manager.run(store, state.clone(), draining_told));
    }
    watch_reloads(watched, &state, reload_interval, &stopped);
    state.ready.store(true, Ordering::Relaxed);
    tracing::info!(%addr, %admin_addr, "serving: POST /validate over TLS; /metrics on the admin port");
    Ok(Handle {
        addr,
        admin_addr,
        state,
        dev_ca: serving.dev_ca,
        stop,
        draining,
        tasks,
        shutdown_delay,
    })
}

/// The server's metrics, the policy in service on record: its file's
/// bytes, or the embedded default's text.
fn metrics_for(policy: &Policy, file: Option<&Vec<u8>>) -> Metrics {
    let metrics = Metrics::new();
    match file {
        Some(bytes) => metrics.policy_in_service(policy, bytes, "file"),
        None => metrics.policy_in_service(
            policy,
            policy::config::DEFAULT_POLICY_YAML.as_bytes(),
            "embedded",
        ),
    }
    metrics
}

/// Re-reads each watched file every `interval` until stopped, each in its own task.
fn watch_reloads(
    watched: Vec<Watched>,
    state: &Arc<AppState>,
    interval: Duration,
    stopped: &watch::Receiver<bool>,
) {
    for (source, last) in watched {
        let (state, stopped) = (state.clone(), stopped.clone());
        tokio::spawn(super::reload::watch(source, last, state, interval, stopped));
    }
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
    /// Puts on record when the certificates in service expire.
    fn expiries(&self, metrics: &Metrics) {
        if let Some(expiry) = self.certificates.expiry() {
            metrics.certificate_expires("serving", expiry);
        }
        let client_ca = self.client_ca.as_ref();
        if let Some(expiry) = client_ca.and_then(|(_, _, pem)| crate::pki::keys::bundle_expiry(pem))
        {
            metrics.certificate_expires("client-ca", expiry);
        }
    }

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
            let (certified, seal, fingerprint) = crate::pki::keys::load_files(&cert, &key)?;
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
            let _ = state.audit.log_at_exit();
        }
    }
    Ok(())
}

/// Returns at SIGTERM or Ctrl-C (`serve` and `watch`); at Ctrl-C alone where
/// no SIGTERM handler can be set up.
pub(crate) async fn wait_for_signal() {
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

/// Dev mode: a CA and a serving certificate for localhost and the default
/// Service names, generated at start; the CA is written where clients can find it.
fn dev_certificate(dir: &Path) -> Result<(rustls::sign::CertifiedKey, SealKey, PathBuf)> {
    let ca = certs::CertificateAuthority::generate(30)?;
    let mut names = vec!["localhost".to_string()];
    names.extend(certs::service_names("finalizer-guard", "finalizer-guard"));
    let ips = [
        "127.0.0.1".parse().expect("IPv4 loopback"),
        "::1".parse().expect("IPv6 loopback"),
    ];
    let bundle = ca.issue(&names, &ips, 30)?;
    // Under $TMPDIR, someone else may have made the folder first: only one
    // of the user's own, which no one else may write in, is written to.
    crate::files::private_dir(dir).map_err(|e| Error::io(dir, e))?;
    let ca_path = dir.join("ca.crt");
    crate::files::replace(
        &ca_path,
        bundle.ca_cert_pem.as_bytes(),
        crate::files::Access::Everyone,
    )
    .map_err(|e| Error::io(&ca_path, e))?;
    tracing::warn!(
        ca = %ca_path.display(),
        "dev mode: serving a generated certificate (localhost, 127.0.0.1, finalizer-guard.finalizer-guard.svc); \
         pass --tls-cert and --tls-key in a cluster"
    );
    let certified =
        crate::pki::keys::certified_key(bundle.cert_pem.as_bytes(), bundle.key_pem.as_bytes())?;
    let seal = crate::pki::keys::seal_key(bundle.key_pem.as_bytes())?;
    Ok((certified, seal, ca_path))
}
