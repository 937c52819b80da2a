//! Helm on the real control plane: the chart's values refused before
//! anything is installed, and the helpers the other scenarios render and
//! install the chart with. The chart's own pods serving through its Service
//! (install, upgrades, the policy check's Job, the backstop, uninstall) run
//! on real nodes: tests/nodes.
//!
//! `#[ignore]`d like every scenario: run with `--ignored`, they fail without
//! `FG_E2E_DIR` or without helm (`FG_HELM`, or the binary `e2e/helm/build.sh`
//! caches).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::harness::{self, Cluster, env};

pub(super) use crate::common::repository::chart;
/// `FG_HELM`, else the binary `e2e/helm/build.sh` caches for the pinned version.
pub(crate) use crate::common::tools::find_helm as helm_binary;

/// `helm template finalizer-guard charts/finalizer-guard -n finalizer-guard
/// --set policyCheck.enabled=false ARGS`: the chart's objects as manifests/
/// names them, with no cluster asked and no user configuration.
pub(crate) fn render(work: &Path, args: &[&str]) -> Vec<Value> {
    let helm = helm_binary()
        .expect("no helm: set FG_HELM, or build it with e2e/helm/build.sh (.ci/run does)");
    let home = work.join("render-helm-home");
    let mut cmd = Command::new(helm);
    cmd.args(["template", "finalizer-guard"])
        .arg(chart())
        .args(["--namespace", harness::NAMESPACE])
        .args(["--set", "policyCheck.enabled=false"])
        .args(args)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBECONFIG");
    let out = harness::run(cmd, None).ok();
    serde_yaml_ng::Deserializer::from_str(&out.stdout)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// Helm, run as the cluster's admin, with a configuration of its own.
pub(super) struct Helm {
    binary: PathBuf,
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Helm {
    pub(super) fn new(cluster: &Cluster, work: &Path) -> Helm {
        let binary = helm_binary()
            .expect("no helm: set FG_HELM, or build it with e2e/helm/build.sh (.ci/run does)");
        Helm {
            binary,
            kubeconfig: cluster.kubeconfig("admin"),
            home: work.join("helm-home"),
        }
    }

    pub(super) fn run(&self, args: &[&str]) -> harness::Run {
        let mut cmd = Command::new(&self.binary);
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_DATA_HOME", self.home.join("data"));
        harness::run(cmd, None)
    }
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR) and helm: see .ci/run"]
fn helm_install_refuses_a_misspelled_value_and_installs_nothing() {
    let env = env();
    let c = &env.cluster;
    let work = env.work.join("helm-refused");
    fs::create_dir_all(&work).unwrap();
    let helm = Helm::new(c, &work);
    let chart = chart();
    let run = helm.run(&[
        "install",
        "helm-e2e-refused",
        chart.to_str().unwrap(),
        "-n",
        "e2e-helm-refused",
        "--create-namespace",
        "--set",
        "policy.rules[0].finalizers={example.com/cleanup}",
        "--set",
        "policy.rules[0].serviceAccount={ops:cleanup}",
    ]);
    assert_ne!(run.code, 0, "{run:#?}");
    assert!(
        run.stderr
            .contains("values don't meet the specifications of the schema")
            && run.stderr.contains("serviceAccount"),
        "helm names the misspelled value: {run:#?}"
    );
    assert!(
        c.get(&[
            "validatingwebhookconfiguration",
            "helm-e2e-refused-finalizer-guard"
        ])
        .is_none()
    );
    let releases = helm.run(&["list", "-A", "-q"]).ok();
    assert!(
        !releases.stdout.contains("helm-e2e-refused"),
        "{releases:#?}"
    );
}
