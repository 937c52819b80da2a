//! Controllers nobody in this project wrote, under the guard on the real
//! control plane: Flux's source-controller and Cluster API's core manager,
//! built from their upstream Go modules (`e2e/controllers/build.sh`, pinned
//! in `e2e/controllers/NAME/go.mod`, cached outside the repository), their
//! CRDs and ClusterRoles taken from the same modules. Each runs as a process
//! on the host with a token of its own ServiceAccount, so the webhook judges
//! `system:serviceaccount:flux-system:source-controller` and
//! `system:serviceaccount:capi-system:capi-manager` as it would their pods.
//!
//! The journey of docs/install.md: warn mode, a policy that covers the
//! controllers, enforce, a tenant namespace created after the switch, every
//! deletion finishing, a person's strip refused, and `unstick` releasing an
//! object while its controller is stopped.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::harness::{Env, OVERRIDE, Policy, Run, env, free_port, wait_until};
use super::{STRIP, denied, finalizers};

/// The namespaces the controllers reconcile in before the switch to enforce.
const BEFORE: [&str; 2] = ["team-a", "team-b"];
/// The tenant namespace a platform adds after the switch.
const AFTER: &str = "team-c";
/// How long a deletion the controller finishes may take.
const DELETE_BOUND: Duration = Duration::from_secs(60);

/// A controller from the catalog, as its upstream installer names it.
pub(super) struct Upstream {
    /// `e2e/controllers/build.sh NAME`, and the binary in the folder it prints.
    pub(super) name: &'static str,
    /// The namespace and ServiceAccount its installer runs it as.
    pub(super) namespace: &'static str,
    pub(super) account: &'static str,
    pub(super) finalizer: &'static str,
    /// The kinds it puts its finalizer on that the journey uses, as
    /// `kubectl` names them.
    pub(super) kinds: &'static [&'static str],
}

pub(super) const FLUX: Upstream = Upstream {
    name: "source-controller",
    namespace: "flux-system",
    account: "source-controller",
    finalizer: "finalizers.fluxcd.io",
    kinds: &[
        "helmrepositories.source.toolkit.fluxcd.io",
        "ocirepositories.source.toolkit.fluxcd.io",
        "gitrepositories.source.toolkit.fluxcd.io",
    ],
};

/// Flux's kustomize-controller (tests/e2e/gitops.rs): it applies whatever
/// a Kustomization holds, so Flux binds it to cluster-admin.
pub(super) const KUSTOMIZE: Upstream = Upstream {
    name: "kustomize-controller",
    namespace: "flux-system",
    account: "kustomize-controller",
    finalizer: "finalizers.fluxcd.io",
    kinds: &["kustomizations.kustomize.toolkit.fluxcd.io"],
};

const CAPI: Upstream = Upstream {
    name: "cluster-api",
    namespace: "capi-system",
    account: "capi-manager",
    finalizer: "cluster.cluster.x-k8s.io",
    kinds: &["clusters.cluster.x-k8s.io"],
};

const UPSTREAMS: [&Upstream; 2] = [&FLUX, &CAPI];

impl Upstream {
    pub(super) fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.account)
    }
}

/// The policy that lets the controllers remove their own finalizers, in
/// `mode`: the catalog's presets for them (`presets: [flux, cluster-api]`),
/// which reach every namespace, as a controller that watches every
/// namespace needs.
fn controllers_policy(env: &Env, mode: &str) -> String {
    let policy = env.policy(Policy::default());
    let mut policy: serde_yaml_ng::Value = serde_yaml_ng::from_str(&policy).unwrap();
    // The catalog's entries, with the installers' default identities.
    policy["presets"] = serde_yaml_ng::to_value(["flux", "cluster-api"]).unwrap();
    in_mode(&serde_yaml_ng::to_string(&policy).unwrap(), mode)
}

/// `policy` (the harness's, in enforce mode) switched to `mode`.
fn in_mode(policy: &str, mode: &str) -> String {
    let switched = policy.replacen("mode: enforce", &format!("mode: {mode}"), 1);
    assert!(switched.contains(&format!("mode: {mode}")), "{switched}");
    switched
}

/// The folder `e2e/controllers/build.sh NAME` prints: at once when the
/// pinned version is cached (`.ci/run` builds them while cargo builds).
pub(super) fn built(name: &str) -> PathBuf {
    let script = crate::common::repository::path("e2e/controllers/build.sh");
    let out = Command::new(&script)
        .arg(name)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", script.display()));
    assert!(
        out.status.success(),
        "e2e/controllers/build.sh {name} failed"
    );
    let dir = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    assert!(
        dir.join(name).is_file(),
        "{} holds no {name}",
        dir.display()
    );
    dir
}

/// A controller process; stopped when dropped.
pub(super) struct Running(Option<Child>);

impl Running {
    pub(super) fn stop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Installs the controller as its installer would (its CRDs, namespace,
/// ServiceAccount, the module's ClusterRole bound to it, and the
/// cluster-admin binding where the module ships one), and returns a
/// kubeconfig holding a token of that ServiceAccount.
pub(super) fn install(env: &Env, up: &Upstream, dir: &Path) -> PathBuf {
    let c = &env.cluster;
    c.admin(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        dir.join("crds").to_str().unwrap(),
    ])
    .ok();
    for kind in up.kinds {
        wait_until(&format!("{kind} to be served"), 60, || {
            c.admin(&["get", kind, "-A"]).code == 0
        });
    }
    if c.get(&["namespace", up.namespace]).is_none() {
        c.namespace(up.namespace);
    }
    c.apply(&json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": up.account, "namespace": up.namespace},
    }));
    // The module's ClusterRole (kubebuilder's `manager-role`), under the
    // name its installer gives it.
    let role_name = format!("e2e-{}", up.name);
    let mut role: Value =
        serde_yaml_ng::from_str(&fs::read_to_string(dir.join("rbac/role.yaml")).unwrap()).unwrap();
    role["metadata"] = json!({"name": role_name});
    c.apply(&role);
    c.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": role_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": up.account, "namespace": up.namespace}],
    }));
    // kustomize-controller's `cluster-reconciler`: cluster-admin, as Flux installs it.
    let admin_binding = dir.join("rbac/cluster_role_binding.yaml");
    if admin_binding.is_file() {
        let mut binding: Value =
            serde_yaml_ng::from_str(&fs::read_to_string(&admin_binding).unwrap()).unwrap();
        assert_eq!(binding["roleRef"]["name"], "cluster-admin", "{binding}");
        binding["metadata"] = json!({"name": format!("e2e-{}-cluster-reconciler", up.name)});
        binding["subjects"] =
            json!([{"kind": "ServiceAccount", "name": up.account, "namespace": up.namespace}]);
        c.apply(&binding);
    }
    c.token_kubeconfig(
        up.account,
        up.namespace,
        &env.work.join(format!("{}.kubeconfig", up.name)),
    )
}

/// What people (alice, carol: `edit`) may do with the controllers' objects,
/// as Flux's own `flux-edit` ClusterRole gives it: aggregated into `edit`.
fn people_edit(env: &Env) {
    let c = &env.cluster;
    c.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {
            "name": "e2e-controllers-edit",
            "labels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"},
        },
        "rules": [{
            "apiGroups": ["source.toolkit.fluxcd.io", "cluster.x-k8s.io"],
            "resources": ["*"],
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        }],
    }));
    for kind in [
        "helmrepositories.source.toolkit.fluxcd.io",
        "clusters.cluster.x-k8s.io",
    ] {
        wait_until(&format!("alice may patch {kind}"), 30, || {
            c.admin(&[
                "auth",
                "can-i",
                "patch",
                kind,
                "-A",
                "--as",
                "alice",
                "--as-group",
                "developers",
            ])
            .stdout
            .trim()
                == "yes"
        });
    }
}

/// Starts the controller with its ServiceAccount's kubeconfig, its ports on
/// 127.0.0.1, its log in the webhook's work folder.
pub(super) fn start(env: &Env, up: &Upstream, dir: &Path, kubeconfig: &Path) -> Running {
    let work = env.work.join(up.name);
    fs::create_dir_all(&work).unwrap();
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(env.work.join(format!("{}.log", up.name)))
        .unwrap();
    let addr = || format!("127.0.0.1:{}", free_port());
    let mut cmd = Command::new(dir.join(up.name));
    cmd.env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    match up.name {
        "source-controller" => {
            // Where it keeps the artifacts it fetches (none, here); it must exist.
            fs::create_dir_all(work.join("storage")).unwrap();
            let storage = addr();
            cmd.env("RUNTIME_NAMESPACE", up.namespace)
                .arg(format!("--storage-path={}", work.join("storage").display()))
                .arg(format!("--storage-addr={storage}"))
                .arg(format!("--storage-adv-addr={storage}"))
                .arg(format!("--metrics-addr={}", addr()))
                .arg(format!("--health-addr={}", addr()))
                .arg("--enable-leader-election=false");
        }
        "kustomize-controller" => {
            // It fetches the artifacts from source-controller's storage, at
            // the address source-controller advertises (127.0.0.1).
            cmd.env("RUNTIME_NAMESPACE", up.namespace)
                .arg(format!("--metrics-addr={}", addr()))
                .arg(format!("--health-addr={}", addr()))
                .arg("--enable-leader-election=false");
        }
        "cluster-api" => {
            // Its webhook server starts whether or not the API server calls
            // it (nothing registers it here): any serving certificate does.
            let certs = work.join("webhook-certs");
            fs::create_dir_all(&certs).unwrap();
            for f in ["tls.crt", "tls.key"] {
                fs::copy(env.work.join("certs").join(f), certs.join(f)).unwrap();
            }
            cmd.env("POD_NAMESPACE", up.namespace)
                .arg("--leader-elect=false")
                .arg(format!("--webhook-cert-dir={}", certs.display()))
                .arg(format!("--webhook-port={}", free_port()))
                .arg(format!("--diagnostics-address={}", addr()))
                .arg("--insecure-diagnostics")
                .arg(format!("--health-addr={}", addr()));
        }
        other => panic!("no way to start {other}"),
    }
    Running(Some(
        cmd.spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", up.name)),
    ))
}

/// Everything the journey needs of both controllers: built, installed, running.
struct Controllers {
    running: Vec<Running>,
}

impl Controllers {
    fn up(env: &Env) -> Controllers {
        let installed: Vec<(PathBuf, PathBuf)> = UPSTREAMS
            .iter()
            .map(|up| {
                let dir = built(up.name);
                let kubeconfig = install(env, up, &dir);
                (dir, kubeconfig)
            })
            .collect();
        people_edit(env);
        let running = UPSTREAMS
            .iter()
            .zip(&installed)
            .map(|(up, (dir, kubeconfig))| start(env, up, dir, kubeconfig))
            .collect();
        Controllers { running }
    }

    fn stop(&mut self) {
        for r in &mut self.running {
            r.stop();
        }
    }
}

/// An address nothing listens on: every fetch the controllers try fails
/// (they add their finalizer before they fetch).
fn nowhere() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// The objects the journey puts in `ns`, one of each kind: (kind, name, manifest).
fn objects(ns: &str, unreachable: &str) -> Vec<(&'static str, String, Value)> {
    let source = |kind: &str, spec: Value| {
        json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": kind,
            "metadata": {"name": "app", "namespace": ns},
            "spec": spec,
        })
    };
    vec![
        (
            FLUX.kinds[0],
            "app".to_string(),
            source(
                "HelmRepository",
                json!({"url": format!("http://{unreachable}/charts"), "interval": "10m"}),
            ),
        ),
        (
            FLUX.kinds[1],
            "app".to_string(),
            source(
                "OCIRepository",
                json!({"url": format!("oci://{unreachable}/app"), "interval": "10m", "ref": {"tag": "latest"}}),
            ),
        ),
        (
            FLUX.kinds[2],
            "app".to_string(),
            source(
                "GitRepository",
                json!({"url": format!("http://{unreachable}/app.git"), "interval": "10m", "ref": {"branch": "main"}}),
            ),
        ),
        (
            CAPI.kinds[0],
            "app".to_string(),
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": "app", "namespace": ns},
                // The spec a Cluster needs no provider for (nothing to provision).
                "spec": {"clusterNetwork": {"serviceDomain": "cluster.local"}},
            }),
        ),
    ]
}

fn finalizer_of(kind: &str) -> &'static str {
    UPSTREAMS
        .iter()
        .find(|up| up.kinds.contains(&kind))
        .map(|up| up.finalizer)
        .unwrap()
}

/// Creates the objects and waits until each controller has put its finalizer on its own.
fn create_and_wait_for_finalizers(env: &Env, objects: &[(&str, String, Value)]) {
    let c = &env.cluster;
    for (_, _, manifest) in objects {
        c.apply(manifest);
    }
    for (kind, name, manifest) in objects {
        let ns = manifest["metadata"]["namespace"].as_str().unwrap();
        let want = finalizer_of(kind);
        wait_until(&format!("{want} on {kind}/{name} in {ns}"), 60, || {
            c.get(&[kind, name, "-n", ns])
                .is_some_and(|o| finalizers(&o).iter().any(|f| f == want))
        });
    }
}

/// One deletion: the object, and how long until it was gone (`None`: not within the bound).
struct Deletion {
    what: String,
    took: Option<Duration>,
}

/// Deletes every object at once and waits, at most [`DELETE_BOUND`], until
/// each is gone: the controller removed its finalizer.
fn delete_all(env: &Env, objects: &[(&str, String, Value)]) -> Vec<Deletion> {
    let c = &env.cluster;
    let started = Instant::now();
    for (kind, name, manifest) in objects {
        let ns = manifest["metadata"]["namespace"].as_str().unwrap();
        c.admin(&["delete", kind, name, "-n", ns, "--wait=false"])
            .ok();
    }
    let mut gone: Vec<Option<Duration>> = vec![None; objects.len()];
    super::harness::poll(DELETE_BOUND.as_secs(), || {
        for (i, (kind, name, manifest)) in objects.iter().enumerate() {
            if gone[i].is_none() {
                let ns = manifest["metadata"]["namespace"].as_str().unwrap();
                if c.get(&[kind, name, "-n", ns]).is_none() {
                    gone[i] = Some(started.elapsed());
                }
            }
        }
        gone.iter().all(Option::is_some)
    });
    objects
        .iter()
        .zip(gone)
        .map(|((kind, name, manifest), took)| Deletion {
            what: format!(
                "{kind}/{name} in {}",
                manifest["metadata"]["namespace"].as_str().unwrap()
            ),
            took,
        })
        .collect()
}

fn print_deletions(deletions: &[Deletion]) {
    for d in deletions {
        match d.took {
            Some(t) => println!("deleted {} in {:.1} s", d.what, t.as_secs_f64()),
            None => println!("NOT deleted within {DELETE_BOUND:?}: {}", d.what),
        }
    }
}

/// The webhook's records, from `from` on, of the controllers' removals it
/// did not authorize (denied or would-deny).
fn controller_refusals(env: &Env, from: usize) -> Vec<Value> {
    let users: Vec<String> = UPSTREAMS.iter().map(|up| up.username()).collect();
    env.audit_records()
        .into_iter()
        .skip(from)
        .filter(|r| {
            r["user"]
                .as_str()
                .is_some_and(|u| users.iter().any(|x| x == u))
        })
        .filter(|r| r["decision"] != "authorized")
        .collect()
}

/// Deletes an object and releases it with an override, as admin, whoever
/// removes the finalizer first: the override also lets a running
/// controller remove its own where its rule does not.
fn release(env: &Env, kind: &str, name: &str, ns: &str) {
    let c = &env.cluster;
    let gone_or_ok = |run: Run| {
        assert!(run.code == 0 || run.stderr.contains("NotFound"), "{run:#?}");
    };
    gone_or_ok(c.admin(&["delete", kind, name, "-n", ns, "--wait=false"]));
    if c.get(&[kind, name, "-n", ns]).is_some() {
        let reason = format!("{OVERRIDE}=controller-uninstalled: e2e cleanup");
        gone_or_ok(c.admin(&["annotate", "--overwrite", kind, name, "-n", ns, &reason]));
        gone_or_ok(c.admin(&["patch", kind, name, "-n", ns, "--type=merge", "-p", STRIP]));
    }
    wait_until(&format!("{kind}/{name} in {ns} to be gone"), 30, || {
        c.get(&[kind, name, "-n", ns]).is_none()
    });
}

/// Deletes namespace `ns` if it exists, releasing first (as admin, with an
/// override) what a scenario left stuck there.
fn clear(env: &Env, ns: &str) {
    let c = &env.cluster;
    if c.get(&["namespace", ns]).is_none() {
        return;
    }
    for up in UPSTREAMS {
        for kind in up.kinds {
            let names = c
                .admin(&["get", kind, "-n", ns, "-o", "name", "--ignore-not-found"])
                .stdout;
            for name in names.lines().filter_map(|l| l.split('/').nth(1)) {
                release(env, kind, name, ns);
            }
        }
    }
    c.admin(&["delete", "namespace", ns, "--timeout=120s"]).ok();
}

/// A namespace of this scenario's, made afresh.
fn fresh_namespace(env: &Env, ns: &str) {
    clear(env, ns);
    env.cluster.namespace(ns);
}

/// Removes what a scenario leaves, whatever its outcome.
fn clean_up(env: &Env) {
    for ns in [BEFORE[0], BEFORE[1], AFTER] {
        clear(env, ns);
    }
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR) and the controllers (e2e/controllers/build.sh): see .ci/run"]
fn real_controllers_keep_working_under_enforce_in_a_namespace_made_after_the_switch() {
    let mut env = env();
    let warn = controllers_policy(&env, "warn");
    env.set_policy(&warn);
    let records_from = env.audit_records().len();
    for ns in BEFORE {
        fresh_namespace(&env, ns);
    }
    clear(&env, AFTER);
    let mut controllers = Controllers::up(&env);
    let unreachable = nowhere();

    // Warn mode: the controllers reconcile in team-a and team-b.
    let before: Vec<_> = BEFORE
        .iter()
        .flat_map(|ns| objects(ns, &unreachable))
        .collect();
    create_and_wait_for_finalizers(&env, &before);

    // Enforce. Then a tenant namespace the platform adds after the switch.
    let enforce = controllers_policy(&env, "enforce");
    env.set_policy(&enforce);
    let enforced_from = env.audit_records().len();
    env.cluster.namespace(AFTER);
    let after = objects(AFTER, &unreachable);
    create_and_wait_for_finalizers(&env, &after);

    // Every deletion, in all three namespaces, is finished by its controller.
    let all: Vec<_> = before.iter().chain(&after).cloned().collect();
    let deletions = delete_all(&env, &all);
    print_deletions(&deletions);
    let refusals = controller_refusals(&env, records_from);
    let unfinished: Vec<&Deletion> = deletions.iter().filter(|d| d.took.is_none()).collect();
    // The webhook judged the controllers' removals (they are not skipped as
    // Kubernetes' own): authorized by their rule, in team-c too.
    let authorized_in_c = || -> Vec<Value> {
        env.audit_records()[enforced_from..]
            .iter()
            .filter(|r| r["namespace"] == AFTER && r["decision"] == "authorized")
            .cloned()
            .collect()
    };
    // (The server writes its records as it answers; give the last a moment.)
    super::harness::poll(10, || {
        UPSTREAMS.iter().all(|up| {
            authorized_in_c()
                .iter()
                .any(|r| r["user"] == up.username().as_str())
        })
    });
    let authorized_in_c = authorized_in_c();
    for up in UPSTREAMS {
        let seen = authorized_in_c
            .iter()
            .find(|r| r["user"] == up.username().as_str());
        match seen {
            Some(r) => println!(
                "{} removed {} in {AFTER}: {} by {}",
                r["user"].as_str().unwrap(),
                up.finalizer,
                r["decision"].as_str().unwrap(),
                r["removedFinalizers"][0]["authorizedBy"]
                    .as_str()
                    .unwrap_or("?"),
            ),
            None => {
                clean_up(&env);
                panic!(
                    "no authorized removal of {} by {} in {AFTER} in the webhook's records",
                    up.finalizer,
                    up.username()
                );
            }
        }
    }
    if !unfinished.is_empty() || !refusals.is_empty() {
        clean_up(&env);
        panic!(
            "deletions not finished within {DELETE_BOUND:?}: {:?}; the webhook refused the controllers: {refusals:#?}",
            unfinished.iter().map(|d| &d.what).collect::<Vec<_>>()
        );
    }

    // A person stripping a controller's finalizer is refused.
    let c = &env.cluster;
    let held = objects(AFTER, &unreachable);
    let held: Vec<_> = held
        .into_iter()
        .filter(|(kind, _, _)| *kind == FLUX.kinds[0] || *kind == CAPI.kinds[0])
        .map(|(kind, _, mut manifest)| {
            manifest["metadata"]["name"] = "held".into();
            (kind, "held".to_string(), manifest)
        })
        .collect();
    create_and_wait_for_finalizers(&env, &held);
    for (kind, name, _) in &held {
        let run = c
            .kubectl(
                "alice",
                &[
                    "patch",
                    kind,
                    name,
                    "-n",
                    AFTER,
                    "--type=merge",
                    "-p",
                    STRIP,
                ],
            )
            .refused(&denied());
        println!("alice strips {kind}/{name}: {}", run.stderr.trim());
        assert!(
            run.stderr.contains(finalizer_of(kind)) && run.stderr.contains("alice"),
            "{run:#?}"
        );
    }

    // The controllers stop; a deleted object stays Terminating on its
    // finalizer, and the on-call engineer releases it with unstick.
    controllers.stop();
    for (kind, name, _) in &held {
        c.admin(&["delete", kind, name, "-n", AFTER, "--wait=false"])
            .ok();
    }
    // Staying Terminating is what is checked: nothing may release them in
    // these 3 s, so this sleep is the window, not a wait for a condition.
    std::thread::sleep(Duration::from_secs(3));
    for (kind, name, _) in &held {
        let object = c.get(&[kind, name, "-n", AFTER]).expect("still there");
        assert!(
            object["metadata"]["deletionTimestamp"].is_string(),
            "{object:#}"
        );
        assert_eq!(finalizers(&object), [finalizer_of(kind)]);
    }
    for (kind, name, _) in &held {
        let target = format!("{kind}/{name}");
        let explain = c.finalizer_guard("carol", &["unstick", &target, "-n", AFTER]);
        println!(
            "$ finalizer-guard unstick {target} -n {AFTER}\n{}{}",
            explain.stdout, explain.stderr
        );
        let run = c.finalizer_guard(
            "carol",
            &[
                "unstick",
                &target,
                "-n",
                AFTER,
                "--reason",
                "controller-unavailable",
                "--detail",
                "INC-5120 controllers stopped for the upgrade",
            ],
        );
        println!(
            "$ finalizer-guard unstick {target} -n {AFTER} --reason controller-unavailable --detail ...\n{}{}",
            run.stdout, run.stderr
        );
        assert_eq!(run.code, 0, "{run:#?}");
        wait_until(&format!("{target} to be gone"), 30, || {
            c.get(&[kind, name, "-n", AFTER]).is_none()
        });
    }
    let released =
        |r: &Value| r["name"] == "held" && r["decision"] == "override" && r["dryRun"] != true;
    let override_record = env
        .audit_records_when(|records| records.iter().filter(|r| released(r)).count() >= held.len())
        .into_iter()
        .rev()
        .find(released)
        .expect("the override's audit record");
    assert_eq!(override_record["user"], "carol", "{override_record:#}");
    assert_eq!(
        override_record["overrideReason"], "controller-unavailable",
        "{override_record:#}"
    );

    // No denial of the controllers anywhere in the journey.
    let refusals = controller_refusals(&env, records_from);
    assert!(refusals.is_empty(), "{refusals:#?}");
    clean_up(&env);
}

/// The same journey through `policy suggest`: the rules written from
/// warn-mode evidence of the controllers in team-a and team-b must still
/// hold in team-c, created after the switch to enforce.
#[test]
#[ignore = "needs a cluster (FG_E2E_DIR) and the controllers (e2e/controllers/build.sh): see .ci/run"]
fn suggested_rules_for_real_controllers_hold_in_a_namespace_made_after_the_switch() {
    let mut env = env();
    // The harness's policy (no rule for the controllers), in warn mode.
    let base = in_mode(&env.policy(Policy::default()), "warn");
    env.set_policy(&base);
    for ns in BEFORE {
        fresh_namespace(&env, ns);
    }
    clear(&env, AFTER);
    let warn_from = env.audit_records().len();
    let _controllers = Controllers::up(&env);
    let unreachable = nowhere();

    // Warn mode: the controllers add and remove their finalizers in team-a
    // and team-b; the webhook records each removal as would-deny.
    let before: Vec<_> = BEFORE
        .iter()
        .flat_map(|ns| objects(ns, &unreachable))
        .collect();
    create_and_wait_for_finalizers(&env, &before);
    let deletions = delete_all(&env, &before);
    print_deletions(&deletions);
    assert!(
        deletions.iter().all(|d| d.took.is_some()),
        "warn mode blocks nothing"
    );
    for up in UPSTREAMS {
        let user = up.username();
        wait_until(
            &format!("the webhook's would-deny records of {user}"),
            30,
            || {
                env.audit_records()[warn_from..]
                    .iter()
                    .any(|r| r["user"] == user.as_str() && r["decision"] == "would-deny")
            },
        );
    }

    // policy suggest --merge, from the webhook's own records of the warn period.
    let evidence = env.work.join("controllers-warn-audit.jsonl");
    let lines: Vec<String> = fs::read_to_string(env.work.join("audit.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).is_ok())
        .skip(warn_from)
        .map(str::to_string)
        .collect();
    fs::write(&evidence, lines.join("\n") + "\n").unwrap();
    let base_file = env.work.join("controllers-base-policy.yaml");
    fs::write(&base_file, &base).unwrap();
    let run = env.cluster.finalizer_guard(
        "admin",
        &[
            "policy",
            "suggest",
            "--merge",
            base_file.to_str().unwrap(),
            evidence.to_str().unwrap(),
        ],
    );
    println!(
        "$ finalizer-guard policy suggest --merge POLICY EVIDENCE\n{}{}",
        run.stdout, run.stderr
    );
    assert_eq!(run.code, 0, "{run:#?}");
    let merged = run.stdout;
    let enforce = merged.replacen("mode: warn", "mode: enforce", 1);
    assert_ne!(enforce, merged, "{merged}");
    env.set_policy(&enforce);
    let enforced_from = env.audit_records().len();

    // Enforce; team-c is created after the switch. The controllers must
    // still finish every deletion there, and in team-a.
    env.cluster.namespace(AFTER);
    let after: Vec<_> = objects(AFTER, &unreachable)
        .into_iter()
        .chain(objects(BEFORE[0], &unreachable))
        .collect();
    create_and_wait_for_finalizers(&env, &after);
    let deletions = delete_all(&env, &after);
    print_deletions(&deletions);
    let refusals = controller_refusals(&env, enforced_from);
    let mut counted: Vec<(String, usize)> = Vec::new();
    for r in &refusals {
        let line = format!(
            "{} {} removing {} from {}/{} in {}",
            r["decision"].as_str().unwrap_or("?"),
            r["user"].as_str().unwrap_or("?"),
            r["removedFinalizers"][0]["finalizer"]
                .as_str()
                .unwrap_or("?"),
            r["resource"].as_str().unwrap_or("?"),
            r["name"].as_str().unwrap_or("?"),
            r["namespace"].as_str().unwrap_or("-"),
        );
        match counted.iter_mut().find(|(l, _)| *l == line) {
            Some((_, n)) => *n += 1,
            None => counted.push((line, 1)),
        }
    }
    for (line, n) in &counted {
        println!("webhook: {line} (x{n})");
    }
    let unfinished: Vec<String> = deletions
        .iter()
        .filter(|d| d.took.is_none())
        .map(|d| d.what.clone())
        .collect();
    clean_up(&env);
    assert!(
        unfinished.is_empty() && refusals.is_empty(),
        "under the suggested policy, deletions not finished within {DELETE_BOUND:?}: {unfinished:?}; \
         the webhook refused the controllers {} time(s)",
        refusals.len()
    );
}
