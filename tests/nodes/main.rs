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

#[test]
#[ignore = "needs e2e/nodes.sh's nodes and the image: see .ci/run"]
fn chart_installs_unmodified_on_two_nodes_and_denies_through_its_service() {
    let n = nodes();
    n.uninstalled();
    n.install();
    n.wait_spread();

    // kube-apiserver calls the chart's Service: no url, the CA the pods
    // made and wrote into the caBundle (certificates.source self, the default).
    let config = n.get(&["validatingwebhookconfiguration", FULLNAME]);
    let client = &config["webhooks"][0]["clientConfig"];
    assert_eq!(client["service"]["name"], FULLNAME, "{config:#}");
    assert_eq!(client["service"]["namespace"], NAMESPACE, "{config:#}");
    assert!(client["url"].is_null(), "{config:#}");
    assert!(
        client["caBundle"].as_str().is_some_and(|b| !b.is_empty()),
        "{config:#}"
    );
    // The pods run the image given (FG_IMAGE, FG_IMAGE_DIGEST), as the chart runs it.
    let deploy = n.get(&["deployment", FULLNAME, "-n", NAMESPACE]);
    let container = &deploy["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], n.image_ref(), "{deploy:#}");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(deploy["status"]["readyReplicas"], 2, "{deploy:#}");

    let ns = "nodes-chart";
    n.namespace(ns);
    n.held_configmap(ns, "held");

    // Warn mode, as installed: alice's strip goes through, with a warning.
    let warned = n.strip("configmap", "held", ns);
    assert_eq!(warned.code, 0, "{warned:#?}");
    assert!(warned.stderr.contains("Warning:"), "{warned:#?}");

    // Enforcing: the same strip is denied, by the pods, through the Service.
    n.enforce();
    n.wait_spread();
    n.held_configmap(ns, "held");
    let strip = n.strip("configmap", "held", ns);
    assert_eq!(strip.code, 1, "{strip:#?}");
    assert!(strip.stderr.contains(&denied()), "{strip:#?}");
    let held = n.get(&["configmap", "held", "-n", ns]);
    assert_eq!(held["metadata"]["finalizers"], json!([HOLD]), "{held:#}");
    let config = n.get(&["validatingwebhookconfiguration", FULLNAME]);
    assert_eq!(config["webhooks"][0]["failurePolicy"], "Fail", "{config:#}");
    n.release_namespace(ns);
}

/// The objects `helm get manifest` says the release installed.
fn release_objects(n: &Nodes) -> Vec<Value> {
    let manifest = n
        .helm(&["get", "manifest", RELEASE, "-n", NAMESPACE])
        .ok()
        .stdout;
    manifest_objects(&manifest)
}

/// The objects of a rendered manifest (YAML documents).
fn manifest_objects(manifest: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(manifest)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).expect("a YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The resource `kubectl get` names an object of a manifest by: `KIND.GROUP`.
fn resource(object: &Value) -> String {
    let kind = object["kind"].as_str().expect("a kind").to_lowercase();
    let api_version = object["apiVersion"].as_str().expect("an apiVersion");
    match api_version.rsplit_once('/') {
        Some((group, _)) => format!("{kind}.{group}"),
        None => kind,
    }
}

/// What is left with the release's label (`app.kubernetes.io/instance`):
/// of every namespaced kind the API server lists, in every namespace (the
/// pods, ReplicaSets, Jobs and EndpointSlices the chart's objects made
/// too), and of the cluster-scoped kinds among `rendered`. `kubectl get -o
/// name`'s lines; empty when nothing is.
fn release_leftovers(n: &Nodes, rendered: &[Value]) -> String {
    let listed = n
        .admin(&[
            "api-resources",
            "--namespaced",
            "--verbs=list",
            "-o",
            "name",
        ])
        .ok()
        .stdout;
    let mut kinds: Vec<String> = listed.lines().map(str::to_string).collect();
    for object in rendered
        .iter()
        .filter(|o| o["metadata"]["namespace"].is_null())
    {
        let kind = resource(object);
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    let kinds = kinds.join(",");
    let selector = format!("app.kubernetes.io/instance={RELEASE}");
    n.admin(&["get", &kinds, "-A", "-l", &selector, "-o", "name"])
        .ok()
        .stdout
        .trim()
        .to_string()
}

/// `kubectl get` arguments for one object of a manifest.
fn get_args(object: &Value) -> Vec<String> {
    let mut args = vec![
        resource(object),
        object["metadata"]["name"]
            .as_str()
            .expect("a name")
            .to_string(),
    ];
    if let Some(ns) = object["metadata"]["namespace"].as_str() {
        args.extend(["-n".to_string(), ns.to_string()]);
    }
    args
}

/// A rule letting the developers (alice's group) remove the CNI finalizer,
/// for `helm --set-json`.
fn developers_rule() -> String {
    format!(
        r#"policy.rules=[{{"name":"developers-release-cni","finalizers":["{CNI}"],"groups":["developers"]}}]"#
    )
}

const SKIPPED_SA: &str = "system:serviceaccount:storage-system:volume-cleaner";
const SKIP_BINDING: &str = "nodes-e2e-skip-identities";

/// The chart's life on the nodes after the install: its objects as
/// rendered, the denial and an override through the pods, unauthenticated
/// (no `--client-ca` as installed) and so without Events; `helm upgrade`
/// with a policy `serve` would refuse, refused by the policy check's Job on
/// a node with nothing changed; an upgrade that passes, the pods rolled to
/// its policy (a rule for the developers, and identities matchConditions
/// keep away from the webhook) and to `events.unauthenticated=true`, whose
/// denials write Events again, the certificates kept; and `helm
/// uninstall`, which leaves nothing.
#[test]
#[ignore = "needs e2e/nodes.sh's nodes and the image: see .ci/run"]
fn helm_upgrade_checks_the_policy_rolls_the_pods_and_uninstall_leaves_nothing() {
    let ns = "nodes-helm";
    let n = enforcing_in(ns);

    // Every object the release names exists, with what the chart rendered.
    let objects = release_objects(&n);
    for object in &objects {
        let args = get_args(object);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let live = n.get(&args);
        assert_eq!(
            live["metadata"]["labels"]["app.kubernetes.io/instance"], RELEASE,
            "{args:?}"
        );
    }
    let installed = n.get(&["validatingwebhookconfiguration", FULLNAME]);
    let rendered = objects
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .expect("the webhook configuration in the manifest");
    for field in [
        "rules",
        "matchConditions",
        "timeoutSeconds",
        "sideEffects",
        "matchPolicy",
    ] {
        assert_eq!(
            installed["webhooks"][0][field], rendered["webhooks"][0][field],
            "{field} as rendered"
        );
    }
    let ca_bundle = installed["webhooks"][0]["clientConfig"]["caBundle"].clone();
    let tls = n.get(&[
        "secret",
        &format!("{FULLNAME}-certificates"),
        "-n",
        NAMESPACE,
    ]);
    assert_eq!(
        tls["data"]["ca.crt"], ca_bundle,
        "the caBundle is the Secret's CA"
    );

    // Denied through the pods; an override lets it through, with a warning.
    let _uninstall = UninstallOnPanic(&n);
    n.held(ns, "cni", CNI);
    n.delete_held(ns, "cni");
    let run = n.strip("configmap", "cni", ns);
    assert_eq!(run.code, 1, "{run:#?}");
    assert_prints_on_stderr(&run, &[denied().as_str(), CNI, "alice"]);
    n.kubectl(
        "alice",
        &[
            "annotate",
            "configmap",
            "cni",
            "-n",
            ns,
            "finalizer-guard.io/override=node-lost: INC-4711 node-c powered off",
        ],
        None,
    )
    .ok();
    let run = n.strip("configmap", "cni", ns).ok();
    assert!(
        run.stderr.contains("Warning:") && run.stderr.contains("node-lost"),
        "{run:#?}"
    );
    // As installed the pods have no --client-ca: they cannot tell
    // kube-apiserver from anyone else who reaches them. Their audit records
    // say so, and they write no Event about the object (docs/security.md,
    // "Who can post a review"); events.unauthenticated, below, turns them on.
    let cni_records = || -> Vec<Value> {
        n.audit_records()
            .into_iter()
            .filter(|r| r["name"] == "cni" && r["namespace"] == ns)
            .collect()
    };
    wait_until(
        "the pods' audit records of the denial and the override",
        30,
        || {
            let records = cni_records();
            ["denied", "override"]
                .iter()
                .all(|d| records.iter().any(|r| r["decision"] == *d))
        },
    );
    for record in cni_records() {
        assert_eq!(record["authenticated"], false, "{record}");
    }
    // An Event would be sent within a second of its review: none in 3 s.
    // The time is what is tested (nothing comes), not a wait for a condition.
    std::thread::sleep(Duration::from_secs(3));
    for reason in ["FinalizerRemovalDenied", "FinalizerOverride"] {
        let events = n.events(ns, "cni", reason);
        assert!(
            events.is_empty(),
            "an unauthenticated {reason} Event: {events:#?}"
        );
    }

    // helm upgrade with a policy `serve` would refuse: Kubernetes' own
    // controllers judged (builtinControllers false) and no rule for them.
    // The policy check's Job, on a node, refuses it; nothing changes.
    let current = |kind: &str, name: &str| {
        if kind == "validatingwebhookconfiguration" {
            n.get(&[kind, name])
        } else {
            n.get(&[kind, name, "-n", NAMESPACE])
        }
    };
    let policy_name = format!("{FULLNAME}-policy");
    let before: Vec<(&str, &str, Value)> = [
        ("configmap", policy_name.as_str()),
        ("deployment", FULLNAME),
        ("validatingwebhookconfiguration", FULLNAME),
    ]
    .into_iter()
    .map(|(kind, name)| (kind, name, current(kind, name)))
    .collect();
    let rule = developers_rule();
    let refused = n.helm_upgrade(&[
        "--set",
        "policy.builtinControllers=false",
        "--set-json",
        &rule,
    ]);
    assert_ne!(
        refused.code, 0,
        "helm upgrade passed a refused policy: {refused:#?}"
    );
    assert!(
        refused.stderr.contains("pre-upgrade hooks failed")
            && refused.stderr.contains(&format!("{FULLNAME}-policy-check")),
        "{refused:#?}"
    );
    let check = n.policy_check_log();
    assert!(
        check.contains("garbage-collector"),
        "the check said which controller it would block: {check}"
    );
    for (kind, name, was) in &before {
        assert_eq!(
            current(kind, name)["metadata"]["resourceVersion"],
            was["metadata"]["resourceVersion"],
            "{kind} {name} changed by a refused upgrade"
        );
    }
    // The pods go on under the policy they had: the developers' strip is denied.
    n.held(ns, "cni-1", CNI);
    let run = n.strip("configmap", "cni-1", ns);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.contains(&denied()), "{run:#?}");

    // An upgrade that passes: the developers' rule, identities kept away
    // from the webhook by matchConditions, and Events for unauthenticated
    // reviews (only kube-apiserver reaches the pods here). The pods roll to it.
    n.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": SKIP_BINDING},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [
            {"kind": "ServiceAccount", "namespace": "storage-system", "name": "volume-cleaner"},
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"},
        ],
    }));
    let digest = |deployment: &Value| {
        deployment["spec"]["template"]["metadata"]["annotations"]["finalizer-guard.io/policy-sha256"]
            .clone()
    };
    let ca_before = n.get(&[
        "secret",
        &format!("{FULLNAME}-certificates"),
        "-n",
        NAMESPACE,
    ]);
    n.helm_upgrade(&[
        "--set-json",
        &rule,
        "--set-json",
        r#"webhook.skipIdentities={"serviceAccounts":["storage-system:volume-cleaner"]}"#,
        "--set",
        "events.unauthenticated=true",
    ])
    .ok();
    n.old_pods_gone();
    n.wait_spread();
    let deployment = n.get(&["deployment", FULLNAME, "-n", NAMESPACE]);
    assert_ne!(
        digest(&deployment),
        digest(&before[1].2),
        "a new pod template: the pods roll"
    );
    assert_eq!(
        n.get(&["validatingwebhookconfiguration", FULLNAME])["webhooks"][0]["clientConfig"]["caBundle"],
        ca_bundle,
        "the pods' CA, and so the caBundle, is kept across helm upgrade"
    );
    assert_eq!(
        n.get(&[
            "secret",
            &format!("{FULLNAME}-certificates"),
            "-n",
            NAMESPACE
        ])["data"]["ca.crt"],
        ca_before["data"]["ca.crt"],
        "helm upgrade leaves the certificates Secret's data alone"
    );
    // alice, a developer, releases the CNI finalizer under the new rule.
    n.held(ns, "cni-2", CNI);
    let run = n.strip("configmap", "cni-2", ns).ok();
    assert!(
        !run.stderr.contains("Warning:"),
        "a rule authorizes it: {run:#?}"
    );
    wait_until("the pods' audit record of cni-2", 30, || {
        n.audit_records().iter().any(|r| {
            r["decision"] == "authorized"
                && r["name"] == "cni-2"
                && r.to_string().contains("developers-release-cni")
        })
    });
    // The skipped service account strips a hold the policy would deny, and
    // the webhook never sees it; bob, not skipped, is still denied.
    wait_may_patch_configmaps(|args| n.admin(args), ns, SKIPPED_SA);
    for name in ["by-sa", "by-bob"] {
        n.held_configmap(ns, name);
    }
    let strip_as = |name: &str, who: &str| {
        n.merge_patch("admin", ["configmap", name, ns], STRIP, &["--as", who])
    };
    strip_as("by-sa", SKIPPED_SA).ok();
    let run = strip_as("by-bob", "bob");
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.contains(&denied()), "{run:#?}");
    wait_until("the pods' audit record of by-bob", 30, || {
        n.audit_records().iter().any(|r| r["name"] == "by-bob")
    });
    // events.unauthenticated=true: the denial's Event, through the chart's
    // RBAC, though the review is still unauthenticated.
    wait_until("the FinalizerRemovalDenied Event of by-bob", 30, || {
        !n.events(ns, "by-bob", "FinalizerRemovalDenied").is_empty()
    });
    for record in n.audit_records().iter().filter(|r| r["name"] == "by-bob") {
        assert_eq!(record["authenticated"], false, "{record}");
    }
    assert!(
        !n.audit_records().iter().any(|r| r["name"] == "by-sa"),
        "the webhook was called for the skipped service account"
    );
    n.admin(&[
        "delete",
        "clusterrolebinding",
        SKIP_BINDING,
        "--ignore-not-found",
    ]);

    // helm uninstall: nothing of the release is left, the webhook
    // configuration least of all, and nothing refuses the strip.
    let run = n
        .helm(&["uninstall", RELEASE, "-n", NAMESPACE, "--wait"])
        .ok();
    assert!(run.stdout.contains("uninstalled"), "{run:#?}");
    for object in &objects {
        let args = get_args(object);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        wait_until(&format!("{args:?} gone"), 60, || n.admin(&args).code != 0);
    }
    wait_until("the release's pods and ReplicaSets gone", 120, || {
        release_leftovers(&n, &objects).is_empty()
    });
    n.held_configmap(ns, "after");
    n.strip("configmap", "after", ns).ok();
    n.release_namespace(ns);
}

/// Should a scenario that changes the release fail half-way: the release
/// uninstalled, so the next scenario installs it afresh.
struct UninstallOnPanic<'a>(&'a Nodes);

impl Drop for UninstallOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .helm(&["uninstall", RELEASE, "-n", NAMESPACE, "--wait"]);
        }
    }
}

/// The denial of the chart's backstop (its ValidatingAdmissionPolicy).
/// `finalizer-guard policy export --vap` of the policy the chart renders for
/// the release's values and `extra` (its ConfigMap's policy.yaml), written
/// to `work/NAME`: the steps values.yaml gives for the backstop.
fn export_release_policy(n: &Nodes, work: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let values = work.join(format!("{name}.values.yaml"));
    let current = n
        .helm(&["get", "values", RELEASE, "-n", NAMESPACE, "-o", "yaml"])
        .ok();
    std::fs::write(&values, current.stdout).expect("values written");
    let mut args = chart_command("template");
    args.extend([
        "-f",
        values.to_str().expect("a UTF-8 path"),
        "--show-only",
        "templates/configmap.yaml",
    ]);
    args.extend_from_slice(extra);
    let config_map: Value =
        serde_yaml_ng::from_str(&n.helm(&args).ok().stdout).expect("the ConfigMap");
    let policy = work.join(format!("{name}.policy.yaml"));
    std::fs::write(
        &policy,
        config_map["data"]["policy.yaml"]
            .as_str()
            .expect("policy.yaml"),
    )
    .expect("policy written");
    let mut export = Command::new(env!("CARGO_BIN_EXE_finalizer-guard"));
    export.args(["policy", "export", "--vap"]).arg(&policy);
    let vap = work.join(name);
    std::fs::write(&vap, run(export, None).ok().stdout).expect("the export written");
    vap
}

/// The chart in backstop mode on the nodes: the ValidatingAdmissionPolicy
/// it is given installed beside a webhook failing open. Up, the policy
/// refuses the strips first; with no webhook pod left (the Deployment scaled
/// to nothing), the strips through every path are still refused,
/// Kubernetes' own controllers complete (a namespace deleted), and an
/// override still releases. An upgrade that changes the policy but not the
/// export is refused by the policy check's Job; exported again, it passes;
/// uninstall takes the policy away.
#[test]
#[ignore = "needs e2e/nodes.sh's nodes and the image: see .ci/run"]
fn backstop_guards_while_no_webhook_pod_runs_and_refuses_a_stale_export() {
    let n = nodes();
    n.enforcing();
    let work = n.dir.join("backstop");
    std::fs::create_dir_all(&work).expect("a folder");
    let ns = "nodes-backstop";
    n.namespace(ns);
    let _uninstall = UninstallOnPanic(&n);
    let vap = export_release_policy(&n, &work, "vap.yaml", &[]);
    let set_vap = |file: &Path| format!("backstop.validatingAdmissionPolicy={}", file.display());
    n.helm_upgrade(&[
        "--set",
        "backstop.enabled=true",
        "--set-file",
        &set_vap(&vap),
    ])
    .ok();
    let config = n.get(&["validatingwebhookconfiguration", FULLNAME]);
    assert_eq!(
        config["webhooks"][0]["failurePolicy"], "Ignore",
        "enforcing with the backstop: the webhook fails open"
    );
    let binding = n.get(&["validatingadmissionpolicybinding", "finalizer-guard"]);
    assert_eq!(
        binding["spec"]["validationActions"],
        json!(["Deny", "Audit"])
    );

    // Both up: kube-apiserver evaluates the policy before calling the webhook.
    n.held(ns, "cni-0", CNI);
    wait_until("the backstop in force", 30, || {
        n.strip("configmap", "cni-0", ns)
            .stderr
            .contains(&policy_denial())
    });

    // No webhook pod at all: the policy still refuses every path.
    n.scale_webhook(0);
    wait_until("no webhook pod left", 120, || n.webhook_pods().is_empty());
    n.held(ns, "cni-1", CNI);
    n.delete_held(ns, "cni-1");
    for (patch_type, patch) in [
        ("merge", STRIP),
        ("json", r#"[{"op":"remove","path":"/metadata/finalizers"}]"#),
    ] {
        let run = n.kubectl(
            "alice",
            &[
                "patch",
                "configmap",
                "cni-1",
                "-n",
                ns,
                "--type",
                patch_type,
                "-p",
                patch,
            ],
            None,
        );
        assert_eq!(run.code, 1, "{patch_type}: {run:#?}");
        assert!(
            run.stderr.contains(&policy_denial()),
            "{patch_type}: {run:#?}"
        );
    }
    let mut whole = n.get(&["configmap", "cni-1", "-n", ns]);
    whole["metadata"]["finalizers"] = json!([]);
    let run = n.kubectl("alice", &["replace", "-f", "-"], Some(&whole.to_string()));
    assert_eq!(run.code, 1, "update: {run:#?}");
    assert!(run.stderr.contains(&policy_denial()), "update: {run:#?}");
    // Kubernetes' own controllers complete: the garbage collector removes
    // foregroundDeletion once a Deployment's ReplicaSet and pod are gone,
    // and the namespace controller empties and deletes a namespace.
    n.apply(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "app", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "app"}},
            "template": {
                "metadata": {"labels": {"app": "app"}},
                "spec": {
                    "automountServiceAccountToken": false,
                    "containers": [{"name": "app", "image": PAUSE, "imagePullPolicy": "Never"}],
                },
            },
        },
    }));
    wait_until("the Deployment's pod running", 120, || {
        n.get(&["pods", "-n", ns, "-l", "app=app"])["items"]
            .as_array()
            .is_some_and(|p| p.len() == 1 && p[0]["status"]["phase"] == "Running")
    });
    n.admin(&[
        "delete",
        "deployment",
        "app",
        "-n",
        ns,
        "--cascade=foreground",
        "--wait=false",
    ])
    .ok();
    wait_until(
        "the garbage collector to finish the Deployment",
        120,
        || n.admin(&["get", "deployment", "app", "-n", ns]).code != 0,
    );
    let doomed = "nodes-backstop-doomed";
    n.namespace(doomed);
    n.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "content", "namespace": doomed}}));
    n.admin(&["delete", "namespace", doomed, "--wait=false"])
        .ok();
    wait_until("the namespace controller to finish", 120, || {
        n.admin(&["get", "namespace", doomed]).code != 0
    });
    // An override releases.
    n.kubectl(
        "alice",
        &[
            "annotate",
            "configmap",
            "cni-1",
            "-n",
            ns,
            "finalizer-guard.io/override=node-lost: INC-4711 node-c powered off",
        ],
        None,
    )
    .ok();
    n.strip("configmap", "cni-1", ns).ok();
    n.scale_webhook(2);
    n.wait_spread();

    // A rule for the developers, the export left as it was: refused by the
    // policy check, and the policy unchanged.
    let rule = developers_rule();
    let before = n.get(&["validatingadmissionpolicy", "finalizer-guard"]);
    let refused = n.helm_upgrade(&["--set-json", &rule]);
    assert_ne!(refused.code, 0, "{refused:#?}");
    let check = n.policy_check_log();
    assert!(
        check.contains("not `finalizer-guard policy export --vap"),
        "{check}"
    );
    assert_eq!(
        n.get(&["validatingadmissionpolicy", "finalizer-guard"])["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"],
        "a refused upgrade changes nothing"
    );
    // Exported again: taken, and kube-apiserver decides the new rule.
    let vap = export_release_policy(&n, &work, "vap-2.yaml", &["--set-json", &rule]);
    n.helm_upgrade(&["--set-json", &rule, "--set-file", &set_vap(&vap)])
        .ok();
    n.held(ns, "cni-2", CNI);
    wait_until("the new export in force", 30, || {
        n.strip("configmap", "cni-2", ns).code == 0
    });

    // helm uninstall takes the policy and its binding with it.
    n.helm(&["uninstall", RELEASE, "-n", NAMESPACE, "--wait"])
        .ok();
    for kind in [
        "validatingadmissionpolicy",
        "validatingadmissionpolicybinding",
    ] {
        wait_until(&format!("the {kind} gone"), 60, || {
            n.admin(&["get", kind, "finalizer-guard"]).code != 0
        });
    }
    n.held(ns, "cni-3", CNI);
    wait_until("no guard left", 30, || {
        n.strip("configmap", "cni-3", ns).code == 0
    });
    n.release_namespace(ns);
}

/// What the writers saw during one disruption.
#[derive(Debug, Default, Clone)]
struct Tally {
    guarded: u64,
    ordinary: u64,
    unavailable: u64,
    other: u64,
    examples: Vec<String>,
    /// Every write refused with the webhook unavailable: when, and what
    /// kube-apiserver said.
    refusals: Vec<(Instant, String)>,
}

/// A token and the API server's address, from a kubeconfig cluster.sh wrote.
fn credentials(dir: &Path, user: &str) -> (String, String) {
    let text = std::fs::read_to_string(dir.join(format!("{user}.kubeconfig"))).expect("kubeconfig");
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .unwrap_or_else(|| panic!("{user}.kubeconfig has no {key}"))
            .trim()
            .to_string()
    };
    (field("server:"), field("token:"))
}

fn api_client(dir: &Path) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(dir.join("ca.crt")).expect("ca.crt");
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.expect("a certificate")).expect("a root");
    }
    let tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("a client")
}

/// Writers through kube-apiserver while `disrupt` runs: each repeats alice's
/// strip of its own held ConfigMap (guarded: the webhook must deny it) and
/// a label change (ordinary: the webhook is not called). A write that
/// failed because the webhook could not be reached counts as unavailable.
fn under_writes(n: &Nodes, ns: &str, writers: usize, disrupt: impl FnOnce()) -> Tally {
    let (server, token) = credentials(&n.dir, "alice");
    for w in 0..writers {
        n.held_configmap(ns, &format!("w{w}"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let client = api_client(&n.dir);
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (client, stop) = (client.clone(), stop.clone());
            let url = format!("{server}/api/v1/namespaces/{ns}/configmaps/w{w}");
            let token = token.clone();
            rt.spawn(async move {
                let mut tally = Tally::default();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let guarded = i % 2 == 1;
                    let body = if guarded {
                        STRIP.to_string()
                    } else {
                        json!({"metadata": {"labels": {"seq": i.to_string()}}}).to_string()
                    };
                    let sent = client
                        .patch(&url)
                        .bearer_auth(&token)
                        .header("content-type", "application/merge-patch+json")
                        .body(body)
                        .send()
                        .await;
                    let (status, text) = match sent {
                        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
                        Err(e) => (0, e.to_string()),
                    };
                    let expected = if guarded {
                        status == 403 && text.contains("denied the request")
                    } else {
                        status == 200
                    };
                    if guarded {
                        tally.guarded += 1;
                    } else {
                        tally.ordinary += 1;
                    }
                    if !expected {
                        if text.contains("failed calling webhook") {
                            tally.unavailable += 1;
                            tally.refusals.push((Instant::now(), text.clone()));
                        } else {
                            tally.other += 1;
                        }
                        if tally.examples.len() < 3 {
                            tally.examples.push(format!("{status}: {text}"));
                        }
                    }
                }
                tally
            })
        })
        .collect();
    // Let the writers run before and after the disruption: the windows of
    // writes are what is tested, not waits for a condition.
    std::thread::sleep(Duration::from_secs(3));
    disrupt();
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    let mut all = Tally::default();
    for task in tasks {
        let t = rt.block_on(task).expect("a writer");
        all.guarded += t.guarded;
        all.ordinary += t.ordinary;
        all.unavailable += t.unavailable;
        all.other += t.other;
        all.examples.extend(t.examples);
        all.refusals.extend(t.refusals);
    }
    all
}

fn repeats() -> usize {
    std::env::var("FG_NODES_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

#[test]
#[ignore = "needs e2e/nodes.sh's nodes and the image: see .ci/run"]
fn upgrade_drain_and_a_killed_container_refuse_no_write() {
    let n = nodes();
    let next = split_image(&std::env::var("FG_IMAGE_NEXT").expect(
        "FG_IMAGE_NEXT is not set: the same image under another tag, in the registry or imported into the nodes",
    ));
    n.enforcing();
    let ns = "nodes-disruptions";
    n.namespace(ns);
    let mut report = Vec::new();
    let mut kills: Vec<KillTimes> = Vec::new();
    for round in 0..repeats() {
        // helm upgrade to another image tag: a rolling update of both pods.
        let tag = if round % 2 == 0 { &next.1 } else { &n.image.1 };
        let upgrade = under_writes(&n, ns, 4, || n.upgrade(&format!("image.tag={tag}")));
        n.wait_spread();
        report.push(("helm upgrade", upgrade));

        // kubectl drain of the node of one webhook pod: evicted through the PDB.
        let drain = under_writes(&n, ns, 4, || {
            n.admin(&[
                "drain",
                "node-b",
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--timeout",
                "180s",
            ])
            .ok();
            wait_until("both webhook pods ready again", 180, || {
                n.webhook_pods().iter().filter(|p| p.2).count() == 2
            });
        });
        n.admin(&["uncordon", "node-b"]).ok();
        // Back to one pod per node for what follows.
        n.admin(&[
            "rollout",
            "restart",
            "deployment",
            FULLNAME,
            "-n",
            NAMESPACE,
        ])
        .ok();
        n.admin(&[
            "rollout",
            "status",
            "deployment",
            FULLNAME,
            "-n",
            NAMESPACE,
            "--timeout",
            "180s",
        ])
        .ok();
        n.wait_spread();
        report.push(("kubectl drain", drain));

        // A webhook container killed (SIGKILL): the kubelet restarts it.
        let mut times = None;
        let tally = under_writes(&n, ns, 4, || {
            let pods = n.webhook_pods();
            let (name, node, _, id) = pods
                .iter()
                .find(|p| p.1 == "node-b")
                .expect("a pod on node-b");
            let pod = n.get(&["pod", name, "-n", NAMESPACE]);
            let ip = pod["status"]["podIP"]
                .as_str()
                .expect("a pod IP")
                .to_string();
            let endpoints = EndpointWatch::start(&n, &ip);
            // containerd's runc shim keeps a runc root per containerd namespace.
            let root = n.dir.join(format!("nodes/{node}/runc/k8s.io"));
            let mut cmd = Command::new("runc");
            cmd.arg("--root").arg(&root).args(["kill", id, "KILL"]);
            let at = Instant::now();
            let killed = run(cmd, None);
            assert_eq!(
                killed.code, 0,
                "runc kill of {name}'s container: {killed:#?}"
            );
            wait_until("the killed container restarted and ready", 120, || {
                let pods = n.webhook_pods();
                pods.iter().any(|p| &p.0 == name && p.2 && &p.3 != id)
            });
            times = Some(endpoints.stop(ip, at));
        });
        let mut times: KillTimes = times.expect("the kill ran");
        times.classes = tally
            .refusals
            .iter()
            .map(|(when, message)| {
                let after = when.saturating_duration_since(times.killed);
                (
                    sigkill_class(message, &times, after),
                    after,
                    message.clone(),
                )
            })
            .collect();
        kills.push(times);
        report.push(("container SIGKILL", tally));
    }
    for (what, t) in &report {
        eprintln!(
            "nodes: {what}: {} of {} guarded writes and {} ordinary ones failed with the webhook unavailable, {} otherwise; {}",
            t.unavailable,
            t.guarded,
            t.ordinary,
            t.other,
            t.examples.join(" | ")
        );
    }
    for (round, k) in kills.iter().enumerate() {
        let ms = |d: Option<Duration>| {
            d.map_or("never seen".to_string(), |d| {
                format!("{} ms", d.as_millis())
            })
        };
        let of = |class: SigkillClass| {
            let at: Vec<String> = k
                .classes
                .iter()
                .filter(|c| c.0 == class)
                .map(|c| format!("{} ms", c.1.as_millis()))
                .collect();
            format!("{} [{}]", at.len(), at.join(", "))
        };
        eprintln!(
            "nodes: SIGKILL round {round}: {} listed not ready {} after the kill, ready again {}; refused in flight (reset, broken pipe, EOF, closed): {}; refused at connect: {}",
            k.address,
            ms(k.not_ready),
            ms(k.ready_again),
            of(SigkillClass::InFlight),
            of(SigkillClass::AtConnect),
        );
    }
    n.release_namespace(ns);
    for (what, t) in &report {
        assert!(
            t.guarded > 0 && t.ordinary > 0,
            "{what}: no writes ran: {t:?}"
        );
        assert_eq!(t.other, 0, "{what}: writes refused otherwise: {t:?}");
        if *what != "container SIGKILL" {
            assert_eq!(t.unavailable, 0, "{what}: refused writes: {t:?}");
        }
    }
    // A SIGKILLed process drains nothing: the calls it was answering, and
    // those written to its kept-alive connections, are reset (in flight);
    // and until the kubelet has seen it die and the endpoints drop it, a
    // call kube-apiserver sends to its address is refused at connect.
    // kube-apiserver retries no admission call (docs/performance.md). Those,
    // and only those, are allowed here; they are counted above.
    for k in &kills {
        for (class, after, message) in &k.classes {
            assert_ne!(
                *class,
                SigkillClass::Other,
                "a write refused other than by the killed container ({}), {} ms after the kill: {message}",
                k.address,
                after.as_millis()
            );
        }
    }
}

/// Why a write failed while a webhook container was SIGKILLed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SigkillClass {
    /// On a connection the killed process held: reset, broken pipe, EOF
    /// (the connection closed before an answer), a connection closed under
    /// the call.
    InFlight,
    /// A new connection to the dead address, refused: the endpoints still
    /// listed it.
    AtConnect,
    /// Anything else: not allowed.
    Other,
}

/// `message`'s class, `after` the kill. Go's client names no address when
/// the connection closed before an answer (`EOF`) or was closed under the
/// call (`use of closed network connection`): those are counted in flight
/// while the killed pod was still listed ready, and not after.
fn sigkill_class(message: &str, times: &KillTimes, after: Duration) -> SigkillClass {
    let ours = message.contains(&times.address);
    let listed = times.not_ready.is_none_or(|d| after <= d);
    let in_flight = (ours
        && (message.contains("connection reset by peer")
            || message.contains("write: broken pipe")))
        || ((message.contains(": EOF") || message.contains(": use of closed network connection"))
            && (ours || listed));
    if ours && message.contains("connect: connection refused") {
        SigkillClass::AtConnect
    } else if in_flight {
        SigkillClass::InFlight
    } else {
        SigkillClass::Other
    }
}

/// When a killed webhook pod's address left the Service's EndpointSlices'
/// ready endpoints, and came back, counted from the kill; and the refused
/// writes of that round, by class.
struct KillTimes {
    address: String,
    killed: Instant,
    not_ready: Option<Duration>,
    ready_again: Option<Duration>,
    classes: Vec<(SigkillClass, Duration, String)>,
}

/// Polls the webhook Service's EndpointSlices (every 20 ms, through
/// kube-apiserver) for one pod IP's `ready` condition.
struct EndpointWatch {
    stop: Arc<AtomicBool>,
    polled: std::thread::JoinHandle<Vec<(Instant, bool)>>,
}

impl EndpointWatch {
    fn start(n: &Nodes, ip: &str) -> EndpointWatch {
        let (server, token) = credentials(&n.dir, "admin");
        let url = format!(
            "{server}/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices?labelSelector=kubernetes.io/service-name={FULLNAME}"
        );
        let client = api_client(&n.dir);
        let stop = Arc::new(AtomicBool::new(false));
        let (ip, done) = (ip.to_string(), stop.clone());
        let polled = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async {
                let mut seen: Vec<(Instant, bool)> = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    let slices: Option<Value> =
                        match client.get(&url).bearer_auth(&token).send().await {
                            Ok(r) => r.json().await.ok(),
                            Err(_) => None,
                        };
                    if let Some(slices) = slices {
                        let ready = slices["items"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .flat_map(|s| s["endpoints"].as_array().into_iter().flatten())
                            .any(|e| {
                                e["addresses"]
                                    .as_array()
                                    .is_some_and(|a| a.iter().any(|a| a == ip.as_str()))
                                    && e["conditions"]["ready"] == true
                            });
                        if seen.last().is_none_or(|l| l.1 != ready) {
                            seen.push((Instant::now(), ready));
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                seen
            })
        });
        EndpointWatch { stop, polled }
    }

    fn stop(self, ip: String, killed: Instant) -> KillTimes {
        self.stop.store(true, Ordering::Relaxed);
        let seen = self.polled.join().expect("the EndpointSlice poller");
        let after = |ready: bool| {
            seen.iter()
                .find(|(at, r)| *r == ready && *at > killed)
                .map(|(at, _)| at.duration_since(killed))
        };
        let not_ready = after(false);
        KillTimes {
            address: format!("{ip}:8443"),
            killed,
            not_ready,
            ready_again: not_ready.and_then(|_| {
                seen.iter()
                    .skip_while(|(_, r)| *r)
                    .find(|(at, r)| *r && *at > killed)
                    .map(|(at, _)| at.duration_since(killed))
            }),
            classes: Vec::new(),
        }
    }
}

/// Short lifetimes for `certificates.self` (tests/e2e/certificates.rs'
/// timing, which the schema and `serve` take): a serving certificate every
/// 20 s; a new CA 60 s after the first, served 10 s later, the old one
/// dropped 10 s after that.
const SHORT_CERTIFICATES: [&str; 5] = [
    "certificates.self.validity=40s",
    "certificates.self.renewBefore=20s",
    "certificates.self.caValidity=120s",
    "certificates.self.caRenewBefore=60s",
    "certificates.self.caGrace=10s",
];
/// How long the writes run while the certificates rotate, seconds.
const ROTATION_SECONDS: u64 = 100;

/// What the pods' certificates Secret and the caBundle were, sampled while
/// writes ran.
#[derive(Debug, Default)]
struct Rotation {
    samples: u64,
    serving: std::collections::BTreeSet<String>,
    cas: std::collections::BTreeSet<String>,
    /// `next` (a new CA in the caBundle), `switched` (served), `dropped`
    /// (the previous CA out of it), in the order first seen.
    steps: Vec<&'static str>,
    had_next: bool,
    had_previous: bool,
    /// Removals the policy allows, judged by the webhook and let through.
    allowed: u64,
    unexpected: Vec<String>,
}

impl Rotation {
    /// One sample: the Secret, then the webhook configuration's caBundle,
    /// which must hold the Secret's CA (the pods add a CA to the caBundle
    /// before they serve a certificate of it, and drop it only once it is
    /// the previous one).
    fn sample(&mut self, at: Duration, secret: &Value, config: &Value) {
        self.samples += 1;
        let at = at.as_secs_f64();
        let data = &secret["data"];
        let (Some(tls), Some(ca)) = (data["tls.crt"].as_str(), data["ca.crt"].as_str()) else {
            self.unexpected.push(format!(
                "{at:.1} s: the Secret has no tls.crt or ca.crt: {data}"
            ));
            return;
        };
        self.serving.insert(tls.to_string());
        self.cas.insert(ca.to_string());
        let has_next = !data["next-ca.crt"].is_null();
        let has_previous = !data["previous-ca.crt"].is_null();
        for (step, seen) in [
            ("next", has_next && !self.had_next),
            ("switched", self.had_next && !has_next),
            ("dropped", self.had_previous && !has_previous),
        ] {
            if seen && !self.steps.contains(&step) {
                self.steps.push(step);
            }
        }
        (self.had_next, self.had_previous) = (has_next, has_previous);
        let pem = |b64: &str| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default()
        };
        let bundle = config["webhooks"][0]["clientConfig"]["caBundle"]
            .as_str()
            .map(pem)
            .unwrap_or_default();
        if !bundle.contains(pem(ca).trim()) {
            self.unexpected
                .push(format!("{at:.1} s: the caBundle lacks the Secret's CA"));
        }
    }
}

/// Seconds since the Unix epoch of an API server's timestamp
/// (`2026-11-27T12:00:00Z`).
fn server_seconds(at: &Value) -> i64 {
    let text = at.as_str().unwrap_or_else(|| panic!("no timestamp: {at}"));
    text.parse::<jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("{text:?}: {e}"))
        .as_second()
}

/// Seconds from now to the end of a certificate given base64-encoded PEM,
/// as a Secret's data holds it; 0 when it does not parse.
fn seconds_left(b64: &str) -> i64 {
    use base64::Engine;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap_or_default();
    let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(&pem) else {
        return 0;
    };
    let Ok(cert) = pem.parse_x509() else {
        return 0;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    cert.validity().not_after.timestamp() - now
}

/// The release rendered and deleted by its manifest: should the scenario
/// fail half-way, `kubectl delete -f` of it, so that the next scenario's
/// `helm install` finds none of its objects.
struct DeleteOnPanic<'a>(&'a Nodes, &'a str);

impl Drop for DeleteOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.kubectl(
                "admin",
                &["delete", "-f", "-", "--ignore-not-found"],
                Some(self.1),
            );
        }
    }
}

/// The chart as Argo CD applies it: `helm template` with no cluster to ask
/// (so no `lookup`; nothing is random either: two renders are the same
/// bytes), piped to `kubectl apply -f -` (client-side, Argo CD's default)
/// into the namespace the README makes; no Helm release, no hook run as a
/// hook. Enforcing, the developers' rule, and certificate lifetimes short
/// enough to renew and rotate within the writes. The pods fill the empty
/// Secret and the caBundle; the policy check's Job, an ordinary Job under
/// `kubectl apply`, runs once beside them and never again (a render that
/// changes its pod is refused: a Job's template is immutable). Then 100 s
/// of writes through
/// kube-apiserver and the Service (guarded strips denied, ordinary writes
/// and removals the rule allows let through) while the serving certificate
/// renews and the CA rotates, and a GitOps tool syncs the same manifest
/// again, server-side: no write refused, the caBundle always holding the
/// Secret's CA. `kubectl delete -f` of the manifest leaves nothing with the
/// release's label, the Secret the pods filled included.
#[test]
#[ignore = "needs e2e/nodes.sh's nodes and the image: see .ci/run"]
fn helm_template_piped_to_kubectl_apply_serves_and_rotates_its_own_certificates_under_writes() {
    let n = nodes();
    n.uninstalled();
    // The namespace as the README makes it: helm template creates none.
    let install = n.readme_namespace_and_install_args();
    let rule = developers_rule();
    let mut args: Vec<&str> = install[1..].iter().map(String::as_str).collect();
    args.extend(["--set", "policy.mode=enforce", "--set-json", &rule]);
    for value in SHORT_CERTIFICATES {
        args.extend(["--set", value]);
    }
    let manifest = n.render(&args);
    assert_eq!(
        n.render(&args),
        manifest,
        "helm template renders the same bytes"
    );
    let objects = manifest_objects(&manifest);
    // Helm's hooks are only annotations to kubectl: the policy check is all
    // that has any, and applied, it is an ordinary ConfigMap and Job.
    let check = format!("{FULLNAME}-policy-check");
    let hooks: Vec<(&str, &str)> = objects
        .iter()
        .filter(|o| !o["metadata"]["annotations"]["helm.sh/hook"].is_null())
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(hooks, [("ConfigMap", check.as_str()), ("Job", &check)]);
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == FULLNAME)
        .expect("the webhook's Deployment");
    let serve = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    for flag in [
        "--certificate-validity",
        "--ca-grace",
        "--certificates-secret",
    ] {
        assert!(serve.contains(flag), "{serve}");
    }

    let start = Instant::now();
    n.kubectl("admin", &["apply", "-f", "-"], Some(&manifest))
        .ok();
    let _delete = DeleteOnPanic(&n, &manifest);
    n.wait_spread();
    let secret_name = format!("{FULLNAME}-certificates");
    let secret = || n.get(&["secret", &secret_name, "-n", NAMESPACE]);
    let config = || n.get(&["validatingwebhookconfiguration", FULLNAME]);
    wait_until("the pods' CA in the caBundle", 60, || {
        let ca = secret()["data"]["ca.crt"].clone();
        ca.is_string() && config()["webhooks"][0]["clientConfig"]["caBundle"] == ca
    });
    eprintln!(
        "nodes: helm template | kubectl apply: {:.1} s to two ready pods and the caBundle filled",
        start.elapsed().as_secs_f64()
    );
    // The CA is the pods' own, of the lifetimes rendered (120 s), not one
    // left by an earlier install's pods.
    let ca_ends_in = seconds_left(secret()["data"]["ca.crt"].as_str().unwrap_or(""));
    assert!(
        (1..=120).contains(&ca_ends_in),
        "the CA ends in {ca_ends_in} s, not within certificates.self.caValidity (120 s)"
    );
    let job = format!("job/{check}");
    wait_until("the policy check's Job complete", 180, || {
        n.get(&[&job, "-n", NAMESPACE])["status"]["succeeded"] == 1
    });
    // It ran once, with the first apply, and runs no more: a render that
    // changes its pod (here `policyCheck.strict`; an image tag does too) is
    // refused by kubectl apply, a Job's template being immutable.
    let mut strict = args.clone();
    strict.extend(["--set", "policyCheck.strict=true"]);
    let refused = n.kubectl(
        "admin",
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&n.render(&strict)),
    );
    assert!(
        refused.code != 0
            && refused
                .stderr
                .contains(&format!("Job \"{check}\" is invalid"))
            && refused.stderr.contains("field is immutable"),
        "{refused:#?}"
    );

    let ns = "nodes-gitops";
    n.namespace(ns);
    let mut rotation = Rotation::default();
    let mut synced = None;
    let writes = under_writes(&n, ns, 4, || {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(ROTATION_SECONDS) {
            let (s, c) = (secret(), config());
            rotation.sample(started.elapsed(), &s, &c);
            // alice, a developer, removes the CNI finalizer: judged by the
            // webhook, allowed by the rule.
            n.held(ns, "free", CNI);
            let run = n.strip("configmap", "free", ns);
            if run.code == 0 && !run.stderr.contains("Warning:") {
                rotation.allowed += 1;
            } else {
                rotation.unexpected.push(format!(
                    "{:.1} s: alice's allowed removal: {run:?}",
                    started.elapsed().as_secs_f64()
                ));
            }
            // A GitOps tool's sync, half-way: the same manifest, server-side.
            let at = started.elapsed();
            if synced.is_none() && at > Duration::from_secs(ROTATION_SECONDS / 2) {
                let run = n
                    .kubectl(
                        "admin",
                        &["apply", "--server-side", "-f", "-"],
                        Some(&manifest),
                    )
                    .ok();
                synced = Some(((at, started.elapsed() - at), run.stdout));
            }
        }
    });
    let ((synced_at, synced_in), synced) = synced.expect("the sync ran");
    let trail = n.audit_trail();
    let authorized = trail
        .records
        .iter()
        .filter(|r| r["name"] == "free" && r["namespace"] == ns && r["decision"] == "authorized")
        .count();
    eprintln!(
        "nodes: certificates rotating under writes for {ROTATION_SECONDS} s: {} guarded writes ({} refused with the webhook unavailable, {} otherwise), {} ordinary, {} removals allowed by the webhook ({authorized} audit records; {} records in all, {} bytes, read from {} log files); {} serving certificates, {} CAs, steps {:?}, in {} samples; synced again at {:.1} s (for {:.1} s); {}",
        writes.guarded,
        writes.unavailable,
        writes.other,
        writes.ordinary,
        rotation.allowed,
        trail.records.len(),
        trail.bytes,
        trail.files,
        rotation.serving.len(),
        rotation.cas.len(),
        rotation.steps,
        rotation.samples,
        synced_at.as_secs_f64(),
        synced_in.as_secs_f64(),
        writes.examples.join(" | ")
    );
    assert!(
        writes.guarded >= 100 && writes.ordinary >= 100,
        "the writes ran: {writes:?}"
    );
    assert_eq!(writes.unavailable, 0, "refused writes: {writes:?}");
    assert_eq!(writes.other, 0, "writes refused otherwise: {writes:?}");
    assert!(rotation.unexpected.is_empty(), "{:#?}", rotation.unexpected);
    assert!(rotation.allowed >= 20, "{rotation:?}");
    assert!(authorized as u64 >= rotation.allowed, "{rotation:?}");
    // The nodes' kubelets rotate at 1Mi (e2e/nodes.sh): the records above
    // were read across rotated files, not from one file per pod.
    assert!(
        trail.files > 2,
        "{} log files for two pods: the kubelet rotated none",
        trail.files
    );
    assert!(
        rotation.serving.len() >= 3,
        "two renewals at least: {rotation:?}"
    );
    assert!(rotation.cas.len() >= 2, "a CA rotation: {rotation:?}");
    for step in ["next", "switched", "dropped"] {
        assert!(rotation.steps.contains(&step), "{step}: {rotation:?}");
    }
    for object in &objects {
        let kind = object["kind"].as_str().unwrap_or("");
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        assert!(
            synced.contains(&format!("/{name} serverside-applied"))
                || !["Secret", "ValidatingWebhookConfiguration"].contains(&kind),
            "{synced}"
        );
    }
    n.release_namespace(ns);

    // kubectl delete -f of the same manifest: nothing with the release's
    // label is left, the Secret the pods filled least of all.
    n.kubectl("admin", &["delete", "-f", "-", "--wait"], Some(&manifest))
        .ok();
    wait_until("nothing of the release left", 120, || {
        release_leftovers(&n, &objects).is_empty()
    });
    assert_ne!(
        n.admin(&["get", "secret", &secret_name, "-n", NAMESPACE])
            .code,
        0,
        "the certificates Secret is gone"
    );
}

#[test]
#[ignore = "needs e2e/nodes.sh's nodes and the image; kills node-b: run last (.ci/run)"]
fn seed_000_pods_of_a_dead_node_stay_guarded_and_unstick_releases_them() {
    let n = nodes();
    n.enforcing();
    // watch (the chart's own Deployment) counts stuck objects after
    // STUCK_AFTER, through the chart's value.
    n.upgrade(&format!("watch.stuckAfter={STUCK_AFTER}s"));
    let watch = n.watch_pod();
    // The node that dies is the one watch does not run on: the webhook has a
    // replica on each, so the other keeps answering, and watch reports.
    let (dead, alive) = if watch.node == "node-a" {
        ("node-b", "node-a")
    } else {
        ("node-a", "node-b")
    };
    eprintln!("nodes: watch runs on {alive} ({}): {dead} dies", watch.ip);
    let ns = "seed-000";
    n.namespace(ns);
    // Five pods on the node, each with the CNI plugin's finalizer, running.
    for i in 0..5 {
        n.apply(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{i}"), "namespace": ns, "finalizers": [CNI]},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": dead},
                "automountServiceAccountToken": false,
                "containers": [{"name": "app", "image": PAUSE, "imagePullPolicy": "Never"}],
            },
        }));
    }
    wait_until(&format!("five pods running on {dead}"), 120, || {
        let pods = n.get(&["pods", "-n", ns]);
        pods["items"]
            .as_array()
            .is_some_and(|p| p.len() == 5 && p.iter().all(|p| p["status"]["phase"] == "Running"))
    });
    assert_eq!(watch.stuck(CNI), None, "nothing stuck yet");

    // The node dies: kubelet, containerd and every container on it.
    n.nodes_sh(&["kill", &n.dir.to_string_lossy(), dead]).ok();
    n.kubectl(
        "alice",
        &["delete", "pods", "--all", "-n", ns, "--wait=false"],
        None,
    )
    .ok();
    // A pod's deletion comes due after its grace period (its
    // deletionTimestamp); stuck is counted from then.
    let grace = n.get(&["pod", "web-0", "-n", ns])["metadata"]["deletionGracePeriodSeconds"]
        .as_u64()
        .expect("a graceful deletion");
    let due = Instant::now() + Duration::from_secs(grace);
    let seen = watch.first_seen_stuck(5, due + Duration::from_secs(STUCK_AFTER + 30));
    // The node controller sees it (NotReady), the endpoints drop its webhook pod.
    wait_until(&format!("{dead} NotReady"), 180, || {
        let node = n.get(&["node", dead]);
        node["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] != "True")
        })
    });
    wait_until(&format!("only {alive}'s webhook pod ready"), 120, || {
        let pods = n.webhook_pods();
        let ready: Vec<_> = pods.iter().filter(|p| p.2).collect();
        ready.len() == 1 && ready[0].1 == alive
    });

    // Terminating and staying so: no kubelet will confirm them. The 5 s
    // are what is tested (they stay), not a wait for a condition.
    std::thread::sleep(Duration::from_secs(5));
    let pods = n.get(&["pods", "-n", ns]);
    let items = pods["items"].as_array().expect("items");
    assert_eq!(items.len(), 5, "{pods:#}");
    assert!(
        items
            .iter()
            .all(|p| !p["metadata"]["deletionTimestamp"].is_null())
    );

    // alice's loop of strips: every one denied, by node-a's replica.
    for round in 0..3 {
        for i in 0..5 {
            let strip = n.strip("pod", &format!("web-{i}"), ns);
            assert_eq!(strip.code, 1, "round {round}: {strip:#?}");
            assert!(
                strip.stderr.contains(&denied()),
                "round {round}: {strip:#?}"
            );
        }
    }

    // watch, on the living node, reports them: the gauges within
    // --stuck-after + 30 s of their deletion coming due, and a
    // FinalizerStuck Event on each.
    let seen = seen.join().expect("the metrics poller");
    let after_due = seen.saturating_duration_since(due);
    eprintln!(
        "nodes: watch counted the 5 pods stuck {:.1} s after their deletion came due (--stuck-after {STUCK_AFTER}s)",
        after_due.as_secs_f64()
    );
    assert!(
        // deletionTimestamp has whole seconds, and was set before kubectl returned.
        after_due >= Duration::from_secs(STUCK_AFTER - 2),
        "counted stuck before --stuck-after: {after_due:?}"
    );
    let oldest = watch
        .gauge(
            "finalizer_guard_stuck_oldest_seconds",
            &format!("finalizer=\"{CNI}\""),
        )
        .expect("finalizer_guard_stuck_oldest_seconds for the CNI finalizer");
    assert!(oldest >= STUCK_AFTER as f64, "{oldest}");
    // Timed by the API server's clock (the Event's creation against the
    // pod's deletionTimestamp), not by when this test got round to look.
    for i in 0..5 {
        let name = format!("web-{i}");
        wait_until(&format!("the FinalizerStuck Event of {name}"), 30, || {
            !n.events(ns, &name, "FinalizerStuck").is_empty()
        });
        let event = &n.events(ns, &name, "FinalizerStuck")[0];
        let pod = n.get(&["pod", &name, "-n", ns]);
        let after = server_seconds(&event["metadata"]["creationTimestamp"])
            - server_seconds(&pod["metadata"]["deletionTimestamp"]);
        assert!(
            after <= (STUCK_AFTER + 30) as i64,
            "{name}'s FinalizerStuck Event came {after} s after its deletion was due"
        );
    }
    let events = n.events(ns, "web-0", "FinalizerStuck");
    let message = events[0]["message"].as_str().unwrap_or("");
    assert!(
        message.contains(CNI) && message.contains("finalizer-guard unstick"),
        "{events:#?}"
    );
    eprintln!("nodes: FinalizerStuck on web-0: {message}");

    // On call, with the chart's on-call role alone.
    n.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "nodes-e2e-oncall"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": format!("{FULLNAME}-oncall")},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "oncall"}],
    }));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_finalizer-guard"));
    cmd.env("KUBECONFIG", n.dir.join("oncall.kubeconfig"))
        .env("NO_COLOR", "1")
        .args([
            "unstick",
            "--node",
            dead,
            "--reason",
            "node-lost",
            "--detail",
            &format!("{dead} powered off, its pod IPs released"),
            "--force-delete",
            "--not-ready-for",
            "0s",
        ]);
    let unstick = run(cmd, None);
    eprintln!("nodes: unstick: {unstick:#?}");
    n.admin(&[
        "delete",
        "clusterrolebinding",
        "nodes-e2e-oncall",
        "--ignore-not-found",
    ]);
    assert_eq!(unstick.code, 0, "{unstick:#?}");

    // Every CNI finalizer released.
    let pods = n.get(&["pods", "-n", ns]);
    for pod in pods["items"].as_array().expect("items") {
        let finalizers = pod["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            !finalizers.iter().any(|f| f == CNI),
            "unstick left {CNI} on {}: {unstick:#?}",
            pod["metadata"]["name"]
        );
    }
    // watch's gauge drops back: nothing holds a finalizer any more.
    wait_until("watch's gauge back to nothing", 30, || {
        watch.stuck(CNI).is_none_or(|v| v == 0.0)
    });
    let left: Vec<String> = pods["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        left.is_empty(),
        "unstick --force-delete left {} pod(s) of dead {dead} Terminating: {left:?}\n{unstick:#?}",
        left.len()
    );
    n.release_namespace(ns);
}

/// Sequential writes through kube-apiserver, each timed: milliseconds, sorted.
fn timed_writes(n: &Nodes, url: &str, body: &str, count: usize, want: u16) -> Vec<f64> {
    let (_, token) = credentials(&n.dir, "alice");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let client = api_client(&n.dir);
    let mut times: Vec<f64> = rt.block_on(async {
        let mut times = Vec::with_capacity(count);
        for _ in 0..count {
            let start = Instant::now();
            let response = client
                .patch(url)
                .bearer_auth(&token)
                .header("content-type", "application/merge-patch+json")
                .body(body.to_string())
                .send()
                .await
                .expect("kube-apiserver answers");
            let status = response.status().as_u16();
            let text = response.text().await.unwrap_or_default();
            assert_eq!(status, want, "{text}");
            times.push(start.elapsed().as_secs_f64() * 1000.0);
        }
        times
    });
    times.sort_by(f64::total_cmp);
    times
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[test]
#[ignore = "needs e2e/nodes.sh's nodes, the image and podman: a measurement (docs/performance.md)"]
fn a_guarded_write_through_the_service_and_through_a_url() {
    let ns = "nodes-latency";
    let n = enforcing_in(ns);
    n.held_configmap(ns, "held");
    let (server, _) = credentials(&n.dir, "alice");
    let url = format!("{server}/api/v1/namespaces/{ns}/configmaps/held");
    let count: usize = std::env::var("FG_NODES_WRITES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let label = json!({"metadata": {"labels": {"touched": "yes"}}}).to_string();

    // The same image on this machine's loopback, reached by a url: clientConfig.
    let work = n.dir.join("latency");
    std::fs::create_dir_all(&work).expect("a folder");
    let policy = n.get(&["configmap", &format!("{FULLNAME}-policy"), "-n", NAMESPACE]);
    std::fs::write(
        work.join("policy.yaml"),
        policy["data"]["policy.yaml"].as_str().expect("policy.yaml"),
    )
    .expect("policy written");
    let mut certs = Command::new(env!("CARGO_BIN_EXE_finalizer-guard"));
    certs
        .args(["certs", "--ip", "127.0.0.1", "--out"])
        .arg(work.join("certs"));
    let ca_b64 = run(certs, None).ok().stdout.trim().to_string();
    let port = {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        socket.local_addr().expect("an address").port()
    };
    let admin = {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        socket.local_addr().expect("an address").port()
    };
    let conf = std::env::var("CONTAINERS_CONF").unwrap_or_default();
    let name = format!("fg-latency-{}", std::process::id());
    let mut podman = Command::new("podman");
    podman
        .env("CONTAINERS_CONF", &conf)
        .args([
            "run",
            "-d",
            "--rm",
            "--name",
            &name,
            "--network",
            "host",
            "--read-only",
        ])
        .arg("-v")
        .arg(format!("{}:/etc/fg:ro", work.display()))
        .arg(n.image_ref())
        .args([
            "serve",
            "--policy",
            "/etc/fg/policy.yaml",
            "--tls-cert",
            "/etc/fg/certs/tls.crt",
            "--tls-key",
            "/etc/fg/certs/tls.key",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
            "--events=false",
        ]);
    // The container's user (65532) reads what this test's user wrote.
    for file in ["certs/tls.crt", "certs/tls.key", "policy.yaml"] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(work.join(file), std::fs::Permissions::from_mode(0o644))
            .expect("readable");
    }
    run(podman, None).ok();
    wait_until("the url webhook ready", 30, || {
        use std::io::{Read, Write};
        let Ok(mut tcp) = std::net::TcpStream::connect(("127.0.0.1", admin)) else {
            return false;
        };
        let _ = tcp.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let mut answer = String::new();
        let _ = tcp.read_to_string(&mut answer);
        answer.starts_with("HTTP/1.1 200")
    });
    struct Stop(String, String);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = Command::new("podman")
                .env("CONTAINERS_CONF", &self.1)
                .args(["stop", "-t", "5", &self.0])
                .output();
        }
    }
    let _stop = Stop(name, conf);

    let service =
        n.get(&["validatingwebhookconfiguration", FULLNAME])["webhooks"][0]["clientConfig"].clone();
    // The url webhook's reviews answered, from its /metrics.
    let url_reviews = || -> u64 {
        http_get(("127.0.0.1", admin), "/metrics")
            .expect("the url webhook's /metrics")
            .lines()
            .filter(|l| l.starts_with("finalizer_guard_reviews_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    let point = |client: &Value| {
        let to_url = client.get("url").is_some();
        let patch = json!([{"op": "replace", "path": "/webhooks/0/clientConfig", "value": client}]);
        n.admin(&[
            "patch",
            "validatingwebhookconfiguration",
            FULLNAME,
            "--type",
            "json",
            "-p",
            &patch.to_string(),
        ])
        .ok();
        // The API server's webhook configuration cache catches up: a
        // guarded write reaches the webhook pointed at (the url one counts
        // it), or no longer reaches the url one.
        wait_until(
            if to_url {
                "kube-apiserver calling the url webhook"
            } else {
                "kube-apiserver calling the Service's webhook again"
            },
            60,
            || {
                let before = url_reviews();
                timed_writes(&n, &url, STRIP, 1, 403);
                (url_reviews() > before) == to_url
            },
        );
    };
    /// The Service clientConfig back, however the measurement ends.
    struct Restore<'a>(&'a Nodes, Value);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            let patch =
                json!([{"op": "replace", "path": "/webhooks/0/clientConfig", "value": self.1}]);
            self.0.admin(&[
                "patch",
                "validatingwebhookconfiguration",
                FULLNAME,
                "--type",
                "json",
                "-p",
                &patch.to_string(),
            ]);
        }
    }
    let _restore = Restore(&n, service.clone());
    let mut rows = Vec::new();
    for round in 0..2 {
        point(&service);
        timed_writes(&n, &url, STRIP, 20, 403);
        rows.push((
            format!("Service (round {round})"),
            timed_writes(&n, &url, STRIP, count, 403),
        ));
        point(&json!({"url": format!("https://127.0.0.1:{port}/validate"), "caBundle": ca_b64}));
        timed_writes(&n, &url, STRIP, 20, 403);
        rows.push((
            format!("url (round {round})"),
            timed_writes(&n, &url, STRIP, count, 403),
        ));
    }
    point(&service);
    rows.push((
        "label write, no webhook call".to_string(),
        timed_writes(&n, &url, &label, count, 200),
    ));
    for (what, times) in &rows {
        eprintln!(
            "nodes: latency {what}: {} writes, p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms",
            times.len(),
            quantile(times, 0.5),
            quantile(times, 0.9),
            quantile(times, 0.99)
        );
    }
    n.release_namespace(ns);
}

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
