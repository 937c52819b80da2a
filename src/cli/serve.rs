//! `serve`'s flags, self-managed certificates' among them.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::server::self_managed::{DEFAULT_WEBHOOK, ServingNames, Settings, Timing};
use clap::{Args, ValueEnum};

use crate::error::Result;
use crate::flags::{POLICY_ENV, PolicyFlag, own_words, parse_duration, parse_timeout};
use crate::server::{EventsTarget, Limits, RecordConfig, ServeConfig};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
#[command(mut_arg("policy", |a| a.env(POLICY_ENV)))]
pub struct ServeArgs {
    #[command(flatten)]
    pub policy: PolicyFlag,
    /// Serving certificate (PEM). Without --tls-cert and --tls-key: dev mode, a generated certificate.
    #[arg(long, env = "FINALIZER_GUARD_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Serving certificate's private key (PEM).
    #[arg(long, env = "FINALIZER_GUARD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require a client certificate on the webhook port, verified against this CA bundle (PEM):
    /// only kube-apiserver, given a certificate through its AdmissionConfiguration, may call.
    /// Probes then belong on the admin port.
    #[arg(long, env = "FINALIZER_GUARD_CLIENT_CA", value_name = "FILE")]
    pub client_ca: Option<PathBuf>,
    /// Webhook address (TLS).
    #[arg(long, env = "FINALIZER_GUARD_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// Admin address (plain HTTP): /metrics, /healthz, /readyz.
    #[arg(
        long,
        env = "FINALIZER_GUARD_ADMIN_LISTEN",
        default_value = "0.0.0.0:9090"
    )]
    pub admin_listen: SocketAddr,
    /// Largest accepted request body; larger ones get 413.
    #[arg(long, env = "FINALIZER_GUARD_MAX_BODY_BYTES", default_value_t = crate::files::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// How long a client may take to finish the TLS handshake.
    #[arg(long, env = "FINALIZER_GUARD_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = own_words(parse_timeout))]
    pub handshake_timeout: Duration,
    /// How long a client may take to send a request's headers: after the handshake, and on a kept-alive connection from the next request's first byte.
    #[arg(long, env = "FINALIZER_GUARD_HEADER_TIMEOUT", default_value = "10s", value_parser = own_words(parse_timeout))]
    pub header_timeout: Duration,
    /// How long a connection (HTTP/1.1 or HTTP/2) stays open with no request in flight, once it has served one.
    /// Keep it longer than the callers' own idle timeout (kube-apiserver: 90s): a connection closed as its
    /// client reuses it fails that call.
    #[arg(long, env = "FINALIZER_GUARD_IDLE_TIMEOUT", default_value = "120s", value_parser = own_words(parse_timeout))]
    pub idle_timeout: Duration,
    /// How long a client may take to send the request body.
    #[arg(long, env = "FINALIZER_GUARD_BODY_TIMEOUT", default_value = "10s", value_parser = own_words(parse_timeout))]
    pub body_timeout: Duration,
    /// How long a write to a client may make no progress (it does not read its answer) before its connection is closed.
    #[arg(long, env = "FINALIZER_GUARD_WRITE_TIMEOUT", default_value = "10s", value_parser = own_words(parse_timeout))]
    pub write_timeout: Duration,
    /// Most TLS connections served at once; more wait to be accepted.
    #[arg(long, env = "FINALIZER_GUARD_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,
    /// Most request body bytes held in memory at once, across all connections; a body that does not fit waits for room.
    #[arg(long, env = "FINALIZER_GUARD_MAX_INFLIGHT_BODY_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_inflight_body_bytes: usize,
    /// How often the policy and certificate files are re-read.
    #[arg(long, env = "FINALIZER_GUARD_RELOAD_INTERVAL", default_value = "2s", value_parser = own_words(parse_duration))]
    pub reload_interval: Duration,
    /// On SIGTERM, keep serving while unready for this long, so Service endpoints catch up.
    #[arg(long, env = "FINALIZER_GUARD_SHUTDOWN_DELAY", default_value = "5s", value_parser = own_words(parse_duration))]
    pub shutdown_delay: Duration,
    /// Then give in-flight requests this long to finish.
    #[arg(long, env = "FINALIZER_GUARD_SHUTDOWN_TIMEOUT", default_value = "20s", value_parser = own_words(parse_duration))]
    pub shutdown_timeout: Duration,
    /// Dev mode: folder the generated CA (ca.crt) is written to: the user's own, writable by no one else.
    #[arg(long, env = "FINALIZER_GUARD_DEV_CERT_DIR")]
    pub dev_cert_dir: Option<PathBuf>,
    /// Record every judged finalizer removal into this folder, for `test` to replay.
    #[arg(long, env = "FINALIZER_GUARD_RECORD_DIR")]
    pub record_dir: Option<PathBuf>,
    /// Most recordings kept; the oldest are dropped first.
    #[arg(
        long,
        env = "FINALIZER_GUARD_RECORD_MAX_FILES",
        default_value_t = 10_000
    )]
    pub record_max_files: usize,
    /// Most bytes of recordings kept; the oldest are dropped first.
    #[arg(long, env = "FINALIZER_GUARD_RECORD_MAX_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub record_max_bytes: u64,
    /// Write Kubernetes Events for denials and overrides (in-cluster configuration or kubeconfig).
    #[arg(long, env = "FINALIZER_GUARD_EVENTS", default_value_t = true, action = clap::ArgAction::Set)]
    pub events: bool,
    /// How many Events may wait to be sent; more are dropped, never delaying a review.
    #[arg(long, env = "FINALIZER_GUARD_EVENTS_QUEUE", default_value_t = 1024)]
    pub events_queue: usize,
    /// Write Events for reviews whose caller presented no verified client certificate
    /// (all of them without --client-ca). Only where nothing but kube-apiserver can reach
    /// the webhook port (a NetworkPolicy): anyone who can post a review could otherwise
    /// write an Event about any object, in any namespace.
    #[arg(long, env = "FINALIZER_GUARD_EVENTS_UNAUTHENTICATED", default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub events_unauthenticated: bool,
    #[command(flatten)]
    pub cluster_name: crate::flags::ClusterNameFlag,
    /// Log format on standard error.
    #[arg(
        long,
        env = "FINALIZER_GUARD_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub certificates: SelfManagedFlags,
}
impl ServeArgs {
    pub fn into_config(self) -> ServeConfig {
        let limits = Limits {
            max_body_bytes: self.max_body_bytes,
            handshake_timeout: self.handshake_timeout,
            header_timeout: self.header_timeout,
            idle_timeout: self.idle_timeout,
            body_timeout: self.body_timeout,
            write_timeout: self.write_timeout,
            max_connections: self.max_connections,
            max_inflight_body_bytes: self.max_inflight_body_bytes,
            max_waiting_frame_bytes: crate::server::BODY_WAITING_BYTES,
        };
        let record = self.record_dir.map(|dir| RecordConfig {
            dir,
            max_files: self.record_max_files,
            max_bytes: self.record_max_bytes,
        });
        ServeConfig {
            self_managed: self.certificates.settings(self.reload_interval),
            policy: self.policy.file,
            tls: self.tls_cert.zip(self.tls_key),
            client_ca: self.client_ca,
            listen: self.listen,
            admin_listen: self.admin_listen,
            limits,
            reload_interval: self.reload_interval,
            shutdown_delay: self.shutdown_delay,
            shutdown_timeout: self.shutdown_timeout,
            dev_cert_dir: self
                .dev_cert_dir
                .unwrap_or_else(|| std::env::temp_dir().join("finalizer-guard-dev")),
            events: if self.events {
                EventsTarget::Cluster
            } else {
                EventsTarget::Off
            },
            events_queue: self.events_queue,
            events_unauthenticated: self.events_unauthenticated,
            cluster_name: self.cluster_name.name,
            record,
        }
    }
}

/// `serve`'s flags for self-managed certificates ([`crate::server::self_managed`]).
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
        value_parser = own_words(secret_ref),
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
        default_value = "finalizer-guard",
        value_parser = own_words(crate::flags::service_name)
    )]
    pub service: String,
    /// Self-managed certificates: an extra DNS name for the serving certificate (repeatable).
    #[arg(
        long = "certificate-dns",
        env = "FINALIZER_GUARD_CERTIFICATE_DNS",
        value_delimiter = ',',
        value_name = "NAME",
        value_parser = own_words(crate::flags::dns_name)
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
    #[arg(long, env = "FINALIZER_GUARD_CERTIFICATE_VALIDITY", value_name = "DURATION", default_value = "2160h", value_parser = own_words(parse_duration))]
    pub certificate_validity: Duration,
    /// Self-managed certificates: renew the serving certificate this long before it expires.
    #[arg(long, env = "FINALIZER_GUARD_CERTIFICATE_RENEW_BEFORE", value_name = "DURATION", default_value = "720h", value_parser = own_words(parse_duration))]
    pub certificate_renew_before: Duration,
    /// Self-managed certificates: the CA's lifetime.
    #[arg(long, env = "FINALIZER_GUARD_CA_VALIDITY", value_name = "DURATION", default_value = "43800h", value_parser = own_words(parse_duration))]
    pub ca_validity: Duration,
    /// Self-managed certificates: start rotating the CA this long before it expires.
    #[arg(long, env = "FINALIZER_GUARD_CA_RENEW_BEFORE", value_name = "DURATION", default_value = "8760h", value_parser = own_words(parse_duration))]
    pub ca_renew_before: Duration,
    /// Self-managed certificates: the wait between the steps of a CA rotation (the new CA
    /// trusted, then served, then the old one dropped).
    #[arg(long, env = "FINALIZER_GUARD_CA_GRACE", value_name = "DURATION", default_value = "10m", value_parser = own_words(parse_duration))]
    pub ca_grace: Duration,
}

/// `NAMESPACE/NAME`, both DNS labels or subdomains as Kubernetes names them.
fn secret_ref(s: &str) -> Result<(String, String), String> {
    let name = |part: &str| part.len() <= 253 && part.split('.').all(crate::policy::is_dns_label);
    match s.split_once('/') {
        Some((ns, secret)) if crate::policy::is_dns_label(ns) && name(secret) => {
            Ok((ns.to_string(), secret.to_string()))
        }
        _ => Err(format!(
            "{} is not NAMESPACE/NAME (a namespace, then a Secret's name: lowercase letters, digits and '-', the name's parts joined by '.'), e.g. finalizer-guard/finalizer-guard-certificates",
            crate::flags::shown_value(s)
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
        let mut dns = crate::pki::certificates::service_names(&self.service, &namespace);
        dns.extend(self.certificate_dns);
        Some(Settings {
            namespace,
            secret,
            webhook_configuration: self.webhook_configuration,
            webhook_names: self.webhook_names,
            names: ServingNames {
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
