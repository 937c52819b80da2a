//! Keys and certificates read from PEM: the key rustls serves (over
//! *ring*), the approval seal key derived from the serving key, expiries,
//! and the fingerprint of a pair to compare reads by. What `serve` and
//! `check` both read.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::TlsError;
use crate::policy::seal::SealKey;

/// A result whose error is a [`TlsError`].
pub type TlsResult<T, E = TlsError> = std::result::Result<T, E>;

pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Parses a PEM certificate chain and private key into a key rustls can serve,
/// refusing a key that does not belong to the certificate.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> TlsResult<CertifiedKey> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<std::result::Result<_, _>>()
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
pub fn seal_key(key_pem: &[u8]) -> TlsResult<SealKey> {
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

/// Reads a certificate and key from files.
pub fn read_pair(cert: &Path, key: &Path) -> TlsResult<(Vec<u8>, Vec<u8>)> {
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
pub fn load_files(cert: &Path, key: &Path) -> TlsResult<(CertifiedKey, SealKey, Vec<u8>)> {
    let (cert_pem, key_pem) = read_pair(cert, key)?;
    let certified = certified_key(&cert_pem, &key_pem)?;
    let seal = seal_key(&key_pem)?;
    Ok((certified, seal, fingerprint(&cert_pem, &key_pem)))
}
