//! `serve`'s flags for self-managed certificates ([`crate::server::self_managed`]).

use std::net::IpAddr;
use std::time::Duration;

use clap::Args;

use crate::flags::parse_duration;
use crate::server::self_managed::{DEFAULT_WEBHOOK, Names, Settings, Timing};

#[derive(Debug, Clone, Args)]
pub struct SelfManagedFlags {
    /// Self-managed certificates: keep the CA and serving certificate in this Secret
    /// (NAMESPACE/NAME; created when missing, rotated before expiry), serve its serving
    /// certificate, and keep --webhook-configuration's caBundle current. Needs no
    /// cert-manager; in place of --tls-cert and --tls-key.
    #[arg(
        long,
        env = "FINALIZER_GUARD_CERTIFICATES_SECRET",
        value_name = "NAMESPACE/NAME",
        value_parser = secret_ref,
        conflicts_with_all = ["tls_cert", "tls_key"]
    )]
    pub certificates_secret: Option<(String, String)>,
    /// Self-managed certificates: the ValidatingWebhookConfiguration whose caBundle is kept current.
    #[arg(
        long,
        env = "FINALIZER_GUARD_WEBHOOK_CONFIGURATION",
        value_name = "NAME",
        default_value = "finalizer-guard"
    )]
    pub webhook_configuration: String,
    /// Self-managed certificates: a webhook of that configuration whose caBundle is kept
    /// current (repeatable); the others are left alone.
    #[arg(long = "webhook-name", env = "FINALIZER_GUARD_WEBHOOK_NAME", value_delimiter = ',', value_name = "NAME", default_value = DEFAULT_WEBHOOK)]
    pub webhook_names: Vec<String>,
    /// Self-managed certificates: the Service the serving certificate is for (its four DNS
    /// names, in the Secret's namespace).
    #[arg(
        long,
        env = "FINALIZER_GUARD_SERVICE",
        value_name = "NAME",
        default_value = "finalizer-guard"
    )]
    pub service: String,
    /// Self-managed certificates: an extra DNS name for the serving certificate (repeatable).
    #[arg(
        long = "certificate-dns",
        env = "FINALIZER_GUARD_CERTIFICATE_DNS",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub certificate_dns: Vec<String>,
    /// Self-managed certificates: an extra IP address for the serving certificate (repeatable).
    #[arg(
        long = "certificate-ip",
        env = "FINALIZER_GUARD_CERTIFICATE_IP",
        value_delimiter = ',',
        value_name = "ADDR"
    )]
    pub certificate_ip: Vec<IpAddr>,
    /// Self-managed certificates: the serving certificate's lifetime.
    #[arg(long, env = "FINALIZER_GUARD_CERTIFICATE_VALIDITY", value_name = "DURATION", default_value = "2160h", value_parser = parse_duration)]
    pub certificate_validity: Duration,
    /// Self-managed certificates: renew the serving certificate this long before it expires.
    #[arg(long, env = "FINALIZER_GUARD_CERTIFICATE_RENEW_BEFORE", value_name = "DURATION", default_value = "720h", value_parser = parse_duration)]
    pub certificate_renew_before: Duration,
    /// Self-managed certificates: the CA's lifetime.
    #[arg(long, env = "FINALIZER_GUARD_CA_VALIDITY", value_name = "DURATION", default_value = "43800h", value_parser = parse_duration)]
    pub ca_validity: Duration,
    /// Self-managed certificates: start rotating the CA this long before it expires.
    #[arg(long, env = "FINALIZER_GUARD_CA_RENEW_BEFORE", value_name = "DURATION", default_value = "8760h", value_parser = parse_duration)]
    pub ca_renew_before: Duration,
    /// Self-managed certificates: the wait between the steps of a CA rotation (the new CA
    /// trusted, then served, then the old one dropped).
    #[arg(long, env = "FINALIZER_GUARD_CA_GRACE", value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub ca_grace: Duration,
}

/// `NAMESPACE/NAME`, both DNS labels or subdomains as Kubernetes names them.
fn secret_ref(s: &str) -> Result<(String, String), String> {
    let valid = |part: &str| {
        !part.is_empty()
            && part.len() <= 253
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'))
    };
    match s.split_once('/') {
        Some((ns, name)) if valid(ns) && valid(name) => Ok((ns.to_string(), name.to_string())),
        _ => Err(format!(
            "{} is not NAMESPACE/NAME (lowercase letters, digits, '-' and '.'), e.g. finalizer-guard/finalizer-guard-certificates",
            crate::output::quoted(s)
        )),
    }
}

fn seconds(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX / 4)
}

impl SelfManagedFlags {
    /// The loop's settings, when `--certificates-secret` is given.
    pub fn settings(self, interval: Duration) -> Option<Settings> {
        let (namespace, secret) = self.certificates_secret?;
        let mut dns = crate::server::certs::service_names(&self.service, &namespace);
        dns.extend(self.certificate_dns);
        Some(Settings {
            namespace,
            secret,
            webhook_configuration: self.webhook_configuration,
            webhook_names: self.webhook_names,
            names: Names {
                dns,
                ips: self.certificate_ip,
            },
            timing: Timing {
                validity: seconds(self.certificate_validity),
                renew_before: seconds(self.certificate_renew_before),
                ca_validity: seconds(self.ca_validity),
                ca_renew_before: seconds(self.ca_renew_before),
                grace: seconds(self.ca_grace),
            },
            interval,
            api_server: None,
        })
    }
}
