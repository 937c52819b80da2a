//! The chart as a platform team installs it, on real nodes: a release's
//! image (`.ci/run`: `scripts/release.sh`; or the Dockerfile's, the same,
//! from `scripts/build-image.sh`), `helm install` with the
//! commands of the README's install section, read from it, two
//! replicas on the two nodes of `e2e/nodes.sh`, the chart's generated
//! certificates, and kube-apiserver calling the webhook through the chart's
//! Service (no `url:`).
//!
//! `#[ignore]`d: `.ci/run` starts a cluster (`e2e/cluster.sh up DIR`), its
//! nodes (`FG_NODES_REGISTRY=127.0.0.1:PORT e2e/nodes.sh up DIR`: containerd
//! pulls from the release's loopback registry), and runs the scenarios one at
//! a time, in this order, with
//!   FG_E2E_DIR=DIR  FG_HELM=helm  FG_IMAGE=REPOSITORY:TAG  FG_IMAGE_NEXT=REPOSITORY:TAG2
//!   FG_CHART=oci://127.0.0.1:PORT/charts/finalizer-guard  FG_CHART_VERSION=VERSION
//!   FG_IMAGE_DIGEST=sha256:...
//! (FG_IMAGE_NEXT: the same image under another tag, for the upgrade). With
//! FG_CHART, every `helm` command names that chart (`--version`, and
//! `--plain-http` for a loopback registry) where the docs name
//! `charts/finalizer-guard`, and the nodes pull the image (by digest with
//! FG_IMAGE_DIGEST). Without it, the repository's chart, and the image
//! archives imported into the nodes (`e2e/nodes.sh up DIR IMAGE.tar...`,
//! `image.pullPolicy=Never`).
//! Each scenario installs the release if an earlier one uninstalled it.
//! `helm_template_piped_to_kubectl_apply_*` installs the chart as Argo CD
//! does instead (`helm template`, no cluster asked, piped to `kubectl
//! apply`; no release), with certificate lifetimes of seconds, and deletes
//! it with `kubectl delete -f`. `seed_000_*` kills a node: it runs last.

#[path = "../common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};

use common::assert::assert_prints_on_stderr;
use common::live::{
    Run, denied, http_get, policy_denial, run, wait_may_patch_configmaps, wait_until,
};
use common::wait::poll_for;
use release::*;
use writes::*;

mod backstop;
mod dead_node;
mod disruption;
mod install;
mod latency;
mod release;
mod rotation;
mod upgrade;
mod writes;

/// The README's release name: the chart then names its objects
/// `finalizer-guard`, as `manifests/` and the docs do.
const RELEASE: &str = "finalizer-guard";
/// The chart's name for its objects under [`RELEASE`].
const FULLNAME: &str = "finalizer-guard";
/// The registry the README's install names, replaced by the local image's.
const README_REPOSITORY: &str = "registry.example.com/finalizer-guard";
/// The chart as the docs' commands name it: the repository's folder.
const REPOSITORY_CHART: &str = "charts/finalizer-guard";
const NAMESPACE: &str = "finalizer-guard";
const CNI: &str = "pod.beta1.sigma.ali/cni-allocated";
const HOLD: &str = "e2e.example.com/hold";
const STRIP: &str = r#"{"metadata":{"finalizers":null}}"#;
const PAUSE: &str = "localhost/finalizer-guard-e2e/pause:1";
/// watch's --stuck-after in seed 000 (the chart's `watch.stuckAfter`), seconds.
const STUCK_AFTER: u64 = 20;

/// The cluster and nodes named by the environment.
struct Nodes {
    dir: PathBuf,
    helm: PathBuf,
    image: (String, String),
    /// `image.digest` (FG_IMAGE_DIGEST), the image pulled by it.
    digest: Option<String>,
    /// The chart from a registry (FG_CHART, FG_CHART_VERSION), in place of
    /// the repository's.
    chart: Option<OciChart>,
}

/// A chart in an OCI registry: `oci://HOST[:PORT]/PATH` and its version.
struct OciChart {
    reference: String,
    version: String,
}

impl OciChart {
    /// FG_CHART and FG_CHART_VERSION; none without FG_CHART.
    fn from_env() -> Option<OciChart> {
        let reference = std::env::var("FG_CHART").ok().filter(|c| !c.is_empty())?;
        let version = std::env::var("FG_CHART_VERSION").unwrap_or_default();
        Some(OciChart::new(&reference, &version))
    }

    fn new(reference: &str, version: &str) -> OciChart {
        assert!(
            reference.starts_with("oci://") && reference.len() > "oci://".len(),
            "FG_CHART is {reference:?}: an oci://HOST[:PORT]/PATH reference"
        );
        assert!(
            !version.is_empty(),
            "FG_CHART is set and FG_CHART_VERSION is not: the chart's version in the registry"
        );
        OciChart {
            reference: reference.to_string(),
            version: version.to_string(),
        }
    }

    /// A registry on this machine's loopback serves plain HTTP.
    fn plain_http(&self) -> bool {
        let host = self.reference["oci://".len()..]
            .split('/')
            .next()
            .unwrap_or("");
        let host = match host.rsplit_once(':') {
            Some((h, port)) if !h.ends_with(':') && port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// `args` with the chart swapped: the repository's folder (or another
    /// `oci://` reference) becomes this one, any `--version` this version,
    /// and `--version` (and `--plain-http`) added. Arguments naming no chart
    /// (`helm status`, `get`, `uninstall`) are left as they are.
    fn swap(&self, args: &[&str]) -> Vec<String> {
        let names_chart = |a: &str| a == REPOSITORY_CHART || a.starts_with("oci://");
        if !args.iter().any(|a| names_chart(a)) {
            return args.iter().map(|a| a.to_string()).collect();
        }
        let mut out = Vec::with_capacity(args.len() + 3);
        let mut rest = args.iter();
        while let Some(&arg) = rest.next() {
            if names_chart(arg) {
                out.push(self.reference.clone());
            } else if arg == "--version" {
                rest.next();
            } else if !arg.starts_with("--version=") && arg != "--plain-http" {
                out.push(arg.to_string());
            }
        }
        out.extend(["--version".to_string(), self.version.clone()]);
        if self.plain_http() {
            out.push("--plain-http".to_string());
        }
        out
    }
}

fn split_image(image: &str) -> (String, String) {
    let (repository, tag) = image
        .rsplit_once(':')
        .filter(|(_, tag)| !tag.contains('/'))
        .unwrap_or_else(|| panic!("image {image:?} has no tag (REPOSITORY:TAG)"));
    (repository.to_string(), tag.to_string())
}

fn nodes() -> Nodes {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: these scenarios run on e2e/nodes.sh's nodes (see .ci/run)")
        })
    };
    let dir = PathBuf::from(var("FG_E2E_DIR"));
    assert!(
        dir.join("nodes/node-a/env").is_file(),
        "{} has no nodes: e2e/nodes.sh up {0}",
        dir.display()
    );
    let digest = std::env::var("FG_IMAGE_DIGEST")
        .ok()
        .filter(|d| !d.is_empty());
    if let Some(d) = &digest {
        assert!(
            d.strip_prefix("sha256:")
                .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit())),
            "FG_IMAGE_DIGEST is {d:?}: sha256:HEX, as a release's image.digest"
        );
    }
    Nodes {
        helm: PathBuf::from(var("FG_HELM")),
        image: split_image(&var("FG_IMAGE")),
        digest,
        chart: OciChart::from_env(),
        dir,
    }
}

impl Nodes {
    fn kubectl(&self, user: &str, args: &[&str], stdin: Option<&str>) -> Run {
        let mut cmd = Command::new(self.dir.join("bin/kubectl"));
        cmd.arg("--kubeconfig")
            .arg(self.dir.join(format!("{user}.kubeconfig")))
            .args(args);
        run(cmd, stdin)
    }

    fn admin(&self, args: &[&str]) -> Run {
        self.kubectl("admin", args, None)
    }

    fn apply(&self, object: &Value) {
        self.kubectl("admin", &["apply", "-f", "-"], Some(&object.to_string()))
            .ok();
    }

    fn get(&self, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        self.admin(&all).ok().json()
    }

    /// The image the chart's pods run: `REPOSITORY:TAG[@DIGEST]`.
    fn image_ref(&self) -> String {
        let (repository, tag) = &self.image;
        match &self.digest {
            Some(digest) => format!("{repository}:{tag}@{digest}"),
            None => format!("{repository}:{tag}"),
        }
    }

    /// `helm ARGS`; with FG_CHART, the chart the arguments name is the
    /// registry's ([`OciChart::swap`]).
    fn helm(&self, args: &[&str]) -> Run {
        let mut cmd = self.helm_command(args);
        cmd.env("KUBECONFIG", self.dir.join("admin.kubeconfig"));
        run(cmd, None)
    }

    /// `helm template ARGS` as a GitOps tool renders (Argo CD): with no
    /// cluster to ask (a kubeconfig that does not exist), so nothing
    /// rendered can come from the cluster. The rendered manifest.
    fn render(&self, args: &[&str]) -> String {
        let mut all = vec!["template"];
        all.extend_from_slice(args);
        let mut cmd = self.helm_command(&all);
        cmd.env("KUBECONFIG", self.dir.join("no-cluster.kubeconfig"));
        run(cmd, None).ok().stdout
    }

    /// `helm ARGS`, with no cluster named yet; with FG_CHART, the chart the
    /// arguments name is the registry's ([`OciChart::swap`]).
    fn helm_command(&self, args: &[&str]) -> Command {
        let home = self.dir.join("helm-home");
        let mut cmd = Command::new(&self.helm);
        let args = match &self.chart {
            Some(chart) => chart.swap(args),
            None => args.iter().map(|a| a.to_string()).collect(),
        };
        // The README's paths (charts/finalizer-guard) are the repository's.
        cmd.args(&args)
            .current_dir(repo())
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_DATA_HOME", home.join("data"));
        cmd
    }

    fn nodes_sh(&self, args: &[&str]) -> Run {
        let mut cmd = Command::new(repo().join("e2e/nodes.sh"));
        cmd.args(args);
        run(cmd, None)
    }

    /// The pods of one of the chart's components (`webhook`, `watch`),
    /// those being deleted too.
    fn component_pods(&self, component: &str) -> Vec<Value> {
        let selector = format!("app.kubernetes.io/component={component}");
        let pods = self.get(&["pods", "-n", NAMESPACE, "-l", &selector]);
        pods["items"].as_array().cloned().unwrap_or_default()
    }

    /// The webhook's pods, ready or not: (name, node, ready, containerID).
    fn webhook_pods(&self) -> Vec<(String, String, bool, String)> {
        self.component_pods("webhook")
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .map(|p| {
                let id = p["status"]["containerStatuses"][0]["containerID"]
                    .as_str()
                    .unwrap_or("")
                    .trim_start_matches("containerd://")
                    .to_string();
                (
                    p["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
                    ready(p),
                    id,
                )
            })
            .collect()
    }

    /// The chart's watch pod, ready, and not being replaced.
    fn watch_pod(&self) -> WatchPod {
        let mut found = None;
        wait_until("one ready watch pod", 180, || {
            found = match &self.component_pods("watch")[..] {
                [p] if p["metadata"]["deletionTimestamp"].is_null() && ready(p) => Some(WatchPod {
                    node: p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
                    ip: p["status"]["podIP"].as_str().unwrap_or("").to_string(),
                }),
                _ => None,
            };
            found.is_some()
        });
        found.expect("a watch pod")
    }

    /// Two ready webhook pods, one on each node.
    fn wait_spread(&self) {
        wait_until("two ready webhook pods, one per node", 180, || {
            let pods = self.webhook_pods();
            let mut on: Vec<&str> = pods.iter().filter(|p| p.2).map(|p| p.1.as_str()).collect();
            on.sort_unstable();
            pods.len() == 2 && on == ["node-a", "node-b"]
        });
    }

    fn release_installed(&self) -> bool {
        self.helm(&["status", RELEASE, "-n", NAMESPACE]).code == 0
    }

    /// No release, and no pod of one: `helm uninstall --wait` when it is
    /// installed, then until no pod of it runs, the terminating included.
    /// Helm deletes the Deployment in the background, and its pods keep
    /// their certificate loop until they stop: one still running would fill
    /// the next install's empty Secret with certificates of its own
    /// lifetimes.
    fn uninstalled(&self) {
        if self.release_installed() {
            self.helm(&["uninstall", RELEASE, "-n", NAMESPACE, "--wait"])
                .ok();
        }
        let selector = format!("app.kubernetes.io/instance={RELEASE}");
        wait_until("no pod of an uninstalled release", 180, || {
            let pods = self.get(&["pods", "-n", NAMESPACE, "-l", &selector]);
            pods["items"].as_array().is_some_and(Vec::is_empty)
        });
    }

    /// The README's install, its commands as written there
    /// ([`Nodes::readme_namespace_and_install_args`]), with `--wait`.
    fn install(&self) {
        let start = Instant::now();
        let mut args = self.readme_namespace_and_install_args();
        args.extend(["--wait", "--timeout", "5m"].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.helm(&args).ok();
        eprintln!(
            "nodes: helm install --wait: {:.1} s to two ready pods (cold start, policy check included)",
            start.elapsed().as_secs_f64()
        );
    }

    /// The README's install ([`readme_install`]) up to its `helm install`:
    /// its `kubectl` commands run (the namespace, restricted), and its `helm
    /// install` words returned, with what only this machine needs: the
    /// image's tag. From a registry (FG_CHART), the chart is the registry's
    /// ([`Nodes::helm`]) and the image is pulled, by `image.digest` when
    /// FG_IMAGE_DIGEST gives it; otherwise `pullPolicy: Never` (the nodes
    /// pull nothing, the image was imported into them).
    fn readme_namespace_and_install_args(&self) -> Vec<String> {
        let commands = readme_install();
        let (helm, kubectl) = commands.split_last().expect("README's install commands");
        for command in kubectl {
            let args: Vec<&str> = command[1..].iter().map(String::as_str).collect();
            match command[0].as_str() {
                "kubectl" if args[..2] == ["create", "namespace"] => {
                    // An earlier scenario's namespace may be there already.
                    self.admin(&args);
                }
                "kubectl" => {
                    self.admin(&args).ok();
                }
                other => panic!("README's install runs {other} before helm install: {command:?}"),
            }
        }
        assert_eq!(helm[..3], ["helm", "install", RELEASE], "{helm:?}");
        let mut args: Vec<String> = helm[1..]
            .iter()
            .map(|w| w.replace(README_REPOSITORY, &self.image.0))
            .collect();
        args.extend(["--set".to_string(), format!("image.tag={}", self.image.1)]);
        if let Some(digest) = &self.digest {
            args.extend(["--set".to_string(), format!("image.digest={digest}")]);
        }
        if self.chart.is_none() {
            args.extend(["--set", "image.pullPolicy=Never"].map(String::from));
        }
        args
    }

    /// `helm upgrade --reuse-values --set VALUE --wait`.
    fn upgrade(&self, value: &str) {
        self.helm_upgrade(&["--set", value]).ok();
    }

    /// `helm upgrade --reuse-values --set policy.mode=enforce`, as the README's
    /// step 3, and the pods of the old policy gone.
    fn enforce(&self) {
        self.upgrade("policy.mode=enforce");
        self.old_pods_gone();
    }

    /// The webhook pods a rollout replaced gone: until they stop they answer
    /// the calls kube-apiserver sends on the connections it has to them,
    /// under the policy they were started with.
    fn old_pods_gone(&self) {
        wait_until("the pods of the old policy gone", 120, || {
            self.component_pods("webhook")
                .iter()
                .all(|p| p["metadata"]["deletionTimestamp"].is_null())
        });
    }

    /// Installed and enforcing, two pods on two nodes.
    fn enforcing(&self) {
        if !self.release_installed() {
            self.install();
        }
        let values = self
            .helm(&["get", "values", RELEASE, "-n", NAMESPACE, "-o", "json"])
            .ok()
            .json();
        if values["policy"]["mode"] != "enforce" {
            self.enforce();
        }
        self.wait_spread();
    }

    /// alice's `finalizers: null` merge patch, as kubectl sends it.
    fn strip(&self, kind: &str, name: &str, ns: &str) -> Run {
        self.merge_patch("alice", [kind, name, ns], STRIP, &[])
    }

    /// `kubectl patch KIND NAME -n NS --type merge -p PATCH EXTRA...` as `user`.
    fn merge_patch(
        &self,
        user: &str,
        [kind, name, ns]: [&str; 3],
        patch: &str,
        extra: &[&str],
    ) -> Run {
        let mut args = vec![
            "patch", kind, name, "-n", ns, "--type", "merge", "-p", patch,
        ];
        args.extend_from_slice(extra);
        self.kubectl(user, &args, None)
    }

    /// A new namespace; one an earlier run left is released and deleted first.
    fn namespace(&self, name: &str) {
        if self.admin(&["get", "namespace", name]).code == 0 {
            self.release_namespace(name);
        }
        wait_until(&format!("namespace {name} gone"), 120, || {
            self.admin(&["get", "namespace", name]).code != 0
        });
        self.admin(&["create", "namespace", name]).ok();
    }

    fn held_configmap(&self, ns: &str, name: &str) {
        self.held(ns, name, HOLD);
    }

    /// A ConfigMap holding `finalizer`.
    fn held(&self, ns: &str, name: &str, finalizer: &str) {
        self.apply(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "finalizers": [finalizer]},
        }));
    }

    /// alice deletes it; its finalizer keeps it, Terminating (an override
    /// only releases an object being deleted).
    fn delete_held(&self, ns: &str, name: &str) {
        self.kubectl(
            "alice",
            &["delete", "configmap", name, "-n", ns, "--wait=false"],
            None,
        )
        .ok();
    }

    /// `helm ARGS` against the release, as `helm upgrade` with `--wait`.
    fn helm_upgrade(&self, extra: &[&str]) -> Run {
        let mut args = chart_command("upgrade");
        args.extend(["--reuse-values", "--wait", "--timeout", "5m"]);
        args.extend_from_slice(extra);
        self.helm(&args)
    }

    /// The audit records the webhook's pods printed (their standard
    /// output's JSON lines with a decision), read as a log shipper reads
    /// them: from the nodes' container log files, the rotated ones included.
    /// The kubelet rotates a container's log at 10 MiB
    /// (`containerLogMaxSize`) and `kubectl logs` reads only the newest
    /// file, which under a few hundred judged writes a second holds the last
    /// minute or so.
    fn audit_records(&self) -> Vec<Value> {
        self.audit_trail().records
    }

    /// [`Nodes::audit_records`], and what they were read from.
    fn audit_trail(&self) -> AuditTrail {
        let pods = self.get(&[
            "pods",
            "-n",
            NAMESPACE,
            "-l",
            "app.kubernetes.io/component=webhook",
        ]);
        let mut trail = AuditTrail::default();
        for pod in pods["items"].as_array().into_iter().flatten() {
            let (Some(name), Some(uid), Some(node)) = (
                pod["metadata"]["name"].as_str(),
                pod["metadata"]["uid"].as_str(),
                pod["spec"]["nodeName"].as_str(),
            ) else {
                continue; // not scheduled: nothing printed
            };
            let logs = self
                .dir
                .join("nodes")
                .join(node)
                .join("pod-logs")
                .join(format!("{NAMESPACE}_{name}_{uid}"));
            if !logs.is_dir() {
                // A pod that has run has its log directory on its node.
                assert_ne!(
                    pod["status"]["phase"],
                    "Running",
                    "{} does not exist: where is {name}'s log?",
                    logs.display()
                );
                continue;
            }
            let (lines, files) = container_stdout(&logs);
            trail.files += files;
            for line in lines {
                let Ok(record) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if record["decision"].is_string() {
                    trail.bytes += line.len() + 1;
                    trail.records.push(record);
                }
            }
        }
        trail
    }

    /// `kubectl scale` of the webhook's Deployment.
    fn scale_webhook(&self, replicas: u32) {
        let replicas = format!("--replicas={replicas}");
        self.admin(&["scale", "deployment", FULLNAME, "-n", NAMESPACE, &replicas])
            .ok();
    }

    /// What the policy check's Job printed (a failed one is kept to say why).
    fn policy_check_log(&self) -> String {
        let job = format!("job/{FULLNAME}-policy-check");
        let logs = self.admin(&["logs", "-n", NAMESPACE, &job]);
        format!("{}{}", logs.stdout, logs.stderr)
    }

    /// The Events of `reason` about `name` in `ns`.
    fn events(&self, ns: &str, name: &str, reason: &str) -> Vec<Value> {
        self.get(&[
            "events",
            "-n",
            ns,
            "--field-selector",
            &format!("involvedObject.name={name},reason={reason}"),
        ])["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Every finalizer removed by admin, then the namespace deleted.
    fn release_namespace(&self, ns: &str) {
        // Deleted first: an override only releases an object being deleted.
        self.admin(&[
            "delete",
            "configmaps,pods",
            "--all",
            "-n",
            ns,
            "--wait=false",
        ]);
        for kind in ["configmaps", "pods"] {
            let list = self.get(&[kind, "-n", ns]);
            for item in list["items"].as_array().into_iter().flatten() {
                let name = item["metadata"]["name"].as_str().unwrap_or("");
                let patch = json!({"metadata": {
                    "finalizers": null,
                    "annotations": {"finalizer-guard.io/override": "node-lost: e2e cleanup"},
                }});
                self.merge_patch("admin", [kind, name, ns], &patch.to_string(), &[]);
            }
        }
        self.admin(&[
            "delete",
            "namespace",
            ns,
            "--ignore-not-found",
            "--wait=false",
        ]);
    }
}

/// `helm VERB RELEASE charts/finalizer-guard -n NAMESPACE`, from the
/// repository (where [`Nodes::helm`] runs).
fn chart_command(verb: &str) -> Vec<&str> {
    vec![verb, RELEASE, "charts/finalizer-guard", "-n", NAMESPACE]
}

/// The README's Helm install, as written there: the commands of the `sh`
/// block that runs `helm install` in "Installing in a cluster", each as its
/// words (continued lines joined, comments dropped). The README shows no
/// quoting there, so none is interpreted here; a quote fails the test.
fn readme_install() -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(repo().join("docs/install.md")).expect("docs/install.md");
    let section = readme
        .split_once("\n## Installing in a cluster\n")
        .and_then(|(_, rest)| rest.split("\n## ").next())
        .expect("docs/install.md has an \"Installing in a cluster\" section");
    let block = section
        .split("```sh\n")
        .skip(1)
        .filter_map(|b| b.split_once("\n```").map(|(b, _)| b))
        .find(|b| b.contains("helm install "))
        .expect("a sh block with helm install in README's install section");
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        let line = match line.find(" #") {
            Some(i) => &line[..i],
            None if line.trim_start().starts_with('#') => "",
            None => line,
        };
        let (text, continued) = match line.trim_end().strip_suffix('\\') {
            Some(text) => (text, true),
            None => (line, false),
        };
        current.push_str(text);
        current.push(' ');
        if !continued && !current.trim().is_empty() {
            assert!(
                !current.contains(['"', '\'', '$', '`']),
                "README's install quotes or expands; run it through a shell: {current}"
            );
            commands.push(current.split_whitespace().map(String::from).collect());
            current.clear();
        } else if !continued {
            current.clear();
        }
    }
    assert!(
        commands.iter().any(|c: &Vec<String>| c[0] == "helm"),
        "{commands:?}"
    );
    commands
}

/// With FG_CHART, the docs' install and every upgrade and template name the
/// registry's chart at its version (plain HTTP on loopback only); what
/// names no chart is left alone. Runs without nodes.
#[test]
fn a_registry_chart_takes_the_place_of_the_repository_s_in_every_helm_command() {
    let chart = OciChart::new("oci://127.0.0.1:5000/charts/finalizer-guard", "0.1.0");
    let install = readme_install()
        .into_iter()
        .find(|c| c[0] == "helm")
        .expect("the docs' helm install");
    let words: Vec<&str> = install[1..].iter().map(String::as_str).collect();
    assert!(words.contains(&REPOSITORY_CHART), "{words:?}");
    let swapped = chart.swap(&words);
    assert!(
        !swapped.iter().any(|w| w == REPOSITORY_CHART),
        "{swapped:?}"
    );
    assert_eq!(swapped[..3], ["install", RELEASE, chart.reference.as_str()]);
    assert_eq!(swapped.len(), words.len() + 3, "{swapped:?}");
    assert_eq!(
        swapped[swapped.len() - 3..],
        ["--version", "0.1.0", "--plain-http"]
    );
    // The docs' other words stay, in their order.
    let kept: Vec<&str> = swapped[3..swapped.len() - 3]
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(kept, words[3..], "{swapped:?}");

    for verb in ["upgrade", "template"] {
        let swapped = chart.swap(&chart_command(verb));
        assert_eq!(
            swapped,
            [
                verb,
                RELEASE,
                &chart.reference,
                "-n",
                NAMESPACE,
                "--version",
                "0.1.0",
                "--plain-http"
            ],
        );
    }
    // A version or an oci:// chart already named: replaced, not doubled.
    let swapped = chart.swap(&[
        "upgrade",
        RELEASE,
        "oci://ghcr.io/x/finalizer-guard",
        "--version",
        "9",
        "--plain-http",
    ]);
    assert_eq!(
        swapped,
        [
            "upgrade",
            RELEASE,
            &chart.reference,
            "--version",
            "0.1.0",
            "--plain-http"
        ]
    );
    for untouched in [
        &["status", RELEASE, "-n", NAMESPACE][..],
        &["uninstall", RELEASE, "-n", NAMESPACE, "--wait"],
        &["get", "values", RELEASE, "-n", NAMESPACE, "-o", "json"],
    ] {
        assert_eq!(chart.swap(untouched), untouched);
    }
    // Only loopback is plain HTTP.
    for (reference, plain) in [
        ("oci://localhost:5000/charts/finalizer-guard", true),
        ("oci://127.0.0.1/finalizer-guard", true),
        ("oci://[::1]:5000/finalizer-guard", true),
        (
            "oci://ghcr.io/finalizer-guard/charts/finalizer-guard",
            false,
        ),
        ("oci://127.0.0.1.example.com/finalizer-guard", false),
        ("oci://10.244.10.1:5000/finalizer-guard", false),
    ] {
        assert_eq!(
            OciChart::new(reference, "1").plain_http(),
            plain,
            "{reference}"
        );
    }
}

/// The chart's `finalizer-guard watch`, read at its pod's address (pod IPs
/// are reachable from this machine).
#[derive(Clone)]
struct WatchPod {
    node: String,
    ip: String,
}

impl WatchPod {
    /// A gauge's value, `None` while the series does not exist.
    fn gauge(&self, name: &str, labels: &str) -> Option<f64> {
        let metrics = http_get(format!("{}:9091", self.ip), "/metrics")?;
        let prefix = format!("{name}{{{labels}}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
    }

    /// `finalizer_guard_stuck_objects` of pods holding `finalizer`.
    fn stuck(&self, finalizer: &str) -> Option<f64> {
        self.gauge(
            "finalizer_guard_stuck_objects",
            &format!("finalizer=\"{finalizer}\",resource=\"pods\""),
        )
    }

    /// Polls the CNI finalizer's gauge in a thread until it counts `count`
    /// pods: when it first did. Gives up at `deadline`.
    fn first_seen_stuck(&self, count: u64, deadline: Instant) -> std::thread::JoinHandle<Instant> {
        let watch = self.clone();
        std::thread::spawn(move || {
            let timeout = deadline.saturating_duration_since(Instant::now());
            poll_for(timeout, Duration::from_millis(250), || {
                (watch.stuck(CNI) == Some(count as f64)).then(Instant::now)
            })
            .unwrap_or_else(|| {
                panic!(
                    "watch did not count {count} pods stuck on {CNI} in time: {:?}",
                    watch.stuck(CNI)
                )
            })
        })
    }
}

/// The pod's Ready condition is True.
fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// The nodes, the release installed and enforcing, and `ns` new.
fn enforcing_in(ns: &str) -> Nodes {
    let n = nodes();
    n.enforcing();
    n.namespace(ns);
    n
}

use common::repository::root as repo;

/// The webhook's audit records, the container log files they were read
/// from (rotated ones included), and the records' bytes.
#[derive(Default)]
struct AuditTrail {
    records: Vec<Value>,
    files: usize,
    bytes: usize,
}

/// The standard output lines of every container of a pod, read from the
/// pod's log directory on its node (`POD-LOGS/NS_NAME_UID/CONTAINER/`) as a
/// log shipper reads it: each container's `N.log`, the files the kubelet
/// rotated beside it (`N.log.TIMESTAMP`, and the older ones gzip'd), in the
/// order written. A line is CRI's `TIME STREAM P|F TEXT`: a `P` part
/// continues in the next line. A file rotated away between the listing and
/// the read is read again under its new name. The lines, and how many files
/// they came from.
fn container_stdout(pod: &Path) -> (Vec<String>, usize) {
    for _ in 0..5 {
        if let Some(lines) = container_stdout_once(pod) {
            return lines;
        }
    }
    panic!("{}: its files were rotated at every read", pod.display())
}

fn container_stdout_once(pod: &Path) -> Option<(Vec<String>, usize)> {
    let read = |dir: &Path| -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .collect();
        paths.sort();
        paths
    };
    let (mut lines, mut read_files) = (Vec::new(), 0);
    for container in read(pod).into_iter().filter(|p| p.is_dir()) {
        // The kubelet gzips into NAME.gz.tmp, then renames it.
        let mut files: Vec<PathBuf> = read(&container)
            .into_iter()
            .filter(|f| f.extension().is_none_or(|e| e != "tmp"))
            .collect();
        // N.log.TIMESTAMP[.gz] sort after N.log but were written before it.
        files.sort_by_key(|f| {
            let name = f.file_name().unwrap_or_default().to_string_lossy();
            let (restart, rest) = name.split_once(".log").unwrap_or((&name, ""));
            (
                restart.parse::<u32>().unwrap_or(u32::MAX),
                rest.is_empty(),
                rest.trim_end_matches(".gz").to_string(),
            )
        });
        let mut partial = String::new();
        read_files += files.len();
        for file in files {
            let text = if file.extension().is_some_and(|e| e == "gz") {
                if !file.exists() {
                    return None;
                }
                let mut gunzip = Command::new("gzip");
                gunzip.arg("-dc").arg(&file);
                run(gunzip, None).ok().stdout
            } else {
                match std::fs::read(&file) {
                    Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
                    Err(e) => panic!("{}: {e}", file.display()),
                }
            };
            for line in text.lines() {
                let mut fields = line.splitn(4, ' ');
                let (Some(_time), Some(stream), Some(tag)) =
                    (fields.next(), fields.next(), fields.next())
                else {
                    continue;
                };
                if stream != "stdout" {
                    continue;
                }
                partial.push_str(fields.next().unwrap_or(""));
                if tag != "P" {
                    lines.push(std::mem::take(&mut partial));
                }
            }
        }
    }
    Some((lines, read_files))
}
