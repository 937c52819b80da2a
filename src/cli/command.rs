//! The command line itself: [`Cli`], its commands, and `version`'s flags.

use clap::{Args, Parser, Subcommand};

use super::{
    ApproveArgs, CertsArgs, CheckArgs, DoctorArgs, LogFormat, PolicyCommand, ServeArgs, TestArgs,
    UnstickArgs, WatchArgs,
};
use crate::output::OutputFlag;

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
