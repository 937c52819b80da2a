//! What the Secret holds, and what it becomes: the facts [`decide`] reads
//! from the certificates, the caBundle, and the steps taken. Pure: no API
//! call here.

use std::net::IpAddr;

use rcgen::KeyPair;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::error::CertificatesResult;
use super::issue::{issue, new_ca};
use super::rotation::{Facts, RotationStep, Timing, decide};
use crate::pki::keys;

/// A certificate and its key, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    pub cert: String,
    pub key: String,
}

/// What the Secret holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stored {
    pub ca: Option<Pair>,
    pub serving: Option<Pair>,
    pub next: Option<(Pair, i64)>,
    /// The CA before the current one: its certificate only, in the caBundle.
    pub previous: Option<(String, i64)>,
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

/// Whether `leaf` was signed by `ca`, and carries exactly `names`.
fn leaf_fits(leaf: &[u8], ca: &[u8], names: &ServingNames) -> bool {
    use x509_parser::extensions::GeneralName;
    let (Ok((_, leaf)), Ok((_, ca))) = (
        x509_parser::parse_x509_certificate(leaf),
        x509_parser::parse_x509_certificate(ca),
    ) else {
        return false;
    };
    if leaf.issuer().as_raw() != ca.subject().as_raw()
        || leaf.verify_signature(Some(ca.public_key())).is_err()
    {
        return false;
    }
    let Ok(Some(sans)) = leaf.subject_alternative_name() else {
        return false;
    };
    let (mut dns, mut ips) = (Vec::new(), Vec::new());
    for name in &sans.value.general_names {
        match name {
            GeneralName::DNSName(name) => dns.push((*name).to_string()),
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => ips.push(IpAddr::from(
                    <[u8; 4]>::try_from(*bytes).unwrap_or_default(),
                )),
                16 => ips.push(IpAddr::from(
                    <[u8; 16]>::try_from(*bytes).unwrap_or_default(),
                )),
                _ => return false,
            },
            _ => return false,
        }
    }
    let (mut want_dns, mut want_ips) = (names.dns.clone(), names.ips.clone());
    for list in [&mut dns, &mut want_dns] {
        list.sort();
        list.dedup();
    }
    for list in [&mut ips, &mut want_ips] {
        list.sort();
        list.dedup();
    }
    dns == want_dns && ips == want_ips
}

/// The DER certificates of a PEM bundle.
pub(super) fn ders(pem: &[u8]) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(|c| c.ok().map(|c| c.as_ref().to_vec()))
        .collect()
}

impl Stored {
    /// What [`decide`] needs, with what the webhook configuration trusts
    /// (`bundles`: the caBundle of each webhook kept current; `None`: not read).
    pub fn facts(&self, names: &ServingNames, bundles: Option<&[Vec<u8>]>) -> Facts {
        let ca = self
            .ca
            .as_ref()
            .filter(|ca| KeyPair::from_pem(&ca.key).is_ok())
            .and_then(|ca| parse(&ca.cert));
        let serving = match (&ca, &self.serving) {
            (Some(ca), Some(serving)) => parse(&serving.cert).map(|leaf| {
                let fits = leaf_fits(&leaf.der, &ca.der, names)
                    && keys::certified_key(serving.cert.as_bytes(), serving.key.as_bytes()).is_ok();
                (leaf.not_after, fits)
            }),
            _ => None,
        };
        let next = self
            .next
            .as_ref()
            .filter(|(next, _)| KeyPair::from_pem(&next.key).is_ok())
            .and_then(|(next, since)| Some((parse(&next.cert)?, *since)));
        let bundle_trusts_next = match (&next, bundles) {
            (Some((next, _)), Some(bundles)) => {
                !bundles.is_empty() && bundles.iter().all(|b| ders(b).contains(&next.der))
            }
            _ => false,
        };
        Facts {
            ca_not_after: ca.map(|ca| ca.not_after),
            serving,
            next_since: next.map(|(_, since)| since),
            previous_since: self.previous.as_ref().map(|(_, since)| *since),
            bundle_trusts_next,
        }
    }

    /// The caBundle: every CA a replica may be serving a certificate of, or
    /// soon will: the previous, the current, the next.
    pub fn bundle(&self) -> String {
        let mut bundle = String::new();
        let previous = self.previous.as_ref().map(|(cert, _)| cert.as_str());
        let ca = self.ca.as_ref().map(|ca| ca.cert.as_str());
        let next = self.next.as_ref().map(|(next, _)| next.cert.as_str());
        // Each as stored: with one CA, the caBundle is `ca.crt`'s bytes.
        for cert in [previous, ca, next].into_iter().flatten() {
            bundle.push_str(cert);
            if !cert.ends_with('\n') {
                bundle.push('\n');
            }
        }
        bundle
    }

    /// Takes `step`, at `now`.
    pub fn apply(
        &mut self,
        step: RotationStep,
        now: i64,
        timing: &Timing,
        names: &ServingNames,
    ) -> CertificatesResult<()> {
        match step {
            RotationStep::Nothing => {}
            RotationStep::NewCa => {
                let ca = new_ca(now, timing.ca_validity)?;
                self.serving = Some(issue(&ca, None, now, timing, names)?);
                self.ca = Some(ca);
                self.next = None;
                self.previous = None;
            }
            RotationStep::AddNextCa => self.next = Some((new_ca(now, timing.ca_validity)?, now)),
            RotationStep::SwitchToNextCa => {
                if let Some((next, _)) = self.next.take() {
                    self.serving = Some(issue(&next, None, now, timing, names)?);
                    self.previous = self.ca.take().map(|ca| (ca.cert, now));
                    self.ca = Some(next);
                }
            }
            RotationStep::DropPreviousCa => self.previous = None,
            RotationStep::IssueServing => {
                if let Some(ca) = &self.ca {
                    let key = self.serving.as_ref().map(|s| s.key.as_str());
                    self.serving = Some(issue(ca, key, now, timing, names)?);
                }
            }
        }
        Ok(())
    }

    /// Takes steps until nothing is left to do (a few at most: a new CA,
    /// then nothing). Whether anything changed.
    pub fn settle(
        &mut self,
        now: i64,
        timing: &Timing,
        names: &ServingNames,
        bundles: Option<&[Vec<u8>]>,
    ) -> CertificatesResult<Vec<RotationStep>> {
        let mut taken = Vec::new();
        // A previous CA that is no certificate, or kept since a time more
        // than a grace period ahead (written by hand; a replica's clock a
        // little ahead is allowed for), would stay in the caBundle for good:
        // it is dropped now.
        if self.previous.as_ref().is_some_and(|(cert, since)| {
            parse(cert).is_none() || *since > now.saturating_add(timing.grace)
        }) {
            self.previous = None;
            taken.push(RotationStep::DropPreviousCa);
        }
        for _ in 0..4 {
            let step = decide(&self.facts(names, bundles), now, timing);
            if step == RotationStep::Nothing {
                break;
            }
            self.apply(step, now, timing, names)?;
            taken.push(step);
        }
        Ok(taken)
    }
}
