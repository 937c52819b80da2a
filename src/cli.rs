//! The command line's flags: `serve`, `certs`, `check`, `test`, `policy`,
//! `doctor`, `version`, and the commands that talk to a cluster, `unstick`,
//! `approve` and `watch` ([`crate::cluster`]). Each command's body lives in
//! its layer ([`crate::offline`], [`crate::cluster`], [`crate::server`]);
//! main.rs runs them.
//!
//! Each command's arguments are destructured exhaustively where they become
//! its settings, so a new flag cannot be silently ignored.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::offline::suggest::Format as EvidenceFormat;
use crate::offline::suggest::command::Suggest;
use crate::server::self_managed::{DEFAULT_WEBHOOK, Names, Settings, Timing};
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::cluster::approve::Approve;
use crate::cluster::doctor::DoctorCluster;
use crate::cluster::unstick::{Release, Unstick};
use crate::cluster::watch::Watch;
use crate::cluster::{Connection, DryRunFlag, Selection, Targets};
use crate::error::{Error, Result};
use crate::flags::{MaxBodyFlag, POLICY_ENV, PolicyFlag, own_words, parse_duration};
use crate::offline::certs::Certs;
use crate::offline::check::Check;
use crate::offline::export::StaticFlags;
use crate::offline::validate::Validate;
use crate::output::{Format, OutputFlag};
use crate::server::{EventsTarget, Limits, RecordConfig, ServeConfig};

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

impl Command {
    /// `serve` and `watch` run long and log to standard error in this format;
    /// the other commands do not log.
    pub fn log_format(&self) -> Option<LogFormat> {
        match self {
            Command::Serve(args) => Some(args.log_format),
            Command::Watch(args) => Some(args.log_format),
            _ => None,
        }
    }
}

#[derive(Debug, Args)]
pub struct VersionArgs {
    #[command(flatten)]
    pub output: OutputFlag,
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
    /// for every namespace, even where the evidence shows it in its own namespace alone (a
    /// rule of `--merge` widened still gets only the namespaces seen).
    #[arg(long, value_name = "FILE")]
    pub bindings: Option<PathBuf>,
    /// How kube-apiserver's audit events are given: as a cluster you run writes them
    /// (kube-apiserver), as a managed control plane delivers them (eks: CloudWatch Logs,
    /// gke: Cloud Audit Logs, aks: Azure Monitor's kube-audit), or auto, each line or
    /// document told by its content. Audit events delivered otherwise are not read; the
    /// webhook's records and recordings always are.
    #[arg(long, value_enum, default_value_t = EvidenceFormat::Auto)]
    pub format: EvidenceFormat,
    /// The webhook's JSON audit records, recordings (files or a --record-dir folder),
    /// or kube-apiserver's audit log, as written or as EKS, GKE or AKS deliver it: told
    /// apart by their content.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

impl SuggestArgs {
    pub fn into_config(self) -> Suggest {
        Suggest {
            merge: self.merge,
            trust_unauthenticated: self.trust_unauthenticated,
            bindings: self.bindings,
            format: self.format,
            paths: self.paths,
        }
    }
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
    /// an identity too broad to trust (in a rule, a preset, an approver), and,
    /// in warn mode, a built-in controller enforce mode would block.
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

impl ValidateArgs {
    pub fn into_config(self) -> Validate {
        let ValidateArgs {
            output,
            vap,
            strict,
            static_dir,
            static_flags,
            file,
        } = self;
        Validate {
            format: output.format,
            vap,
            strict,
            static_dir,
            static_flags,
            file,
        }
    }
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

impl DoctorArgs {
    /// The offline `doctor`'s policy: `--policy`, else the environment as
    /// for `serve` (clap's `env` is not used: `doctor --cluster` must not
    /// read it). `--kubeconfig` and `--context` without `--cluster` are refused.
    pub fn offline(self) -> Result<Option<PathBuf>> {
        let DoctorArgs {
            policy,
            cluster: _,
            output: _,
            connection,
        } = self;
        if connection.kubeconfig.is_some() || connection.context.is_some() {
            return Err(Error::Usage(
                "--kubeconfig and --context talk to a cluster: add --cluster".into(),
            ));
        }
        Ok(policy.or_env())
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
    #[arg(long, default_value = "5m", value_parser = own_words(parse_duration), value_name = "DURATION")]
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
    #[arg(long = "for", value_parser = own_words(parse_duration), value_name = "DURATION")]
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
    #[arg(long, env = "FINALIZER_GUARD_STUCK_AFTER", default_value = "10m", value_parser = own_words(parse_duration), value_name = "DURATION")]
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
    #[arg(long, env = "FINALIZER_GUARD_DISCOVERY_INTERVAL", default_value = "5m", value_parser = own_words(parse_duration), value_name = "DURATION")]
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
    #[command(flatten)]
    pub cluster_name: crate::flags::ClusterNameFlag,
    /// How long a node must be NotReady before its pods' owners count as gone (as unstick).
    #[arg(long, default_value = "5m", value_parser = own_words(parse_duration), value_name = "DURATION")]
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
        Watch {
            stuck_after: self.stuck_after,
            admin_listen: self.admin_listen,
            events: self.events,
            events_queue: self.events_queue,
            discovery_interval: self.discovery_interval,
            max_finalizers: self.max_finalizers,
            cluster_name: self.cluster_name.name,
            not_ready_for: self.not_ready_for,
            // Not `or_env()`: the cluster's policy is judged, as by `unstick`.
            policy: self.policy.file,
            connection: self.connection,
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
    #[arg(long, env = "FINALIZER_GUARD_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = own_words(parse_duration))]
    pub handshake_timeout: Duration,
    /// How long a client may take to send a request's headers (and a connection, HTTP/1.1 or HTTP/2, with no request in flight stays open).
    #[arg(long, env = "FINALIZER_GUARD_HEADER_TIMEOUT", default_value = "10s", value_parser = own_words(parse_duration))]
    pub header_timeout: Duration,
    /// How long a client may take to send the request body.
    #[arg(long, env = "FINALIZER_GUARD_BODY_TIMEOUT", default_value = "10s", value_parser = own_words(parse_duration))]
    pub body_timeout: Duration,
    /// How long a write to a client may make no progress (it does not read its answer) before its connection is closed.
    #[arg(long, env = "FINALIZER_GUARD_WRITE_TIMEOUT", default_value = "10s", value_parser = own_words(parse_duration))]
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

#[derive(Debug, Args)]
pub struct CertsArgs {
    /// The webhook's Service name.
    #[arg(
        long,
        env = "FINALIZER_GUARD_SERVICE",
        default_value = "finalizer-guard",
        value_parser = own_words(crate::flags::service_name)
    )]
    pub service: String,
    /// The webhook's namespace.
    #[arg(
        long,
        env = "FINALIZER_GUARD_NAMESPACE",
        default_value = "finalizer-guard",
        value_parser = own_words(crate::flags::dns_label)
    )]
    pub namespace: String,
    /// Output folder for ca.crt, ca.key, tls.crt, tls.key. An existing ca.crt and ca.key there are reused.
    #[arg(long, env = "FINALIZER_GUARD_CERTS_OUT", default_value = "certs")]
    pub out: PathBuf,
    /// Extra DNS name for the serving certificate (repeatable).
    #[arg(long = "dns", value_name = "NAME", value_parser = own_words(crate::flags::dns_name))]
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

impl CertsArgs {
    pub fn into_config(self) -> Certs {
        Certs {
            service: self.service,
            namespace: self.namespace,
            out: self.out,
            dns: self.dns,
            ip: self.ip,
            days: self.days,
            ca_days: self.ca_days,
            client: self.client,
        }
    }
}

impl CheckArgs {
    /// `$FINALIZER_GUARD_POLICY` reaches `policy` through clap, as for `serve`.
    pub fn into_config(self) -> Check {
        let CheckArgs {
            policy,
            output,
            json,
            tls_key,
            max_body,
            reviews,
        } = self;
        Check {
            policy: policy.file,
            format: if json { Format::Json } else { output.format },
            tls_key,
            max_body_bytes: max_body.bytes,
            reviews,
        }
    }
}

impl ServeArgs {
    pub fn into_config(self) -> ServeConfig {
        let limits = Limits {
            max_body_bytes: self.max_body_bytes,
            handshake_timeout: self.handshake_timeout,
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            write_timeout: self.write_timeout,
            max_connections: self.max_connections,
            max_inflight_body_bytes: self.max_inflight_body_bytes,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_and_watch_take_one_cluster_name_flag() {
        use clap::Parser;
        let named = |args: &[&str]| -> Option<String> {
            match Cli::try_parse_from(args).map(|cli| cli.command) {
                Ok(Command::Serve(args)) => args.into_config().cluster_name,
                Ok(Command::Watch(args)) => args.into_config().cluster_name,
                Ok(_) => panic!("{args:?}"),
                Err(e) => Some(format!("error: {e}")),
            }
        };
        for command in ["serve", "watch"] {
            assert_eq!(
                named(&["finalizer-guard", command, "--cluster-name", "prod-eu-1"]).as_deref(),
                Some("prod-eu-1")
            );
            assert_eq!(named(&["finalizer-guard", command]), None);
            let refused =
                named(&["finalizer-guard", command, "--cluster-name", "prod eu"]).unwrap();
            assert!(
                refused.starts_with("error: ") && refused.contains("is not a cluster name"),
                "{refused}"
            );
        }
    }
}
