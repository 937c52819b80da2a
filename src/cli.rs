//! The command line: `serve`, `certs`, `check`, `test`, `policy validate`, `doctor`,
//! and the commands that talk to a cluster, `unstick` and `approve` ([`crate::cluster`]).
//!
//! Each command's arguments are destructured exhaustively in its `run`, so a
//! new flag cannot be silently ignored.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::admission;
use crate::certs;
use crate::error::{Error, Result, TlsError};
use crate::policy::seal::SealKey;
use crate::policy::{self, LoadError, Policy, Verdict};
use crate::server::{self, EventsTarget, Limits, RecordConfig, ServeConfig};

#[derive(Debug, Parser)]
#[command(
    name = "finalizer-guard",
    version,
    about = "A validating admission webhook that guards metadata.finalizers"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the webhook (TLS) and the admin port (metrics, probes).
    Serve(Box<ServeArgs>),
    /// Write a CA and a serving certificate for the webhook's Service (and a client certificate).
    Certs(CertsArgs),
    /// Decide recorded AdmissionReviews offline, exactly as the server would.
    Check(CheckArgs),
    /// Run policy tests: suite files, recordings from `serve --record-dir`, case files.
    Test(TestArgs),
    /// Work with policy files.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Check that a policy lets every built-in controller remove its own finalizers.
    Doctor(DoctorArgs),
    /// Explain what holds stuck objects; with --reason, release them through the webhook.
    Unstick(Box<crate::cluster::unstick::UnstickArgs>),
    /// Two-person rule: approve an override that another person then uses with `unstick`.
    Approve(Box<crate::cluster::approve::ApproveArgs>),
    /// Watch every type's metadata: gauges and a FinalizerStuck Event for objects stuck on finalizers.
    Watch(Box<crate::cluster::watch::WatchArgs>),
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate a policy file: exit 0, or 1 with errors naming the field (and line).
    Validate(ValidateArgs),
    /// Rules for the controllers seen in warn mode's would-deny evidence, as policy YAML.
    Suggest(SuggestArgs),
}

#[derive(Debug, Args)]
pub struct SuggestArgs {
    /// Print this policy with the suggested rules added (rules it already has are not repeated).
    #[arg(long, value_name = "POLICY")]
    pub merge: Option<PathBuf>,
    /// The webhook's JSON audit records, recordings (files or a --record-dir folder),
    /// or kube-apiserver's audit log: told apart by their content.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The policy file.
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// Decide every case under this policy instead of the suites' own (shadow replay).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Suite files (YAML), recordings or case files (JSON), or folders of them.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// The environment variable of `serve --policy` (and `check --policy`).
pub const POLICY_ENV: &str = "FINALIZER_GUARD_POLICY";

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Policy file (YAML). Without --cluster: default $FINALIZER_GUARD_POLICY, then the
    /// embedded default policy. With --cluster: default the cluster's policy (its
    /// ConfigMap); $FINALIZER_GUARD_POLICY is not read there, only --policy replaces it.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Read every finalizer living in the cluster and say who may remove each under the
    /// policy. Exit 0 when every type was read and enforce would block none; 1 when it
    /// would, or when the read is incomplete (a type or APIService could not be read);
    /// 2 on usage or connection errors.
    #[arg(long)]
    pub cluster: bool,
    /// Output format (with --cluster).
    #[arg(
        short = 'o',
        long,
        value_enum,
        value_name = "FORMAT",
        requires = "cluster"
    )]
    pub output: Option<crate::cluster::doctor::OutputFormat>,
    #[command(flatten)]
    pub connection: crate::cluster::Connection,
}

impl DoctorArgs {
    /// `doctor --cluster`'s arguments; `None` for the offline check.
    pub fn cluster(self) -> std::result::Result<crate::cluster::doctor::DoctorCluster, DoctorArgs> {
        if !self.cluster {
            return Err(self);
        }
        let DoctorArgs {
            policy,
            cluster: _,
            output,
            connection,
        } = self;
        Ok(crate::cluster::doctor::DoctorCluster {
            policy,
            output,
            connection,
        })
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Policy file (YAML). Default: the embedded default policy.
    #[arg(long, env = "FINALIZER_GUARD_POLICY")]
    pub policy: Option<PathBuf>,
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
    #[arg(long, env = "FINALIZER_GUARD_MAX_BODY_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// How long a client may take to finish the TLS handshake.
    #[arg(long, env = "FINALIZER_GUARD_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub handshake_timeout: Duration,
    /// How long a client may take to send a request's headers (and an idle kept-alive connection stays open).
    #[arg(long, env = "FINALIZER_GUARD_HEADER_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: Duration,
    /// How long a client may take to send the request body.
    #[arg(long, env = "FINALIZER_GUARD_BODY_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub body_timeout: Duration,
    /// Most TLS connections served at once; more wait to be accepted.
    #[arg(long, env = "FINALIZER_GUARD_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,
    /// Most request body bytes held in memory at once, across all connections; a body that does not fit waits for room.
    #[arg(long, env = "FINALIZER_GUARD_MAX_INFLIGHT_BODY_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_inflight_body_bytes: usize,
    /// How often the policy and certificate files are re-read.
    #[arg(long, env = "FINALIZER_GUARD_RELOAD_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub reload_interval: Duration,
    /// On SIGTERM, keep serving while unready for this long, so Service endpoints catch up.
    #[arg(long, env = "FINALIZER_GUARD_SHUTDOWN_DELAY", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,
    /// Then give in-flight requests this long to finish.
    #[arg(long, env = "FINALIZER_GUARD_SHUTDOWN_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
    /// Dev mode: folder the generated CA (ca.crt) is written to.
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
    /// Log format on standard error.
    #[arg(
        long,
        env = "FINALIZER_GUARD_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
}

#[derive(Debug, Args)]
pub struct CertsArgs {
    /// The webhook's Service name.
    #[arg(
        long,
        env = "FINALIZER_GUARD_SERVICE",
        default_value = "finalizer-guard"
    )]
    pub service: String,
    /// The webhook's namespace.
    #[arg(
        long,
        env = "FINALIZER_GUARD_NAMESPACE",
        default_value = "finalizer-guard"
    )]
    pub namespace: String,
    /// Output folder for ca.crt, ca.key, tls.crt, tls.key. An existing ca.crt and ca.key there are reused.
    #[arg(long, env = "FINALIZER_GUARD_CERTS_OUT", default_value = "certs")]
    pub out: PathBuf,
    /// Extra DNS name for the serving certificate (repeatable).
    #[arg(long = "dns", value_name = "NAME")]
    pub dns: Vec<String>,
    /// Extra IP address for the serving certificate (repeatable).
    #[arg(long = "ip", value_name = "ADDR")]
    pub ip: Vec<IpAddr>,
    /// Validity of the serving certificate, in days.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
    /// Validity of a new CA, in days.
    #[arg(long, default_value_t = 3650)]
    pub ca_days: u32,
    /// Also write client.crt and client.key, a client certificate with this Common Name
    /// signed by the same CA: for kube-apiserver, when `serve --client-ca` requires one.
    #[arg(long, value_name = "NAME")]
    pub client: Option<String>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Policy file (YAML). Default: the embedded default policy.
    #[arg(long, env = "FINALIZER_GUARD_POLICY")]
    pub policy: Option<PathBuf>,
    /// One JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
    /// The webhook's serving key (PEM): two-person approvals are sealed and
    /// verified with it as the webhook does. Without it, an approval cannot
    /// be verified and a removal relying on one is denied.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// AdmissionReview files.
    #[arg(required = true, value_name = "REVIEW.json")]
    pub reviews: Vec<PathBuf>,
}

/// Parses `500ms`, `5s`, `2m`, `1h`, `1h30m` (and ISO 8601 `PT5S`). The error
/// says what is accepted: it is what a person reads after a typo.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    const ACCEPTED: &str = "a number and a unit, ms, s, m or h: e.g. 500ms, 30s, 30m, 2h or 1h30m";
    let d: jiff::SignedDuration = s.parse().map_err(|_| {
        if s.parse::<jiff::Span>().is_ok() {
            format!(
                "{s:?}: days, weeks, months and years are not accepted (their length varies); give {ACCEPTED}"
            )
        } else {
            format!("{s:?} is not a duration: give {ACCEPTED}")
        }
    })?;
    Duration::try_from(d).map_err(|_| format!("{s:?} is negative: give {ACCEPTED}"))
}

/// Loads `--policy`, or the embedded default.
fn policy_flag(path: Option<&std::path::Path>) -> Result<Policy> {
    match path {
        None => Ok(Policy::embedded_default()),
        Some(path) => policy::load(path).map_err(|e| Error::policy(path, e)),
    }
}

impl ServeArgs {
    pub fn log_format(&self) -> LogFormat {
        self.log_format
    }

    pub fn into_config(self) -> ServeConfig {
        let ServeArgs {
            policy,
            tls_cert,
            tls_key,
            client_ca,
            listen,
            admin_listen,
            max_body_bytes,
            handshake_timeout,
            header_timeout,
            body_timeout,
            max_connections,
            max_inflight_body_bytes,
            reload_interval,
            shutdown_delay,
            shutdown_timeout,
            dev_cert_dir,
            record_dir,
            record_max_files,
            record_max_bytes,
            events,
            events_queue,
            log_format: _,
        } = self;
        ServeConfig {
            policy,
            tls: tls_cert.zip(tls_key),
            client_ca,
            listen,
            admin_listen,
            limits: Limits {
                max_body_bytes,
                handshake_timeout,
                header_timeout,
                body_timeout,
                max_connections,
                max_inflight_body_bytes,
            },
            reload_interval,
            shutdown_delay,
            shutdown_timeout,
            dev_cert_dir: dev_cert_dir
                .unwrap_or_else(|| std::env::temp_dir().join("finalizer-guard-dev")),
            events: if events {
                EventsTarget::Cluster
            } else {
                EventsTarget::Off
            },
            events_queue,
            record: record_dir.map(|dir| RecordConfig {
                dir,
                max_files: record_max_files,
                max_bytes: record_max_bytes,
            }),
        }
    }
}

pub async fn serve(args: ServeArgs) -> Result<()> {
    server::run(args.into_config()).await
}

pub fn certs(args: CertsArgs) -> Result<()> {
    let CertsArgs {
        service,
        namespace,
        out,
        dns,
        ip,
        days,
        ca_days,
        client,
    } = args;
    let (ca_crt, ca_key) = (out.join("ca.crt"), out.join("ca.key"));
    let authority = if ca_crt.exists() && ca_key.exists() {
        let cert = std::fs::read_to_string(&ca_crt).map_err(|e| Error::io(&ca_crt, e))?;
        let key = std::fs::read_to_string(&ca_key).map_err(|e| Error::io(&ca_key, e))?;
        eprintln!("reusing the CA in {}", out.display());
        certs::Authority::from_pem(&cert, &key)?
    } else {
        certs::Authority::generate(ca_days)?
    };
    let mut names = certs::service_names(&service, &namespace);
    names.extend(dns);
    let bundle = authority.issue(&names, &ip, days)?;
    certs::write(&bundle, &out)?;
    eprintln!(
        "wrote {0}/ca.crt, {0}/ca.key, {0}/tls.crt, {0}/tls.key (SANs: {1}); caBundle:",
        out.display(),
        names
            .iter()
            .cloned()
            .chain(ip.iter().map(ToString::to_string))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(name) = client {
        let client_bundle = authority.issue_client(&name, days)?;
        certs::write_client(&client_bundle, &out)?;
        eprintln!(
            "wrote {0}/client.crt, {0}/client.key (client certificate, CN {name})",
            out.display()
        );
    }
    println!("{}", certs::ca_bundle(&bundle.ca_cert_pem));
    Ok(())
}

/// What `check` concluded for one file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CheckLine {
    pub file: String,
    /// `None` when the file could not be decided.
    pub allowed: Option<bool>,
    pub decision: Option<Verdict>,
    pub message: Option<String>,
    pub warnings: Vec<String>,
    pub error: Option<String>,
}

impl CheckLine {
    fn text(&self) -> String {
        match (&self.error, self.allowed) {
            (Some(e), _) => format!("{}: error: {e}", self.file),
            (None, Some(false)) => format!(
                "{}: denied: {}",
                self.file,
                self.message.as_deref().unwrap_or_default()
            ),
            (None, _) => format!("{}: allowed", self.file),
        }
    }
}

/// Decides one file with the server's own function.
pub fn check_file(
    policy: &Policy,
    seal_key: Option<&SealKey>,
    path: &std::path::Path,
) -> CheckLine {
    let file = path.display().to_string();
    let failed = |e: String| CheckLine {
        file: file.clone(),
        allowed: None,
        decision: None,
        message: None,
        warnings: Vec::new(),
        error: Some(e),
    };
    let body = match std::fs::read(path) {
        Ok(body) => body,
        Err(e) => return failed(e.to_string()),
    };
    match admission::review_with(policy, &body, jiff::Timestamp::now(), seal_key) {
        Ok(r) => CheckLine {
            file,
            allowed: Some(r.allowed()),
            decision: Some(r.verdict()),
            message: r.message,
            warnings: r.warnings,
            error: None,
        },
        Err(e) => failed(e.to_string()),
    }
}

/// Exit code: 0 all allowed, 1 any denied, 2 any file not decided.
pub fn check(args: CheckArgs) -> Result<i32> {
    let CheckArgs {
        policy,
        json,
        tls_key,
        reviews,
    } = args;
    let policy = policy_flag(policy.as_deref())?;
    let seal_key = match tls_key {
        None => None,
        Some(path) => {
            let pem = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
            let key = server::tls::seal_key(&pem).map_err(|e| TlsError::InFile {
                path: path.clone(),
                source: Box::new(e),
            })?;
            Some(key)
        }
    };
    let mut out = std::io::stdout().lock();
    let (mut denied, mut errors) = (false, false);
    for path in &reviews {
        let line = check_file(&policy, seal_key.as_ref(), path);
        denied |= line.allowed == Some(false);
        errors |= line.error.is_some();
        let text = if json {
            serde_json::to_string(&line).expect("a check line always serializes")
        } else {
            line.text()
        };
        writeln!(out, "{text}").map_err(|e| Error::io("stdout", e))?;
    }
    Ok(if errors {
        2
    } else if denied {
        1
    } else {
        0
    })
}

/// `test`: exit 0 when every case passed, 1 when any failed or changed, 2
/// when an input could not be read (as `check` and `policy validate`).
pub fn test(args: TestArgs) -> Result<i32> {
    let TestArgs { policy, paths } = args;
    let policy = policy.map(|p| policy_flag(Some(&p))).transpose()?;
    let outcomes = crate::suite::run(&paths, policy.as_ref());
    crate::suite::report(&outcomes, &mut std::io::stdout().lock())
}

/// `policy validate`: exit 0, or 1 with one error per line; 2 when the file
/// cannot be read. It refuses what `serve` refuses, through the same checks:
/// the policy parser, then [`crate::doctor::servable`].
pub fn validate(args: ValidateArgs) -> Result<i32> {
    let ValidateArgs { file } = args;
    let policy = match policy::load(&file) {
        Ok(policy) => policy,
        Err(LoadError::Invalid(invalid)) => {
            for e in &invalid.0 {
                println!("{}: {e}", file.display());
            }
            return Ok(1);
        }
        Err(e) => return Err(Error::policy(&file, e)),
    };
    match crate::doctor::servable(&policy) {
        Err(blocked) => {
            println!(
                "{}: {}",
                file.display(),
                Error::BlocksBuiltinControllers(blocked)
            );
            Ok(1)
        }
        Ok(warned) => {
            for b in &warned {
                eprintln!(
                    "warning: {}: served in warn mode, refused in enforce mode: it would block the {b}",
                    file.display()
                );
            }
            println!(
                "{}: valid (mode {}, {} rules, builtinControllers {}, override annotation {})",
                file.display(),
                policy.mode.as_str(),
                policy.rules.len(),
                policy.builtin_controllers,
                policy.override_settings.annotation
            );
            // Valid, but what can match nothing was surely meant to match something.
            for warning in policy.warnings() {
                println!("{}: warning: {warning}", file.display());
            }
            Ok(0)
        }
    }
}

/// `policy suggest`: the policy YAML on standard output, what was read on
/// standard error. Exit 0, or 2 when a path holds no evidence or the policy to
/// merge into is not valid.
pub fn suggest(args: SuggestArgs) -> Result<i32> {
    let SuggestArgs { merge, paths } = args;
    let base = match &merge {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
            let policy =
                Policy::from_yaml(&text).map_err(|e| Error::policy(path, LoadError::Invalid(e)))?;
            Some((text, policy))
        }
        None => None,
    };
    let mut evidence = crate::suggest::Evidence::default();
    for path in &paths {
        if let Err(e) = crate::suggest::read_path(path, &mut evidence) {
            eprintln!("error: {e}");
            return Ok(2);
        }
    }
    let read: Vec<String> = evidence
        .read
        .iter()
        .map(|(source, n)| format!("{n} {}", source.describe()))
        .collect();
    eprintln!(
        "read {}; {} would-deny removal(s)",
        read.join(", "),
        evidence.seen.len()
    );
    let suggestions = crate::suggest::suggest(&evidence.seen, base.as_ref().map(|(_, p)| p));
    let yaml = crate::suggest::render(
        &suggestions,
        base.as_ref().map(|(text, policy)| (text.as_str(), policy)),
    );
    print!("{yaml}");
    Ok(0)
}

/// `doctor`: exit 0 when every built-in controller may remove its finalizers, 1 otherwise.
pub fn doctor(args: DoctorArgs) -> Result<i32> {
    let DoctorArgs {
        policy,
        cluster: _,
        output: _,
        connection,
    } = args;
    if connection.kubeconfig.is_some() || connection.context.is_some() {
        eprintln!("error: --kubeconfig and --context talk to a cluster: add --cluster");
        return Ok(2);
    }
    // Offline, the environment names the policy as it does for `serve`
    // (clap's `env` is not used: `doctor --cluster` must not read it).
    let policy = policy.or_else(|| {
        std::env::var_os(POLICY_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    let policy = policy_flag(policy.as_deref())?;
    let blocked = crate::doctor::check(&policy);
    let checked = crate::doctor::checked();
    for b in &blocked {
        println!("BLOCKED {b}");
    }
    if blocked.is_empty() {
        println!("ok: all {checked} built-in controller removals are authorized");
        Ok(0)
    } else {
        println!(
            "{} of {checked} built-in controller removals would be blocked: \
             set builtinControllers: true or add rules for them",
            blocked.len()
        );
        Ok(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("-5s").unwrap_err().contains("negative"));
        for (typed, said) in [
            (
                "soon",
                "\"soon\" is not a duration: give a number and a unit, ms, s, m or h",
            ),
            ("30", "\"30\" is not a duration"),
            (
                "1y",
                "\"1y\": days, weeks, months and years are not accepted",
            ),
            (
                "2d",
                "\"2d\": days, weeks, months and years are not accepted",
            ),
        ] {
            let e = parse_duration(typed).unwrap_err();
            assert!(e.starts_with(said), "{typed}: {e}");
            assert!(e.contains("30m"), "{typed}: {e}");
            assert!(!e.contains("jiff"), "{typed}: no library talk: {e}");
        }
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
