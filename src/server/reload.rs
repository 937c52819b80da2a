//! Hot reload of mounted files: the policy, the serving certificate, the client CA.
//!
//! Kubernetes updates a mounted ConfigMap or Secret by writing a new
//! timestamped folder and swapping the `..data` symlink; watching one file's
//! inode misses that. So the files are re-read by path every interval and
//! compared by content. A file that does not parse, or a certificate whose key
//! does not match (half-written), is logged and counted, and the last good one
//! stays in service.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::tls::{self, CertStore, ClientCaStore};
use super::{AppState, stopped_signal};
use crate::policy::Policy;

/// Re-reads the policy file; applies a new valid policy, keeps the old one otherwise.
pub async fn watch_policy(
    path: PathBuf,
    last: Vec<u8>,
    state: Arc<AppState>,
    interval: Duration,
    stopped: watch::Receiver<bool>,
) {
    let shown = path.display().to_string();
    let read = move || std::fs::read(&path);
    let apply_state = state.clone();
    let apply = move |bytes: &[u8]| {
        let policy =
            Policy::from_yaml(&String::from_utf8_lossy(bytes)).map_err(|e| e.to_string())?;
        super::doctor_allows(&policy)
            .map_err(|blocked| format!("it would block built-in controllers: {blocked}"))?;
        tracing::info!(
            mode = policy.mode.as_str(),
            rules = policy.rules.len(),
            "policy reloaded"
        );
        apply_state.policy.store(Arc::new(policy));
        Ok(())
    };
    poll("policy", shown, read, apply, last, state, interval, stopped).await;
}

/// Re-reads the certificate and key; swaps in a new valid pair.
pub async fn watch_certificate(
    cert: PathBuf,
    key: PathBuf,
    last: Vec<u8>,
    store: Arc<CertStore>,
    state: Arc<AppState>,
    interval: Duration,
    stopped: watch::Receiver<bool>,
) {
    let shown = cert.display().to_string();
    let read = move || {
        tls::read_pair(&cert, &key).map(|(cert_pem, key_pem)| tls::fingerprint(&cert_pem, &key_pem))
    };
    let apply_state = state.clone();
    let apply = move |bytes: &[u8]| {
        let (cert_pem, key_pem) = tls::split_fingerprint(bytes);
        let certified = tls::certified_key(cert_pem, key_pem).map_err(|e| e.to_string())?;
        store.replace(certified);
        if let Some(expiry) = store.expiry() {
            apply_state.metrics.certificate_expiry.set(expiry);
        }
        tracing::info!("serving certificate reloaded");
        Ok(())
    };
    poll(
        "certificate",
        shown,
        read,
        apply,
        last,
        state,
        interval,
        stopped,
    )
    .await;
}

/// Re-reads the client CA bundle; swaps in a new valid one.
pub async fn watch_client_ca(
    path: PathBuf,
    last: Vec<u8>,
    store: Arc<ClientCaStore>,
    state: Arc<AppState>,
    interval: Duration,
    stopped: watch::Receiver<bool>,
) {
    let shown = path.display().to_string();
    let read = move || std::fs::read(&path);
    let apply = move |bytes: &[u8]| {
        store.replace(tls::client_verifier(bytes).map_err(|e| e.to_string())?);
        tracing::info!("client CA reloaded");
        Ok(())
    };
    poll(
        "client-ca",
        shown,
        read,
        apply,
        last,
        state,
        interval,
        stopped,
    )
    .await;
}

/// Every `interval`, reads the bytes; when they differ from the last applied
/// (and from the last refused), applies them, counting the outcome.
#[allow(clippy::too_many_arguments)]
async fn poll<R, A>(
    kind: &'static str,
    shown: String,
    read: R,
    apply: A,
    mut last: Vec<u8>,
    state: Arc<AppState>,
    interval: Duration,
    mut stopped: watch::Receiver<bool>,
) where
    R: Fn() -> std::io::Result<Vec<u8>> + Clone + Send + 'static,
    A: Fn(&[u8]) -> Result<(), String>,
{
    let mut last_failed: Option<Vec<u8>> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = stopped_signal(&mut stopped) => return,
        }
        let bytes = match tokio::task::spawn_blocking(read.clone()).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(e)) => {
                tracing::warn!(kind, file = %shown, error = %e, "cannot read; keeping the current one");
                continue;
            }
            Err(_) => continue,
        };
        if bytes == last || last_failed.as_ref() == Some(&bytes) {
            continue;
        }
        match apply(&bytes) {
            Ok(()) => {
                state.metrics.reload(kind, true);
                last = bytes;
                last_failed = None;
            }
            Err(e) => {
                tracing::error!(kind, file = %shown, error = %e, "refused the new file; keeping the current one");
                state.metrics.reload(kind, false);
                last_failed = Some(bytes);
            }
        }
    }
}
