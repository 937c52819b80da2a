//! Certificates made for the Secret: a new CA, a serving certificate from it.

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::error::CertificatesResult;
use super::pem::{Pair, ServingNames, parse};
use super::rotation::Timing;

/// Certificates are valid from this long before they are made: clocks of
/// nodes and of kube-apiserver differ.
const BACKDATE_SECONDS: i64 = 300;

fn at(seconds: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(seconds).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// A new self-signed CA; its name carries when it was made, so that every
/// CA's subject, which its certificates name as their issuer, differs.
pub(super) fn new_ca(now: i64, validity: i64) -> CertificatesResult<Pair> {
    let key = KeyPair::generate()?;
    let made =
        jiff::Timestamp::from_second(now).map_or_else(|_| now.to_string(), |t| t.to_string());
    let mut params = crate::pki::certificates::ca_named(format!("finalizer-guard CA {made}"));
    params.not_before = at(now - BACKDATE_SECONDS);
    params.not_after = at(now + validity);
    let cert = params.self_signed(&key)?;
    Ok(Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A serving certificate from `ca` for `names`, with `key` when given (a
/// renewal) or a new one; it never outlives the CA.
pub(super) fn issue(
    ca: &Pair,
    key: Option<&str>,
    now: i64,
    timing: &Timing,
    names: &ServingNames,
) -> CertificatesResult<Pair> {
    let issuer = Issuer::from_ca_cert_pem(&ca.cert, KeyPair::from_pem(&ca.key)?)?;
    let ca_end = parse(&ca.cert).map_or(now + timing.validity, |ca| ca.not_after);
    let key = match key.map(KeyPair::from_pem) {
        Some(Ok(key)) => key,
        _ => KeyPair::generate()?,
    };
    let mut sans = names.dns.clone();
    sans.extend(names.ips.iter().map(ToString::to_string));
    let mut params = CertificateParams::new(sans)?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        names.dns.first().map_or("finalizer-guard", String::as_str),
    );
    params.distinguished_name = dn;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = at(now - BACKDATE_SECONDS);
    params.not_after = at((now + timing.validity).min(ca_end));
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}
