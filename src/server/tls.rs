//! TLS: rustls over *ring*, with a certificate that can be swapped while
//! serving; with `--client-ca`, client certificates verified against a CA
//! bundle that can be swapped too.
//!
//! *ring* rather than aws-lc-rs: no C toolchain or CMake beyond a C compiler,
//! a much shorter build on a 2-core CI machine, and everything a webhook
//! needs (ECDSA/RSA/Ed25519, TLS 1.2 and 1.3). Nothing here requires FIPS.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, UnixTime};

pub use crate::error::TlsError;
use crate::policy::seal::SealKey;

use crate::pki::keys::{TlsResult, expiry, provider};

/// The serving certificate, swapped atomically: handshakes in flight keep
/// the one they started with, new ones get the new one. The approval seal
/// key derived from its private key is swapped with it.
pub struct CertStore {
    current: ArcSwap<CertifiedKey>,
    seal: ArcSwap<SealKey>,
}

impl CertStore {
    pub fn new(key: CertifiedKey, seal: SealKey) -> Arc<CertStore> {
        Arc::new(CertStore {
            current: ArcSwap::from_pointee(key),
            seal: ArcSwap::from_pointee(seal),
        })
    }

    pub fn replace(&self, key: CertifiedKey, seal: SealKey) {
        self.current.store(Arc::new(key));
        self.seal.store(Arc::new(seal));
    }

    /// The key approvals are sealed with now.
    pub fn seal_key(&self) -> Arc<SealKey> {
        self.seal.load_full()
    }

    /// The current certificate's expiry, in seconds since the Unix epoch.
    pub fn expiry(&self) -> Option<i64> {
        expiry(&self.current.load())
    }
}

impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CertStore")
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// A server configuration offering HTTP/2 and HTTP/1.1 (kube-apiserver pins
/// HTTP/1.1); with `client_ca`, requiring a client certificate it verifies.
pub fn server_config(
    store: Arc<CertStore>,
    client_ca: Option<Arc<ClientCaStore>>,
) -> TlsResult<ServerConfig> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Protocol)?;
    let mut config = match &client_ca {
        Some(verifier) => builder.with_client_cert_verifier(verifier.clone()),
        None => builder.with_no_client_auth(),
    }
    .with_cert_resolver(store);
    if client_ca.is_some() {
        // A resumed session skips certificate verification: every connection
        // is verified against the CA bundle in force. kube-apiserver keeps
        // its connections alive, so full handshakes are rare.
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
    }
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// A verifier of client certificates: they must chain to a certificate in
/// `ca_pem` (one or more PEM blocks) and be meant for client authentication.
pub fn client_verifier(ca_pem: &[u8]) -> TlsResult<Arc<dyn ClientCertVerifier>> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        let cert = cert.map_err(TlsError::ClientCaPem)?;
        roots.add(cert).map_err(TlsError::ClientCaCertificate)?;
    }
    if roots.is_empty() {
        return Err(TlsError::NoClientCa);
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(TlsError::ClientVerifier)
}

/// Reads a client CA bundle: its verifier, and the file's bytes to compare reads by.
pub fn load_client_ca(path: &Path) -> TlsResult<(Arc<dyn ClientCertVerifier>, Vec<u8>)> {
    let pem = crate::error::read(path)?;
    let verifier = client_verifier(&pem).map_err(|e| TlsError::InFile {
        path: path.to_path_buf(),
        source: Box::new(e),
    })?;
    Ok((verifier, pem))
}

/// The client CA bundle, swapped atomically like the serving certificate:
/// handshakes started before a swap finish under the old one.
pub struct ClientCaStore {
    current: ArcSwap<Arc<dyn ClientCertVerifier>>,
}

impl ClientCaStore {
    pub fn new(verifier: Arc<dyn ClientCertVerifier>) -> Arc<ClientCaStore> {
        Arc::new(ClientCaStore {
            current: ArcSwap::from_pointee(verifier),
        })
    }

    pub fn replace(&self, verifier: Arc<dyn ClientCertVerifier>) {
        self.current.store(Arc::new(verifier));
    }

    /// Asks the verifier in force now (a swap meanwhile takes the next call).
    fn with_current<T>(&self, ask: impl FnOnce(&dyn ClientCertVerifier) -> T) -> T {
        ask(self.current.load().as_ref().as_ref())
    }
}

impl fmt::Debug for ClientCaStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientCaStore")
    }
}

impl ClientCertVerifier for ClientCaStore {
    fn client_auth_mandatory(&self) -> bool {
        true
    }

    /// No CA names are sent: they would have to outlive a swap. Clients with
    /// one certificate, as kube-apiserver has per webhook, present it anyway.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        self.with_current(|v| v.verify_client_cert(end_entity, intermediates, now))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.with_current(|v| v.verify_tls12_signature(message, cert, dss))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.with_current(|v| v.verify_tls13_signature(message, cert, dss))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current.load().supported_verify_schemes()
    }
}

/// Whether the client of one webhook-port connection proved who it is: a
/// request extension, read where the review's evidence is written.
///
/// `Verified` only when the TLS handshake took a client certificate, which
/// happens only with `--client-ca` (its verifier requires one and checks it
/// against the bundle). Without `--client-ca` every caller is `Unverified`:
/// anyone who reaches the port could have posted the review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientCert {
    Verified,
    #[default]
    Unverified,
}

impl ClientCert {
    /// What a finished handshake says about its client.
    pub fn of<IO>(connection: &tokio_rustls::server::TlsStream<IO>) -> ClientCert {
        match connection.get_ref().1.peer_certificates() {
            Some(chain) if !chain.is_empty() => ClientCert::Verified,
            _ => ClientCert::Unverified,
        }
    }

    pub fn verified(self) -> bool {
        self == ClientCert::Verified
    }
}
