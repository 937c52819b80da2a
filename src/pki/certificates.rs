//! Certificates: a CA and a serving certificate whose SANs name the Service,
//! for `certs` and for `serve`'s dev mode; and client certificates from the
//! same CA, for kube-apiserver when the webhook requires one.
//!
//! Go's TLS stack, and so kube-apiserver, ignores the Common Name: every name
//! a client uses must be a SAN.

use std::fs;
use std::net::IpAddr;
use std::path::Path;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

use crate::error::{Error, Result};
use crate::files::{self, Access};

/// PEM texts of a CA and a serving certificate it signed.
#[derive(Debug, Clone)]
pub struct Bundle {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// `NAME`, `NAME.NS`, `NAME.NS.svc`, `NAME.NS.svc.cluster.local`.
pub fn service_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// A CA able to sign serving certificates.
pub struct CertificateAuthority {
    cert_pem: String,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl CertificateAuthority {
    /// A new self-signed CA valid for `days`.
    pub fn generate(days: u32) -> Result<CertificateAuthority> {
        let key = KeyPair::generate()?;
        let params = ca_params(days);
        let cert = params.self_signed(&key)?;
        Ok(CertificateAuthority {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// An existing CA, from its PEM certificate and key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<CertificateAuthority> {
        let key = KeyPair::from_pem(key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)?;
        Ok(CertificateAuthority {
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
            issuer,
        })
    }

    /// A serving certificate for `dns` names and `ips`, valid for `days`.
    pub fn issue(&self, dns: &[String], ips: &[IpAddr], days: u32) -> Result<Bundle> {
        let mut sans: Vec<String> = dns.to_vec();
        sans.extend(ips.iter().map(ToString::to_string));
        let mut params = CertificateParams::new(sans)?;
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            dns.first().map(String::as_str).unwrap_or("finalizer-guard"),
        );
        params.distinguished_name = dn;
        self.sign(params, ExtendedKeyUsagePurpose::ServerAuth, days)
    }
}

impl CertificateAuthority {
    /// A client certificate for `name` (its Common Name), valid for `days`:
    /// what kube-apiserver presents to a webhook started with `--client-ca`.
    pub fn issue_client(&self, name: &str, days: u32) -> Result<Bundle> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        self.sign(params, ExtendedKeyUsagePurpose::ClientAuth, days)
    }

    /// Signs a leaf certificate for `usage`, valid for `days`, with a new key.
    fn sign(
        &self,
        mut params: CertificateParams,
        usage: ExtendedKeyUsagePurpose,
        days: u32,
    ) -> Result<Bundle> {
        let key = KeyPair::generate()?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        (params.not_before, params.not_after) = validity(days);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Bundle {
            ca_cert_pem: self.cert_pem.clone(),
            ca_key_pem: self.key_pem.clone(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

fn ca_params(days: u32) -> CertificateParams {
    let mut params = ca_named("finalizer-guard CA".into());
    (params.not_before, params.not_after) = validity(days);
    params
}

/// A CA's parameters, its validity still to set: `common_name`, signing
/// certificates (and CRLs) only, with no intermediate below it.
pub(crate) fn ca_named(common_name: String) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// From an hour ago (clock skew between nodes) to `days` ahead.
fn validity(days: u32) -> (OffsetDateTime, OffsetDateTime) {
    let now = OffsetDateTime::now_utc();
    (
        now - Duration::hours(1),
        now + Duration::days(i64::from(days)),
    )
}

/// The caBundle field of a webhook configuration: the CA's PEM, base64-encoded.
pub fn ca_bundle(ca_cert_pem: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(ca_cert_pem)
}

/// Writes `ca.crt`, `ca.key`, `tls.crt`, `tls.key` into `dir`, each a new
/// file renamed into place ([`files::replace`]): the keys readable by the
/// owner only, whatever a file they replace allowed; a symlink there is
/// replaced, not written through.
pub fn write(bundle: &Bundle, dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    write_file(&dir.join("ca.crt"), &bundle.ca_cert_pem, Access::Everyone)?;
    write_file(&dir.join("ca.key"), &bundle.ca_key_pem, Access::Owner)?;
    write_file(&dir.join("tls.crt"), &bundle.cert_pem, Access::Everyone)?;
    write_file(&dir.join("tls.key"), &bundle.key_pem, Access::Owner)?;
    Ok(())
}

/// Writes a client certificate's `client.crt` and `client.key` into `dir`
/// as `write` does: the key readable by the owner only.
pub fn write_client(bundle: &Bundle, dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    write_file(&dir.join("client.crt"), &bundle.cert_pem, Access::Everyone)?;
    write_file(&dir.join("client.key"), &bundle.key_pem, Access::Owner)?;
    Ok(())
}

fn write_file(path: &Path, text: &str, access: Access) -> Result<()> {
    files::replace(path, text.as_bytes(), access).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issues_a_chain_with_sans() {
        let ca = CertificateAuthority::generate(30).unwrap();
        let names = service_names("finalizer-guard", "finalizer-guard");
        assert_eq!(
            names[3],
            "finalizer-guard.finalizer-guard.svc.cluster.local"
        );
        let bundle = ca
            .issue(&names, &["127.0.0.1".parse().unwrap()], 30)
            .unwrap();
        assert!(bundle.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(bundle.key_pem.contains("PRIVATE KEY"));
        let again =
            CertificateAuthority::from_pem(&bundle.ca_cert_pem, &bundle.ca_key_pem).unwrap();
        let second = again.issue(&names, &[], 30).unwrap();
        assert_eq!(second.ca_cert_pem, bundle.ca_cert_pem);
        use base64::Engine;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(ca_bundle(&bundle.ca_cert_pem))
            .unwrap();
        assert_eq!(decoded, bundle.ca_cert_pem.as_bytes());
    }
}
