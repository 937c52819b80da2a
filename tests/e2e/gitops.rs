//! GitOps delivery for real: Flux's source-controller and kustomize-controller,
//! built from their upstream Go modules (`e2e/controllers/`), deliver
//! finalizer-guard from an OCI artifact in a loopback registry, keep it,
//! upgrade it, prune what the new version drops, and delete it, while the
//! webhook they delivered enforces `presets: [flux]`. No denial of Flux.
//!
//! The artifact is what `flux push artifact` pushes: a folder as a gzip'd
//! tar, one layer of media type `application/vnd.cncf.flux.content.v1.tar+gzip`
//! under the config type `application/vnd.cncf.flux.config.v1+json`. The
//! folder is a fleet repository as a Flux user keeps one: `finalizer-guard/`,
//! the project's `manifests/` as a release ships them, and
//! `my-finalizer-guard/`, the overlay docs/install.md shows for enforcing
//! (the user's policy, `failurePolicy: Fail`). distribution's registry
//! (`scripts/release-tools.sh registry`, as the release's proof runs it)
//! serves it on a loopback port.
//!
//! As in every scenario here the webhook's pods cannot run (there is no
//! kubelet): the local server stands in for them. So the Flux Kustomization
//! patches what every scenario changes, the webhook's clientConfig (the
//! local server's url and CA), and the test plays the kubelet's part: it
//! copies the policy Flux delivered into the server's policy file, and
//! restarts the server with a token of the ServiceAccount Flux created.

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use base64::Engine;
use serde_json::{Value, json};

use super::controllers::{FLUX, KUSTOMIZE, Running, Upstream, built, install, start};
use super::harness::{
    CONFIG, Env, NAMESPACE, Policy, Run, env, free_port, http_get, poll, run, wait_until,
};
use super::{STRIP, denied, finalizers};

/// Where Flux runs, and where its objects live.
const FLUX_NS: &str = "flux-system";
/// A team's namespace: the guarded ConfigMap, and what the team's own
/// Kustomization delivers.
const NS: &str = "e2e-gitops";
/// A finalizer no rule of the first version lets alice remove.
const HELD: &str = "example.com/cleanup";
/// `flux push artifact`'s layer and config media types.
const LAYER: &str = "application/vnd.cncf.flux.content.v1.tar+gzip";
const FLUX_CONFIG: &str = "application/vnd.cncf.flux.config.v1+json";
/// How long one reconcile may take, from a push to the Kustomization Ready.
const RECONCILE_BOUND: u64 = 120;
/// What the second version of the release no longer ships: pruned.
const DROPPED: (&str, &str) = ("resourcequota", "finalizer-guard-critical-pods");

/// The user's overlay (docs/install.md, "The first weeks"), on the
/// release's base: the serving certificate is this cluster's own (here, the
/// local server's), as with `certificates.source: external`.
const OVERLAY: &str = r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../finalizer-guard/base
configMapGenerator:
  - name: finalizer-guard-policy
    namespace: finalizer-guard
    behavior: replace
    files: [policy.yaml]
    options:
      disableNameSuffixHash: true
patches:
  - target: {kind: ValidatingWebhookConfiguration, name: finalizer-guard}
    patch: |-
      - op: replace
        path: /webhooks/0/failurePolicy
        value: Fail
"#;

/// distribution's registry on a loopback port; stopped when dropped.
struct Registry {
    child: Child,
    addr: String,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the registry the release's proof runs (`scripts/release-tools.sh
/// registry`: at once when cached, `.ci/run` builds it before this step).
fn registry(env: &Env) -> Registry {
    let script = crate::common::repository::path("scripts/release-tools.sh");
    let out = Command::new(&script)
        .arg("registry")
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", script.display()));
    assert!(
        out.status.success(),
        "scripts/release-tools.sh registry failed"
    );
    let bin = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let dir = env.work.join("gitops/registry");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("storage")).unwrap();
    let port = free_port();
    let config = dir.join("config.yml");
    fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.join("storage").display()
        ),
    )
    .unwrap();
    let log = fs::File::create(dir.join("registry.log")).unwrap();
    let child = Command::new(&bin)
        .arg("serve")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{bin} starts: {e}"));
    let registry = Registry {
        child,
        addr: format!("127.0.0.1:{port}"),
    };
    wait_until("the registry to answer /v2/", 30, || {
        http_get(port, "/v2/").is_some()
    });
    registry
}

fn sha256(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// `curl ARGS`, failing on an HTTP error, 30 s at most.
fn curl(args: &[&str]) -> Run {
    let mut cmd = Command::new("curl");
    cmd.args(["-fsS", "--max-time", "30"]).args(args);
    run(cmd, None).ok()
}

/// Uploads the file `path`, whose digest is `digest`, as a blob of `repo`:
/// the distribution API's POST then PUT.
fn push_blob(registry: &str, repo: &str, path: &Path, digest: &str) {
    let started = curl(&[
        "-X",
        "POST",
        "-D",
        "-",
        "-o",
        "/dev/null",
        &format!("http://{registry}/v2/{repo}/blobs/uploads/"),
    ]);
    let location = started
        .stdout
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("location")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no Location for the upload: {started:#?}"));
    let url = if location.starts_with("http") {
        location
    } else {
        format!("http://{registry}{location}")
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    curl(&[
        "-X",
        "PUT",
        "-H",
        "Content-Type: application/octet-stream",
        "--data-binary",
        &format!("@{}", path.display()),
        &format!("{url}{sep}digest={digest}"),
    ]);
}

/// Pushes the folder `dir` to `oci://REGISTRY/REPO:TAG` as `flux push
/// artifact --path=DIR --revision=REVISION` does. Returns the manifest's digest.
fn push_artifact(registry: &str, repo: &str, tag: &str, dir: &Path, revision: &str) -> String {
    let out = PathBuf::from(format!("{}.oci", dir.display()));
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).unwrap();
    // The folder's entries at the root of the tar, as Flux builds it.
    let mut entries: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    entries.sort();
    let layer = out.join("layer.tar.gz");
    let mut tar = Command::new("tar");
    tar.args([
        "--sort=name",
        "--owner=0",
        "--group=0",
        "--numeric-owner",
        "--mtime=@0",
        "-czf",
    ])
    .arg(&layer)
    .arg("-C")
    .arg(dir)
    .args(&entries);
    run(tar, None).ok();
    let layer_bytes = fs::read(&layer).unwrap();
    let layer_digest = sha256(&layer_bytes);
    push_blob(registry, repo, &layer, &layer_digest);
    let config = out.join("config.json");
    fs::write(&config, "{}").unwrap();
    let config_digest = sha256(b"{}");
    push_blob(registry, repo, &config, &config_digest);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": FLUX_CONFIG, "digest": config_digest, "size": 2},
        "layers": [{"mediaType": LAYER, "digest": layer_digest, "size": layer_bytes.len()}],
        "annotations": {
            "org.opencontainers.image.created": jiff::Timestamp::now().to_string(),
            "org.opencontainers.image.source": "fleet",
            "org.opencontainers.image.revision": revision,
        },
    });
    let manifest_bytes = serde_json::to_vec(&manifest).unwrap();
    let manifest_file = out.join("manifest.json");
    fs::write(&manifest_file, &manifest_bytes).unwrap();
    curl(&[
        "-X",
        "PUT",
        "-H",
        "Content-Type: application/vnd.oci.image.manifest.v1+json",
        "--data-binary",
        &format!("@{}", manifest_file.display()),
        &format!("http://{registry}/v2/{repo}/manifests/{tag}"),
    ]);
    sha256(&manifest_bytes)
}

/// The fleet repository at `version`: the release's manifests (the
/// repository's `manifests/`; without the [`DROPPED`] object where `next`),
/// and the user's overlay with `policy`.
fn fleet(env: &Env, version: &str, policy: &str, next: bool) -> PathBuf {
    let root = env.work.join(format!("gitops/fleet-{version}"));
    let _ = fs::remove_dir_all(&root);
    let release = root.join("finalizer-guard");
    super::harness::copy_tree(&crate::common::repository::path("manifests"), &release);
    if next {
        let base = release.join("base/kustomization.yaml");
        let kustomization = fs::read_to_string(&base).unwrap();
        let without = kustomization.replace("  - resourcequota.yaml\n", "");
        assert_ne!(without, kustomization, "{kustomization}");
        fs::write(&base, without).unwrap();
        fs::remove_file(release.join("base/resourcequota.yaml")).unwrap();
    }
    let overlay = root.join("my-finalizer-guard");
    fs::create_dir_all(&overlay).unwrap();
    fs::write(overlay.join("kustomization.yaml"), OVERLAY).unwrap();
    fs::write(overlay.join("policy.yaml"), policy).unwrap();
    root
}

/// A team's application, delivered by a Kustomization of its own.
fn team_app(env: &Env) -> PathBuf {
    let root = env.work.join("gitops/team-app-1.0.0");
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root).unwrap();
    let settings = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": NS},
        "data": {"greeting": "hello"},
    });
    fs::write(
        root.join("settings.yaml"),
        serde_yaml_ng::to_string(&settings).unwrap(),
    )
    .unwrap();
    root
}

/// The user's policy: the shipped one in enforce mode with `presets: [flux]`
/// and `rules`, checked with `policy validate` as docs/install.md says.
fn fleet_policy(env: &Env, rules: Vec<Value>) -> String {
    let policy = env.policy(Policy {
        rules,
        ..Policy::default()
    });
    let mut policy: serde_yaml_ng::Value = serde_yaml_ng::from_str(&policy).unwrap();
    policy["presets"] = serde_yaml_ng::to_value(["flux"]).unwrap();
    let policy = serde_yaml_ng::to_string(&policy).unwrap();
    let file = env.work.join("gitops/policy-check.yaml");
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(&file, &policy).unwrap();
    env.cluster
        .finalizer_guard("admin", &["policy", "validate", file.to_str().unwrap()])
        .ok();
    policy
}

/// An OCIRepository as `flux create source oci --url=URL --tag-semver=">=1.0.0"
/// --insecure` writes it, the layer selected by Flux's media type.
fn oci_repository(name: &str, url: &str) -> Value {
    json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
        "metadata": {"name": name, "namespace": FLUX_NS},
        "spec": {
            "interval": "10m",
            "url": url,
            "ref": {"semver": ">=1.0.0"},
            "insecure": true,
            "layerSelector": {"mediaType": LAYER, "operation": "extract"},
        },
    })
}

/// A Kustomization of `path` in the OCIRepository `name`, pruning.
fn kustomization(name: &str, path: &str, patches: Value) -> Value {
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": name, "namespace": FLUX_NS},
        "spec": {
            "interval": "10m",
            "retryInterval": "5s",
            "timeout": "2m",
            "sourceRef": {"kind": "OCIRepository", "name": name},
            "path": path,
            "prune": true,
            "patches": patches,
        },
    })
}

/// The one change every scenario here makes to the shipped webhook
/// configuration, as a Flux Kustomization patch: its clientConfig names the
/// local server (url and CA) instead of the pods' Service.
fn local_server_patches(env: &Env) -> Value {
    let ca = fs::read(env.work.join("certs/ca.crt")).unwrap();
    let ca = base64::engine::general_purpose::STANDARD.encode(ca);
    let patch = json!([
        {"op": "remove", "path": "/webhooks/0/clientConfig/service"},
        {"op": "add", "path": "/webhooks/0/clientConfig/url", "value": env.webhook_url()},
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca},
    ]);
    json!([{
        "target": {"kind": "ValidatingWebhookConfiguration", "name": CONFIG},
        "patch": patch.to_string(),
    }])
}

const KUSTOMIZATIONS: &str = "kustomizations.kustomize.toolkit.fluxcd.io";
const OCI_REPOSITORIES: &str = "ocirepositories.source.toolkit.fluxcd.io";

/// Whether the Flux object is Ready at its generation with a revision
/// starting with `revision` (`status.lastAppliedRevision` of a
/// Kustomization, `status.artifact.revision` of a source).
fn ready_at(object: &Value, revision: &str) -> bool {
    let status = &object["status"];
    let ready = status["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    let applied = status["lastAppliedRevision"]
        .as_str()
        .or(status["artifact"]["revision"].as_str())
        .is_some_and(|r| r.starts_with(revision));
    ready && applied && status["observedGeneration"] == object["metadata"]["generation"]
}

/// Waits, at most [`RECONCILE_BOUND`], until `kind/name` is Ready at
/// `revision`; else fails saying its status and the controllers' last words.
fn wait_ready(env: &Env, kind: &str, name: &str, revision: &str) {
    let c = &env.cluster;
    let mut last = Value::Null;
    let done = poll(RECONCILE_BOUND, || {
        last = c.get(&[kind, name, "-n", FLUX_NS]).unwrap_or(Value::Null);
        ready_at(&last, revision)
    });
    if !done {
        let tail = |name: &str| {
            let log = fs::read_to_string(env.work.join(format!("{name}.log"))).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            lines[lines.len().saturating_sub(15)..].join("\n")
        };
        panic!(
            "{kind}/{name} not Ready at {revision} within {RECONCILE_BOUND} s: {:#}\n\
             source-controller:\n{}\nkustomize-controller:\n{}",
            last["status"],
            tail(FLUX.name),
            tail(KUSTOMIZE.name)
        );
    }
}

/// What `flux reconcile source oci NAME` does: ask for a reconcile now.
fn request_reconcile(env: &Env, kind: &str, name: &str) {
    let now = jiff::Timestamp::now().to_string();
    env.cluster
        .admin(&[
            "annotate",
            "--overwrite",
            kind,
            name,
            "-n",
            FLUX_NS,
            &format!("reconcile.fluxcd.io/requestedAt={now}"),
        ])
        .ok();
}

/// The kubelet's part: the policy Flux delivered in the ConfigMap, into the
/// server's policy file; returns it.
fn sync_delivered_policy(env: &mut Env) -> String {
    let delivered = env
        .cluster
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
    env.serve_policy(&delivered);
    delivered
}

/// The Flux identities this scenario runs.
fn flux_users() -> [String; 2] {
    [FLUX.username(), KUSTOMIZE.username()]
}

/// The webhook's records, from `from` on, of Flux's removals it did not
/// authorize.
fn flux_refusals(env: &Env, from: usize) -> Vec<Value> {
    let users = flux_users();
    env.audit_records()
        .into_iter()
        .skip(from)
        .filter(|r| users.iter().any(|u| r["user"] == u.as_str()))
        .filter(|r| r["decision"] != "authorized")
        .collect()
}

/// kube-apiserver's audit events, from `from` on, of a write by Flux
/// refused (403: RBAC or an admission webhook).
fn flux_forbidden(env: &Env, from: usize) -> Vec<Value> {
    let users = flux_users();
    env.apiserver_audit()
        .into_iter()
        .skip(from)
        .filter(|e| users.iter().any(|u| e["user"]["username"] == u.as_str()))
        .filter(|e| e["responseStatus"]["code"] == 403)
        .collect()
}

/// The webhook's record of `up` removing its finalizer from the `kind`
/// `name`, authorized; waited for (the writer writes a moment after the answer).
fn authorized_removal(env: &Env, up: &Upstream, kind: &str, name: &str, from: usize) -> Value {
    let user = up.username();
    let found = |records: &[Value]| -> Option<Value> {
        records[from.min(records.len())..]
            .iter()
            .find(|r| {
                r["user"] == user.as_str()
                    && r["objectKind"] == kind
                    && r["name"] == name
                    && r["decision"] == "authorized"
            })
            .cloned()
    };
    let records = env.audit_records_when(|records| found(records).is_some());
    found(&records).unwrap_or_else(|| {
        panic!("no authorized removal by {user} of its finalizer from {kind} {name} in the webhook's records")
    })
}

fn print_removal(record: &Value) {
    println!(
        "webhook: {} removed {} from {} {}/{}: {} by {}",
        record["user"].as_str().unwrap_or("?"),
        record["removedFinalizers"][0]["finalizer"]
            .as_str()
            .unwrap_or("?"),
        record["objectKind"].as_str().unwrap_or("?"),
        record["namespace"].as_str().unwrap_or("-"),
        record["name"].as_str().unwrap_or("?"),
        record["decision"].as_str().unwrap_or("?"),
        record["removedFinalizers"][0]["authorizedBy"]
            .as_str()
            .unwrap_or("?"),
    );
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR), the controllers (e2e/controllers/build.sh) and the registry (scripts/release-tools.sh): see .ci/run"]
fn flux_delivers_upgrades_prunes_and_deletes_the_webhook_under_enforce() {
    let mut env = env();
    let started = Instant::now();
    // Everything built first: a missing tool fails before the installation is touched.
    let source = built(FLUX.name);
    let kustomize = built(KUSTOMIZE.name);
    let registry = registry(&env);
    let records_from = env.audit_records().len();
    let apiserver_from = env.apiserver_audit().len();

    let mut controllers = Vec::new();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // The harness's installation goes: Flux delivers the webhook from nothing.
        env.uninstall();
        for (up, dir) in [(&FLUX, &source), (&KUSTOMIZE, &kustomize)] {
            let kubeconfig = install(&env, up, dir);
            controllers.push(start(&env, up, dir, &kubeconfig));
        }
        journey(&mut env, &registry.addr, records_from, apiserver_from);
    }));
    clean_up(&mut env, &mut controllers);
    if let Err(panic) = outcome {
        resume_unwind(panic);
    }
    println!("the scenario took {:.0} s", started.elapsed().as_secs_f64());
}

fn journey(env: &mut Env, registry: &str, records_from: usize, apiserver_from: usize) {
    let c = env.cluster.clone();
    c.admin(&[
        "delete",
        "namespace",
        NS,
        "--ignore-not-found",
        "--timeout=120s",
    ])
    .ok();
    let phase = Instant::now();

    // Version 1.0.0 of the fleet: the release's manifests and the user's
    // overlay, enforcing presets [flux]; the team's application beside it.
    let v1_policy = fleet_policy(env, vec![]);
    let v1 = fleet(env, "1.0.0", &v1_policy, false);
    let digest = push_artifact(registry, "fleet/finalizer-guard", "1.0.0", &v1, "1.0.0");
    println!("pushed oci://{registry}/fleet/finalizer-guard:1.0.0@{digest}");
    let team = team_app(env);
    push_artifact(registry, "fleet/team-app", "1.0.0", &team, "1.0.0");

    // As `flux create source oci` and `flux create kustomization` write them.
    c.apply(&oci_repository(
        "finalizer-guard",
        &format!("oci://{registry}/fleet/finalizer-guard"),
    ));
    c.apply(&kustomization(
        "finalizer-guard",
        "./my-finalizer-guard",
        local_server_patches(env),
    ));
    wait_ready(env, OCI_REPOSITORIES, "finalizer-guard", "1.0.0@");
    wait_ready(env, KUSTOMIZATIONS, "finalizer-guard", "1.0.0@");
    println!(
        "1.0.0 delivered by kustomize-controller in {:.1} s",
        phase.elapsed().as_secs_f64()
    );

    // What Flux delivered, and now keeps.
    let config = c
        .get(&["validatingwebhookconfiguration", CONFIG])
        .expect("the webhook configuration Flux applied");
    let labels = &config["metadata"]["labels"];
    assert_eq!(
        labels["kustomize.toolkit.fluxcd.io/name"], "finalizer-guard",
        "{config:#}"
    );
    assert_eq!(config["webhooks"][0]["failurePolicy"], "Fail", "{config:#}");
    assert_eq!(
        config["webhooks"][0]["clientConfig"]["url"],
        env.webhook_url().as_str()
    );
    let fields = c
        .admin(&[
            "get",
            "validatingwebhookconfiguration",
            CONFIG,
            "--show-managed-fields",
            "-o",
            "jsonpath={.metadata.managedFields}",
        ])
        .ok()
        .json();
    let managers: Vec<&str> = fields
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(managers, ["kustomize-controller"], "{fields:#}");
    // A pod would start on the ServiceAccount Flux made and mount the policy.
    env.renew_credentials();
    let delivered = sync_delivered_policy(env);
    assert_eq!(delivered, v1_policy, "the policy delivered is the fleet's");

    // It serves: alice's strip of a finalizer no rule lets her remove is
    // refused, through the configuration Flux delivered.
    c.namespace(NS);
    c.apply(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": NS, "finalizers": [HELD]},
    }));
    let strip = [
        "patch",
        "configmap",
        "held",
        "-n",
        NS,
        "--type=merge",
        "-p",
        STRIP,
    ];
    let refused = c.kubectl("alice", &strip).refused(&denied());
    println!("alice strips {HELD} under 1.0.0: {}", refused.stderr.trim());
    assert!(
        refused.stderr.contains(HELD) && refused.stderr.contains("alice"),
        "{refused:#?}"
    );
    let denial = env.audit_records_when(|records| {
        records
            .iter()
            .any(|r| r["name"] == "held" && r["decision"] == "denied")
    });
    assert!(
        denial.iter().any(|r| r["name"] == "held"
            && r["decision"] == "denied"
            && r["authenticated"] == true),
        "no authenticated denial record of alice's strip"
    );

    // And keeps it: the webhook made to fail open by hand is put back at the
    // next reconcile (what `flux reconcile kustomization` asks for at once).
    let phase = Instant::now();
    c.admin(&[
        "patch",
        "validatingwebhookconfiguration",
        CONFIG,
        "--type=json",
        "-p",
        r#"[{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]"#,
    ])
    .ok();
    request_reconcile(env, KUSTOMIZATIONS, "finalizer-guard");
    let failure_policy = || {
        c.get(&["validatingwebhookconfiguration", CONFIG])
            .map(|config| config["webhooks"][0]["failurePolicy"].clone())
    };
    wait_until(
        "kustomize-controller to put failurePolicy: Fail back",
        60,
        || failure_policy() == Some(json!("Fail")),
    );
    println!(
        "failurePolicy changed by hand to Ignore, put back to Fail by kustomize-controller in {:.1} s",
        phase.elapsed().as_secs_f64()
    );

    // The team's application, delivered under the guard.
    c.apply(&oci_repository(
        "team-app",
        &format!("oci://{registry}/fleet/team-app"),
    ));
    c.apply(&kustomization("team-app", "./", json!([])));
    wait_ready(env, KUSTOMIZATIONS, "team-app", "1.0.0@");
    assert!(c.get(&["configmap", "settings", "-n", NS]).is_some());

    // 1.1.0: the next release drops an object, and the user's policy lets
    // alice remove her finalizer in her namespace.
    let phase = Instant::now();
    let rule =
        json!({"name": "gitops-e2e", "finalizers": [HELD], "users": ["alice"], "namespaces": [NS]});
    let v2_policy = fleet_policy(env, vec![rule]);
    let v2 = fleet(env, "1.1.0", &v2_policy, true);
    let digest = push_artifact(registry, "fleet/finalizer-guard", "1.1.0", &v2, "1.1.0");
    println!("pushed oci://{registry}/fleet/finalizer-guard:1.1.0@{digest}");
    request_reconcile(env, OCI_REPOSITORIES, "finalizer-guard");
    wait_ready(env, OCI_REPOSITORIES, "finalizer-guard", "1.1.0@");
    wait_ready(env, KUSTOMIZATIONS, "finalizer-guard", "1.1.0@");
    let (kind, name) = DROPPED;
    wait_until(&format!("{kind}/{name} to be pruned"), 30, || {
        c.get(&[kind, name, "-n", NAMESPACE]).is_none()
    });
    println!(
        "upgraded to 1.1.0 in {:.1} s: {kind}/{name} pruned",
        phase.elapsed().as_secs_f64()
    );
    assert!(
        c.get(&["validatingwebhookconfiguration", CONFIG]).is_some(),
        "the webhook configuration stays"
    );
    let delivered = sync_delivered_policy(env);
    assert_eq!(delivered, v2_policy, "the policy delivered is 1.1.0's");
    let passed = c.kubectl("alice", &strip).ok();
    println!("alice strips {HELD} under 1.1.0: {}", passed.stdout.trim());
    assert!(
        finalizers(&c.get(&["configmap", "held", "-n", NS]).unwrap()).is_empty(),
        "the rule of 1.1.0 let alice remove it"
    );

    // The team's delivery removed while the guard enforces: Flux's
    // controllers remove their finalizers, authorized by the presets.
    let phase = Instant::now();
    let from = env.audit_records().len();
    for kind in [KUSTOMIZATIONS, OCI_REPOSITORIES] {
        delete_or_say_why(env, kind, "team-app", records_from);
    }
    wait_until("team-app's ConfigMap to be pruned", 30, || {
        c.get(&["configmap", "settings", "-n", NS]).is_none()
    });
    print_removal(&authorized_removal(
        env,
        &KUSTOMIZE,
        "Kustomization",
        "team-app",
        from,
    ));
    print_removal(&authorized_removal(
        env,
        &FLUX,
        "OCIRepository",
        "team-app",
        from,
    ));
    println!(
        "team-app deleted and pruned under enforce in {:.1} s",
        phase.elapsed().as_secs_f64()
    );

    // The guard's own delivery deleted, its source first (judged by the
    // guard, which still stands): then the Kustomization, and Flux prunes
    // everything it applied, the webhook configuration and the namespace
    // among them (its own finalizer goes once the guard is gone).
    let phase = Instant::now();
    let from = env.audit_records().len();
    for kind in [OCI_REPOSITORIES, KUSTOMIZATIONS] {
        delete_or_say_why(env, kind, "finalizer-guard", records_from);
    }
    print_removal(&authorized_removal(
        env,
        &FLUX,
        "OCIRepository",
        "finalizer-guard",
        from,
    ));
    wait_until("namespace finalizer-guard to be gone", 120, || {
        c.get(&["namespace", NAMESPACE]).is_none()
    });
    assert!(c.get(&["validatingwebhookconfiguration", CONFIG]).is_none());
    let left = c
        .admin(&[
            "get",
            "clusterroles,clusterrolebindings",
            "-l",
            "app.kubernetes.io/name=finalizer-guard",
            "-o",
            "name",
        ])
        .ok()
        .stdout;
    assert!(left.trim().is_empty(), "Flux left: {left}");
    println!(
        "finalizer-guard deleted and pruned in {:.1} s: nothing left",
        phase.elapsed().as_secs_f64()
    );

    // No denial of Flux anywhere in the journey: not by the webhook, not
    // by kube-apiserver.
    let refusals = flux_refusals(env, records_from);
    assert!(
        refusals.is_empty(),
        "the webhook refused Flux: {refusals:#?}"
    );
    let forbidden = flux_forbidden(env, apiserver_from);
    assert!(
        forbidden.is_empty(),
        "kube-apiserver refused Flux: {forbidden:#?}"
    );
    // And the metric FinalizerGuardServiceAccountDenied fires on, since the
    // server started on Flux's ServiceAccount: no ServiceAccount denied,
    // one person (alice, under 1.0.0).
    let metrics = env.metrics().expect("the server's metrics");
    let denials = |class: &str, decision: &str| -> f64 {
        let series = format!(
            "finalizer_guard_denials_by_identity_total{{class=\"{class}\",decision=\"{decision}\"}} "
        );
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no series {series}in {metrics}"))
    };
    for decision in ["denied", "would-deny"] {
        assert_eq!(denials("serviceaccount", decision), 0.0, "{metrics}");
    }
    assert_eq!(denials("person", "denied"), 1.0, "{metrics}");
    let judged = env.audit_records()[records_from..]
        .iter()
        .filter(|r| flux_users().iter().any(|u| r["user"] == u.as_str()))
        .count();
    println!("the webhook judged {judged} removal(s) by Flux, refused none");
}

/// `kubectl delete KIND NAME -n flux-system`, waiting (90 s at most) until
/// Flux has finalized it; else fails with what the webhook refused Flux.
fn delete_or_say_why(env: &Env, kind: &str, name: &str, records_from: usize) {
    let run = env
        .cluster
        .admin(&["delete", kind, name, "-n", FLUX_NS, "--timeout=90s"]);
    if run.code != 0 {
        panic!(
            "{kind}/{name} not finalized by Flux within 90 s: {}; the webhook refused Flux: {:#?}",
            run.stderr.trim(),
            flux_refusals(env, records_from)
        );
    }
}

/// Whatever the outcome: Flux's objects deleted (by Flux while it runs),
/// the controllers stopped, anything left released as the break-glass way
/// says, and the harness's installation back for the scenarios after.
fn clean_up(env: &mut Env, controllers: &mut [Running]) {
    let c = env.cluster.clone();
    // Whether it is there; false too when its kind is not served.
    let exists = |kind: &str, name: &str, ns: &str| {
        let run = c.admin(&[
            "get",
            kind,
            name,
            "-n",
            ns,
            "-o",
            "name",
            "--ignore-not-found",
        ]);
        run.code == 0 && !run.stdout.trim().is_empty()
    };
    let objects = [
        (KUSTOMIZATIONS, "team-app"),
        (KUSTOMIZATIONS, "finalizer-guard"),
        (OCI_REPOSITORIES, "team-app"),
        (OCI_REPOSITORIES, "finalizer-guard"),
    ];
    for (kind, name) in objects {
        if exists(kind, name, FLUX_NS) {
            c.admin(&[
                "delete",
                kind,
                name,
                "-n",
                FLUX_NS,
                "--ignore-not-found",
                "--timeout=60s",
            ]);
        }
    }
    for controller in controllers.iter_mut() {
        controller.stop();
    }
    // The webhook configuration Flux delivered, should it still be there,
    // first: then nothing below is refused.
    c.admin(&[
        "delete",
        "validatingwebhookconfiguration",
        CONFIG,
        "--ignore-not-found",
    ])
    .ok();
    for (kind, name) in objects {
        if exists(kind, name, FLUX_NS) {
            c.admin(&[
                "patch",
                kind,
                name,
                "-n",
                FLUX_NS,
                "--type=merge",
                "-p",
                STRIP,
            ]);
        }
    }
    if exists("configmap", "held", NS) {
        c.admin(&[
            "patch",
            "configmap",
            "held",
            "-n",
            NS,
            "--type=merge",
            "-p",
            STRIP,
        ]);
    }
    for ns in [NS, NAMESPACE] {
        c.admin(&[
            "delete",
            "namespace",
            ns,
            "--ignore-not-found",
            "--timeout=120s",
        ]);
    }
    env.reinstall();
}
