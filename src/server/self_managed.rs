//! Self-managed certificates (`serve --certificates-secret NS/NAME`): the
//! webhook keeps its own CA and serving certificate in one Secret, serves the
//! serving pair from it, and keeps the caBundle of its own
//! ValidatingWebhookConfiguration current. Nothing to install first (no
//! cert-manager), nothing rendered at install time (no `lookup`, no key in
//! the manifests): what GitOps tools apply is the same bytes every time.
//!
//! Every replica runs the same loop, every `--reload-interval`:
//!
//! 1. read the Secret; when there is none, create it (a new CA and serving
//!    certificate). Replicas race: the one whose `create` wins is served by
//!    all, the others read it back (409 AlreadyExists);
//! 2. decide, from the certificates it holds and the time ([`decide`], pure),
//!    what the Secret needs, and write that with the resourceVersion read
//!    (409 Conflict: another replica wrote first; read again next time);
//! 3. serve the Secret's serving pair (swapped in memory, as a reload of
//!    certificate files is);
//! 4. patch `webhooks[].clientConfig.caBundle` of the webhooks it is told
//!    (`--webhook-name`) to the CAs the Secret holds, when they differ.
//!
//! Rotation never refuses a write: a serving certificate is renewed from the
//! same CA well before it expires (the caBundle does not change); a CA is
//! rotated in three steps a grace period apart: the new CA joins the caBundle
//! (old and new trusted); once the webhook configuration carries it, the
//! serving certificate of the new CA is served; then the old CA leaves.
//!
//! A serving renewal keeps the serving key, so the approval seal derived
//! from it ([`super::tls::seal_key`]) and approvals sealed under it survive
//! the renewal; a new CA comes with a new serving key. Every replica serves
//! the Secret's one key, so every replica seals alike (within a reload
//! interval of a change).
//!
//! What it needs of the API, and no more: create Secrets in its namespace
//! (RBAC cannot limit `create` by name), get and update its own Secret, get
//! and patch its own ValidatingWebhookConfiguration. A refused call is
//! logged with the verb and the object, and the server keeps serving the
//! certificate it has.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde_json::json;
use tokio::sync::watch;

use super::state::{AppState, stopped_signal};
use super::tls::{self, CertStore};

/// The one webhook the chart's configuration names.
pub const DEFAULT_WEBHOOK: &str = "finalizers.finalizer-guard.io";

/// The Secret's keys.
const CA_CRT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const TLS_CRT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";
const NEXT_CA_CRT: &str = "next-ca.crt";
const NEXT_CA_KEY: &str = "next-ca.key";
const PREVIOUS_CA_CRT: &str = "previous-ca.crt";
/// When the next CA joined the caBundle, and when the previous one was
/// replaced (RFC 3339): where the grace periods count from.
const NEXT_SINCE: &str = "finalizer-guard.io/next-ca-since";
const PREVIOUS_SINCE: &str = "finalizer-guard.io/previous-ca-since";

/// Certificates are valid from this long before they are made: clocks of
/// nodes and of kube-apiserver differ.
const BACKDATE_SECONDS: i64 = 300;

/// Why the Secret or the webhook configuration could not be kept current.
#[derive(Debug, thiserror::Error)]
pub enum CertificatesError {
    #[error(
        "forbidden: the webhook's ServiceAccount may not {verb} {object} (grant it: docs/install.md, \"Self-managed certificates\"): {message}"
    )]
    Forbidden {
        verb: &'static str,
        object: String,
        message: String,
    },
    #[error("cannot {verb} {object}: {source}")]
    Api {
        verb: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("validatingwebhookconfiguration {config} has no webhook named {}", names.join(", "))]
    NoWebhook { config: String, names: Vec<String> },
    #[error("no {0} yet: its caBundle is written once it exists")]
    NoConfiguration(String),
    #[error("no Kubernetes API configuration: {0}")]
    Client(String),
    #[error("certificate generation: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the Secret's serving certificate cannot be served: {0}")]
    Tls(#[from] tls::TlsError),
    /// Lifetimes and margins that would make rotations run into each other.
    #[error("{0}")]
    Timing(String),
    #[error("{0}")]
    Other(String),
}

type Result<T, E = CertificatesError> = std::result::Result<T, E>;

/// Lifetimes and margins, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// A serving certificate's lifetime.
    pub validity: i64,
    /// Renew a serving certificate this long before it expires.
    pub renew_before: i64,
    /// A CA's lifetime.
    pub ca_validity: i64,
    /// Start rotating a CA this long before it expires.
    pub ca_renew_before: i64,
    /// Between the steps of a CA rotation: long enough for kube-apiserver to
    /// see the new caBundle and for every replica to read the Secret.
    pub grace: i64,
}

impl Timing {
    /// Refuses margins that would make the rotations run into each other:
    /// a CA rotation (two grace periods) must be over before the serving
    /// certificate it signed has to be renewed.
    pub fn check(&self) -> Result<()> {
        let refuse = |why: String| Err(CertificatesError::Timing(why));
        // A century at most: every sum of these (and the clock) then fits.
        const CENTURY: i64 = 100 * 365 * 86_400;
        for (flag, value) in [
            ("--certificate-validity", self.validity),
            ("--certificate-renew-before", self.renew_before),
            ("--ca-validity", self.ca_validity),
            ("--ca-renew-before", self.ca_renew_before),
            ("--ca-grace", self.grace),
        ] {
            if value > CENTURY {
                return refuse(format!("{flag} ({value}s): at most 100 years"));
            }
        }
        if self.renew_before <= 0 || self.renew_before >= self.validity {
            return refuse(format!(
                "--certificate-renew-before ({}s) must be above 0 and below --certificate-validity ({}s)",
                self.renew_before, self.validity
            ));
        }
        if self.ca_renew_before >= self.ca_validity {
            return refuse(format!(
                "--ca-renew-before ({}s) must be below --ca-validity ({}s)",
                self.ca_renew_before, self.ca_validity
            ));
        }
        if self.grace <= 0 || self.ca_renew_before < self.renew_before + 2 * self.grace {
            return refuse(format!(
                "--ca-renew-before ({}s) must be at least --certificate-renew-before ({}s) plus twice --ca-grace ({}s, above 0): a CA rotation takes two grace periods",
                self.ca_renew_before, self.renew_before, self.grace
            ));
        }
        Ok(())
    }
}

/// What the Secret needs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing: every certificate is good for now.
    Nothing,
    /// No usable CA (none yet, unreadable, or expired): a new CA and serving
    /// certificate, at once. Only at the first start, or after an outage
    /// longer than the CA's renewal margin.
    NewCa,
    /// The CA nears its end: make the next CA, which joins the caBundle.
    AddNextCa,
    /// The caBundle has carried the next CA for the grace period: it signs
    /// a new serving certificate; the old CA stays in the caBundle.
    SwitchToNextCa,
    /// The old CA has stayed in the caBundle for the grace period after the
    /// switch: every replica serves the new certificate; drop it.
    DropPreviousCa,
    /// The serving certificate is missing, not the CA's, not for the names,
    /// or within its renewal margin: issue one from the CA.
    IssueServing,
}

/// What [`decide`] needs to know of the Secret and the webhook configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    /// The CA's expiry; `None`: no CA with its key that parses.
    pub ca_not_after: Option<i64>,
    /// The serving certificate's expiry, and whether it fits (signed by the
    /// CA, its key matching, for exactly the names wanted).
    pub serving: Option<(i64, bool)>,
    /// Since when the next CA is in the Secret.
    pub next_since: Option<i64>,
    /// Since when the previous CA is kept for the caBundle.
    pub previous_since: Option<i64>,
    /// Every webhook the server keeps current trusts the next CA.
    pub bundle_trusts_next: bool,
}

/// What to do, given the certificates and `now` (seconds since the epoch).
pub fn decide(facts: &Facts, now: i64, timing: &Timing) -> Step {
    let Some(ca_end) = facts.ca_not_after else {
        return Step::NewCa;
    };
    if now >= ca_end {
        return Step::NewCa;
    }
    if facts
        .previous_since
        .is_some_and(|since| now >= since + timing.grace)
    {
        return Step::DropPreviousCa;
    }
    match facts.next_since {
        Some(since) if now >= since + timing.grace && facts.bundle_trusts_next => {
            return Step::SwitchToNextCa;
        }
        None if facts.previous_since.is_none() && now >= ca_end - timing.ca_renew_before => {
            return Step::AddNextCa;
        }
        _ => {}
    }
    match facts.serving {
        None | Some((_, false)) => Step::IssueServing,
        // A certificate never outlives its CA: renewing makes sense only
        // when the new one would end later than the one served.
        Some((end, true))
            if now >= end - timing.renew_before && (now + timing.validity).min(ca_end) > end =>
        {
            Step::IssueServing
        }
        Some(_) => Step::Nothing,
    }
}

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
pub struct Names {
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
}

/// One certificate, parsed.
struct Parsed {
    der: Vec<u8>,
    not_after: i64,
}

fn parse(pem: &str) -> Option<Parsed> {
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    Some(Parsed {
        not_after: cert.validity().not_after.timestamp(),
        der: der.as_ref().to_vec(),
    })
}

/// Whether `leaf` was signed by `ca`, and carries exactly `names`.
fn leaf_fits(leaf: &[u8], ca: &[u8], names: &Names) -> bool {
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
fn ders(pem: &[u8]) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(|c| c.ok().map(|c| c.as_ref().to_vec()))
        .collect()
}

impl Stored {
    /// What [`decide`] needs, with what the webhook configuration trusts
    /// (`bundles`: the caBundle of each webhook kept current; `None`: not read).
    pub fn facts(&self, names: &Names, bundles: Option<&[Vec<u8>]>) -> Facts {
        let ca = self
            .ca
            .as_ref()
            .filter(|ca| KeyPair::from_pem(&ca.key).is_ok())
            .and_then(|ca| parse(&ca.cert));
        let serving = match (&ca, &self.serving) {
            (Some(ca), Some(serving)) => parse(&serving.cert).map(|leaf| {
                let fits = leaf_fits(&leaf.der, &ca.der, names)
                    && tls::certified_key(serving.cert.as_bytes(), serving.key.as_bytes()).is_ok();
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
    pub fn apply(&mut self, step: Step, now: i64, timing: &Timing, names: &Names) -> Result<()> {
        match step {
            Step::Nothing => {}
            Step::NewCa => {
                let ca = new_ca(now, timing.ca_validity)?;
                self.serving = Some(issue(&ca, None, now, timing, names)?);
                self.ca = Some(ca);
                self.next = None;
                self.previous = None;
            }
            Step::AddNextCa => self.next = Some((new_ca(now, timing.ca_validity)?, now)),
            Step::SwitchToNextCa => {
                if let Some((next, _)) = self.next.take() {
                    self.serving = Some(issue(&next, None, now, timing, names)?);
                    self.previous = self.ca.take().map(|ca| (ca.cert, now));
                    self.ca = Some(next);
                }
            }
            Step::DropPreviousCa => self.previous = None,
            Step::IssueServing => {
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
        names: &Names,
        bundles: Option<&[Vec<u8>]>,
    ) -> Result<Vec<Step>> {
        let mut taken = Vec::new();
        // A previous CA that is no certificate, or kept since a time more
        // than a grace period ahead (written by hand; a replica's clock a
        // little ahead is allowed for), would stay in the caBundle for good:
        // it is dropped now.
        if self.previous.as_ref().is_some_and(|(cert, since)| {
            parse(cert).is_none() || *since > now.saturating_add(timing.grace)
        }) {
            self.previous = None;
            taken.push(Step::DropPreviousCa);
        }
        for _ in 0..4 {
            let step = decide(&self.facts(names, bundles), now, timing);
            if step == Step::Nothing {
                break;
            }
            self.apply(step, now, timing, names)?;
            taken.push(step);
        }
        Ok(taken)
    }

    /// Reads the Secret's data and annotations; what is missing or does not
    /// decode is absent (and so made anew).
    pub fn from_secret(secret: &Secret) -> Stored {
        let empty = BTreeMap::new();
        let data = secret.data.as_ref().unwrap_or(&empty);
        let text = |key: &str| {
            data.get(key)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
                .filter(|t| !t.trim().is_empty())
        };
        let pair = |cert: &str, key: &str| {
            Some(Pair {
                cert: text(cert)?,
                key: text(key)?,
            })
        };
        let annotations = secret.metadata.annotations.as_ref();
        let since = |key: &str| {
            annotations
                .and_then(|a| a.get(key))
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map(|t| t.as_second())
        };
        Stored {
            ca: pair(CA_CRT, CA_KEY),
            serving: pair(TLS_CRT, TLS_KEY),
            next: pair(NEXT_CA_CRT, NEXT_CA_KEY).zip(since(NEXT_SINCE)),
            previous: text(PREVIOUS_CA_CRT).zip(since(PREVIOUS_SINCE)),
        }
    }

    /// Writes the certificates into `secret`'s data and annotations, leaving
    /// its other keys and annotations alone.
    pub fn to_secret(&self, secret: &mut Secret) {
        let data = secret.data.get_or_insert_with(BTreeMap::new);
        let mut put = |key: &str, value: Option<&str>| match value {
            Some(value) => {
                data.insert(key.to_string(), ByteString(value.as_bytes().to_vec()));
            }
            None => {
                data.remove(key);
            }
        };
        put(CA_CRT, self.ca.as_ref().map(|p| p.cert.as_str()));
        put(CA_KEY, self.ca.as_ref().map(|p| p.key.as_str()));
        put(TLS_CRT, self.serving.as_ref().map(|p| p.cert.as_str()));
        put(TLS_KEY, self.serving.as_ref().map(|p| p.key.as_str()));
        put(
            NEXT_CA_CRT,
            self.next.as_ref().map(|(p, _)| p.cert.as_str()),
        );
        put(NEXT_CA_KEY, self.next.as_ref().map(|(p, _)| p.key.as_str()));
        put(
            PREVIOUS_CA_CRT,
            self.previous.as_ref().map(|(c, _)| c.as_str()),
        );
        let annotations = secret
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        let mut stamp = |key: &str, since: Option<i64>| match since
            .and_then(|s| jiff::Timestamp::from_second(s).ok())
        {
            Some(at) => {
                annotations.insert(key.to_string(), at.to_string());
            }
            None => {
                annotations.remove(key);
            }
        };
        stamp(NEXT_SINCE, self.next.as_ref().map(|(_, s)| *s));
        stamp(PREVIOUS_SINCE, self.previous.as_ref().map(|(_, s)| *s));
    }
}

fn at(seconds: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(seconds).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// A new self-signed CA; its name carries when it was made, so that every
/// CA's subject, which its certificates name as their issuer, differs.
fn new_ca(now: i64, validity: i64) -> Result<Pair> {
    let key = KeyPair::generate()?;
    let made =
        jiff::Timestamp::from_second(now).map_or_else(|_| now.to_string(), |t| t.to_string());
    let mut params = super::certs::ca_named(format!("finalizer-guard CA {made}"));
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
fn issue(ca: &Pair, key: Option<&str>, now: i64, timing: &Timing, names: &Names) -> Result<Pair> {
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

/// The certificate to start serving with, and its seal key.
pub type Initial = (rustls::sign::CertifiedKey, crate::policy::seal::SealKey);

/// With settings: the first round done (the Secret read or made, the
/// caBundle written), the loop to run, and the certificate to start with.
pub async fn start(settings: Option<Settings>) -> crate::error::Result<Option<(Manager, Initial)>> {
    let Some(settings) = settings else {
        return Ok(None);
    };
    let fail = |e: CertificatesError| crate::error::Error::Certificates(e.to_string());
    let mut manager = Manager::new(settings).await.map_err(fail)?;
    let first = manager.first().await.map_err(fail)?;
    Ok(Some((manager, first)))
}

/// Everything the loop needs, resolved from flags.
#[derive(Debug, Clone)]
pub struct Settings {
    pub namespace: String,
    pub secret: String,
    pub webhook_configuration: String,
    /// The webhooks of that configuration whose caBundle is kept current.
    pub webhook_names: Vec<String>,
    pub names: Names,
    pub timing: Timing,
    /// How often the Secret is read.
    pub interval: Duration,
    /// `None`: in-cluster configuration, or a kubeconfig.
    pub api_server: Option<http::Uri>,
}

/// The Secret and webhook configuration, through the API.
pub struct Manager {
    settings: Settings,
    secrets: Api<Secret>,
    configs: Api<ValidatingWebhookConfiguration>,
    /// The serving pair in service, to swap only on a change.
    serving: Option<Pair>,
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Names a refused call by its verb and object.
fn api_error(verb: &'static str, object: String) -> impl FnOnce(kube::Error) -> CertificatesError {
    move |source| match source {
        kube::Error::Api(status) if status.code == 403 => CertificatesError::Forbidden {
            verb,
            object,
            message: status.message,
        },
        source => CertificatesError::Api {
            verb,
            object,
            source,
        },
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == code)
}

impl Manager {
    pub async fn new(settings: Settings) -> Result<Manager> {
        settings.timing.check()?;
        let client = match &settings.api_server {
            None => kube::Client::try_default().await,
            Some(url) => kube::Client::try_from(kube::Config::new(url.clone())),
        }
        .map_err(|e| CertificatesError::Client(e.to_string()))?;
        Ok(Manager {
            secrets: Api::namespaced(client.clone(), &settings.namespace),
            configs: Api::all(client),
            settings,
            serving: None,
        })
    }

    fn secret_name(&self) -> String {
        format!(
            "secret {}/{}",
            self.settings.namespace, self.settings.secret
        )
    }

    fn config_name(&self) -> String {
        format!(
            "validatingwebhookconfiguration {}",
            self.settings.webhook_configuration
        )
    }

    /// One round: the Secret read (made, or brought up to date), the
    /// caBundle patched when it differs. The serving pair to serve, and what
    /// failed without keeping it from being served: a refused update of the
    /// Secret (its pair as read is served), a refused caBundle patch.
    pub async fn reconcile(&self) -> Result<(Pair, Vec<CertificatesError>)> {
        let config = self
            .configs
            .get_opt(&self.settings.webhook_configuration)
            .await
            .map_err(api_error("get", self.config_name()));
        let bundles = match &config {
            Ok(Some(config)) => self.bundles(config).ok(),
            _ => None,
        };
        let (stored, written) = self.secret(bundles.as_deref()).await?;
        let serving = stored.serving.clone().ok_or_else(|| {
            CertificatesError::Other("the Secret holds no serving certificate".into())
        })?;
        let mut failed: Vec<CertificatesError> = written.into_iter().collect();
        match config {
            Ok(Some(config)) => {
                failed.extend(self.patch_bundle(&config, &stored.bundle()).await.err())
            }
            Ok(None) => failed.push(CertificatesError::NoConfiguration(self.config_name())),
            Err(e) => failed.push(e),
        }
        Ok((serving, failed))
    }

    /// The Secret this replica creates when there is none: labelled as the
    /// chart labels its own, of type kubernetes.io/tls.
    fn new_secret(&self) -> Secret {
        let settings = &self.settings;
        Secret {
            metadata: ObjectMeta {
                name: Some(settings.secret.clone()),
                namespace: Some(settings.namespace.clone()),
                labels: Some(BTreeMap::from([
                    ("app.kubernetes.io/name".into(), "finalizer-guard".into()),
                    ("app.kubernetes.io/component".into(), "certificates".into()),
                    (
                        "app.kubernetes.io/managed-by".into(),
                        "finalizer-guard".into(),
                    ),
                ])),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            ..Secret::default()
        }
    }

    /// The Secret as it is once up to date: read, created, or updated; or,
    /// when the update is refused, as read, with the refusal.
    async fn secret(
        &self,
        bundles: Option<&[Vec<u8>]>,
    ) -> Result<(Stored, Option<CertificatesError>)> {
        let (settings, name) = (&self.settings, self.secret_name());
        for _ in 0..3 {
            let existing = self
                .secrets
                .get_opt(&settings.secret)
                .await
                .map_err(api_error("get", name.clone()))?;
            let mut secret = existing.clone().unwrap_or_else(|| self.new_secret());
            let mut stored = Stored::from_secret(&secret);
            let taken = stored.settle(now(), &settings.timing, &settings.names, bundles)?;
            if taken.is_empty() {
                return Ok((stored, None));
            }
            stored.to_secret(&mut secret);
            let written = match existing {
                None => self
                    .secrets
                    .create(&PostParams::default(), &secret)
                    .await
                    .map_err(|e| (e, "create")),
                // The resourceVersion read goes with it: a replica that wrote
                // meanwhile makes this one fail with 409, and read again.
                Some(_) => self
                    .secrets
                    .replace(&settings.secret, &PostParams::default(), &secret)
                    .await
                    .map_err(|e| (e, "update")),
            };
            match written {
                Ok(_) => {
                    tracing::info!(object = %name, steps = ?taken, "certificates Secret written");
                    return Ok((stored, None));
                }
                Err((e, _)) if is_status(&e, 409) => {
                    tracing::debug!(object = %name, "another replica wrote the Secret first; reading it again");
                }
                Err((e, "create")) => {
                    return Err(api_error(
                        "create",
                        format!("secrets in namespace {}", settings.namespace),
                    )(e));
                }
                Err((e, verb)) => {
                    let refused = api_error(verb, name)(e);
                    // What it holds may still be good to serve (a renewal
                    // is due well before the end).
                    let read = Stored::from_secret(existing.as_ref().unwrap_or(&secret));
                    let serving = read.serving.as_ref().filter(|s| {
                        tls::certified_key(s.cert.as_bytes(), s.key.as_bytes()).is_ok()
                    });
                    return match serving {
                        Some(_) => Ok((read, Some(refused))),
                        None => Err(refused),
                    };
                }
            }
        }
        Err(CertificatesError::Other(format!(
            "{name}: written by others three times in a row while updating it; trying again later"
        )))
    }

    /// The caBundle of each webhook kept current.
    fn bundles(&self, config: &ValidatingWebhookConfiguration) -> Result<Vec<Vec<u8>>> {
        let bundles: Vec<Vec<u8>> = config
            .webhooks
            .iter()
            .flatten()
            .filter(|w| self.settings.webhook_names.contains(&w.name))
            .map(|w| {
                w.client_config
                    .ca_bundle
                    .as_ref()
                    .map(|b| b.0.clone())
                    .unwrap_or_default()
            })
            .collect();
        if bundles.is_empty() {
            return Err(CertificatesError::NoWebhook {
                config: self.settings.webhook_configuration.clone(),
                names: self.settings.webhook_names.clone(),
            });
        }
        Ok(bundles)
    }

    /// Patches the caBundle of each webhook kept current that differs from
    /// `bundle`: a JSON patch that tests the object's uid and each
    /// webhook's name at its index, so it writes what was read or nothing.
    async fn patch_bundle(
        &self,
        config: &ValidatingWebhookConfiguration,
        bundle: &str,
    ) -> Result<()> {
        self.bundles(config)?;
        let uid = config.metadata.uid.clone().unwrap_or_default();
        let mut ops = vec![json!({"op": "test", "path": "/metadata/uid", "value": uid})];
        for (index, webhook) in config.webhooks.iter().flatten().enumerate() {
            let current = webhook
                .client_config
                .ca_bundle
                .as_ref()
                .map(|b| b.0.as_slice());
            if !self.settings.webhook_names.contains(&webhook.name)
                || current == Some(bundle.as_bytes())
            {
                continue;
            }
            ops.push(json!({"op": "test", "path": format!("/webhooks/{index}/name"), "value": webhook.name}));
            ops.push(json!({
                "op": "add",
                "path": format!("/webhooks/{index}/clientConfig/caBundle"),
                "value": super::certs::ca_bundle(bundle),
            }));
        }
        if ops.len() == 1 {
            return Ok(());
        }
        let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))
            .map_err(|e| CertificatesError::Other(format!("caBundle patch: {e}")))?;
        self.configs
            .patch(
                &self.settings.webhook_configuration,
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
            .map_err(api_error("patch", self.config_name()))?;
        tracing::info!(config = %self.settings.webhook_configuration, cas = ders(bundle.as_bytes()).len(), "caBundle written");
        Ok(())
    }

    /// Serves `pair` unless it is in service already.
    fn serve(&mut self, pair: Pair, store: &CertStore, state: Option<&AppState>) -> Result<bool> {
        if self.serving.as_ref() == Some(&pair) {
            return Ok(false);
        }
        let certified = tls::certified_key(pair.cert.as_bytes(), pair.key.as_bytes())?;
        let seal = tls::seal_key(pair.key.as_bytes())?;
        store.replace(certified, seal);
        if let (Some(state), Some(expiry)) = (state, store.expiry()) {
            state.metrics.certificate_expires("serving", expiry);
        }
        self.serving = Some(pair);
        Ok(true)
    }

    /// The first round, before the server serves: the certificate to start with.
    pub async fn first(&mut self) -> Result<Initial> {
        let (pair, failed) = self.reconcile().await?;
        for e in failed {
            tracing::error!(error = %e, "certificates not kept current; serving the Secret's certificate, trying again every interval");
        }
        let certified = tls::certified_key(pair.cert.as_bytes(), pair.key.as_bytes())?;
        let seal = tls::seal_key(pair.key.as_bytes())?;
        tracing::info!(object = %self.secret_name(), "serving the certificate of the certificates Secret");
        self.serving = Some(pair);
        Ok((certified, seal))
    }

    /// Every interval, a round; a changed serving pair is swapped in. A
    /// failed round is logged and counted, and the certificate in service
    /// stays. Returns once the server is told it drains: a round under way
    /// finishes, none starts, and the certificate in service stays.
    pub async fn run(
        mut self,
        store: Arc<CertStore>,
        state: Arc<AppState>,
        mut draining: watch::Receiver<bool>,
    ) {
        let mut last_error: Vec<String> = Vec::new();
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.settings.interval) => {}
                () = stopped_signal(&mut draining) => {
                    if *draining.borrow() {
                        tracing::info!(object = %self.secret_name(), "draining: the certificates Secret is left to the pods that stay");
                    }
                    return;
                }
            }
            let failed = match self.reconcile().await {
                Ok((pair, failed)) => {
                    match self.serve(pair, &store, Some(&state)) {
                        Ok(true) => {
                            state.metrics.reload("certificate", true);
                            tracing::info!("serving certificate swapped for the Secret's new one");
                        }
                        Ok(false) => {}
                        Err(e) => {
                            state.metrics.reload("certificate", false);
                            tracing::error!(error = %e, "refused the Secret's serving certificate; keeping the current one");
                        }
                    }
                    failed
                }
                Err(e) => vec![e],
            };
            // Logged when it starts and when it changes, not every interval.
            let text: Vec<String> = failed.iter().map(ToString::to_string).collect();
            if text != last_error {
                for error in text.iter().filter(|e| !last_error.contains(e)) {
                    tracing::error!(%error, "certificates not kept current; serving the current certificate");
                }
                if text.is_empty() {
                    tracing::info!("certificates kept current again");
                }
                last_error = text;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMING: Timing = Timing {
        validity: 90,
        renew_before: 45,
        ca_validity: 400,
        ca_renew_before: 200,
        grace: 15,
    };

    fn names() -> Names {
        Names {
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
        assert_eq!(decide(&Facts::default(), 0, &t), Step::NewCa);
        // A CA past its end: start over.
        assert_eq!(decide(&facts(100, 100), 100, &t), Step::NewCa);
        // Well within both lifetimes: nothing.
        assert_eq!(decide(&facts(400, 90), 10, &t), Step::Nothing);
        // The serving certificate within its margin: renew it.
        assert_eq!(decide(&facts(400, 90), 45, &t), Step::IssueServing);
        // Missing or not fitting (other CA, other names, key mismatch).
        let mut f = facts(400, 90);
        f.serving = None;
        assert_eq!(decide(&f, 10, &t), Step::IssueServing);
        f.serving = Some((90, false));
        assert_eq!(decide(&f, 10, &t), Step::IssueServing);
        // The CA within its margin: the next CA first.
        assert_eq!(decide(&facts(400, 260), 200, &t), Step::AddNextCa);
        // The next CA waits for the grace period and the caBundle.
        let mut f = facts(400, 300);
        f.next_since = Some(200);
        assert_eq!(decide(&f, 210, &t), Step::Nothing);
        assert_eq!(
            decide(&f, 215, &t),
            Step::Nothing,
            "not in the caBundle yet"
        );
        f.bundle_trusts_next = true;
        assert_eq!(decide(&f, 214, &t), Step::Nothing);
        assert_eq!(decide(&f, 215, &t), Step::SwitchToNextCa);
        // The previous CA stays for the grace period after the switch.
        let mut f = facts(615, 305);
        f.previous_since = Some(215);
        assert_eq!(decide(&f, 229, &t), Step::Nothing);
        assert_eq!(decide(&f, 230, &t), Step::DropPreviousCa);
    }

    #[test]
    fn renews_no_certificate_it_cannot_make_last_longer() {
        // The CA's end caps the serving certificate's: while the next CA
        // waits for the caBundle (a patch refused), renewing again and
        // again would gain nothing.
        let mut f = facts(400, 400);
        f.next_since = Some(200);
        assert_eq!(decide(&f, 360, &TIMING), Step::Nothing);
        // A waiting next CA does not hold back a renewal that gains time.
        let mut f = facts(400, 250);
        f.next_since = Some(200);
        assert_eq!(decide(&f, 210, &TIMING), Step::IssueServing);
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
        assert_eq!(seen[0], Step::NewCa);
        assert!(!seen[1..].contains(&Step::NewCa), "{seen:?}");
        for step in [Step::AddNextCa, Step::SwitchToNextCa, Step::DropPreviousCa] {
            assert!(seen.iter().filter(|s| **s == step).count() >= 2, "{seen:?}");
        }
        assert!(
            seen.iter().filter(|s| **s == Step::IssueServing).count() >= 10,
            "{seen:?}"
        );
        // A key per CA: renewals keep it.
        let switches = seen.iter().filter(|s| **s == Step::SwitchToNextCa).count();
        assert_eq!(serving_keys.len(), switches + 1);
    }

    #[test]
    fn a_serving_certificate_for_other_names_or_another_ca_is_replaced() {
        let (t, names) = (TIMING, names());
        let mut stored = Stored::default();
        stored.settle(1_000, &t, &names, None).unwrap();
        assert!(stored.facts(&names, None).serving.unwrap().1);
        let other = Names {
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
            vec![Step::IssueServing]
        );
        assert!(stored.facts(&names, None).serving.unwrap().1);
        // Garbage where a CA should be: a new one.
        stored.ca = Some(Pair {
            cert: "not a certificate".into(),
            key: "not a key".into(),
        });
        assert_eq!(
            stored.settle(1_002, &t, &names, None).unwrap(),
            vec![Step::NewCa]
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
            vec![Step::DropPreviousCa]
        );
        assert_eq!(stored.bundle(), ca);
        // Kept "since" long after now: it would never be dropped.
        stored.previous = Some((ca.clone(), 1_001 + t.grace + 1));
        assert_eq!(
            stored.settle(1_001, &t, &names, None).unwrap(),
            vec![Step::DropPreviousCa]
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
            .apply(Step::AddNextCa, 1_200, &TIMING, &names())
            .unwrap();
        assert_eq!(ders(stored.bundle().as_bytes()).len(), 2);
    }

    #[test]
    fn the_next_ca_counts_only_once_every_webhook_trusts_it() {
        let (t, names) = (TIMING, names());
        let mut stored = Stored::default();
        stored.settle(1_000, &t, &names, None).unwrap();
        stored.apply(Step::AddNextCa, 1_200, &t, &names).unwrap();
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
