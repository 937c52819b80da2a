//! `policy export`: the policy as a ValidatingAdmissionPolicy and its binding
//! (`--vap`, [`super::vap`]), or kube-apiserver's static manifests for it
//! (`--static DIR`, [`super::static_export`]).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::Args;

use super::static_export::{self, Options, Webhook};
use super::vap;
use crate::error::{Error, Result};
use crate::output::escape;
use crate::policy::{self, LoadError, Policy};

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
    #[arg(long, value_name = "NAME", default_value = vap::NAME)]
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
    pub(crate) fn options(&self, dir: &Path) -> Result<Options> {
        let install_dir = match &self.install_dir {
            Some(d) => d.clone(),
            None => std::path::absolute(dir)
                .map_err(|e| Error::io(dir, e))?
                .to_string_lossy()
                .into_owned(),
        };
        let webhook = match (&self.webhook_url, &self.webhook_ca_bundle) {
            (Some(url), Some(ca)) => Some(Webhook {
                url: url.clone(),
                ca_bundle: crate::error::read(ca)?,
            }),
            _ => None,
        };
        Ok(Options {
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

/// `policy export`: with `--static DIR`, the manifests written into DIR
/// (their paths on standard output); else the ValidatingAdmissionPolicy's
/// YAML on standard output. Exit 1 when the policy is not valid or cannot be
/// exported faithfully (each reason on a line), 2 when the file cannot be read.
pub fn run(static_dir: Option<PathBuf>, static_flags: &StaticFlags, file: &Path) -> Result<i32> {
    let policy = match policy::load(file) {
        Ok(policy) => policy,
        Err(LoadError::Invalid(invalid)) => {
            for e in &invalid.0 {
                eprintln!("{}", escape(&format!("{}: {e}", file.display())));
            }
            return Ok(1);
        }
        Err(e) => return Err(Error::policy(file, e)),
    };
    match static_dir {
        Some(dir) => export_static(&policy, &static_flags.options(&dir)?, &dir, file),
        None => export_vap(&policy, file),
    }
}

/// `--static DIR`: the manifests written, each path on a line, and how
/// kube-apiserver loads them on standard error.
fn export_static(policy: &Policy, options: &Options, dir: &Path, file: &Path) -> Result<i32> {
    let files = match static_export::render(policy, options) {
        Ok(files) => files,
        Err(e) => {
            eprintln!(
                "{}",
                escape(&format!("{}: not exported: {e}", file.display()))
            );
            return Ok(1);
        }
    };
    if let Err(e) = static_export::write(dir, &files) {
        eprintln!("{}", escape(&format!("not written: {e}")));
        return Ok(1);
    }
    let mut out = io::stdout().lock();
    for f in &files {
        writeln!(out, "{}", escape(&dir.join(f.path).display().to_string()))
            .map_err(Error::stdout)?;
    }
    eprintln!(
        "{}",
        escape(&format!(
            "kube-apiserver (1.37 or later) loads these with --admission-control-config-file={}/{}",
            options.install_dir.trim_end_matches('/'),
            static_export::ADMISSION_CONFIG
        ))
    );
    Ok(0)
}

/// `--vap`: the ValidatingAdmissionPolicy and its binding, as YAML.
fn export_vap(policy: &Policy, file: &Path) -> Result<i32> {
    match vap::export_yaml(policy) {
        Ok(yaml) => {
            io::stdout()
                .write_all(yaml.as_bytes())
                .map_err(Error::stdout)?;
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
