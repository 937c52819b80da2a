//! `policy`'s subcommands (`validate`, `export`, `suggest`, `presets`) and `test`.

use std::path::PathBuf;

use crate::offline::suggest::EvidenceFormat;
use crate::offline::suggest::command::Suggest;
use clap::{Args, Subcommand};

use crate::flags::{MaxBodyFlag, PolicyFlag};
use crate::offline::export::StaticFlags;
use crate::offline::validate::Validate;
use crate::output::OutputFlag;

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
