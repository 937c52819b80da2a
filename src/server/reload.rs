//! Hot reload of mounted files.
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

use super::tls::{self, CertStore};
use super::{AppState, stopped_signal};
use crate::policy::Policy;

/// Re-reads the policy file; applies a new valid policy, keeps the old one otherwise.
pub async fn watch_policy(
    path: PathBuf,
    mut last: Vec<u8>,
    state: Arc<AppState>,
    interval: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut last_failed: Option<Vec<u8>> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = stopped_signal(&mut stopped) => return,
        }
        let bytes = match tokio::fs::read(&path).await {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::warn!(policy = %path.display(), error = %e, "cannot read policy; keeping the current one");
                continue;
            }
        };
        if bytes == last || last_failed.as_ref() == Some(&bytes) {
            continue;
        }
        let parsed = Policy::from_yaml(&String::from_utf8_lossy(&bytes))
            .map_err(|e| e.to_string())
            .and_then(|policy| {
                super::doctor_allows(&policy)
                    .map(|()| policy)
                    .map_err(|blocked| format!("it would block built-in controllers: {blocked}"))
            });
        match parsed {
            Ok(policy) => {
                tracing::info!(
                    policy = %path.display(),
                    mode = policy.mode.as_str(),
                    rules = policy.rules.len(),
                    "policy reloaded"
                );
                state.policy.store(Arc::new(policy));
                state.metrics.reload("policy", true);
                last = bytes;
                last_failed = None;
            }
            Err(e) => {
                tracing::error!(policy = %path.display(), error = %e, "new policy refused; keeping the current one");
                state.metrics.reload("policy", false);
                last_failed = Some(bytes);
            }
        }
    }
}

/// Re-reads the certificate and key; swaps in a new valid pair.
pub async fn watch_certificate(
    cert: PathBuf,
    key: PathBuf,
    mut last: Vec<u8>,
    store: Arc<CertStore>,
    state: Arc<AppState>,
    interval: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut last_failed: Option<Vec<u8>> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = stopped_signal(&mut stopped) => return,
        }
        let (cert_path, key_path) = (cert.clone(), key.clone());
        let read = tokio::task::spawn_blocking(move || {
            let cert_pem = std::fs::read(&cert_path)?;
            let key_pem = std::fs::read(&key_path)?;
            Ok::<_, std::io::Error>((cert_pem, key_pem))
        })
        .await;
        let (cert_pem, key_pem) = match read {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => {
                tracing::warn!(cert = %cert.display(), error = %e, "cannot read certificate; keeping the current one");
                continue;
            }
            Err(_) => continue,
        };
        let mut fingerprint = cert_pem.clone();
        fingerprint.extend_from_slice(&key_pem);
        if fingerprint == last || last_failed.as_ref() == Some(&fingerprint) {
            continue;
        }
        match tls::certified_key(&cert_pem, &key_pem) {
            Ok(certified) => {
                store.replace(certified);
                if let Some(expiry) = store.expiry() {
                    state.metrics.certificate_expiry.set(expiry);
                }
                tracing::info!(cert = %cert.display(), "serving certificate reloaded");
                state.metrics.reload("certificate", true);
                last = fingerprint;
                last_failed = None;
            }
            Err(e) => {
                tracing::error!(cert = %cert.display(), error = %e, "new certificate refused; keeping the current one");
                state.metrics.reload("certificate", false);
                last_failed = Some(fingerprint);
            }
        }
    }
}
