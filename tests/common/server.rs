//! A server on loopback and an HTTPS client that trusts it the way
//! kube-apiserver does (the CA bundle only, the Service DNS name).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use finalizer_guard::server::{self, Handle, Limits, ServeConfig};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde_json::Value;

use super::wait::poll_until;

pub const SERVICE_NAME: &str = "finalizer-guard.finalizer-guard.svc";

pub fn config(dir: &Path) -> ServeConfig {
    ServeConfig {
        policy: None,
        tls: None,
        client_ca: None,
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        limits: Limits {
            max_body_bytes: 8 * 1024 * 1024,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            body_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            max_connections: 1024,
            max_inflight_body_bytes: 64 * 1024 * 1024,
            max_waiting_frame_bytes: finalizer_guard::server::BODY_WAITING_BYTES,
        },
        reload_interval: Duration::from_millis(100),
        shutdown_delay: Duration::ZERO,
        shutdown_timeout: Duration::from_secs(5),
        dev_cert_dir: dir.to_path_buf(),
        record: None,
        events: server::EventsTarget::Off,
        events_queue: 16,
        events_unauthenticated: false,
        cluster_name: None,
        self_managed: None,
    }
}

/// An HTTPS client trusting only `ca_pem`, reaching `addr` under the Service name.
pub fn client(ca_pem: &[u8], addr: SocketAddr, alpn: &[&[u8]]) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls_config(ca_pem, alpn))
        .resolve(SERVICE_NAME, addr)
        .timeout(Duration::from_secs(10))
        // Idle connections are given up well before the shortest idle
        // timeout a test serves with (1 s): reusing one the server is
        // closing at that moment would fail the request, which is not
        // what these tests are about.
        .pool_idle_timeout(Duration::from_millis(300))
        .build()
        .unwrap()
}

/// A rustls client configuration trusting only the certificates in `ca_pem`
/// (one or more PEM blocks), offering `alpn`.
pub fn tls_config(ca_pem: &[u8], alpn: &[&[u8]]) -> rustls::ClientConfig {
    tls_config_as(ca_pem, alpn, None)
}

/// [`tls_config`], presenting `identity` (certificate and key PEM) if any.
pub fn tls_config_as(
    ca_pem: &[u8],
    alpn: &[&[u8]],
    identity: Option<(&[u8], &[u8])>,
) -> rustls::ClientConfig {
    install_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let mut tls = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert)
                    .map(Result::unwrap)
                    .collect(),
                rustls_pki_types::PrivateKeyDer::from_pem_slice(key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tls
}

/// An HTTPS client like [`client`] that presents the client certificate
/// `cert_pem` (its key `key_pem`), as kube-apiserver does for `--client-ca`.
pub fn client_with_cert(
    ca_pem: &[u8],
    addr: SocketAddr,
    cert_pem: &[u8],
    key_pem: &[u8],
) -> reqwest::Client {
    client_as(ca_pem, addr, Some((cert_pem, key_pem)))
}

/// An HTTPS client (HTTP/1.1) trusting `ca_pem`, presenting `identity`
/// (certificate and key PEM) if any.
pub fn client_as(
    ca_pem: &[u8],
    addr: SocketAddr,
    identity: Option<(&[u8], &[u8])>,
) -> reqwest::Client {
    let tls = tls_config_as(ca_pem, &[b"http/1.1"], identity);
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .resolve(SERVICE_NAME, addr)
        .timeout(Duration::from_secs(10))
        // Idle connections are given up well before the shortest idle
        // timeout a test serves with (1 s): reusing one the server is
        // closing at that moment would fail the request, which is not
        // what these tests are about.
        .pool_idle_timeout(Duration::from_millis(300))
        .build()
        .unwrap()
}

/// `finalizer-guard certs --client kube-apiserver --out OUT`: ca.crt,
/// tls.crt, tls.key for the Service names, and client.crt, client.key.
pub fn certs_with_client(out: &Path) {
    let certs = std::process::Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
        .args([
            "certs",
            "--service",
            "finalizer-guard",
            "--namespace",
            "finalizer-guard",
        ])
        .args(["--client", "kube-apiserver", "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(
        certs.status.success(),
        "{}",
        String::from_utf8_lossy(&certs.stderr)
    );
}

/// Starts a server with `certs_with_client`'s certificates and `--client-ca`
/// (after `adjust`); its `https` client presents the client certificate.
pub async fn start_mtls(adjust: impl FnOnce(&mut ServeConfig, &Path)) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    certs_with_client(&out);
    let mut config = config(dir.path());
    config.tls = Some((out.join("tls.crt"), out.join("tls.key")));
    config.client_ca = Some(out.join("ca.crt"));
    adjust(&mut config, dir.path());
    let handle = server::start(config).await.unwrap();
    let read = |name: &str| std::fs::read(out.join(name)).unwrap();
    let ca_pem = read("ca.crt");
    let https = client_with_cert(
        &ca_pem,
        handle.addr,
        &read("client.crt"),
        &read("client.key"),
    );
    Running {
        url: format!("https://{SERVICE_NAME}:{}", handle.addr.port()),
        admin: format!("http://{}", handle.admin_addr),
        handle,
        https,
        ca_pem,
        dir,
    }
}

/// reqwest's plain clients need a process-wide rustls provider.
pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub struct Running {
    pub handle: Handle,
    pub https: reqwest::Client,
    pub url: String,
    pub admin: String,
    pub ca_pem: Vec<u8>,
    pub dir: tempfile::TempDir,
}

impl Running {
    pub async fn post(&self, body: impl Into<reqwest::Body>) -> reqwest::Response {
        self.https
            .post(format!("{}/validate?timeout=10s", self.url))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap()
    }

    pub async fn review(&self, review: &Value) -> Value {
        let response = self.post(serde_json::to_vec(review).unwrap()).await;
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.admin))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Polls the admin port's metrics until `line` is there (10 s at most);
    /// returns them. Fails the test showing the last metrics otherwise.
    #[track_caller]
    pub fn wait_for_metric<'a>(&'a self, line: &'a str) -> impl Future<Output = String> + 'a {
        let caller = std::panic::Location::caller();
        async move {
            let mut metrics = String::new();
            let seen = poll_until(Duration::from_secs(10), async || {
                metrics = self.metrics().await;
                metrics.contains(line)
            })
            .await;
            assert!(seen, "no {line} within 10 s ({caller}) in:\n{metrics}");
            metrics
        }
    }
}

/// Starts a dev-mode server, optionally with a policy file's text.
pub async fn start(policy: Option<&str>) -> Running {
    start_with(policy, |_, _| {}).await
}

/// Starts a dev-mode server after `adjust` has had its say on the configuration.
pub async fn start_with(
    policy: Option<&str>,
    adjust: impl FnOnce(&mut ServeConfig, &Path),
) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    adjust(&mut config, dir.path());
    if let Some(text) = policy {
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, text).unwrap();
        config.policy = Some(path);
    }
    let handle = server::start(config).await.unwrap();
    let ca_pem = std::fs::read(handle.dev_ca.as_ref().unwrap()).unwrap();
    let https = client(&ca_pem, handle.addr, &[b"http/1.1"]);
    Running {
        url: format!("https://{SERVICE_NAME}:{}", handle.addr.port()),
        admin: format!("http://{}", handle.admin_addr),
        handle,
        https,
        ca_pem,
        dir,
    }
}
