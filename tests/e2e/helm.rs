//! The Helm chart on the real control plane: `helm install`, the dead-node
//! scenario through the webhook configuration Helm installed, `helm upgrade`
//! with a new rule, and `helm uninstall`.
//!
//! As for `manifests/`, the webhook runs as a local `finalizer-guard serve`
//! (there is no kubelet to run the chart's pods), started the way the pods
//! start: the policy from the chart's ConfigMap, the serving certificate and
//! key from the Secret the chart generated, Events with a token of the
//! chart's ServiceAccount. The installed webhook configuration keeps
//! everything the chart rendered, its caBundle too; only its `clientConfig`
//! is pointed at the local server's `url:`. The generated certificate carries
//! `127.0.0.1` for that (`certificates.generated.extraIPAddresses`).
//!
//! What kubelet would do is done by the test, and said where it is done:
//! after `helm upgrade`, the ConfigMap is read back from the API server and
//! written over the server's policy file, as kubelet refreshes a mounted
//! ConfigMap. That the running server then applies it without a restart is
//! what is proven.
//!
//! The policy check (the chart's pre-install and pre-upgrade hook Job) runs
//! for real as far as the control plane goes: Helm creates the hook, the
//! Job controller makes its pod, and Helm waits for the Job's outcome. What a
//! scheduler and a kubelet would do for that pod is done by [`HookKubelet`]:
//! it binds the pod to a Node, runs its container's command here (this
//! build's binary, with the Job's arguments and the ConfigMap it mounts),
//! and writes the pod's status back. So a `helm upgrade` whose policy
//! `policy validate` refuses is refused by the real Job controller and Helm,
//! and what is then proven is that nothing the webhook's pods read or run
//! changed: the ConfigMap, the Deployment, the webhook configuration.
//!
//! `#[ignore]`d like every scenario: run with `--ignored`, they fail without
//! `FG_E2E_DIR` or without helm (`FG_HELM`, or the binary `e2e/helm/build.sh`
//! caches).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{self, Cluster, OVERRIDE, WEBHOOK, env, wait_until};

const RELEASE: &str = "helm-e2e";
/// The chart's name for the release's objects: RELEASE-finalizer-guard.
const FULLNAME: &str = "helm-e2e-finalizer-guard";
const RELEASE_NS: &str = "e2e-helm-release";
const CNI: &str = "pod.beta1.sigma.ali/cni-allocated";
const STRIP: &str = r#"{"metadata":{"finalizers":null}}"#;

pub(super) fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/finalizer-guard")
}

/// `FG_HELM`, else the binary `e2e/helm/build.sh` caches for the pinned version.
pub(crate) fn helm_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("FG_HELM") {
        return Some(PathBuf::from(path));
    }
    let go_mod =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/helm/go.mod")).ok()?;
    let version = go_mod
        .lines()
        .find_map(|l| l.trim().strip_prefix("require helm.sh/helm/v3 "))?
        .trim();
    let cache = std::env::var_os("FG_E2E_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("finalizer-guard-e2e"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/finalizer-guard-e2e"))
        })?;
    let cached = cache.join(format!("helm-{version}")).join("helm");
    cached.is_file().then_some(cached)
}

/// `helm template finalizer-guard charts/finalizer-guard -n finalizer-guard
/// --set policyCheck.enabled=false ARGS`: the chart's objects as manifests/
/// names them, with no cluster asked and no user configuration.
pub(crate) fn render(work: &Path, args: &[&str]) -> Vec<Value> {
    let helm = helm_binary()
        .expect("no helm: set FG_HELM, or build it with e2e/helm/build.sh (.ci/run does)");
    let home = work.join("render-helm-home");
    let out = Command::new(helm)
        .args(["template", "finalizer-guard"])
        .arg(chart())
        .args(["--namespace", harness::NAMESPACE])
        .args(["--set", "policyCheck.enabled=false"])
        .args(args)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBECONFIG")
        .output()
        .expect("helm runs");
    assert!(
        out.status.success(),
        "helm template {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_yaml_ng::Deserializer::from_str(&String::from_utf8_lossy(&out.stdout))
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
        let out = Command::new(&self.binary)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .stdin(Stdio::null())
            .output()
            .expect("helm runs");
        harness::Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// One policy-check pod [`HookKubelet`] ran.
#[derive(Debug, Clone)]
struct Ran {
    pod: String,
    code: i32,
    output: String,
}

/// The scheduler and kubelet of the policy check's pods in one namespace,
/// which this control plane does not have: each pending pod of the chart's
/// `policy-check` component is bound to a Node, its container's command run
/// here, and its status written back as a kubelet writes it, the output's
/// end as the termination message (`terminationMessagePolicy:
/// FallbackToLogsOnError`). The Job controller and Helm do the rest.
struct HookKubelet {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Ran>>>,
}

const HOOK_NODE: &str = "helm-e2e-hook-node";

impl HookKubelet {
    fn start(cluster: &Cluster, ns: &str, work: &Path) -> HookKubelet {
        cluster
            .apply(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": HOOK_NODE}}));
        let stop = Arc::new(AtomicBool::new(false));
        let (cluster, ns, work) = (cluster.clone(), ns.to_string(), work.join("hooks"));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut ran: Vec<Ran> = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                let pods = cluster.admin(&[
                    "get",
                    "pods",
                    "-n",
                    &ns,
                    "-l",
                    "app.kubernetes.io/component=policy-check",
                    "-o",
                    "json",
                ]);
                let items = serde_json::from_str::<Value>(&pods.stdout)
                    .ok()
                    .and_then(|l| l["items"].as_array().cloned())
                    .unwrap_or_default();
                for pod in items {
                    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
                    let phase = pod["status"]["phase"].as_str().unwrap_or("");
                    if ran.iter().any(|r| r.pod == name) || matches!(phase, "Succeeded" | "Failed")
                    {
                        continue;
                    }
                    ran.push(run_hook_pod(&cluster, &ns, &pod, &work));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            ran
        });
        HookKubelet {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops, and says which pods it ran.
    fn stop(mut self) -> Vec<Ran> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for HookKubelet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One policy-check pod: bound (the scheduler's part), run and reported
/// (the kubelet's).
fn run_hook_pod(cluster: &Cluster, ns: &str, pod: &Value, work: &Path) -> Ran {
    let name = pod["metadata"]["name"].as_str().unwrap();
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": HOOK_NODE},
    });
    cluster
        .kubectl_in(
            "admin",
            &[
                "create",
                "--raw",
                &format!("/api/v1/namespaces/{ns}/pods/{name}/binding"),
                "-f",
                "-",
            ],
            Some(&binding.to_string()),
        )
        .ok();

    // The volumes it mounts: ConfigMaps, written where the container reads them.
    let container = &pod["spec"]["containers"][0];
    let root = work.join(name);
    let mut args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    for mount in container["volumeMounts"].as_array().unwrap() {
        let volume = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap();
        let config_map = volume["configMap"]["name"]
            .as_str()
            .expect("the policy check mounts ConfigMaps only");
        let data = cluster
            .get(&["configmap", config_map, "-n", ns])
            .expect("the mounted ConfigMap")["data"]
            .clone();
        let at = mount["mountPath"].as_str().unwrap();
        let local = root.join(at.trim_start_matches('/'));
        fs::create_dir_all(&local).unwrap();
        for (key, value) in data.as_object().unwrap() {
            fs::write(local.join(key), value.as_str().unwrap()).unwrap();
        }
        for arg in &mut args {
            if let Some(rest) = arg.strip_prefix(at) {
                *arg = format!("{}{rest}", local.display());
            }
        }
    }
    let started = jiff::Timestamp::now().to_string();
    let out = Command::new(harness::bin())
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let message: String = output
        .chars()
        .rev()
        .take(4000)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let status = json!({"status": {
        "phase": if code == 0 { "Succeeded" } else { "Failed" },
        "startTime": started,
        "containerStatuses": [{
            "name": container["name"], "image": container["image"], "imageID": "",
            "ready": false, "restartCount": 0, "started": false,
            "state": {"terminated": {
                "exitCode": code,
                "reason": if code == 0 { "Completed" } else { "Error" },
                "message": if code == 0 { String::new() } else { message },
                "startedAt": started, "finishedAt": jiff::Timestamp::now().to_string(),
            }},
        }],
    }});
    cluster
        .admin(&[
            "patch",
            "pod",
            name,
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ])
        .ok();
    Ran {
        pod: name.to_string(),
        code,
        output,
    }
}

/// A `finalizer-guard serve` started as the chart's pod would be.
struct Server {
    child: Child,
    admin_port: u16,
    work: PathBuf,
}

impl Server {
    fn start(work: &Path, port: u16, kubeconfig: &Path) -> Server {
        let admin_port = harness::free_port();
        let audit = fs::File::create(work.join("audit.jsonl")).unwrap();
        let log = fs::File::create(work.join("server.log")).unwrap();
        let child = Command::new(harness::bin())
            .arg("serve")
            .arg("--policy")
            .arg(work.join("policy/policy.yaml"))
            .arg("--tls-cert")
            .arg(work.join("tls/tls.crt"))
            .arg("--tls-key")
            .arg(work.join("tls/tls.key"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin_port}")])
            .args(["--reload-interval", "200ms", "--shutdown-delay", "0s"])
            .args(["--log-format", "json"])
            .env("KUBECONFIG", kubeconfig)
            .stdout(audit)
            .stderr(log)
            .spawn()
            .unwrap();
        let server = Server {
            child,
            admin_port,
            work: work.to_path_buf(),
        };
        wait_until(
            "the Helm-installed webhook's server to be ready",
            30,
            || harness::http_get(admin_port, "/readyz").is_some(),
        );
        server
    }

    fn policy_reloads(&self) -> u64 {
        harness::http_get(self.admin_port, "/metrics")
            .unwrap_or_default()
            .lines()
            .find(|l| {
                l.starts_with("finalizer_guard_reloads_total")
                    && l.contains("kind=\"policy\"")
                    && l.contains("outcome=\"success\"")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    }

    fn audit_records(&self) -> Vec<Value> {
        fs::read_to_string(self.work.join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `content` to `dir/name` as kubelet updates a mounted volume: a
/// new file renamed over the old, so a reader never sees half of it.
fn write_mounted(dir: &Path, name: &str, content: &[u8]) {
    fs::create_dir_all(dir).unwrap();
    let tmp = dir.join(format!(".{name}.tmp"));
    fs::write(&tmp, content).unwrap();
    fs::rename(&tmp, dir.join(name)).unwrap();
}

fn b64decode(value: &Value) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(value.as_str().expect("base64 data"))
        .unwrap()
}

/// The chart's ConfigMap, as the API server holds it, written where the
/// server reads its policy: what kubelet does for the pods' volume.
fn sync_policy_from_configmap(cluster: &Cluster, work: &Path) -> String {
    let config_map = cluster
        .get(&["configmap", &format!("{FULLNAME}-policy"), "-n", RELEASE_NS])
        .expect("the chart's ConfigMap");
    let policy = config_map["data"]["policy.yaml"]
        .as_str()
        .unwrap()
        .to_string();
    write_mounted(&work.join("policy"), "policy.yaml", policy.as_bytes());
    policy
}

/// The release's webhook served here, as the chart's pod runs it: the
/// chart's policy, the chart's certificate, a token of the chart's
/// ServiceAccount; the installed configuration's clientConfig pointed at it.
/// The server and its url.
fn serve_release(c: &Cluster, work: &Path) -> (Server, String) {
    let tls = c
        .get(&["secret", &format!("{FULLNAME}-tls"), "-n", RELEASE_NS])
        .unwrap();
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        write_mounted(&work.join("tls"), key, &b64decode(&tls["data"][key]));
    }
    sync_policy_from_configmap(c, work);
    let kubeconfig = c.token_kubeconfig(FULLNAME, RELEASE_NS, &work.join("webhook.kubeconfig"));
    let port = harness::free_port();
    let server = Server::start(work, port, &kubeconfig);
    let url = format!("https://127.0.0.1:{port}/validate");
    point_client_config(c, Some(&url));
    (server, url)
}

/// The values of the scenarios' releases: enforcing, with the address the
/// local server listens on in the generated certificate.
fn enforcing_values(work: &Path) -> PathBuf {
    let values = work.join("values.yaml");
    fs::write(
        &values,
        "policy:\n  mode: enforce\ncertificates:\n  generated:\n    extraIPAddresses: [127.0.0.1]\n",
    )
    .unwrap();
    values
}

/// `helm install` of the release with `values` and `extra`, its policy
/// check's pods run: what helm printed (it must succeed), and the pods run.
fn install_release(
    c: &Cluster,
    helm: &Helm,
    work: &Path,
    values: &Path,
    extra: &[&str],
) -> (harness::Run, Vec<Ran>) {
    let chart = chart();
    let mut args = vec![
        "install",
        RELEASE,
        chart.to_str().unwrap(),
        "-n",
        RELEASE_NS,
        "--create-namespace",
        "-f",
        values.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (run, ran) = helm_with_hooks(c, helm, work, &args);
    (run.ok(), ran)
}

/// `helm upgrade --reuse-values` of the release with `extra`, its policy
/// check's pods run: what helm printed, and the pods run.
fn upgrade_release(
    c: &Cluster,
    helm: &Helm,
    work: &Path,
    extra: &[&str],
) -> (harness::Run, Vec<Ran>) {
    let chart = chart();
    let mut args = vec![
        "upgrade",
        RELEASE,
        chart.to_str().unwrap(),
        "-n",
        RELEASE_NS,
        "--reuse-values",
    ];
    args.extend_from_slice(extra);
    helm_with_hooks(c, helm, work, &args)
}

/// A rule letting the developers (alice's group) remove the CNI finalizer,
/// for `helm --set-json`.
fn developers_rule() -> String {
    format!(
        r#"policy.rules=[{{"name":"developers-release-cni","finalizers":["{CNI}"],"groups":["developers"]}}]"#
    )
}

/// `helm ARGS` with the policy check's pods run ([`HookKubelet`]): what
/// helm printed, and the pods run.
fn helm_with_hooks(
    c: &Cluster,
    helm: &Helm,
    work: &Path,
    args: &[&str],
) -> (harness::Run, Vec<Ran>) {
    let kubelet = HookKubelet::start(c, RELEASE_NS, work);
    let run = helm.run(args);
    (run, kubelet.stop())
}

/// Waits until an earlier scenario's release namespace, deleted without
/// waiting, is gone: Helm cannot install into a namespace being deleted.
fn release_namespace_gone(c: &Cluster) {
    wait_until("an earlier release namespace to be gone", 120, || {
        c.get(&["namespace", RELEASE_NS]).is_none()
    });
}

fn webhook_config(cluster: &Cluster) -> Option<Value> {
    cluster.get(&["validatingwebhookconfiguration", FULLNAME])
}

/// Points the Helm-installed webhook configuration's clientConfig at `url`,
/// or back at the chart's Service; nothing else changes.
fn point_client_config(cluster: &Cluster, url: Option<&str>) {
    let patch = match url {
        Some(url) => json!([
            {"op": "test", "path": "/webhooks/0/name", "value": WEBHOOK},
            {"op": "remove", "path": "/webhooks/0/clientConfig/service"},
            {"op": "add", "path": "/webhooks/0/clientConfig/url", "value": url},
        ]),
        None => json!([
            {"op": "test", "path": "/webhooks/0/name", "value": WEBHOOK},
            {"op": "remove", "path": "/webhooks/0/clientConfig/url"},
            {"op": "add", "path": "/webhooks/0/clientConfig/service", "value": {
                "namespace": RELEASE_NS, "name": FULLNAME, "path": "/validate", "port": 443,
            }},
        ]),
    };
    cluster
        .admin(&[
            "patch",
            "validatingwebhookconfiguration",
            FULLNAME,
            "--type=json",
            "-p",
            &patch.to_string(),
        ])
        .ok();
}

/// The objects `helm get manifest` says the release installed.
fn release_objects(helm: &Helm) -> Vec<Value> {
    let run = helm
        .run(&["get", "manifest", RELEASE, "-n", RELEASE_NS])
        .ok();
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&run.stdout) {
        let value = <Value as serde::Deserialize>::deserialize(doc).unwrap();
        if !value.is_null() {
            out.push(value);
        }
    }
    out
}

/// `kubectl get` arguments for one object of a manifest.
fn get_args(object: &Value) -> Vec<String> {
    let kind = object["kind"].as_str().unwrap();
    let api_version = object["apiVersion"].as_str().unwrap();
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    let resource = if group.is_empty() {
        kind.to_lowercase()
    } else {
        format!("{}.{group}", kind.to_lowercase())
    };
    let mut args = vec![
        resource,
        object["metadata"]["name"].as_str().unwrap().to_string(),
    ];
    if let Some(ns) = object["metadata"]["namespace"].as_str() {
        args.extend(["-n".to_string(), ns.to_string()]);
    }
    args
}

fn pod(ns: &str, name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "finalizers": [CNI]},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
            "automountServiceAccountToken": false,
        },
    })
}

/// A pod on a Node with no kubelet, deleted: Terminating, held by its CNI finalizer.
fn stuck_pod(cluster: &Cluster, ns: &str, name: &str, node: &str) {
    cluster.apply(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}));
    cluster.apply(&pod(ns, name, node));
    cluster
        .admin(&["delete", "--wait=false", "pod", name, "-n", ns])
        .ok();
    let stuck = cluster.get(&["pod", name, "-n", ns]).unwrap();
    assert!(stuck["metadata"]["deletionTimestamp"].is_string());
}

fn force_delete(cluster: &Cluster, ns: &str, name: &str) {
    cluster
        .admin(&[
            "delete",
            "pod",
            name,
            "-n",
            ns,
            "--grace-period=0",
            "--force",
        ])
        .ok();
    wait_until(&format!("{name} to be gone"), 30, || {
        cluster.get(&["pod", name, "-n", ns]).is_none()
    });
}

/// The policy check's Jobs and ConfigMaps left in the release's namespace.
fn hook_objects(cluster: &Cluster) -> String {
    cluster
        .admin(&[
            "get",
            "jobs,configmaps",
            "-n",
            RELEASE_NS,
            "-l",
            "app.kubernetes.io/component=policy-check",
            "-o",
            "name",
        ])
        .ok()
        .stdout
        .trim()
        .to_string()
}

fn sha256_hex(text: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Should the scenario fail half-way: the release uninstalled, and its
/// webhook configuration gone in any case, so it cannot refuse the writes of
/// the scenarios after it once its server is gone.
struct ReleaseCleanup<'a> {
    helm: &'a Helm,
    cluster: &'a Cluster,
}

impl Drop for ReleaseCleanup<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        self.helm.run(&["uninstall", RELEASE, "-n", RELEASE_NS]);
        self.cluster.admin(&[
            "delete",
            "validatingwebhookconfiguration",
            FULLNAME,
            "--ignore-not-found",
        ]);
    }
}

/// The `manifests/` webhook of the other scenarios, kept out of one
/// namespace while the Helm-installed webhook is tested there, so every
/// decision in it is the Helm-installed one's. Put back when dropped.
struct KustomizeWebhookExcluded<'a> {
    cluster: &'a Cluster,
}

impl<'a> KustomizeWebhookExcluded<'a> {
    fn new(cluster: &'a Cluster, ns: &str) -> Self {
        let selector = json!({"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [ns],
        }]});
        cluster
            .admin(&[
                "patch",
                "validatingwebhookconfiguration",
                harness::CONFIG,
                "--type=json",
                "-p",
                &json!([
                    {"op": "test", "path": "/webhooks/0/namespaceSelector", "value": {}},
                    {"op": "replace", "path": "/webhooks/0/namespaceSelector", "value": selector},
                ])
                .to_string(),
            ])
            .ok();
        KustomizeWebhookExcluded { cluster }
    }
}

impl Drop for KustomizeWebhookExcluded<'_> {
    fn drop(&mut self) {
        self.cluster.admin(&[
            "patch",
            "validatingwebhookconfiguration",
            harness::CONFIG,
            "--type=json",
            "-p",
            r#"[{"op": "replace", "path": "/webhooks/0/namespaceSelector", "value": {}}]"#,
        ]);
    }
}

fn denied() -> String {
    format!("admission webhook \"{WEBHOOK}\" denied the request")
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

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR) and helm: see .ci/run"]
fn helm_install_guards_upgrade_reloads_and_uninstall_leaves_nothing() {
    let env = env();
    let c = &env.cluster;
    let work = env.work.join("helm");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).unwrap();
    let helm = Helm::new(c, &work);
    let ns = "e2e-helm-dead-node";
    c.namespace(ns);
    release_namespace_gone(c);
    let _excluded = KustomizeWebhookExcluded::new(c, ns);

    // helm install, enforcing, with the address the local server listens on
    // in the generated certificate.
    let values = enforcing_values(&work);
    let _cleanup = ReleaseCleanup {
        helm: &helm,
        cluster: c,
    };
    // The policy check runs first: Helm waits for its Job.
    let (run, ran) = install_release(c, &helm, &work, &values, &[]);
    assert!(run.stdout.contains("STATUS: deployed"), "{run:#?}");
    assert!(
        run.stdout.contains("ENFORCE mode"),
        "NOTES.txt says the mode: {run:#?}"
    );
    assert_eq!(ran.len(), 1, "one policy check before install: {ran:#?}");
    assert_eq!(ran[0].code, 0, "{ran:#?}");
    assert!(
        hook_objects(c).is_empty(),
        "a passed check leaves nothing behind"
    );

    // Every object the release names exists, with what the chart rendered.
    let objects = release_objects(&helm);
    let mut kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "Deployment",
            "PodDisruptionBudget",
            "ResourceQuota",
            "Secret",
            "Secret",
            "Service",
            "Service",
            "ServiceAccount",
            "ServiceAccount",
            "ValidatingWebhookConfiguration",
        ],
        "the webhook's and watch's (its Deployment, Service, ServiceAccount, ClusterRole and binding)"
    );
    for object in &objects {
        let args = get_args(object);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let live = c
            .get(&args)
            .unwrap_or_else(|| panic!("helm install did not create {args:?}"));
        assert_eq!(
            live["metadata"]["labels"]["app.kubernetes.io/instance"], RELEASE,
            "{args:?}"
        );
    }
    let installed = webhook_config(c).expect("the Helm-installed webhook configuration");
    let rendered = objects
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .unwrap();
    for field in [
        "rules",
        "matchConditions",
        "failurePolicy",
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
    assert!(ca_bundle.is_string(), "the chart filled the caBundle");

    // The server, as the chart's pod runs it.
    let tls = c
        .get(&["secret", &format!("{FULLNAME}-tls"), "-n", RELEASE_NS])
        .unwrap();
    assert_eq!(
        tls["data"]["ca.crt"], ca_bundle,
        "the caBundle is the Secret's CA"
    );
    let (server, url) = serve_release(c, &work);
    let policy = fs::read_to_string(work.join("policy/policy.yaml")).unwrap();
    assert!(policy.contains("mode: enforce"), "{policy}");

    // The dead-node scenario, through the Helm-installed webhook.
    stuck_pod(c, ns, "web-0", "helm-dead-node-1");
    let strip = |name: &str| {
        c.kubectl(
            "alice",
            &["patch", "pod", name, "-n", ns, "-p", STRIP, "--type=merge"],
        )
    };
    let run = strip("web-0").refused(&denied());
    for needle in [CNI, "alice", "web-0", OVERRIDE, "node-lost"] {
        assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
    }
    let judged_by_helm_server = |decision: &str, name: &str| {
        server
            .audit_records()
            .iter()
            .any(|r| r["decision"] == decision && r["name"] == name && r["namespace"] == ns)
    };
    wait_until(
        "the Helm-installed webhook's server to record the denial",
        10,
        || judged_by_helm_server("denied", "web-0"),
    );
    c.kubectl(
        "alice",
        &[
            "annotate",
            "pod",
            "web-0",
            "-n",
            ns,
            &format!("{OVERRIDE}=node-lost: INC-4711 helm-dead-node-1 powered off"),
        ],
    )
    .ok();
    let run = strip("web-0").ok();
    assert!(run.stdout.contains("pod/web-0 patched"), "{run:#?}");
    assert!(
        run.stderr.contains("Warning:") && run.stderr.contains("node-lost"),
        "{run:#?}"
    );
    wait_until(
        "the Helm-installed webhook's server to record the override",
        10,
        || judged_by_helm_server("override", "web-0"),
    );
    force_delete(c, ns, "web-0");
    // The Events went through the chart's RBAC: the server's token is the
    // chart's ServiceAccount's.
    for reason in ["FinalizerRemovalDenied", "FinalizerOverride"] {
        wait_until(&format!("the {reason} Event of web-0"), 30, || {
            let list = c
                .get(&[
                    "events",
                    "-n",
                    ns,
                    "--field-selector",
                    &format!("involvedObject.name=web-0,reason={reason}"),
                ])
                .unwrap();
            list["items"]
                .as_array()
                .is_some_and(|items| !items.is_empty())
        });
    }

    // helm upgrade with a policy `serve` would refuse: enforcing, with
    // Kubernetes' own controllers judged (builtinControllers false) and no
    // rule for them, and a rule for the developers beside. The policy check
    // refuses it, Helm stops before changing anything, and the webhook goes
    // on under the policy it had: the developers' strip is still denied.
    let before = |kind: &str, name: &str| {
        let mut args = vec![kind, name];
        if kind != "validatingwebhookconfiguration" {
            args.extend(["-n", RELEASE_NS]);
        }
        c.get(&args).unwrap()
    };
    let config_map_before = before("configmap", &format!("{FULLNAME}-policy"));
    let deployment_before = before("deployment", FULLNAME);
    let webhook_before = before("validatingwebhookconfiguration", FULLNAME);
    let developers_rule = developers_rule();
    let (run, ran) = upgrade_release(
        c,
        &helm,
        &work,
        &[
            "--set",
            "policy.builtinControllers=false",
            "--set-json",
            &developers_rule,
        ],
    );
    assert_ne!(
        run.code, 0,
        "helm upgrade passed a refused policy: {run:#?}"
    );
    assert!(
        run.stderr.contains("pre-upgrade hooks failed")
            && run.stderr.contains(&format!("{FULLNAME}-policy-check")),
        "{run:#?}"
    );
    assert_eq!(ran.len(), 1, "{ran:#?}");
    assert_eq!(ran[0].code, 1, "policy validate refused it: {ran:#?}");
    assert!(
        ran[0].output.contains("garbage-collector"),
        "and said which controller it would block: {ran:#?}"
    );
    // The Job controller failed the Job, which is kept to say why.
    let job = c
        .get(&["job", &format!("{FULLNAME}-policy-check"), "-n", RELEASE_NS])
        .expect("a failed check is kept");
    assert!(
        job["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Failed" && c["status"] == "True"),
        "{job:#}"
    );
    // Nothing of the release changed.
    let same = |kind: &str, name: &str, was: &Value| {
        let now = before(kind, name);
        assert_eq!(
            now["metadata"]["resourceVersion"], was["metadata"]["resourceVersion"],
            "{kind} {name} changed: {now:#}"
        );
    };
    same(
        "configmap",
        &format!("{FULLNAME}-policy"),
        &config_map_before,
    );
    same("deployment", FULLNAME, &deployment_before);
    same("validatingwebhookconfiguration", FULLNAME, &webhook_before);
    let history: Value = serde_json::from_str(
        &helm
            .run(&["history", RELEASE, "-n", RELEASE_NS, "-o", "json"])
            .ok()
            .stdout,
    )
    .unwrap();
    let statuses: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["deployed", "failed"], "{history:#}");
    // kubelet's part: the ConfigMap, unchanged, is what the pods read; the
    // running server keeps deciding under the policy it had.
    let policy = sync_policy_from_configmap(c, &work);
    assert!(!policy.contains("developers-release-cni"), "{policy}");
    stuck_pod(c, ns, "web-3", "helm-dead-node-1");
    let run = strip("web-3").refused(&denied());
    assert!(run.stderr.contains("alice"), "{run:#?}");
    c.kubectl(
        "alice",
        &[
            "annotate",
            "pod",
            "web-3",
            "-n",
            ns,
            &format!("{OVERRIDE}=node-lost: INC-4711 helm-dead-node-1 powered off"),
        ],
    )
    .ok();
    strip("web-3").ok();
    force_delete(c, ns, "web-3");

    // helm upgrade: a rule lets the developers release CNI finalizers.
    // Helm re-applies the chart's clientConfig (the Service) by a three-way
    // merge, which a url beside it would make invalid: the configuration is
    // pointed back at the Service for the upgrade, and at the local server
    // again after it.
    let ca_secret_before = c
        .get(&["secret", &format!("{FULLNAME}-ca"), "-n", RELEASE_NS])
        .unwrap();
    point_client_config(c, None);
    let (run, ran) = upgrade_release(c, &helm, &work, &["--set-json", &developers_rule]);
    let run = run.ok();
    assert!(run.stdout.contains("STATUS: deployed"), "{run:#?}");
    assert_eq!(ran.len(), 1, "{ran:#?}");
    assert_eq!(ran[0].code, 0, "the policy check passed it: {ran:#?}");
    assert!(
        hook_objects(c).is_empty(),
        "the failed check's Job was replaced, and the passed one's removed"
    );
    // The pods roll to the policy that passed: its digest, in the pod template.
    let config_map = before("configmap", &format!("{FULLNAME}-policy"));
    let deployment = before("deployment", FULLNAME);
    let digest = &deployment["spec"]["template"]["metadata"]["annotations"]["finalizer-guard.io/policy-sha256"];
    assert_eq!(
        digest.as_str(),
        Some(sha256_hex(config_map["data"]["policy.yaml"].as_str().unwrap()).as_str()),
        "{deployment:#}"
    );
    assert_ne!(
        digest,
        &deployment_before["spec"]["template"]["metadata"]["annotations"]["finalizer-guard.io/policy-sha256"],
        "a new pod template: the pods roll"
    );
    let upgraded = webhook_config(c).unwrap();
    assert_eq!(
        upgraded["webhooks"][0]["clientConfig"]["caBundle"], ca_bundle,
        "the generated CA, and so the caBundle, is kept across helm upgrade"
    );
    let ca_secret_after = c
        .get(&["secret", &format!("{FULLNAME}-ca"), "-n", RELEASE_NS])
        .unwrap();
    assert_eq!(ca_secret_after["data"], ca_secret_before["data"]);
    let tls_after = c
        .get(&["secret", &format!("{FULLNAME}-tls"), "-n", RELEASE_NS])
        .unwrap();
    assert_eq!(
        tls_after["data"], tls["data"],
        "the serving certificate is kept while its names are the same"
    );
    point_client_config(c, Some(&url));

    // kubelet's part: the refreshed ConfigMap lands in the mounted file.
    let reloads = server.policy_reloads();
    let pid = server.child.id();
    let policy = sync_policy_from_configmap(c, &work);
    assert!(policy.contains("developers-release-cni"), "{policy}");
    wait_until(
        "the running server to apply the upgraded policy",
        30,
        || server.policy_reloads() > reloads,
    );
    stuck_pod(c, ns, "web-1", "helm-dead-node-1");
    let run = strip("web-1").ok();
    assert!(run.stdout.contains("pod/web-1 patched"), "{run:#?}");
    assert!(
        !run.stderr.contains("Warning:"),
        "a rule authorizes it: no override, no warning: {run:#?}"
    );
    wait_until("the audit record of web-1", 10, || {
        server.audit_records().iter().any(|r| r["name"] == "web-1")
    });
    let records = server.audit_records();
    let record = records.iter().rev().find(|r| r["name"] == "web-1").unwrap();
    assert_eq!(record["decision"], "authorized", "{record}");
    assert!(
        record.to_string().contains("developers-release-cni"),
        "authorized by the new rule: {record}"
    );
    assert_eq!(
        server.child.id(),
        pid,
        "the same process: picked up without a restart"
    );
    force_delete(c, ns, "web-1");

    // helm uninstall: nothing of the release is left, the webhook
    // configuration least of all.
    let run = helm.run(&["uninstall", RELEASE, "-n", RELEASE_NS]).ok();
    assert!(run.stdout.contains("uninstalled"), "{run:#?}");
    for object in &objects {
        let args = get_args(object);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        wait_until(&format!("{args:?} to be gone"), 60, || {
            c.get(&args).is_none()
        });
    }
    let selector = format!("app.kubernetes.io/instance={RELEASE}");
    let left = c
        .admin(&[
            "get",
            "validatingwebhookconfigurations,clusterroles,clusterrolebindings",
            "-l",
            &selector,
            "-o",
            "name",
        ])
        .ok();
    assert_eq!(
        left.stdout.trim(),
        "",
        "cluster-scoped objects left: {left:#?}"
    );
    wait_until("the release's pods and ReplicaSets to be gone", 60, || {
        c.admin(&[
            "get",
            "all,configmaps,secrets,serviceaccounts,poddisruptionbudgets,resourcequotas",
            "-n",
            RELEASE_NS,
            "-l",
            &selector,
            "-o",
            "name",
        ])
        .ok()
        .stdout
        .trim()
        .is_empty()
    });

    // With its server gone too, no webhook configuration refuses the write
    // it would have judged.
    drop(server);
    stuck_pod(c, ns, "web-2", "helm-dead-node-1");
    let run = strip("web-2").ok();
    assert!(run.stdout.contains("pod/web-2 patched"), "{run:#?}");
    force_delete(c, ns, "web-2");
    c.admin(&["delete", "namespace", RELEASE_NS, "--wait=false"])
        .ok();
}

/// `finalizer-guard policy export --vap` of the policy the chart renders
/// for `args` (its ConfigMap's policy.yaml), written to `work/NAME`: the
/// steps values.yaml gives for the backstop.
fn export_chart_policy(helm: &Helm, work: &Path, name: &str, args: &[&str]) -> PathBuf {
    let chart = chart();
    let mut full = vec![
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "-n",
        RELEASE_NS,
    ];
    full.extend_from_slice(args);
    full.extend(["--show-only", "templates/configmap.yaml"]);
    let config_map: Value = serde_yaml_ng::from_str(&helm.run(&full).ok().stdout).unwrap();
    let policy = work.join(format!("{name}.policy.yaml"));
    fs::write(&policy, config_map["data"]["policy.yaml"].as_str().unwrap()).unwrap();
    let out = Command::new(harness::bin())
        .args(["policy", "export", "--vap"])
        .arg(&policy)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let vap = work.join(name);
    fs::write(&vap, out.stdout).unwrap();
    vap
}

/// The chart in backstop mode: the ValidatingAdmissionPolicy it is given
/// installed beside a webhook failing open. Up, the policy refuses the
/// strips first and the webhook still judges (and warns about) overrides;
/// down, the strips through every path are still refused, Kubernetes' own
/// controllers complete, and an override still releases. An upgrade that
/// changes the policy but not the export is refused by the policy check,
/// and passes once exported again; uninstall takes the policy away.
#[test]
#[ignore = "needs a cluster (FG_E2E_DIR) and helm: see .ci/run"]
fn helm_backstop_guards_while_the_webhook_is_down_and_refuses_a_stale_export() {
    let mut env = env();
    // Only the release guards: the harness's webhook stopped and set aside.
    env.stop();
    helm_backstop(&env);
    env.start();
}

fn helm_backstop(env: &harness::Env) {
    use crate::vap::{WebhookAside, policy_denial};
    let c = &env.cluster;
    let _aside = WebhookAside::new(c);
    let work = env.work.join("helm-backstop");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).unwrap();
    let helm = Helm::new(c, &work);
    let ns = "e2e-helm-backstop";
    c.namespace(ns);
    release_namespace_gone(c);
    let values_file = enforcing_values(&work);
    let values = values_file.to_str().unwrap();
    let vap = export_chart_policy(&helm, &work, "vap.yaml", &["-f", values]);
    let set_vap = |file: &Path| format!("backstop.validatingAdmissionPolicy={}", file.display());

    let _cleanup = ReleaseCleanup {
        helm: &helm,
        cluster: c,
    };
    let (run, ran) = install_release(
        c,
        &helm,
        &work,
        &values_file,
        &[
            "--set",
            "backstop.enabled=true",
            "--set-file",
            &set_vap(&vap),
        ],
    );
    assert!(run.stdout.contains("STATUS: deployed"));
    assert_eq!(ran.len(), 1, "{ran:#?}");
    assert_eq!(ran[0].code, 0, "the check took the export: {ran:#?}");
    let kinds: Vec<String> = release_objects(&helm)
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_string())
        .collect();
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "{kind}: {kinds:?}");
    }
    let binding = c
        .get(&["validatingadmissionpolicybinding", "finalizer-guard"])
        .expect("the binding, installed by Helm");
    assert_eq!(
        binding["spec"]["validationActions"],
        json!(["Deny", "Audit"])
    );
    assert_eq!(
        binding["metadata"]["labels"]["app.kubernetes.io/name"],
        "finalizer-guard"
    );
    assert_eq!(
        webhook_config(c).unwrap()["webhooks"][0]["failurePolicy"],
        "Ignore",
        "enforcing with the backstop: the webhook fails open"
    );
    let (server, _url) = serve_release(c, &work);

    // Both up: kube-apiserver evaluates the policy before calling the
    // webhook, so the policy refuses the strip and the webhook is never asked.
    stuck_pod(c, ns, "web-0", "helm-backstop-node");
    let strip = |name: &str| {
        c.kubectl(
            "alice",
            &["patch", "pod", name, "-n", ns, "-p", STRIP, "--type=merge"],
        )
    };
    wait_until("the backstop to be in force", 30, || {
        strip("web-0").stderr.contains(&policy_denial())
    });
    let run = strip("web-0").refused(&policy_denial());
    for needle in [CNI, "alice", "web-0", OVERRIDE, "node-lost"] {
        assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
    }
    assert!(
        !server.audit_records().iter().any(|r| r["name"] == "web-0"),
        "the webhook judged a write the policy refused"
    );
    // An override passes both; the webhook warns, and records it.
    let annotate = |name: &str| {
        c.kubectl(
            "alice",
            &[
                "annotate",
                "pod",
                name,
                "-n",
                ns,
                &format!("{OVERRIDE}=node-lost: INC-4711 helm-backstop-node powered off"),
            ],
        )
        .ok();
    };
    annotate("web-0");
    let run = strip("web-0").ok();
    assert!(
        run.stderr.contains("Warning:") && run.stderr.contains("node-lost"),
        "{run:#?}"
    );
    wait_until("the webhook to record the override", 10, || {
        server
            .audit_records()
            .iter()
            .any(|r| r["decision"] == "override" && r["name"] == "web-0")
    });
    force_delete(c, ns, "web-0");

    // The webhook down: the seed's strips, the controllers, an override.
    drop(server);
    super::strips_are_refused_through_every_path(env, "e2e-helm-backstop-paths", &policy_denial());
    super::builtin_controllers_complete(env, "helm-backstop");
    stuck_pod(c, ns, "web-1", "helm-backstop-node");
    strip("web-1").refused(&policy_denial());
    annotate("web-1");
    strip("web-1").ok();
    let overridden = env.apiserver_audit().into_iter().rev().find(|e| {
        e["objectRef"]["name"] == "web-1"
            && e["annotations"]["finalizer-guard/decision"] == "override"
    });
    let overridden = overridden.expect("kube-apiserver's audit log records the policy's override");
    assert_eq!(
        overridden["annotations"]["finalizer-guard/override-reason"],
        "node-lost"
    );
    force_delete(c, ns, "web-1");

    // helm upgrade with a rule for the developers, the export left as it
    // was: the policy check refuses it, and nothing changes.
    point_client_config(c, None);
    let rule = developers_rule();
    let policy_before = c
        .get(&["validatingadmissionpolicy", "finalizer-guard"])
        .unwrap();
    let upgrade = |extra: &[&str]| {
        let mut args = vec!["--set-json", rule.as_str()];
        args.extend_from_slice(extra);
        upgrade_release(c, &helm, &work, &args)
    };
    let (run, ran) = upgrade(&[]);
    assert_ne!(run.code, 0, "{run:#?}");
    assert_eq!(ran.len(), 1, "{ran:#?}");
    assert_eq!(ran[0].code, 1, "{ran:#?}");
    assert!(
        ran[0]
            .output
            .contains("not `finalizer-guard policy export --vap"),
        "{ran:#?}"
    );
    assert_eq!(
        c.get(&["validatingadmissionpolicy", "finalizer-guard"])
            .unwrap()["metadata"]["resourceVersion"],
        policy_before["metadata"]["resourceVersion"],
        "a refused upgrade changes nothing"
    );
    // Exported again: taken, and kube-apiserver decides the new rule at once.
    let vap = export_chart_policy(
        &helm,
        &work,
        "vap-2.yaml",
        &["-f", values, "--set-json", &rule],
    );
    let (run, ran) = upgrade(&["--set-file", &set_vap(&vap)]);
    assert!(run.ok().stdout.contains("STATUS: deployed"));
    assert_eq!(ran.last().map(|r| r.code), Some(0), "{ran:#?}");
    stuck_pod(c, ns, "web-2", "helm-backstop-node");
    wait_until("the new export to be in force", 30, || {
        strip("web-2").code == 0
    });
    let authorized = env.apiserver_audit().into_iter().rev().find(|e| {
        e["objectRef"]["name"] == "web-2"
            && e["annotations"]["finalizer-guard/decision"] == "authorized"
    });
    assert_eq!(
        authorized.expect("the policy's decision")["annotations"]["finalizer-guard/authorized-by"],
        "rule developers-release-cni"
    );
    force_delete(c, ns, "web-2");

    // helm uninstall takes the policy and its binding with it.
    helm.run(&["uninstall", RELEASE, "-n", RELEASE_NS]).ok();
    for kind in [
        "validatingadmissionpolicy",
        "validatingadmissionpolicybinding",
    ] {
        wait_until(&format!("the {kind} to be gone"), 60, || {
            c.get(&[kind, "finalizer-guard"]).is_none()
        });
    }
    stuck_pod(c, ns, "web-3", "helm-backstop-node");
    wait_until("no guard left", 30, || strip("web-3").code == 0);
    force_delete(c, ns, "web-3");
    c.admin(&["delete", "namespace", RELEASE_NS, "--wait=false"])
        .ok();
    c.admin(&["delete", "namespace", ns, "--wait=false"]).ok();
}
