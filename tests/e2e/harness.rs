//! The real control plane of `e2e/cluster.sh`, the webhook installed in it
//! from `manifests/` the way users install it, and real `kubectl`.
//!
//! The webhook runs as a local `finalizer-guard serve` (there is no kubelet
//! to run its pod): the installed ValidatingWebhookConfiguration keeps its
//! rules, matchConditions and timeouts exactly as shipped, fails closed as
//! docs/install.md's enforce overlay makes it (the scenarios enforce), and
//! only its `clientConfig` is pointed at the local server's `url:`. The
//! server sends its Events with the token of the ServiceAccount the manifests
//! install, so their RBAC is what is tested. It runs with `--client-ca`, as
//! docs/security.md's "Only kube-apiserver may call" sets it up: the
//! client certificate kube-apiserver presents (cluster.sh's admission
//! configuration) is the only one it serves.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};

use serde_json::{Value, json};

pub use super::common::live::{
    Run, WEBHOOK, denied, policy_denial, poll, run, wait_may_patch_configmaps, wait_until,
};
pub const CONFIG: &str = "finalizer-guard";
pub const NAMESPACE: &str = "finalizer-guard";
pub const OVERRIDE: &str = "finalizer-guard.io/override";

/// The cluster `e2e/cluster.sh up DIR` started, named by `FG_E2E_DIR`.
#[derive(Clone)]
pub struct Cluster {
    pub dir: PathBuf,
    kubectl: PathBuf,
}

impl Cluster {
    fn from_env() -> Option<Cluster> {
        let dir = PathBuf::from(std::env::var_os("FG_E2E_DIR")?);
        let kubectl = dir.join("bin/kubectl");
        assert!(
            kubectl.exists(),
            "FG_E2E_DIR={} holds no cluster (run e2e/cluster.sh up {0})",
            dir.display()
        );
        Some(Cluster { dir, kubectl })
    }

    pub fn kubeconfig(&self, user: &str) -> PathBuf {
        self.dir.join(format!("{user}.kubeconfig"))
    }

    /// The CA of the client certificate kube-apiserver presents to webhooks.
    pub fn webhook_client_ca(&self) -> PathBuf {
        self.dir.join("webhook-client-ca.crt")
    }

    /// Runs kubectl as `user` (admin, alice, carol, oncall), with `stdin` if given.
    pub fn kubectl_in(&self, user: &str, args: &[&str], stdin: Option<&str>) -> Run {
        self.kubectl_env(user, args, stdin, &[])
    }

    pub fn kubectl_env(
        &self,
        user: &str,
        args: &[&str],
        stdin: Option<&str>,
        env: &[(&str, &str)],
    ) -> Run {
        let mut cmd = Command::new(&self.kubectl);
        cmd.env("KUBECONFIG", self.kubeconfig(user))
            .env_remove("KUBECTL_EXTERNAL_DIFF")
            .args(args)
            .envs(env.iter().copied());
        run(cmd, stdin)
    }

    pub fn kubectl(&self, user: &str, args: &[&str]) -> Run {
        self.kubectl_in(user, args, None)
    }

    pub fn admin(&self, args: &[&str]) -> Run {
        self.kubectl("admin", args)
    }

    /// `finalizer-guard ARGS` as `user`, reading their kubeconfig as kubectl would.
    pub fn finalizer_guard(&self, user: &str, args: &[&str]) -> Run {
        run(self.finalizer_guard_command(user, args), None)
    }

    pub fn finalizer_guard_command(&self, user: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.env("KUBECONFIG", self.kubeconfig(user))
            .env("NO_COLOR", "1")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// `kubectl finalizer-guard ARGS`: the binary installed as a kubectl plugin.
    pub fn plugin(&self, user: &str, args: &[&str]) -> Run {
        let dir = self.dir.join("plugins");
        let link = dir.join("kubectl-finalizer_guard");
        if !link.exists() {
            fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::symlink(bin(), &link).unwrap();
        }
        let path = format!(
            "{}:{}",
            dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut full = vec!["finalizer-guard"];
        full.extend_from_slice(args);
        self.kubectl_env(user, &full, None, &[("PATH", &path)])
    }

    /// `kubectl apply -f -` as admin.
    pub fn apply(&self, manifest: &Value) -> Run {
        self.kubectl_in(
            "admin",
            &["apply", "-f", "-"],
            Some(&serde_json::to_string(manifest).unwrap()),
        )
        .ok()
    }

    /// The object as JSON, or `None` once it is gone.
    pub fn get(&self, args: &[&str]) -> Option<Value> {
        let mut full = vec!["get", "-o", "json"];
        full.extend_from_slice(args);
        let run = self.admin(&full);
        if run.code != 0 && run.stderr.contains("NotFound") {
            return None;
        }
        Some(run.ok().json())
    }

    /// A kubeconfig at `path` that authenticates with an hour's token of
    /// ServiceAccount `ns/account`, as its pod would.
    pub fn token_kubeconfig(&self, account: &str, ns: &str, path: &Path) -> PathBuf {
        let token = self
            .admin(&["create", "token", account, "-n", ns, "--duration", "1h"])
            .ok()
            .stdout;
        let admin: Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(self.kubeconfig("admin")).unwrap())
                .unwrap();
        std::fs::write(
            path,
            serde_json::to_string(&serde_json::json!({
                "apiVersion": "v1", "kind": "Config",
                "clusters": [{"name": "e2e", "cluster": admin["clusters"][0]["cluster"]}],
                "users": [{"name": account, "user": {"token": token.trim()}}],
                "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": account}}],
                "current-context": "e2e",
            }))
            .unwrap(),
        )
        .unwrap();
        path.to_path_buf()
    }

    /// kube-apiserver's version, `(gitVersion, minor)`.
    pub fn server_version(&self) -> (String, u32) {
        let version = self.admin(&["version", "-o", "json"]).ok().json();
        let server = &version["serverVersion"];
        let minor = server["minor"]
            .as_str()
            .and_then(|m| m.trim_end_matches('+').parse().ok())
            .unwrap_or_else(|| panic!("kube-apiserver's version has no minor: {version}"));
        let git = server["gitVersion"].as_str().unwrap_or("?").to_string();
        (git, minor)
    }

    /// Fails the scenario, saying why, on a release before 1.`minor`: a
    /// scenario that needs a newer release is skipped there by name
    /// (`--skip`, .ci/run), never passed without having run.
    pub fn require_release(&self, minor: u32, why: &str) {
        let (git, have) = self.server_version();
        assert!(
            have >= minor,
            "kube-apiserver {git} is older than 1.{minor}, which this scenario needs: {why}"
        );
    }

    /// A fresh namespace whose `default` ServiceAccount exists (pods need it).
    pub fn namespace(&self, name: &str) {
        self.admin(&["create", "namespace", name]).ok();
        wait_until(&format!("serviceaccount default in {name}"), 60, || {
            self.admin(&["get", "serviceaccount", "default", "-n", name])
                .code
                == 0
        });
    }
}

/// An object read with `kubectl get -o json`, made fit to create again:
/// without what the API server set on it.
pub fn to_create_again(object: &mut Value) {
    let meta = object["metadata"].as_object_mut().unwrap();
    for key in [
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "generation",
        "managedFields",
    ] {
        meta.remove(key);
    }
}

/// Which matchConditions the installed webhook configuration runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conditions {
    /// Exactly as shipped.
    Shipped,
    /// Without `not-builtin-controller`: the webhook's own table judges
    /// Kubernetes' controllers.
    JudgeBuiltins,
}

/// The cluster with the webhook installed and its local server running.
pub struct Env {
    pub cluster: Cluster,
    /// Where the certificates, policy, logs and recordings live.
    pub work: PathBuf,
    /// The shipped ConfigMap's policy, as installed.
    pub shipped_policy: String,
    server: Option<Child>,
    port: u16,
    admin_port: u16,
    conditions: Conditions,
    /// The matchCondition the JudgeBuiltins variant took out, to put back.
    removed_condition: Option<(usize, Value)>,
}

static ENV: OnceLock<Mutex<Env>> = OnceLock::new();

/// docs/install.md's overlay for enforcing, but for its policy: the
/// webhook fails closed.
const ENFORCE_OVERLAY: &str = r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../overlays/self-managed
patches:
  - target: {kind: ValidatingWebhookConfiguration, name: finalizer-guard}
    patch: |-
      - op: replace
        path: /webhooks/0/failurePolicy
        value: Fail
"#;

/// The installed webhook, held for one scenario at a time (scenarios stop
/// the server and change the configuration). The scenarios are `#[ignore]`d:
/// run with `--ignored`, they fail without a cluster rather than pass.
pub fn env() -> MutexGuard<'static, Env> {
    let env = ENV.get_or_init(|| {
        let cluster = Cluster::from_env().expect(
            "no real control plane: set FG_E2E_DIR after `e2e/cluster.sh up DIR` (.ci/run does)",
        );
        Mutex::new(Env::install(cluster))
    });
    let mut guard = env.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // Whatever an earlier scenario left behind: the server up, as shipped,
    // under the shipped policy in enforce mode.
    guard.set_conditions(Conditions::Shipped);
    guard.start();
    let policy = guard.policy(Policy::default());
    guard.set_policy(&policy);
    guard
}

/// A loopback port nothing listens on, never one this process handed out
/// before: the kernel may give a port just released again, and two calls
/// for one process's addresses must not collide.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            return port;
        }
    }
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_finalizer-guard")
}

impl Env {
    fn install(cluster: Cluster) -> Env {
        let work = cluster.dir.join("webhook");
        let _ = fs::remove_dir_all(&work);
        fs::create_dir_all(&work).unwrap();

        // Certificates as users make them, for the address the API server calls.
        let certs = work.join("certs");
        let out = Command::new(bin())
            .args(["certs", "--ip", "127.0.0.1", "--out"])
            .arg(&certs)
            .output()
            .unwrap();
        assert!(out.status.success(), "certs: {out:?}");

        // `kubectl apply --server-side -k manifests/overlays/self-managed`, with
        // the three files copied in as the overlay says, on a copy of the
        // tree so the checkout stays clean.
        let manifests = work.join("manifests");
        copy_tree(&crate::common::repository::path("manifests"), &manifests);
        let overlay = manifests.join("overlays/self-managed");
        for f in ["ca.crt", "tls.crt", "tls.key"] {
            fs::copy(certs.join(f), overlay.join(f)).unwrap();
        }
        // The scenarios enforce, so the webhook fails closed: the overlay
        // docs/install.md shows for enforcing, over the self-managed one
        // (the policy itself is this harness's, set below).
        let enforce = manifests.join("enforce");
        fs::create_dir_all(&enforce).unwrap();
        fs::write(enforce.join("kustomization.yaml"), ENFORCE_OVERLAY).unwrap();

        let mut env = Env {
            cluster,
            work,
            shipped_policy: String::new(),
            server: None,
            port: free_port(),
            admin_port: free_port(),
            conditions: Conditions::Shipped,
            removed_condition: None,
        };
        env.apply_installation();
        env
    }

    /// `kubectl apply --server-side -k` of the enforce overlay, the server's
    /// credentials and policy, and the clientConfig pointed at the local
    /// server: what [`Env::install`] does in the cluster, again after a
    /// scenario took the installation away ([`Env::uninstall`]).
    fn apply_installation(&mut self) {
        let cluster = &self.cluster;
        // A cluster an earlier run installed into is installed afresh: its
        // configuration points at a server that is gone.
        cluster
            .admin(&[
                "delete",
                "validatingwebhookconfiguration",
                CONFIG,
                "--ignore-not-found",
            ])
            .ok();
        let enforce = self.work.join("manifests/enforce");
        cluster
            .admin(&[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-k",
                enforce.to_str().unwrap(),
            ])
            .ok();

        let shipped_policy = cluster
            .admin(&[
                "get",
                "configmap",
                "finalizer-guard-policy",
                "-n",
                NAMESPACE,
                "-o",
                "jsonpath={.data.policy\\.yaml}",
            ])
            .ok()
            .stdout;
        assert!(shipped_policy.contains("mode: warn"), "{shipped_policy}");
        self.shipped_policy = shipped_policy;
        self.write_credentials();

        // The installed ConfigMap holds the shipped policy again: say what
        // the server serves, as set_policy does.
        let policy = self.policy(Policy::default());
        if let Ok(serving) = fs::read_to_string(self.work.join("policy.yaml")) {
            self.sync_policy_configmap(&serving);
        }
        self.set_policy(&policy);

        // Only the clientConfig changes: a url for the local server.
        let url = self.webhook_url();
        self.patch_config(&json!([
            {"op": "test", "path": "/webhooks/0/name", "value": WEBHOOK},
            {"op": "remove", "path": "/webhooks/0/clientConfig/service"},
            {"op": "add", "path": "/webhooks/0/clientConfig/url", "value": url},
        ]));
        // The matchConditions are the shipped ones again.
        self.conditions = Conditions::Shipped;
        self.removed_condition = None;
    }

    /// The server's credentials: a token of the ServiceAccount the
    /// manifests install, in the kubeconfig the server reads at start.
    fn write_credentials(&self) {
        let cluster = &self.cluster;
        let token = cluster
            .admin(&[
                "create",
                "token",
                "finalizer-guard",
                "-n",
                NAMESPACE,
                "--duration",
                "12h",
            ])
            .ok()
            .stdout;
        let admin: Value =
            serde_yaml_ng::from_str(&fs::read_to_string(cluster.kubeconfig("admin")).unwrap())
                .unwrap();
        let server = admin["clusters"][0]["cluster"]["server"].as_str().unwrap();
        let ca = admin["clusters"][0]["cluster"]["certificate-authority"]
            .as_str()
            .unwrap();
        fs::write(
            self.work.join("webhook.kubeconfig"),
            serde_json::to_string_pretty(&json!({
                "apiVersion": "v1", "kind": "Config",
                "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": ca}}],
                "users": [{"name": "finalizer-guard", "user": {"token": token.trim()}}],
                "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "finalizer-guard"}}],
                "current-context": "e2e",
            }))
            .unwrap(),
        )
        .unwrap();
    }

    /// Restarts the server with a token of the webhook's ServiceAccount as
    /// it is installed now: a pod started anew after the ServiceAccount was
    /// made again (the old token names one that is gone).
    pub fn renew_credentials(&mut self) {
        self.write_credentials();
        self.stop();
        self.start();
    }

    /// Deletes what [`Env::install`] applied (the enforce overlay's objects,
    /// its namespace among them) and waits, at most 120 s, until they are
    /// gone. The server keeps running; nothing calls it until a webhook
    /// configuration names it again. [`Env::reinstall`] puts it all back.
    pub fn uninstall(&self) {
        let enforce = self.work.join("manifests/enforce");
        self.cluster
            .admin(&[
                "delete",
                "-k",
                enforce.to_str().unwrap(),
                "--ignore-not-found",
                "--timeout=120s",
            ])
            .ok();
    }

    /// Installs the webhook again as [`Env::install`] did, after a scenario
    /// took it away, and restarts the server with a token of the
    /// ServiceAccount installed now.
    pub fn reinstall(&mut self) {
        self.apply_installation();
        self.renew_credentials();
    }

    /// The `url:` the installed webhook configuration calls: the local server.
    pub fn webhook_url(&self) -> String {
        format!("https://127.0.0.1:{}/validate", self.port)
    }

    /// The shipped policy in `mode: enforce`, plus `extra`.
    pub fn policy(&self, extra: Policy) -> String {
        let mut policy: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&self.shipped_policy).unwrap();
        policy["mode"] = "enforce".into();
        let rules = policy["rules"].as_sequence_mut().expect("rules");
        for rule in extra.rules {
            rules.push(serde_yaml_ng::to_value(rule).unwrap());
        }
        if let Some(approval) = extra.approval {
            policy["override"]["approval"] = serde_yaml_ng::to_value(approval).unwrap();
        }
        serde_yaml_ng::to_string(&policy).unwrap()
    }

    /// Writes the policy file and waits until the running server has it.
    pub fn set_policy(&mut self, yaml: &str) {
        let path = self.work.join("policy.yaml");
        if fs::read_to_string(&path).ok().as_deref() == Some(yaml) {
            return;
        }
        // The installed ConfigMap says the same, as a kubelet would sync it
        // into the webhook's volume: `unstick` reads the policy from there.
        self.sync_policy_configmap(yaml);
        self.serve_policy(yaml);
    }

    /// Writes the server's policy file, and waits until the running server
    /// has it, leaving the installed ConfigMap alone: what a kubelet does
    /// when the mounted ConfigMap changed (a scenario whose ConfigMap
    /// someone else writes plays that part with this).
    pub fn serve_policy(&mut self, yaml: &str) {
        let path = self.work.join("policy.yaml");
        if fs::read_to_string(&path).ok().as_deref() == Some(yaml) {
            return;
        }
        let before = self.policy_reloads();
        fs::write(&path, yaml).unwrap();
        if self.server.is_some() {
            wait_until("the server to reload its policy", 30, || {
                self.policy_reloads() > before
            });
        }
    }

    fn sync_policy_configmap(&self, yaml: &str) {
        let patch = json!({"data": {"policy.yaml": yaml}}).to_string();
        self.cluster
            .admin(&[
                "patch",
                "configmap",
                "finalizer-guard-policy",
                "-n",
                NAMESPACE,
                "--type=merge",
                "-p",
                &patch,
            ])
            .ok();
    }

    fn policy_reloads(&self) -> u64 {
        let Some(metrics) = self.metrics() else {
            return 0;
        };
        metrics
            .lines()
            .find(|l| {
                l.starts_with("finalizer_guard_reloads_total")
                    && l.contains("kind=\"policy\"")
                    && l.contains("outcome=\"success\"")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// The admin port's /metrics, or `None` when the server is down.
    pub fn metrics(&self) -> Option<String> {
        http_get(self.admin_port, "/metrics")
    }

    /// Starts the server unless it runs.
    pub fn start(&mut self) {
        if let Some(child) = &mut self.server
            && child.try_wait().unwrap().is_none()
        {
            return;
        }
        let audit = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.work.join("audit.jsonl"))
            .unwrap();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.work.join("server.log"))
            .unwrap();
        let certs = self.work.join("certs");
        let child = Command::new(bin())
            .arg("serve")
            .arg("--policy")
            .arg(self.work.join("policy.yaml"))
            .arg("--tls-cert")
            .arg(certs.join("tls.crt"))
            .arg("--tls-key")
            .arg(certs.join("tls.key"))
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args(["--admin-listen", &format!("127.0.0.1:{}", self.admin_port)])
            .arg("--record-dir")
            .arg(self.work.join("recordings"))
            // Only kube-apiserver may call, as docs/security.md sets it up:
            // cluster.sh gives it a client certificate for every webhook
            // (its admission configuration), so its reviews are
            // authenticated and write their Events; anything else is
            // refused at the handshake.
            .arg("--client-ca")
            .arg(self.cluster.webhook_client_ca())
            .args([
                "--reload-interval",
                "200ms",
                "--shutdown-delay",
                "0s",
                "--log-format",
                "json",
            ])
            .env("KUBECONFIG", self.work.join("webhook.kubeconfig"))
            .stdout(audit)
            .stderr(log)
            .spawn()
            .unwrap();
        // cluster.sh down stops it with the control plane, should a test
        // run end without stopping it.
        fs::write(
            self.cluster.dir.join("run/finalizer-guard.pid"),
            child.id().to_string(),
        )
        .unwrap();
        self.server = Some(child);
        wait_until("the webhook to be ready", 30, || {
            http_get(self.admin_port, "/readyz").is_some()
        });
    }

    /// Stops the server, as a crash or a lost node would: at once.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A JSON patch of the installed ValidatingWebhookConfiguration.
    fn patch_config(&self, patch: &Value) {
        self.cluster
            .admin(&[
                "patch",
                "validatingwebhookconfiguration",
                CONFIG,
                "--type=json",
                "-p",
                &patch.to_string(),
            ])
            .ok();
    }

    /// Installs the webhook configuration's matchConditions as asked.
    pub fn set_conditions(&mut self, want: Conditions) {
        if want == self.conditions {
            return;
        }
        let patch = match want {
            Conditions::JudgeBuiltins => {
                let config = self
                    .cluster
                    .get(&["validatingwebhookconfiguration", CONFIG])
                    .unwrap();
                let conditions = config["webhooks"][0]["matchConditions"].as_array().unwrap();
                let index = conditions
                    .iter()
                    .position(|c| c["name"] == "not-builtin-controller")
                    .expect("the shipped not-builtin-controller condition");
                let condition = conditions[index].clone();
                let path = format!("/webhooks/0/matchConditions/{index}");
                let patch = json!([
                    {"op": "test", "path": path, "value": condition},
                    {"op": "remove", "path": path},
                ]);
                self.removed_condition = Some((index, condition));
                patch
            }
            Conditions::Shipped => {
                let (index, condition) = self.removed_condition.take().unwrap();
                json!([{"op": "add", "path": format!("/webhooks/0/matchConditions/{index}"), "value": condition}])
            }
        };
        self.patch_config(&patch);
        self.conditions = want;
    }

    /// The webhook's own audit records so far.
    pub fn audit_records(&self) -> Vec<Value> {
        fs::read_to_string(self.work.join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The webhook's audit records once `ready` holds of them, or after 10 s
    /// (for the caller's assertion to say what is missing). A review is
    /// answered once its record is queued; the writer writes it a moment
    /// later, so a record looked for straight after a write is waited for.
    pub fn audit_records_when(&self, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let mut records = Vec::new();
        poll(10, || {
            records = self.audit_records();
            ready(&records)
        });
        records
    }

    /// The webhook's recordings so far (`--record-dir`), oldest first.
    pub fn recordings(&self) -> Vec<Value> {
        let mut paths: Vec<PathBuf> = fs::read_dir(self.work.join("recordings"))
            .map(|dir| dir.filter_map(|e| Some(e.ok()?.path())).collect())
            .unwrap_or_default();
        paths.retain(|p| p.extension().is_some_and(|e| e == "json"));
        paths.sort();
        paths
            .iter()
            .filter_map(|p| serde_json::from_str(&fs::read_to_string(p).ok()?).ok())
            .collect()
    }

    /// POSTs `body` to the webhook port's `/validate` the way anything on
    /// the network could, not through kube-apiserver: over TLS that trusts
    /// the serving CA, presenting `client` (certificate and key, PEM) or no
    /// certificate at all. The HTTP answer, or the error that ended the
    /// exchange (a TLS alert reads `received fatal alert: ...`).
    pub fn post_review(
        &self,
        body: &str,
        client: Option<(&[u8], &[u8])>,
    ) -> Result<String, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
        use std::io::{Read, Write};
        use std::sync::Arc;

        let ca = fs::read(self.work.join("certs/ca.crt")).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&ca) {
            roots.add(cert.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
        let config = match client {
            None => config.with_no_client_auth(),
            Some((cert, key)) => config
                .with_client_auth_cert(
                    CertificateDer::pem_slice_iter(cert)
                        .map(Result::unwrap)
                        .collect(),
                    PrivateKeyDer::from_pem_slice(key).unwrap(),
                )
                .unwrap(),
        };
        // The serving certificate's SAN, as the installed configuration's url says.
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let tcp = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut tls = rustls::StreamOwned::new(connection, tcp);
        let request = format!(
            "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tls.write_all(request.as_bytes())
            .and_then(|()| tls.flush())
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        match tls.read_to_end(&mut answer) {
            Ok(_) => Ok(String::from_utf8_lossy(&answer).into_owned()),
            // A server that closes without close_notify after its answer.
            Err(e) if !answer.is_empty() && e.kind() == std::io::ErrorKind::UnexpectedEof => {
                Ok(String::from_utf8_lossy(&answer).into_owned())
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// kube-apiserver's audit events so far.
    pub fn apiserver_audit(&self) -> Vec<Value> {
        fs::read_to_string(self.cluster.dir.join("audit.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// What a scenario adds to the shipped policy.
#[derive(Default)]
pub struct Policy {
    pub rules: Vec<serde_json::Value>,
    pub approval: Option<serde_json::Value>,
}

/// A plain-HTTP GET on the admin port: the body of a 200, else `None`.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    super::common::live::http_get(("127.0.0.1", port), path)
}

/// Copies a folder, leaving out certificates and keys (`*.crt`, `*.key`).
pub fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else if !matches!(
            entry.path().extension().and_then(|e| e.to_str()),
            Some("crt" | "key")
        ) {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}
