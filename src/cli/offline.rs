//! The flags of `doctor`, `certs` and `check`.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::Args;

use crate::cluster::Connection;
use crate::cluster::doctor::DoctorCluster;
use crate::error::{Error, Result};
use crate::flags::{MaxBodyFlag, POLICY_ENV, PolicyFlag, own_words};
use crate::offline::certs::Certs;
use crate::offline::check::Check;
use crate::output::{Format, OutputFlag};

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
