//! Hot reload of mounted files: the policy, the serving certificate, the client CA.
//!
//! Kubernetes updates a mounted ConfigMap or Secret by writing a new
//! timestamped folder and swapping the `..data` symlink; watching one file's
//! inode misses that. So the files are re-read by path every interval and
//! compared by content. A file that does not parse, or a certificate whose key
//! does not match (half-written), is logged and counted, and the last good one
//! stays in service.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::state::{AppState, stopped_signal};
use super::tls::{self, CertStore, ClientCaStore, TlsError};
use crate::error::{IoError, list};
use crate::pki::keys;
use crate::policy::servable::{self, Blocked};
use crate::policy::{self, LoadError, Policy};

/// Why a changed file was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Read(#[from] IoError),
    #[error(transparent)]
    Policy(#[from] LoadError),
    #[error("it would block built-in controllers: {}", list(.0))]
    BlocksBuiltinControllers(Vec<Blocked>),
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// Something served from files that can be swapped while serving.
pub trait Reloadable: Send + Sync + 'static {
    /// The `kind` of the reload metrics and logs.
    fn kind(&self) -> &'static str;
    /// The file (the first of them), as logs name it.
    fn path(&self) -> &Path;
    /// Reads the files' current content (on the blocking pool).
    fn read(&self) -> Result<Vec<u8>, ReloadError> {
        Ok(crate::error::read(self.path())?)
    }
    /// Puts content that differs from the last applied into service.
    fn apply(&self, bytes: &[u8], state: &AppState) -> Result<(), ReloadError>;
}

/// The policy file.
pub struct WatchedPolicyFile(pub PathBuf);

impl Reloadable for WatchedPolicyFile {
    fn kind(&self) -> &'static str {
        "policy"
    }
    fn path(&self) -> &Path {
        &self.0
    }
    fn apply(&self, bytes: &[u8], state: &AppState) -> Result<(), ReloadError> {
        let policy = policy::from_bytes(bytes)?;
        doctor_allows(&policy).map_err(ReloadError::BlocksBuiltinControllers)?;
        tracing::info!(
            mode = policy.mode.as_str(),
            rules = policy.rules.len(),
            "policy reloaded"
        );
        state.metrics.policy_in_service(&policy, bytes, "file");
        state.policy.store(Arc::new(policy));
        Ok(())
    }
}

/// The serving certificate and its key, read as one pair.
pub struct CertificateFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub store: Arc<CertStore>,
}

impl Reloadable for CertificateFiles {
    fn kind(&self) -> &'static str {
        "certificate"
    }
    fn path(&self) -> &Path {
        &self.cert
    }
    fn read(&self) -> Result<Vec<u8>, ReloadError> {
        let (cert_pem, key_pem) = keys::read_pair(&self.cert, &self.key)?;
        Ok(keys::fingerprint(&cert_pem, &key_pem))
    }
    fn apply(&self, bytes: &[u8], state: &AppState) -> Result<(), ReloadError> {
        let (cert_pem, key_pem) = keys::split_fingerprint(bytes);
        self.store.replace(
            keys::certified_key(cert_pem, key_pem)?,
            keys::seal_key(key_pem)?,
        );
        if let Some(expiry) = self.store.expiry() {
            state.metrics.certificate_expires("serving", expiry);
        }
        tracing::info!("serving certificate reloaded");
        Ok(())
    }
}

/// The CA bundle client certificates are verified against.
pub struct ClientCaFile {
    pub path: PathBuf,
    pub store: Arc<ClientCaStore>,
}

impl Reloadable for ClientCaFile {
    fn kind(&self) -> &'static str {
        "client-ca"
    }
    fn path(&self) -> &Path {
        &self.path
    }
    fn apply(&self, bytes: &[u8], state: &AppState) -> Result<(), ReloadError> {
        self.store.replace(tls::client_verifier(bytes)?);
        if let Some(expiry) = keys::bundle_expiry(bytes) {
            state.metrics.certificate_expires("client-ca", expiry);
        }
        tracing::info!("client CA reloaded");
        Ok(())
    }
}

/// Every `interval`, reads `source`; when the content differs from `last`
/// (the content in service) and from the last refused, applies it, counting
/// the outcome. Returns once the server is told to stop.
pub async fn watch(
    source: Arc<dyn Reloadable>,
    mut last: Vec<u8>,
    state: Arc<AppState>,
    interval: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let (kind, file) = (source.kind(), source.path().display().to_string());
    let mut last_failed: Option<Vec<u8>> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = stopped_signal(&mut stopped) => return,
        }
        let reader = source.clone();
        let bytes = match tokio::task::spawn_blocking(move || reader.read()).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e)) => {
                tracing::warn!(kind, file, error = %e, "cannot read; keeping the current one");
                continue;
            }
            Err(_) => continue,
        };
        if bytes == last || last_failed.as_ref() == Some(&bytes) {
            continue;
        }
        match source.apply(&bytes, &state) {
            Ok(()) => {
                state.metrics.reload(kind, true);
                last = bytes;
                last_failed = None;
            }
            Err(e) => {
                tracing::error!(kind, file, error = %e, "refused the new file; keeping the current one");
                state.metrics.reload(kind, false);
                last_failed = Some(bytes);
            }
        }
    }
}

/// Runs `doctor` on a policy ([`servable::servable`], which `policy validate`
/// runs too). In enforce mode a policy that would block a built-in
/// controller is refused; in warn mode it is served, loudly.
pub(crate) fn doctor_allows(policy: &Policy) -> std::result::Result<(), Vec<Blocked>> {
    for b in servable::servable(policy)? {
        tracing::error!(
            controller = b.controller,
            username = b.username,
            finalizer = b.finalizer,
            "policy would block a built-in controller: enforcing it would break the cluster"
        );
    }
    Ok(())
}
