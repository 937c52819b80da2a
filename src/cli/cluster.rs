//! The flags of the commands that talk to a cluster: `unstick`, `approve`, `watch`.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use super::LogFormat;
use crate::cluster::approve::Approve;
use crate::cluster::unstick::{Release, Unstick};
use crate::cluster::watch::Watch;
use crate::cluster::{Connection, DryRunFlag, Selection, Targets};
use crate::flags::{PolicyFlag, own_words, parse_duration};
use crate::output::OutputFlag;

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
