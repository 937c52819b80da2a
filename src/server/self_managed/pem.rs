//! A certificate pair as the Secret holds it, the names a serving
//! certificate carries, and one certificate read from PEM: what both the
//! issuing and the stored state build on.

use std::net::IpAddr;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// A certificate and its key, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    pub cert: String,
    pub key: String,
}

/// The names the serving certificate carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingNames {
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
}

/// One certificate, parsed.
pub(super) struct ParsedCertificate {
    pub(super) der: Vec<u8>,
    pub(super) not_after: i64,
}

pub(super) fn parse(pem: &str) -> Option<ParsedCertificate> {
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    Some(ParsedCertificate {
        not_after: cert.validity().not_after.timestamp(),
        der: der.as_ref().to_vec(),
    })
}
