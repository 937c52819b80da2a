//! What the Secret holds, and what it becomes: the facts [`decide`] reads
//! from the certificates, the caBundle, and the steps taken. Pure: no API
//! call here.

use std::net::IpAddr;

use rcgen::KeyPair;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::error::CertificatesResult;
use super::issue::{issue, new_ca};
use super::pem::{Pair, ServingNames, parse};
use super::rotation::{Facts, RotationStep, Timing, decide};
use crate::pki::keys;

/// What the Secret holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stored {
    pub ca: Option<Pair>,
    pub serving: Option<Pair>,
    pub next: Option<(Pair, i64)>,
    /// The CA before the current one: its certificate only, in the caBundle.
    pub previous: Option<(String, i64)>,
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

#[cfg(test)]
mod tests {
    use super::super::rotation::{Facts, RotationStep, Timing, decide};
    use super::*;
    use k8s_openapi::api::core::v1::Secret;

    const TIMING: Timing = Timing {
        validity: 90,
        renew_before: 45,
        ca_validity: 400,
        ca_renew_before: 200,
        grace: 15,
    };

    fn names() -> ServingNames {
        ServingNames {
            dns: vec!["finalizer-guard.finalizer-guard.svc".into()],
            ips: vec!["127.0.0.1".parse().unwrap()],
        }
    }

    fn facts(ca: i64, serving: i64) -> Facts {
        Facts {
            ca_not_after: Some(ca),
            serving: Some((serving, true)),
            ..Facts::default()
        }
    }

    #[test]
    fn decides_each_step_in_turn() {
        let t = TIMING;
        assert_eq!(decide(&Facts::default(), 0, &t), RotationStep::NewCa);
        // A CA past its end: start over.
        assert_eq!(decide(&facts(100, 100), 100, &t), RotationStep::NewCa);
        // Well within both lifetimes: nothing.
        assert_eq!(decide(&facts(400, 90), 10, &t), RotationStep::Nothing);
        // The serving certificate within its margin: renew it.
        assert_eq!(decide(&facts(400, 90), 45, &t), RotationStep::IssueServing);
        // Missing or not fitting (other CA, other names, key mismatch).
        let mut f = facts(400, 90);
        f.serving = None;
        assert_eq!(decide(&f, 10, &t), RotationStep::IssueServing);
        f.serving = Some((90, false));
        assert_eq!(decide(&f, 10, &t), RotationStep::IssueServing);
        // The CA within its margin: the next CA first.
        assert_eq!(decide(&facts(400, 260), 200, &t), RotationStep::AddNextCa);
        // The next CA waits for the grace period and the caBundle.
        let mut f = facts(400, 300);
        f.next_since = Some(200);
        assert_eq!(decide(&f, 210, &t), RotationStep::Nothing);
        assert_eq!(
            decide(&f, 215, &t),
            RotationStep::Nothing,
            "not in the caBundle yet"
        );
        f.bundle_trusts_next = true;
        assert_eq!(decide(&f, 214, &t), RotationStep::Nothing);
        assert_eq!(decide(&f, 215, &t), RotationStep::SwitchToNextCa);
        // The previous CA stays for the grace period after the switch.
        let mut f = facts(615, 305);
        f.previous_since = Some(215);
        assert_eq!(decide(&f, 229, &t), RotationStep::Nothing);
        assert_eq!(decide(&f, 230, &t), RotationStep::DropPreviousCa);
    }

    #[test]
    fn renews_no_certificate_it_cannot_make_last_longer() {
        // The CA's end caps the serving certificate's: while the next CA
        // waits for the caBundle (a patch refused), renewing again and
        // again would gain nothing.
        let mut f = facts(400, 400);
        f.next_since = Some(200);
        assert_eq!(decide(&f, 360, &TIMING), RotationStep::Nothing);
        // A waiting next CA does not hold back a renewal that gains time.
        let mut f = facts(400, 250);
        f.next_since = Some(200);
        assert_eq!(decide(&f, 210, &TIMING), RotationStep::IssueServing);
    }

    #[test]
    fn refuses_margins_that_overlap() {
        TIMING.check().unwrap();
        for bad in [
            Timing {
                renew_before: 90,
                ..TIMING
            },
            Timing {
                renew_before: 0,
                ..TIMING
            },
            Timing {
                ca_renew_before: 400,
                ..TIMING
            },
            Timing {
                ca_renew_before: 70,
                ..TIMING
            },
            Timing { grace: 0, ..TIMING },
        ] {
            let e = bad.check().unwrap_err().to_string();
            assert!(e.contains("must"), "{e}");
        }
        // A sum that would wrap past i64::MAX is refused, not passed.
        let huge = Timing {
            grace: i64::MAX / 2,
            ..TIMING
        };
        let e = huge.check().unwrap_err().to_string();
        assert!(
            e.contains("--ca-grace") && e.contains("at most 100 years"),
            "{e}"
        );
    }

    /// Steps a Secret through time as the replicas would, with a webhook
    /// configuration that takes every caBundle written.
    #[test]
    fn rotates_through_a_ca_lifetime_always_trusted() {
        let (t, names) = (TIMING, names());
        let mut stored = Stored::default();
        let mut bundle: Vec<u8> = Vec::new();
        let mut seen = Vec::new();
        let mut serving_keys = std::collections::BTreeSet::new();
        for now in (1_000..1_000 + 900).step_by(5) {
            let taken = stored
                .settle(now, &t, &names, Some(&[bundle.clone()]))
                .unwrap();
            seen.extend(taken);
            let serving = stored.serving.clone().unwrap();
            serving_keys.insert(serving.key.clone());
            // What is served now is trusted by the caBundle kube-apiserver
            // has (written last round) and by the one written now.
            let leaf = parse(&serving.cert).unwrap();
            let trusted_by = |b: &[u8]| {
                ders(b).iter().any(|ca| {
                    x509_parser::parse_x509_certificate(ca).is_ok_and(|(_, ca)| {
                        x509_parser::parse_x509_certificate(&leaf.der)
                            .unwrap()
                            .1
                            .verify_signature(Some(ca.public_key()))
                            .is_ok()
                    })
                })
            };
            if !bundle.is_empty() {
                assert!(
                    trusted_by(&bundle),
                    "at {now}: served certificate not in the caBundle"
                );
            }
            bundle = stored.bundle().into_bytes();
            assert!(trusted_by(&bundle));
            assert!(leaf.not_after > now, "at {now}: expired certificate served");
            // The round trip through a Secret keeps everything.
            let mut secret = Secret::default();
            stored.to_secret(&mut secret);
            assert_eq!(Stored::from_secret(&secret), stored);
        }
        assert_eq!(seen[0], RotationStep::NewCa);
        assert!(!seen[1..].contains(&RotationStep::NewCa), "{seen:?}");
        for step in [
            RotationStep::AddNextCa,
            RotationStep::SwitchToNextCa,
            RotationStep::DropPreviousCa,
        ] {
            assert!(seen.iter().filter(|s| **s == step).count() >= 2, "{seen:?}");
        }
        assert!(
            seen.iter()
                .filter(|s| **s == RotationStep::IssueServing)
                .count()
                >= 10,
            "{seen:?}"
        );
        // A key per CA: renewals keep it.
        let switches = seen
            .iter()
            .filter(|s| **s == RotationStep::SwitchToNextCa)
            .count();
        assert_eq!(serving_keys.len(), switches + 1);
    }

    #[test]
    fn a_serving_certificate_for_other_names_or_another_ca_is_replaced() {
        let (t, names) = (TIMING, names());
        let mut stored = Stored::default();
        stored.settle(1_000, &t, &names, None).unwrap();
        assert!(stored.facts(&names, None).serving.unwrap().1);
        let other = ServingNames {
            dns: vec!["elsewhere.example".into()],
            ips: vec![],
        };
        assert!(!stored.facts(&other, None).serving.unwrap().1);
        let mut foreign = Stored::default();
        foreign.settle(1_000, &t, &names, None).unwrap();
        stored.serving = foreign.serving;
        assert!(!stored.facts(&names, None).serving.unwrap().1);
        assert_eq!(
            stored.settle(1_001, &t, &names, None).unwrap(),
            vec![RotationStep::IssueServing]
        );
        assert!(stored.facts(&names, None).serving.unwrap().1);
        // Garbage where a CA should be: a new one.
        stored.ca = Some(Pair {
            cert: "not a certificate".into(),
            key: "not a key".into(),
        });
        assert_eq!(
            stored.settle(1_002, &t, &names, None).unwrap(),
            vec![RotationStep::NewCa]
        );
    }

    #[test]
    fn a_previous_ca_that_is_no_certificate_or_kept_from_the_future_is_dropped() {
        let (t, names) = (TIMING, names());
        let mut stored = Stored::default();
        stored.settle(1_000, &t, &names, None).unwrap();
        let ca = stored.ca.as_ref().unwrap().cert.clone();
        stored.previous = Some(("not a certificate".into(), 1_000));
        assert_eq!(
            stored.settle(1_001, &t, &names, None).unwrap(),
            vec![RotationStep::DropPreviousCa]
        );
        assert_eq!(stored.bundle(), ca);
        // Kept "since" long after now: it would never be dropped.
        stored.previous = Some((ca.clone(), 1_001 + t.grace + 1));
        assert_eq!(
            stored.settle(1_001, &t, &names, None).unwrap(),
            vec![RotationStep::DropPreviousCa]
        );
        // A replica's clock a little ahead is no reason.
        stored.previous = Some((ca.clone(), 1_001 + t.grace));
        assert_eq!(stored.settle(1_001, &t, &names, None).unwrap(), vec![]);
        assert!(stored.previous.is_some());
    }

    #[test]
    fn with_one_ca_the_bundle_is_the_ca_certificate() {
        let mut stored = Stored::default();
        stored.settle(1_000, &TIMING, &names(), None).unwrap();
        assert_eq!(stored.bundle(), stored.ca.as_ref().unwrap().cert);
        stored
            .apply(RotationStep::AddNextCa, 1_200, &TIMING, &names())
            .unwrap();
        assert_eq!(ders(stored.bundle().as_bytes()).len(), 2);
    }

    #[test]
    fn the_next_ca_counts_only_once_every_webhook_trusts_it() {
        let (t, names) = (TIMING, names());
        let mut stored = Stored::default();
        stored.settle(1_000, &t, &names, None).unwrap();
        stored
            .apply(RotationStep::AddNextCa, 1_200, &t, &names)
            .unwrap();
        let old = stored.ca.as_ref().unwrap().cert.clone().into_bytes();
        let both = stored.bundle().into_bytes();
        assert!(
            stored
                .facts(&names, Some(std::slice::from_ref(&both)))
                .bundle_trusts_next
        );
        assert!(
            !stored
                .facts(&names, Some(&[both.clone(), old.clone()]))
                .bundle_trusts_next
        );
        assert!(!stored.facts(&names, Some(&[])).bundle_trusts_next);
        assert!(!stored.facts(&names, None).bundle_trusts_next);
    }
}
