//! The chart as a platform team installs it, on real nodes: the image built
//! from the Dockerfile (`scripts/build-image.sh`), `helm install` as the
//! README's install section says with nothing changed but the image, two
//! replicas on the two nodes of `e2e/nodes.sh`, the chart's generated
//! certificates, and kube-apiserver calling the webhook through the chart's
//! Service (no `url:`).
//!
//! `#[ignore]`d: `.ci/run` starts a cluster (`e2e/cluster.sh up DIR`), its
//! nodes (`e2e/nodes.sh up DIR IMAGE.tar`), and runs the scenarios one at a
//! time, in this order, with
//!   FG_E2E_DIR=DIR  FG_HELM=helm  FG_IMAGE=REPOSITORY:TAG  FG_IMAGE_NEXT=REPOSITORY:TAG2
//! (FG_IMAGE_NEXT: the same image under another tag, for the upgrade).
//! `seed_000_*` kills node-b: it runs last.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};

/// Not `finalizer-guard`: the chart then names its objects `fg-finalizer-guard`,
/// and everything that finds the installed webhook must follow that.
const RELEASE: &str = "fg";
/// The chart's name for its objects under [`RELEASE`].
const FULLNAME: &str = "fg-finalizer-guard";
const NAMESPACE: &str = "finalizer-guard";
const WEBHOOK: &str = "finalizers.finalizer-guard.io";
const CNI: &str = "pod.beta1.sigma.ali/cni-allocated";
const HOLD: &str = "e2e.example.com/hold";
const STRIP: &str = r#"{"metadata":{"finalizers":null}}"#;
const PAUSE: &str = "localhost/finalizer-guard-e2e/pause:1";

/// What one command printed, and how it exited.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    #[track_caller]
    fn ok(self) -> Run {
        assert_eq!(self.code, 0, "expected success: {self:#?}");
        self
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("no JSON ({e}): {self:#?}"))
    }
}

fn run(mut cmd: Command, stdin: Option<&str>) -> Run {
    use std::io::Write;
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?} runs: {e}"));
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("stdin written");
    }
    let out = child.wait_with_output().expect("the command ends");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The cluster and nodes named by the environment.
struct Nodes {
    dir: PathBuf,
    helm: PathBuf,
    image: (String, String),
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
    Nodes {
        helm: PathBuf::from(var("FG_HELM")),
        image: split_image(&var("FG_IMAGE")),
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

    fn helm(&self, args: &[&str]) -> Run {
        let home = self.dir.join("helm-home");
        let mut cmd = Command::new(&self.helm);
        cmd.args(args)
            .env("KUBECONFIG", self.dir.join("admin.kubeconfig"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_DATA_HOME", home.join("data"));
        run(cmd, None)
    }

    fn nodes_sh(&self, args: &[&str]) -> Run {
        let mut cmd = Command::new(repo().join("e2e/nodes.sh"));
        cmd.args(args);
        run(cmd, None)
    }

    /// The webhook's pods, ready or not: (name, node, ready, containerID).
    fn webhook_pods(&self) -> Vec<(String, String, bool, String)> {
        let pods = self.get(&[
            "pods",
            "-n",
            NAMESPACE,
            "-l",
            "app.kubernetes.io/component=webhook",
        ]);
        pods["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .map(|p| {
                let ready = p["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
                let id = p["status"]["containerStatuses"][0]["containerID"]
                    .as_str()
                    .unwrap_or("")
                    .trim_start_matches("containerd://")
                    .to_string();
                (
                    p["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
                    ready,
                    id,
                )
            })
            .collect()
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

    /// The README's first install: the namespace, restricted, then the chart
    /// with the image named, and nothing else.
    fn install(&self) {
        self.admin(&["create", "namespace", NAMESPACE]);
        self.admin(&[
            "label",
            "--overwrite",
            "namespace",
            NAMESPACE,
            "pod-security.kubernetes.io/enforce=restricted",
        ])
        .ok();
        let start = Instant::now();
        self.helm(&[
            "install",
            RELEASE,
            &repo().join("charts/finalizer-guard").to_string_lossy(),
            "-n",
            NAMESPACE,
            "--set",
            &format!("image.repository={}", self.image.0),
            "--set",
            &format!("image.tag={}", self.image.1),
            // The nodes pull nothing: the image was imported into them.
            "--set",
            "image.pullPolicy=Never",
            "--wait",
            "--timeout",
            "5m",
        ])
        .ok();
        eprintln!(
            "nodes: helm install --wait: {:.1} s to two ready pods (cold start, policy check included)",
            start.elapsed().as_secs_f64()
        );
    }

    /// `helm upgrade --reuse-values --set VALUE --wait`.
    fn upgrade(&self, value: &str) {
        self.helm(&[
            "upgrade",
            RELEASE,
            &repo().join("charts/finalizer-guard").to_string_lossy(),
            "-n",
            NAMESPACE,
            "--reuse-values",
            "--set",
            value,
            "--wait",
            "--timeout",
            "5m",
        ])
        .ok();
    }

    /// `helm upgrade --reuse-values --set policy.mode=enforce`, as the README's
    /// step 3, and the pods of the old policy gone: until they stop they
    /// answer the calls kube-apiserver sends on the connections it has to them.
    fn enforce(&self) {
        self.upgrade("policy.mode=enforce");
        wait_until("the pods of the old policy gone", 120, || {
            let pods = self.get(&[
                "pods",
                "-n",
                NAMESPACE,
                "-l",
                "app.kubernetes.io/component=webhook",
            ]);
            pods["items"].as_array().is_some_and(|p| {
                p.iter()
                    .all(|p| p["metadata"]["deletionTimestamp"].is_null())
            })
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
        self.kubectl(
            "alice",
            &[
                "patch", kind, name, "-n", ns, "--type", "merge", "-p", STRIP,
            ],
            None,
        )
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
        self.apply(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "finalizers": [HOLD]},
        }));
    }

    /// Every finalizer removed by admin, then the namespace deleted.
    fn release_namespace(&self, ns: &str) {
        for kind in ["configmaps", "pods"] {
            let list = self.get(&[kind, "-n", ns]);
            for item in list["items"].as_array().into_iter().flatten() {
                let name = item["metadata"]["name"].as_str().unwrap_or("");
                let patch = json!({"metadata": {
                    "finalizers": null,
                    "annotations": {"finalizer-guard.io/override": "node-lost: e2e cleanup"},
                }});
                self.admin(&[
                    "patch",
                    kind,
                    name,
                    "-n",
                    ns,
                    "--type",
                    "merge",
                    "-p",
                    &patch.to_string(),
                ]);
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

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn wait_until(what: &str, seconds: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "gave up waiting for {what} after {seconds}s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn denied() -> String {
    format!("admission webhook \"{WEBHOOK}\" denied the request")
}

#[test]
#[ignore = "needs e2e/nodes.sh's nodes and the image: see .ci/run"]
fn chart_installs_unmodified_on_two_nodes_and_denies_through_its_service() {
    let n = nodes();
    if n.release_installed() {
        n.helm(&["uninstall", RELEASE, "-n", NAMESPACE, "--wait"])
            .ok();
    }
    n.install();
    n.wait_spread();

    // kube-apiserver calls the chart's Service: no url, the generated CA.
    let config = n.get(&["validatingwebhookconfiguration", FULLNAME]);
    let client = &config["webhooks"][0]["clientConfig"];
    assert_eq!(client["service"]["name"], FULLNAME, "{config:#}");
    assert_eq!(client["service"]["namespace"], NAMESPACE, "{config:#}");
    assert!(client["url"].is_null(), "{config:#}");
    assert!(
        client["caBundle"].as_str().is_some_and(|b| !b.is_empty()),
        "{config:#}"
    );
    // The pods run the image built from the Dockerfile, as the chart runs it.
    let deploy = n.get(&["deployment", FULLNAME, "-n", NAMESPACE]);
    let container = &deploy["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        format!("{}:{}", n.image.0, n.image.1),
        "{deploy:#}"
    );
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

/// What the writers saw during one disruption.
#[derive(Debug, Default, Clone)]
struct Tally {
    guarded: u64,
    ordinary: u64,
    unavailable: u64,
    other: u64,
    examples: Vec<String>,
    /// Every write refused with the webhook unavailable: what kube-apiserver said.
    unavailable_messages: Vec<String>,
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
                            tally.unavailable_messages.push(text.clone());
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
    // Let the writers run before and after the disruption.
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
        all.unavailable_messages.extend(t.unavailable_messages);
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
        "FG_IMAGE_NEXT is not set: the same image under another tag, imported into the nodes",
    ));
    n.enforcing();
    let ns = "nodes-disruptions";
    n.namespace(ns);
    let mut report = Vec::new();
    let mut killed = Vec::new();
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
        let kill = under_writes(&n, ns, 4, || {
            let pods = n.webhook_pods();
            let (name, node, _, id) = pods
                .iter()
                .find(|p| p.1 == "node-b")
                .expect("a pod on node-b");
            let pod = n.get(&["pod", name, "-n", NAMESPACE]);
            killed.push(format!(
                "{}:8443",
                pod["status"]["podIP"].as_str().expect("a pod IP")
            ));
            // containerd's runc shim keeps a runc root per containerd namespace.
            let root = n.dir.join(format!("nodes/{node}/runc/k8s.io"));
            let mut cmd = Command::new("runc");
            cmd.arg("--root").arg(&root).args(["kill", id, "KILL"]);
            let killed = run(cmd, None);
            assert_eq!(
                killed.code, 0,
                "runc kill of {name}'s container: {killed:#?}"
            );
            wait_until("the killed container restarted and ready", 120, || {
                let pods = n.webhook_pods();
                pods.iter().any(|p| &p.0 == name && p.2 && &p.3 != id)
            });
        });
        report.push(("container SIGKILL", kill));
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
    // those written to its kept-alive connections, are reset, and until the kubelet has seen it die and the endpoints drop
    // it, a call kube-apiserver sends to its address is refused at connect
    // (kube-apiserver retries no admission call). Those, and only those,
    // are allowed here; they are counted above.
    let kill: Vec<&Tally> = report
        .iter()
        .filter(|(what, _)| *what == "container SIGKILL")
        .map(|(_, t)| t)
        .collect();
    for message in kill.iter().flat_map(|t| &t.unavailable_messages) {
        assert!(
            (message.contains("connect: connection refused")
                || message.contains("connection reset by peer")
                || message.contains("write: broken pipe"))
                && killed.iter().any(|addr| message.contains(addr.as_str())),
            "a write refused other than by the killed container's address ({killed:?}): {message}"
        );
    }
}

#[test]
#[ignore = "needs e2e/nodes.sh's nodes and the image; kills node-b: run last (.ci/run)"]
fn seed_000_pods_of_a_dead_node_stay_guarded_and_unstick_releases_them() {
    let n = nodes();
    n.enforcing();
    let ns = "seed-000";
    n.namespace(ns);
    // Five pods on node-b, each with the CNI plugin's finalizer, running.
    for i in 0..5 {
        n.apply(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{i}"), "namespace": ns, "finalizers": [CNI]},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "node-b"},
                "automountServiceAccountToken": false,
                "containers": [{"name": "app", "image": PAUSE, "imagePullPolicy": "Never"}],
            },
        }));
    }
    wait_until("five pods running on node-b", 120, || {
        let pods = n.get(&["pods", "-n", ns]);
        pods["items"]
            .as_array()
            .is_some_and(|p| p.len() == 5 && p.iter().all(|p| p["status"]["phase"] == "Running"))
    });

    // node-b dies: kubelet, containerd and every container on it.
    n.nodes_sh(&["kill", &n.dir.to_string_lossy(), "node-b"])
        .ok();
    n.kubectl(
        "alice",
        &["delete", "pods", "--all", "-n", ns, "--wait=false"],
        None,
    )
    .ok();
    // The node controller sees it (NotReady), the endpoints drop node-b's webhook pod.
    wait_until("node-b NotReady", 180, || {
        let node = n.get(&["node", "node-b"]);
        node["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] != "True")
        })
    });
    wait_until("only node-a's webhook pod ready", 120, || {
        let pods = n.webhook_pods();
        let ready: Vec<_> = pods.iter().filter(|p| p.2).collect();
        ready.len() == 1 && ready[0].1 == "node-a"
    });

    // Terminating and staying so: no kubelet will confirm them.
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
            "node-b",
            "--reason",
            "node-lost",
            "--detail",
            "node-b powered off, its pod IPs released",
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
    // For the lead: `unstick --node --force-delete` finishing the deletion of
    // a dead node's pods is src/cluster's (issue 23); until it lands, the
    // released pods may stay Terminating here.
    let left: Vec<String> = pods["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        left.is_empty(),
        "unstick --force-delete left {} pod(s) of dead node-b Terminating: {left:?}\n{unstick:#?}",
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
    let n = nodes();
    n.enforcing();
    let ns = "nodes-latency";
    n.namespace(ns);
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
        .arg(format!("{}:{}", n.image.0, n.image.1))
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
    let point = |client: &Value| {
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
        // The API server's webhook configuration cache catches up.
        std::thread::sleep(Duration::from_secs(3));
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
