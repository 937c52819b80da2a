//! The command line: `serve`, `certs`, `check`, `test`, `policy validate`, `doctor`,
//! and the commands that talk to a cluster, `unstick`, `approve` and `watch` ([`crate::cluster`]).
//!
//! Each command's arguments are destructured exhaustively in its `run`, so a
//! new flag cannot be silently ignored.

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

use crate::admission;
use crate::cluster::approve::Approve;
use crate::cluster::doctor::DoctorCluster;
use crate::cluster::unstick::{Release, Unstick};
use crate::cluster::watch::Watch;
use crate::cluster::{Connection, DryRunFlag, Selection, Targets};
use crate::error::{Error, Result, TlsError};
use crate::flags::{MaxBodyFlag, POLICY_ENV, PolicyFlag, parse_duration};
use crate::output::{Format, OutputFlag, Printer, Report, escape};
use crate::policy::seal::SealKey;
use crate::policy::{self, LoadError, Policy, Verdict};
use crate::server::certs;
use crate::server::{self, EventsTarget, Limits, RecordConfig, ServeConfig};

#[derive(Debug, Parser)]
#[command(
    name = "finalizer-guard",
    version = crate::version::LINE,
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
    Unstick(Box<UnstickArgs>),
    /// Two-person rule: approve an override that another person then uses with `unstick`.
    Approve(Box<ApproveArgs>),
    /// Watch every type's metadata: gauges and a FinalizerStuck Event for objects stuck on finalizers.
    Watch(Box<WatchArgs>),
    /// Print the version, the commit, the target and the build date (as --version, one field a line).
    Version(VersionArgs),
}

#[derive(Debug, Args)]
pub struct VersionArgs {
    #[command(flatten)]
    pub output: OutputFlag,
}

/// `version`: exit 0.
pub fn version(args: VersionArgs) -> Result<i32> {
    let VersionArgs { output } = args;
    Printer::stdio(output.format)
        .report(&crate::version::Info::of_this_build())
        .map_err(stdout)?;
    Ok(0)
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate a policy file: exit 0, or 1 with errors naming the field (and line).
    Validate(ValidateArgs),
    /// Rules for the controllers seen in warn mode's would-deny evidence and enforce's denials, as policy YAML.
    Suggest(SuggestArgs),
    /// Print the policy as a ValidatingAdmissionPolicy and binding (YAML for kubectl apply),
    /// or write kube-apiserver's static manifests for it (tamper-proof mode).
    Export(ExportArgs),
    /// List the catalog of well-known controllers a policy can trust by name (`presets:`).
    Presets(PresetsArgs),
}

#[derive(Debug, Args)]
pub struct PresetsArgs {
    #[command(flatten)]
    pub output: OutputFlag,
    /// Print each upstream string the catalog cites, one a line, tab-separated:
    /// PRESET, module or github, MODULE or OWNER/REPO, VERSION or COMMIT, FILE, STRING
    /// (what e2e/presets/check-sources.sh checks against the upstream files).
    #[arg(long)]
    pub sources: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["vap", "static_dir"])))]
pub struct ExportArgs {
    /// A ValidatingAdmissionPolicy and its binding: kube-apiserver decides what CEL can
    /// express of the policy. Exit 1 when the policy cannot be exported faithfully.
    #[arg(long)]
    pub vap: bool,
    /// Tamper-proof mode (kube-apiserver 1.37 or later): write into DIR (new, empty, or a
    /// previous export) the static manifests kube-apiserver loads from disk: the backstop
    /// policy, a policy refusing changes to finalizer-guard's own objects except by the
    /// --operator identities, optionally the webhook, and admission-config.yaml.
    #[arg(long = "static", value_name = "DIR")]
    pub static_dir: Option<PathBuf>,
    #[command(flatten)]
    pub static_flags: StaticFlags,
    /// The policy file.
    pub file: PathBuf,
}

/// What `--static` cannot read from the policy: who may still change
/// finalizer-guard's objects, their names (the chart's defaults), and where
/// the files will be on the control plane.
#[derive(Debug, Args)]
pub struct StaticFlags {
    /// A username that may still change or delete finalizer-guard's webhook configuration,
    /// backstop policy and policy ConfigMap (repeatable; at least one operator or group).
    #[arg(long = "operator", value_name = "USER", requires = "static_dir")]
    pub operator_users: Vec<String>,
    /// A group whose members may (repeatable).
    #[arg(long = "operator-group", value_name = "GROUP", requires = "static_dir")]
    pub operator_groups: Vec<String>,
    /// Where DIR will be on the control-plane hosts (absolute; default: DIR made absolute).
    #[arg(long, value_name = "PATH", requires = "static_dir")]
    pub install_dir: Option<String>,
    /// The ValidatingWebhookConfiguration to guard.
    #[arg(long, value_name = "NAME", default_value = "finalizer-guard")]
    pub webhook_configuration: String,
    /// The webhook's name in it (and in the static webhook).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "finalizers.finalizer-guard.io"
    )]
    pub webhook_name: String,
    /// The backstop ValidatingAdmissionPolicy and binding to guard.
    #[arg(long, value_name = "NAME", default_value = crate::offline::vap::NAME)]
    pub backstop_name: String,
    /// The policy ConfigMap's namespace.
    #[arg(long, value_name = "NS", default_value = "finalizer-guard")]
    pub configmap_namespace: String,
    /// The policy ConfigMap's name.
    #[arg(long, value_name = "NAME", default_value = "finalizer-guard-policy")]
    pub configmap_name: String,
    /// Also write the webhook's registration as a static manifest, called at this
    /// https:// URL (static manifests cannot name a Service).
    #[arg(long, value_name = "URL", requires_all = ["static_dir", "webhook_ca_bundle"])]
    pub webhook_url: Option<String>,
    /// The PEM CA bundle kube-apiserver trusts for --webhook-url (`certs` writes ca.crt).
    #[arg(long, value_name = "FILE", requires = "webhook_url")]
    pub webhook_ca_bundle: Option<PathBuf>,
}

impl StaticFlags {
    /// The export's options for DIR: the CA bundle read, the install folder
    /// defaulted to DIR made absolute.
    fn options(&self, dir: &std::path::Path) -> Result<crate::offline::static_export::Options> {
        let install_dir = match &self.install_dir {
            Some(d) => d.clone(),
            None => std::path::absolute(dir)
                .map_err(|e| Error::io(dir, e))?
                .to_string_lossy()
                .into_owned(),
        };
        let webhook = match (&self.webhook_url, &self.webhook_ca_bundle) {
            (Some(url), Some(ca)) => Some(crate::offline::static_export::Webhook {
                url: url.clone(),
                ca_bundle: crate::error::read(ca)?,
            }),
            _ => None,
        };
        Ok(crate::offline::static_export::Options {
            operator_users: self.operator_users.clone(),
            operator_groups: self.operator_groups.clone(),
            webhook_configuration: self.webhook_configuration.clone(),
            webhook_name: self.webhook_name.clone(),
            backstop: self.backstop_name.clone(),
            configmap_namespace: self.configmap_namespace.clone(),
            configmap_name: self.configmap_name.clone(),
            install_dir,
            webhook,
        })
    }
}

#[derive(Debug, Args)]
pub struct SuggestArgs {
    /// Print this policy with the suggested rules added (rules it already has are not repeated).
    #[arg(long, value_name = "POLICY")]
    pub merge: Option<PathBuf>,
    /// Use the webhook's audit records and recordings of unauthenticated reviews (no client
    /// certificate verified against `serve --client-ca`, or written before records said) as
    /// evidence. Without it they count only where kube-apiserver's audit log, given too,
    /// shows the same removal: anyone who reached the webhook port could have posted them.
    #[arg(long)]
    pub trust_unauthenticated: bool,
    /// ClusterRoles and ClusterRoleBindings (`kubectl get clusterroles,clusterrolebindings
    /// -o json`): a ServiceAccount a ClusterRoleBinding lets update a resource gets a rule
    /// for every namespace, even where the evidence shows it in its own namespace alone.
    #[arg(long, value_name = "FILE")]
    pub bindings: Option<PathBuf>,
    /// The webhook's JSON audit records, recordings (files or a --record-dir folder),
    /// or kube-apiserver's audit log: told apart by their content.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub output: OutputFlag,
    /// Also check that this file is `policy export --vap` of the policy (the
    /// ValidatingAdmissionPolicy and binding a backstop installs): exit 1 when it
    /// is not, naming the first field that differs.
    #[arg(long, value_name = "FILE")]
    pub vap: Option<PathBuf>,
    /// Every warning fails the policy (exit 1): a rule that can match nothing,
    /// one that switches the guard off for everyone, and, in warn mode, a
    /// built-in controller enforce mode would block.
    #[arg(long)]
    pub strict: bool,
    /// Also check that DIR is `policy export --static DIR` of the policy with the same
    /// flags: exit 1 when it is not, naming the first file and field that differ.
    #[arg(long = "static", value_name = "DIR")]
    pub static_dir: Option<PathBuf>,
    #[command(flatten)]
    pub static_flags: StaticFlags,
    /// The policy file.
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// Shadow replay: every case is decided under --policy instead of its suite's own.
    #[command(flatten)]
    pub policy: PolicyFlag,
    #[command(flatten)]
    pub output: OutputFlag,
    #[command(flatten)]
    pub max_body: MaxBodyFlag,
    /// Suite files (YAML), recordings or case files (JSON), or folders of them.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub policy: PolicyFlag,
    /// Read every finalizer living in the cluster and say who may remove each under the
    /// policy. Exit 0 when every type was read and enforce would block none; 1 when it
    /// would, or when the read is incomplete (a type or APIService could not be read);
    /// 2 on usage or connection errors.
    #[arg(long)]
    pub cluster: bool,
    #[command(flatten)]
    pub output: OutputFlag,
    #[command(flatten)]
    pub connection: Connection,
}

impl DoctorArgs {
    /// `doctor --cluster`'s settings; `Err` (the arguments back) for the offline check.
    pub fn cluster(self) -> std::result::Result<DoctorCluster, DoctorArgs> {
        if !self.cluster {
            return Err(self);
        }
        let DoctorArgs {
            policy,
            cluster: _,
            output,
            connection,
        } = self;
        Ok(DoctorCluster {
            // Not `or_env()`: the cluster's policy is judged, whatever the environment says.
            policy: policy.file,
            format: output.format,
            connection,
        })
    }
}

/// `unstick`: kubectl's way of naming objects, and what to do with them.
#[derive(Debug, Args)]
pub struct UnstickArgs {
    #[command(flatten)]
    pub selection: Selection,
    /// Only this finalizer (repeatable). Default: every finalizer of each stuck object,
    /// except that one whose owner looks alive is removed only when named here.
    #[arg(long = "finalizer", value_name = "NAME")]
    pub finalizers: Vec<String>,
    /// Release: the override's reason, one of the policy's approved reasons.
    #[arg(long, requires = "detail", value_name = "REASON")]
    pub reason: Option<String>,
    /// Release: what happened (an incident id, the node).
    #[arg(long, requires = "reason", value_name = "TEXT")]
    pub detail: Option<String>,
    /// After releasing a pod on a node that is gone (or NotReady past --not-ready-for),
    /// finish its deletion with grace period 0.
    #[arg(long, requires = "reason")]
    pub force_delete: bool,
    /// Release a Namespace's own `kubernetes` finalizer too, orphaning the objects still
    /// inside it (listed, and counted by type, in the output). Without it unstick leaves it.
    #[arg(long, requires = "reason")]
    pub orphan_contents: bool,
    /// How long a node must be NotReady before its pods' owners count as gone.
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub not_ready_for: Duration,
    #[command(flatten)]
    pub write: WriteFlags,
}

impl UnstickArgs {
    pub fn into_config(self) -> Unstick {
        let UnstickArgs {
            selection,
            finalizers,
            reason,
            detail,
            force_delete,
            orphan_contents,
            not_ready_for,
            write,
        } = self;
        Unstick {
            targets: write.targets(selection),
            finalizers,
            release: reason.zip(detail).map(|(reason, detail)| Release {
                reason,
                detail,
                force_delete,
                orphan_contents,
            }),
            not_ready_for,
        }
    }
}

/// `approve`: the objects, the override and how long the approval stands.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    #[command(flatten)]
    pub selection: Selection,
    /// The override's reason, one of the policy's approved reasons.
    #[arg(long, value_name = "REASON")]
    pub reason: String,
    /// What happened (an incident id, the node).
    #[arg(long, value_name = "TEXT")]
    pub detail: String,
    /// How long the approval stands; at most the policy's override.approval.maxAge.
    #[arg(long = "for", value_parser = parse_duration, value_name = "DURATION")]
    pub for_: Duration,
    #[command(flatten)]
    pub write: WriteFlags,
}

impl ApproveArgs {
    pub fn into_config(self) -> Approve {
        let ApproveArgs {
            selection,
            reason,
            detail,
            for_,
            write,
        } = self;
        Approve {
            targets: write.targets(selection),
            reason,
            detail,
            for_,
        }
    }
}

/// The flags `unstick` and `approve` share, after their own.
#[derive(Debug, Args)]
pub struct WriteFlags {
    #[command(flatten)]
    pub dry_run: DryRunFlag,
    #[command(flatten)]
    pub output: OutputFlag,
    #[command(flatten)]
    pub policy: PolicyFlag,
    #[command(flatten)]
    pub connection: Connection,
}

impl WriteFlags {
    /// What `unstick` and `approve` share. The cluster's policy is judged
    /// unless `--policy` names another: the environment is not read.
    fn targets(self, selection: Selection) -> Targets {
        let WriteFlags {
            dry_run,
            output,
            policy,
            connection,
        } = self;
        Targets {
            selection,
            connection,
            policy: policy.file,
            dry_run: dry_run.dry_run,
            format: output.format,
        }
    }
}

/// `watch`: what counts as stuck, where the metrics are served, and whether
/// Events are written.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// An object deleting with finalizers for longer than this is stuck: counted in
    /// the gauges, and given a FinalizerStuck Event.
    #[arg(long, env = "FINALIZER_GUARD_STUCK_AFTER", default_value = "10m", value_parser = parse_duration, value_name = "DURATION")]
    pub stuck_after: Duration,
    /// Admin address (plain HTTP): /metrics, /healthz, /readyz.
    #[arg(
        long,
        env = "FINALIZER_GUARD_ADMIN_LISTEN",
        default_value = "0.0.0.0:9091",
        value_name = "ADDR"
    )]
    pub admin_listen: SocketAddr,
    /// Write a FinalizerStuck Event on each stuck object (`--events=false`: metrics and logs only).
    #[arg(long, env = "FINALIZER_GUARD_EVENTS", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub events: bool,
    /// Most Events waiting to be written; past it they are dropped (counted in
    /// finalizer_guard_dropped_total{queue="events"}).
    #[arg(
        long,
        env = "FINALIZER_GUARD_EVENTS_QUEUE",
        default_value_t = 1024,
        value_name = "N"
    )]
    pub events_queue: usize,
    /// How often the API server's types are discovered again. A new CRD or APIService
    /// is picked up at once anyway; watches resume where they left off and are never
    /// listed again on a timer.
    #[arg(long, env = "FINALIZER_GUARD_DISCOVERY_INTERVAL", default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub discovery_interval: Duration,
    /// Most distinct finalizer names given a label value of their own; stuck objects'
    /// other finalizers are counted under `other`.
    #[arg(
        long,
        env = "FINALIZER_GUARD_MAX_FINALIZERS",
        default_value_t = 100,
        value_name = "N"
    )]
    pub max_finalizers: usize,
    /// How long a node must be NotReady before its pods' owners count as gone (as unstick).
    #[arg(long, default_value = "5m", value_parser = parse_duration, value_name = "DURATION")]
    pub not_ready_for: Duration,
    #[command(flatten)]
    pub policy: PolicyFlag,
    /// Log format on standard error.
    #[arg(
        long,
        env = "FINALIZER_GUARD_LOG_FORMAT",
        value_enum,
        default_value = "text",
        value_name = "FORMAT"
    )]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub connection: Connection,
}

impl WatchArgs {
    pub fn into_config(self) -> Watch {
        let WatchArgs {
            stuck_after,
            admin_listen,
            events,
            events_queue,
            discovery_interval,
            max_finalizers,
            not_ready_for,
            policy,
            log_format: _,
            connection,
        } = self;
        Watch {
            stuck_after,
            admin_listen,
            events,
            events_queue,
            discovery_interval,
            max_finalizers,
            not_ready_for,
            // Not `or_env()`: the cluster's policy is judged, as by `unstick`.
            policy: policy.file,
            connection,
        }
    }
}

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
    #[arg(long, env = "FINALIZER_GUARD_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub handshake_timeout: Duration,
    /// How long a client may take to send a request's headers (and a connection, HTTP/1.1 or HTTP/2, with no request in flight stays open).
    #[arg(long, env = "FINALIZER_GUARD_HEADER_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: Duration,
    /// How long a client may take to send the request body.
    #[arg(long, env = "FINALIZER_GUARD_BODY_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub body_timeout: Duration,
    /// How long a write to a client may make no progress (it does not read its answer) before its connection is closed.
    #[arg(long, env = "FINALIZER_GUARD_WRITE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub write_timeout: Duration,
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
    /// Write Events for reviews whose caller presented no verified client certificate
    /// (all of them without --client-ca). Only where nothing but kube-apiserver can reach
    /// the webhook port (a NetworkPolicy): anyone who can post a review could otherwise
    /// write an Event about any object, in any namespace.
    #[arg(long, env = "FINALIZER_GUARD_EVENTS_UNAUTHENTICATED", default_value_t = false, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub events_unauthenticated: bool,
    /// The name of the cluster this webhook serves, written in every audit record
    /// (`"cluster"`): one log pipeline often collects many clusters' records.
    #[arg(long, env = "FINALIZER_GUARD_CLUSTER_NAME", value_name = "NAME", value_parser = crate::flags::cluster_name)]
    pub cluster_name: Option<String>,
    /// Log format on standard error.
    #[arg(
        long,
        env = "FINALIZER_GUARD_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub certificates: crate::certificate_flags::SelfManagedFlags,
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
#[command(mut_arg("policy", |a| a.env(POLICY_ENV)))]
pub struct CheckArgs {
    #[command(flatten)]
    pub policy: PolicyFlag,
    /// `-o json`: one JSON object per line.
    #[command(flatten)]
    pub output: OutputFlag,
    /// The same as `-o json`, kept for scripts written before `-o`.
    #[arg(long, hide = true)]
    pub json: bool,
    /// The webhook's serving key (PEM): two-person approvals are sealed and
    /// verified with it as the webhook does. Without it, an approval cannot
    /// be verified and a removal relying on one is denied.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    #[command(flatten)]
    pub max_body: MaxBodyFlag,
    /// AdmissionReview files.
    #[arg(required = true, value_name = "REVIEW.json")]
    pub reviews: Vec<PathBuf>,
}

/// Loads `--policy`, or the embedded default.
fn load_policy(path: Option<&std::path::Path>) -> Result<Policy> {
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
            write_timeout,
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
            events_unauthenticated,
            cluster_name,
            log_format: _,
            certificates,
        } = self;
        ServeConfig {
            self_managed: certificates.settings(reload_interval),
            policy: policy.file,
            tls: tls_cert.zip(tls_key),
            client_ca,
            listen,
            admin_listen,
            limits: Limits {
                max_body_bytes,
                handshake_timeout,
                header_timeout,
                body_timeout,
                write_timeout,
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
            events_unauthenticated,
            cluster_name,
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
        eprintln!("reusing the CA in {}", escape(&out.display().to_string()));
        certs::Authority::from_pem(&cert, &key)?
    } else {
        certs::Authority::generate(ca_days)?
    };
    let mut names = certs::service_names(&service, &namespace);
    names.extend(dns);
    let bundle = authority.issue(&names, &ip, days)?;
    certs::write(&bundle, &out)?;
    let wrote = format!(
        "wrote {0}/ca.crt, {0}/ca.key, {0}/tls.crt, {0}/tls.key (SANs: {1}); caBundle:",
        out.display(),
        names
            .iter()
            .cloned()
            .chain(ip.iter().map(ToString::to_string))
            .collect::<Vec<_>>()
            .join(", ")
    );
    eprintln!("{}", escape(&wrote));
    if let Some(name) = client {
        let client_bundle = authority.issue_client(&name, days)?;
        certs::write_client(&client_bundle, &out)?;
        let wrote = format!(
            "wrote {0}/client.crt, {0}/client.key (client certificate, CN {name})",
            out.display()
        );
        eprintln!("{}", escape(&wrote));
    }
    writeln!(io::stdout(), "{}", certs::ca_bundle(&bundle.ca_cert_pem)).map_err(stdout)?;
    Ok(())
}

/// What `check` concluded for one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckLine {
    pub file: String,
    /// `None` when the file could not be decided.
    pub allowed: Option<bool>,
    pub decision: Option<Verdict>,
    pub message: Option<String>,
    pub warnings: Vec<String>,
    pub error: Option<String>,
}

impl Report for CheckLine {
    fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        // Each value on its line: a file name's newline cannot forge a result line.
        let file = escape(&self.file);
        match (&self.error, self.allowed) {
            (Some(e), _) => writeln!(out, "{file}: error: {}", escape(e)),
            (None, Some(false)) => writeln!(
                out,
                "{file}: denied: {}",
                escape(self.message.as_deref().unwrap_or_default())
            ),
            (None, _) => writeln!(out, "{file}: allowed"),
        }
    }

    /// One JSON object per line, as the contract says: a line per file
    /// whatever the format.
    fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        writeln!(out)
    }
}

/// Decides one file with the server's own function. Only a regular file
/// no larger than `max_body_bytes` (what the webhook would accept) is read.
pub fn check_file(
    policy: &Policy,
    seal_key: Option<&SealKey>,
    max_body_bytes: usize,
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
    let body = match crate::files::read_regular(path, max_body_bytes as u64) {
        Ok(body) => body,
        Err(e) if e.kind() == io::ErrorKind::FileTooLarge => {
            return failed(format!(
                "{e}: the webhook would answer 413 (--max-body-bytes)"
            ));
        }
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
        // What the file holds is not quoted: it may be a secret passed by mistake.
        Err(e) => failed(crate::output::without_values(&e.to_string())),
    }
}

/// The webhook's serving key, to verify approvals' seals as it does.
fn seal_key(path: &std::path::Path) -> Result<SealKey> {
    let pem = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let key = server::tls::seal_key(&pem).map_err(|e| TlsError::InFile {
        path: path.to_path_buf(),
        source: Box::new(e),
    })?;
    Ok(key)
}

pub(crate) fn stdout(e: io::Error) -> Error {
    Error::io("stdout", e)
}

/// Exit code: 0 all allowed, 1 any denied, 2 any file not decided.
pub fn check(args: CheckArgs) -> Result<i32> {
    let CheckArgs {
        policy,
        output,
        json,
        tls_key,
        max_body,
        reviews,
    } = args;
    let format = if json { Format::Json } else { output.format };
    // $FINALIZER_GUARD_POLICY reaches `policy` through clap, as for `serve`.
    let policy = load_policy(policy.path())?;
    let seal_key = tls_key.as_deref().map(seal_key).transpose()?;
    let out = Printer::stdio(format);
    let (mut denied, mut errors) = (false, false);
    for path in &reviews {
        let line = check_file(&policy, seal_key.as_ref(), max_body.bytes, path);
        denied |= line.allowed == Some(false);
        errors |= line.error.is_some();
        out.report(&line).map_err(stdout)?;
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
    let TestArgs {
        policy,
        output,
        max_body,
        paths,
    } = args;
    let policy = policy.path().map(|p| load_policy(Some(p))).transpose()?;
    let outcomes = crate::offline::suite::run_with(&paths, policy.as_ref(), max_body.bytes);
    let report = crate::offline::suite::Report::of(outcomes);
    Printer::stdio(output.format)
        .report(&report)
        .map_err(stdout)?;
    Ok(report.exit_code())
}

/// What `policy validate` found.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Validation {
    pub file: String,
    pub valid: bool,
    /// Why it is refused, each naming its field (and line).
    pub errors: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicySummary>,
    /// Warn mode: the built-in controllers enforce mode would block.
    pub would_block: Vec<String>,
    /// Rules that can match nothing, or switch the guard off for everyone.
    pub warnings: Vec<String>,
    /// `--strict`: every warning (these, and `wouldBlock`) fails the policy.
    pub strict: bool,
    /// What the policy's `presets:` expand to, one rule each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub presets: Vec<PresetRule>,
}

/// One rule a preset expands to.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PresetRule {
    pub rule: String,
    pub finalizers: Vec<String>,
    /// Full usernames.
    pub service_accounts: Vec<String>,
    pub groups: Vec<String>,
    /// `resource.group`; absent: any resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
    /// The rule in a sentence.
    pub description: String,
}

impl PresetRule {
    fn of(rule: &policy::config::Rule) -> PresetRule {
        PresetRule {
            rule: rule.label.clone(),
            finalizers: rule.finalizers.iter().map(ToString::to_string).collect(),
            service_accounts: rule.service_accounts.clone(),
            groups: rule.groups.clone(),
            resources: rule
                .resources
                .as_ref()
                .map(|rs| rs.iter().map(ToString::to_string).collect()),
            description: policy::presets::describe(rule),
        }
    }
}

/// A valid policy, in brief.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicySummary {
    pub mode: &'static str,
    pub rules: usize,
    pub builtin_controllers: bool,
    pub override_annotation: String,
}

impl Validation {
    /// Runs the checks `serve` runs on a policy that parsed: [`crate::offline::doctor::servable`].
    fn of(file: &std::path::Path, policy: &Policy) -> Validation {
        let mut v = Validation::refused(file, Vec::new());
        match crate::offline::doctor::servable(policy) {
            Err(blocked) => v.errors = vec![Error::BlocksBuiltinControllers(blocked).to_string()],
            Ok(warned) => {
                v.valid = true;
                v.would_block = warned.iter().map(ToString::to_string).collect();
                v.warnings = policy.warnings().iter().map(ToString::to_string).collect();
                v.presets = policy
                    .rules
                    .iter()
                    .filter(|r| r.label.starts_with("preset:"))
                    .map(PresetRule::of)
                    .collect();
                v.policy = Some(PolicySummary {
                    mode: policy.mode.as_str(),
                    rules: policy.rules.len(),
                    builtin_controllers: policy.builtin_controllers,
                    override_annotation: policy.override_settings.annotation.clone(),
                });
            }
        }
        v
    }

    /// Valid as a policy, refused for what goes with it.
    fn refuse(&mut self, error: String) {
        self.valid = false;
        self.policy = None;
        self.errors.push(error);
    }

    fn refused(file: &std::path::Path, errors: Vec<String>) -> Validation {
        Validation {
            file: file.display().to_string(),
            valid: false,
            errors,
            policy: None,
            would_block: Vec::new(),
            warnings: Vec::new(),
            presets: Vec::new(),
            strict: false,
        }
    }

    /// `--strict`: a valid policy with any warning is refused, the
    /// warnings still listed, each naming its rule and the fix.
    fn strictly(&mut self) {
        self.strict = true;
        let count = self.warnings.len() + self.would_block.len();
        if self.valid && count > 0 {
            self.valid = false;
            self.policy = None;
            self.errors.push(format!(
                "refused under --strict: {count} warning{} (each below)",
                if count == 1 { "" } else { "s" }
            ));
        }
    }
}

impl Report for Validation {
    fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        let file = escape(&self.file);
        for e in &self.errors {
            writeln!(out, "{file}: {}", escape(e))?;
        }
        if let Some(p) = &self.policy {
            writeln!(
                out,
                "{file}: valid (mode {}, {} rules, builtinControllers {}, override annotation {})",
                p.mode,
                p.rules,
                p.builtin_controllers,
                escape(&p.override_annotation)
            )?;
        }
        for preset in &self.presets {
            writeln!(
                out,
                "{file}: {}: {}",
                escape(&preset.rule),
                escape(&preset.description)
            )?;
        }
        // Valid, but what can match nothing was surely meant to match something.
        for warning in &self.warnings {
            writeln!(out, "{file}: warning: {}", escape(warning))?;
        }
        Ok(())
    }
}

/// `policy validate`: exit 0, or 1 with one error per line; 2 when the file
/// cannot be read. It refuses what `serve` refuses, through the same checks:
/// the policy parser, then [`crate::offline::doctor::servable`].
pub fn validate(args: ValidateArgs) -> Result<i32> {
    let ValidateArgs {
        output,
        vap,
        strict,
        static_dir,
        static_flags,
        file,
    } = args;
    let report = match policy::load(&file) {
        Ok(policy) => {
            let mut report = Validation::of(&file, &policy);
            if let Some(dir) = static_dir.filter(|_| report.valid) {
                let options = static_flags.options(&dir)?;
                let found = crate::offline::static_export::read_dir(&dir)
                    .map_err(|e| Error::io(&dir, e))?;
                if let Err(e) = crate::offline::static_export::verify(&policy, &options, &found) {
                    report.refuse(format!(
                        "{}: not `finalizer-guard policy export --static` of {} with these flags: {e}; export it again",
                        dir.display(),
                        file.display()
                    ));
                }
            }
            if let Some(vap) = vap.filter(|_| report.valid) {
                let bytes = crate::error::read(&vap)?;
                let yaml = String::from_utf8_lossy(&bytes);
                if let Err(e) = crate::offline::vap::verify(&policy, &yaml) {
                    report.refuse(format!(
                        "{}: not `finalizer-guard policy export --vap {}`: {e}; export it again from this policy",
                        vap.display(),
                        file.display()
                    ));
                }
            }
            if strict {
                report.strictly();
            }
            report
        }
        Err(LoadError::Invalid(invalid)) => {
            Validation::refused(&file, invalid.0.iter().map(ToString::to_string).collect())
        }
        Err(e) => return Err(Error::policy(&file, e)),
    };
    let out = Printer::stdio(output.format);
    for b in &report.would_block {
        out.note(format_args!(
            "warning: {}: served in warn mode, refused in enforce mode: it would block the {b}",
            file.display()
        ));
    }
    out.report(&report).map_err(stdout)?;
    Ok(i32::from(!report.valid))
}

/// `policy export --vap`: the YAML on standard output. Exit 1 when the policy
/// is not valid or cannot be exported faithfully (each reason on a line), 2
/// when the file cannot be read.
pub fn export(args: ExportArgs) -> Result<i32> {
    let ExportArgs {
        vap: _,
        static_dir,
        static_flags,
        file,
    } = args;
    let policy = match policy::load(&file) {
        Ok(policy) => policy,
        Err(LoadError::Invalid(invalid)) => {
            for e in &invalid.0 {
                eprintln!("{}", escape(&format!("{}: {e}", file.display())));
            }
            return Ok(1);
        }
        Err(e) => return Err(Error::policy(&file, e)),
    };
    if let Some(dir) = static_dir {
        let options = static_flags.options(&dir)?;
        let files = match crate::offline::static_export::render(&policy, &options) {
            Ok(files) => files,
            Err(e) => {
                eprintln!(
                    "{}",
                    escape(&format!("{}: not exported: {e}", file.display()))
                );
                return Ok(1);
            }
        };
        if let Err(e) = crate::offline::static_export::write(&dir, &files) {
            eprintln!("{}", escape(&format!("not written: {e}")));
            return Ok(1);
        }
        let mut out = io::stdout().lock();
        for f in &files {
            writeln!(out, "{}", escape(&dir.join(f.path).display().to_string())).map_err(stdout)?;
        }
        eprintln!(
            "{}",
            escape(&format!(
                "kube-apiserver (1.37 or later) loads these with --admission-control-config-file={}/{}",
                options.install_dir.trim_end_matches('/'),
                crate::offline::static_export::ADMISSION_CONFIG
            ))
        );
        return Ok(0);
    }
    match crate::offline::vap::export_yaml(&policy) {
        Ok(yaml) => {
            io::stdout().write_all(yaml.as_bytes()).map_err(stdout)?;
            Ok(0)
        }
        Err(e) => {
            eprintln!(
                "{}",
                escape(&format!("{}: not exported: {e}", file.display()))
            );
            Ok(1)
        }
    }
}

/// `policy suggest`: the policy YAML on standard output, what was read on
/// standard error. Exit 0, or 2 when a path holds no evidence or the policy to
/// merge into is not valid.
pub fn suggest(args: SuggestArgs) -> Result<i32> {
    let SuggestArgs {
        merge,
        trust_unauthenticated,
        bindings,
        paths,
    } = args;
    let base = match &merge {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
            let policy =
                Policy::from_yaml(&text).map_err(|e| Error::policy(path, LoadError::Invalid(e)))?;
            Some((text, policy))
        }
        None => None,
    };
    let bindings = match &bindings {
        Some(path) => match read_bindings(path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: {}", escape(&format!("{}: {e}", path.display())));
                return Ok(2);
            }
        },
        None => crate::offline::suggest::Bindings::default(),
    };
    for (binding, role) in bindings.unknown_roles() {
        eprintln!(
            "note: {}",
            escape(&format!(
                "ClusterRoleBinding {binding}: its ClusterRole {role} is not in --bindings, so what it grants is not known: give kubectl get clusterroles,clusterrolebindings -o json"
            ))
        );
    }
    let mut evidence = crate::offline::suggest::Evidence::default();
    for path in &paths {
        if let Err(e) = crate::offline::suggest::read_path(path, &mut evidence) {
            eprintln!("error: {}", escape(&e));
            return Ok(2);
        }
    }
    let read: Vec<String> = evidence
        .read
        .iter()
        .map(|(source, n)| format!("{n} {}", source.describe()))
        .collect();
    let denied = evidence.seen.iter().filter(|s| s.denied).count();
    eprintln!(
        "read {}; {}",
        read.join(", "),
        crate::offline::suggest::removals(evidence.seen.len() - denied, denied)
    );
    for (why, n) in &evidence.skipped {
        eprintln!("skipped {n} would-deny removal(s) {}", why.describe());
    }
    let (seen, aside) = crate::offline::suggest::trusted(evidence.seen, trust_unauthenticated);
    for line in aside.lines() {
        eprintln!("{line}");
    }
    if aside.confirmed > 0 {
        eprintln!(
            "used {} would-deny removal(s) of unauthenticated reviews that kube-apiserver's audit log confirms",
            aside.confirmed
        );
    }
    if aside.same > 0 {
        eprintln!(
            "counted {} webhook record(s) once, as the kube-apiserver audit event of the same request",
            aside.same
        );
    }
    let suggestions =
        crate::offline::suggest::suggest_with(&seen, base.as_ref().map(|(_, p)| p), bindings);
    for note in suggestions.notes() {
        eprintln!("note: {}", escape(&note));
    }
    let yaml = crate::offline::suggest::render(
        &suggestions,
        base.as_ref().map(|(text, policy)| (text.as_str(), policy)),
    );
    io::stdout().write_all(yaml.as_bytes()).map_err(stdout)?;
    Ok(0)
}

/// `policy suggest --bindings FILE`: at most 64 MiB of JSON.
fn read_bindings(
    path: &std::path::Path,
) -> std::result::Result<crate::offline::suggest::Bindings, String> {
    let bytes = crate::files::read_regular(path, 64 * 1024 * 1024).map_err(|e| e.to_string())?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("not JSON: {e}"))?;
    crate::offline::suggest::Bindings::from_json(&value)
}

/// `doctor`: exit 0 when every built-in controller may remove its finalizers, 1 otherwise.
pub fn doctor(args: DoctorArgs) -> Result<i32> {
    let DoctorArgs {
        policy,
        cluster: _,
        output,
        connection,
    } = args;
    if connection.kubeconfig.is_some() || connection.context.is_some() {
        eprintln!("error: --kubeconfig and --context talk to a cluster: add --cluster");
        return Ok(2);
    }
    // Offline, the environment names the policy as it does for `serve`
    // (clap's `env` is not used: `doctor --cluster` must not read it).
    let path = policy.or_env();
    let loaded = load_policy(path.as_deref())?;
    let name = path.map_or_else(|| "embedded default".into(), |p| p.display().to_string());
    let report = crate::offline::doctor::Report::of(name, &loaded);
    Printer::stdio(output.format)
        .report(&report)
        .map_err(stdout)?;
    Ok(report.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    /// `check`'s text line is one line, whatever the file's name holds.
    #[test]
    fn a_check_line_is_one_line_whatever_the_file_is_named() {
        let line = CheckLine {
            file: "x.json: allowed\nevil.json\u{1b}[2J".into(),
            allowed: Some(false),
            decision: None,
            message: Some("denied\nother.json: allowed".into()),
            warnings: Vec::new(),
            error: None,
        };
        let mut out = Vec::new();
        line.write_text(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "x.json: allowed\\u{a}evil.json\\u{1b}[2J: denied: denied\\u{a}other.json: allowed\n"
        );
    }
}
