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
use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

pub use crate::error::TlsError;
use crate::policy::seal::SealKey;

type Result<T, E = TlsError> = std::result::Result<T, E>;

pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Parses a PEM certificate chain and private key into a key rustls can serve,
/// refusing a key that does not belong to the certificate.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(TlsError::Certificate)?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(TlsError::PrivateKey)?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(TlsError::KeyMismatch)
}

/// The key two-person approvals are sealed with, derived from the serving
/// private key: every replica serving the same Secret seals alike, and a new
/// serving key voids the approvals sealed with the old one.
pub fn seal_key(key_pem: &[u8]) -> Result<SealKey> {
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(TlsError::PrivateKey)?;
    Ok(SealKey::derive(key.secret_der()))
}

/// When the leaf certificate expires, in seconds since the Unix epoch.
pub fn expiry(key: &CertifiedKey) -> Option<i64> {
    let leaf = key.cert.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// When the first certificate of a PEM bundle to expire expires, in seconds
/// since the Unix epoch: `None` when it holds none that parses.
pub fn bundle_expiry(pem: &[u8]) -> Option<i64> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(|cert| {
            let cert = cert.ok()?;
            let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
            Some(parsed.validity().not_after.timestamp())
        })
        .min()
}

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
) -> Result<ServerConfig> {
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
pub fn client_verifier(ca_pem: &[u8]) -> Result<Arc<dyn ClientCertVerifier>> {
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
pub fn load_client_ca(path: &Path) -> Result<(Arc<dyn ClientCertVerifier>, Vec<u8>)> {
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

/// Reads a certificate and key from files.
pub fn read_pair(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>)> {
    Ok((crate::error::read(cert)?, crate::error::read(key)?))
}

/// One byte string standing for a certificate and key pair, to compare reads by.
pub fn fingerprint(cert_pem: &[u8], key_pem: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + cert_pem.len() + key_pem.len());
    out.extend_from_slice(&(cert_pem.len() as u64).to_be_bytes());
    out.extend_from_slice(cert_pem);
    out.extend_from_slice(key_pem);
    out
}

/// The certificate and key a [`fingerprint`] was made of.
pub fn split_fingerprint(fingerprint: &[u8]) -> (&[u8], &[u8]) {
    let (len, rest) = fingerprint.split_at(8.min(fingerprint.len()));
    let len = u64::from_be_bytes(len.try_into().unwrap_or([0; 8])) as usize;
    rest.split_at(len.min(rest.len()))
}

/// Reads a certificate and key from files: the key rustls serves, and the pair's fingerprint.
pub fn load_files(cert: &Path, key: &Path) -> Result<(CertifiedKey, SealKey, Vec<u8>)> {
    let (cert_pem, key_pem) = read_pair(cert, key)?;
    let certified = certified_key(&cert_pem, &key_pem)?;
    let seal = seal_key(&key_pem)?;
    Ok((certified, seal, fingerprint(&cert_pem, &key_pem)))
}
