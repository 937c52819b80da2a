//! The ValidatingAdmissionPolicy of `finalizer-guard policy export --vap` on
//! the real control plane.
//!
//! Equivalence: every case file whose decision CEL can express becomes a
//! real request. Its old object is created (a fresh copy per run, its
//! finalizers and override annotation as recorded), deleted first when an
//! override is in play, and the case's change is sent as the case's
//! requester (`kubectl --as`, `--as-group`, with the admin kubeconfig):
//! a merge patch of `metadata.finalizers` and the override annotation, or a
//! PUT to `namespaces/NAME/finalize`. Once with only the webhook installed
//! (it judges Kubernetes' own controllers too, so it decides every case
//! itself), once with only the policy: the same allowed or denied, case by
//! case, both equal to the webhook's own decision of the case file. Then
//! the warn-mode case files under the warn-mode policy, both ways. The
//! cases excluded are listed, each with why.
//!
//! Backstop: the webhook down (its configuration failing open) and the
//! policy installed: a strip is still refused, an override still works.

use std::collections::BTreeSet;
use std::path::Path;

use finalizer_guard::policy::{Policy as GuardPolicy, Verdict};
use serde_json::{Value, json};

use super::harness::{
    CONFIG, Cluster, Conditions, OVERRIDE, Policy, denied, env, policy_denial, wait_until,
};
use super::{
    STRIP, builtin_controllers_complete, configmap, delete_in_foreground, deployment,
    strips_are_refused_through_every_path,
};
use crate::common::assert::assert_prints_on_stderr;

/// Why every scenario here needs 1.30: the export is an
/// `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicy.
const VAP_V1: &str = "the backstop is an admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy, served from 1.30 (v1beta1 and off by default in 1.28 and 1.29)";
const POLICY: &str = "finalizer-guard";
/// The group every replayed requester also gets: it may write everything
/// (cluster-admin), so RBAC never answers in the policy's place, and no rule
/// names it, so no decision changes.
const GROUP: &str = "fg-vap-e2e";
/// The namespace of the probes that tell when a policy is in force.
const PROBE_NS: &str = "fg-vap-e2e";
const HOLD: &str = "e2e.example.com/hold";

/// Case files that are not replayed, and why.
const EXCLUDED: &[(&str, &str)] = &[
    (
        "pod-create-with-finalizers-allowed.json",
        "a CREATE: neither the webhook nor the policy judges it",
    ),
    (
        "pod-delete-with-oldobject-allowed.json",
        "a DELETE: neither judges it",
    ),
    (
        "pod-exec-connect-allowed.json",
        "a CONNECT: neither judges it",
    ),
    (
        "pod-job-controller-removes-job-tracking-authorized.json",
        "kube-controller-manager's job controller removes the finalizer from an orphan pod itself before the request",
    ),
];

fn fixtures() -> &'static Path {
    crate::common::repository::fixtures()
}

/// One replayable case file.
struct Case {
    file: String,
    request: Value,
    /// The webhook's decision of the file, offline.
    allowed: bool,
    verdict: Verdict,
}

/// The case files of `folder`, decided under `policy`; the excluded ones named.
fn cases(folder: &str, policy: &GuardPolicy, excluded: &mut Vec<String>) -> Vec<Case> {
    let mut files: Vec<_> = std::fs::read_dir(fixtures().join(folder))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        let case: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let Some(review) = case.get("review") else {
            excluded.push(format!(
                "{folder}/{file}: a raw body the webhook answers 400: no request to replay"
            ));
            continue;
        };
        if let Some((_, why)) = EXCLUDED.iter().find(|(f, _)| *f == file) {
            excluded.push(format!("{folder}/{file}: {why}"));
            continue;
        }
        assert_eq!(
            review["request"]["operation"], "UPDATE",
            "{file}: only UPDATEs are replayed; exclude it by name"
        );
        let decide = |review: &Value| {
            let body = serde_json::to_vec(review).unwrap();
            finalizer_guard::admission::review(policy, &body).unwrap()
        };
        let recorded = decide(review);
        let (review, renamed) = valid_names(review);
        let reviewed = decide(&review);
        assert_eq!(
            reviewed.verdict(),
            recorded.verdict(),
            "{file}: renaming {renamed:?} changes the decision"
        );
        out.push(Case {
            file: format!("{folder}/{file}"),
            request: review["request"].clone(),
            allowed: reviewed.allowed(),
            verdict: reviewed.verdict(),
        });
    }
    out
}

/// The review with each finalizer name kube-apiserver refuses on a Pod
/// (neither one of Kubernetes' own nor fully qualified, e.g.
/// `spiderpool.spidernet.io`, which older releases took) given a path:
/// `spiderpool.spidernet.io/finalizer`. No such object could be created
/// otherwise; the caller checks that the decision stays the same.
fn valid_names(review: &Value) -> (Value, BTreeSet<String>) {
    const STANDARD: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];
    let mut review = review.clone();
    let mut renamed = BTreeSet::new();
    for object in ["object", "oldObject"] {
        if let Some(list) = review["request"][object]["metadata"]["finalizers"].as_array_mut() {
            for name in list.iter_mut() {
                if let Some(n) = name.as_str()
                    && !n.contains('/')
                    && !STANDARD.contains(&n)
                {
                    renamed.insert(n.to_string());
                    *name = json!(format!("{n}/finalizer"));
                }
            }
        }
    }
    (review, renamed)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// A case, made into objects of this cluster under names of this run.
struct Replay<'a> {
    case: &'a Case,
    /// `kubectl` TYPE: `configmaps`, `widgets.example.com`.
    kind: String,
    name: String,
    namespace: Option<String>,
    finalize: bool,
    /// Delete it before the request: an override releases only an object being deleted.
    delete: bool,
    old: Value,
}

impl<'a> Replay<'a> {
    /// Under a name of its own: `NAME-SUFFIXINDEX` (case files share names).
    fn new(case: &'a Case, suffix: &str, index: usize) -> Replay<'a> {
        let r = &case.request;
        let (group, resource) = (
            r["resource"]["group"].as_str().unwrap(),
            r["resource"]["resource"].as_str().unwrap(),
        );
        let kind = if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        };
        let old = &r["oldObject"];
        let name = format!("{}-{suffix}{index}", r["name"].as_str().unwrap());
        let namespace = r["namespace"]
            .as_str()
            .filter(|ns| !ns.is_empty() && resource != "namespaces")
            .map(String::from);
        let override_value = r["object"]["metadata"]["annotations"][OVERRIDE].as_str();
        let delete = old["metadata"]["deletionTimestamp"].is_string() && override_value.is_some();
        let mut metadata = json!({"name": name, "finalizers": old["metadata"]["finalizers"]});
        if let Some(ns) = &namespace {
            metadata["namespace"] = json!(ns);
        }
        if let Some(value) = old["metadata"]["annotations"][OVERRIDE].as_str() {
            metadata["annotations"] = json!({ OVERRIDE: value });
        }
        let mut object = json!({
            "apiVersion": old["apiVersion"],
            "kind": old["kind"],
            "metadata": metadata,
        });
        // The least each kind needs to be valid: the decision reads none of it.
        match kind.as_str() {
            "pods" => {
                object["spec"] = json!({
                    "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                    "automountServiceAccountToken": false,
                })
            }
            "configmaps" => object["data"] = json!({"k": "v"}),
            "deployments.apps" | "replicasets.apps" => {
                let labels = json!({"app": name});
                let template = json!({"metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}});
                object["spec"] = json!({"replicas": 0, "selector": {"matchLabels": labels}, "template": template});
            }
            "services" => object["spec"] = json!({"ports": [{"port": 80}]}),
            "persistentvolumeclaims" => {
                object["spec"] = json!({"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                    "resources": {"requests": {"storage": "1Gi"}}})
            }
            "persistentvolumes" => {
                object["spec"] = json!({"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                    "hostPath": {"path": "/tmp/fg-vap-e2e"}})
            }
            "volumeattachments.storage.k8s.io" => {
                object["spec"] = json!({"attacher": "csi.example.com", "nodeName": "fg-vap-e2e-node",
                    "source": {"persistentVolumeName": "fg-vap-e2e-pv"}})
            }
            "namespaces" => object["spec"] = json!({"finalizers": old["spec"]["finalizers"]}),
            _ => object["spec"] = json!({}),
        }
        Replay {
            case,
            finalize: r["subResource"] == "finalize",
            kind,
            name,
            namespace,
            delete,
            old: object,
        }
    }

    fn scope(&self) -> Vec<&str> {
        match &self.namespace {
            Some(ns) => vec!["-n", ns],
            None => vec![],
        }
    }

    /// The change, sent as the case's requester: whether it was allowed and
    /// whether kubectl printed a warning, or what kubectl said when the
    /// guard did not decide it.
    fn send(&self, c: &Cluster, live: &Value, denial: &str) -> Result<Sent, String> {
        let r = &self.case.request;
        let as_user = format!("--as={}", r["userInfo"]["username"].as_str().unwrap_or(""));
        let mut groups: Vec<String> = strings(&r["userInfo"]["groups"])
            .into_iter()
            .map(|g| format!("--as-group={g}"))
            .collect();
        groups.push(format!("--as-group={GROUP}"));
        let dry_run = r["dryRun"] == true;
        let old = &r["oldObject"];
        let new = &r["object"];

        // The finalizers the API server added on create (pvc-protection, a
        // Namespace's kubernetes) stay: the same names are removed.
        let keep = |field: &str| -> Value {
            let recorded_old: BTreeSet<String> =
                strings(&old[field]["finalizers"]).into_iter().collect();
            let mut list = strings(&new[field]["finalizers"]);
            for name in strings(&live[field]["finalizers"]) {
                if !recorded_old.contains(&name) && !list.contains(&name) {
                    list.push(name);
                }
            }
            if list.is_empty() && new[field]["finalizers"].is_null() {
                Value::Null
            } else {
                json!(list)
            }
        };
        let annotation = match (
            new["metadata"]["annotations"][OVERRIDE].as_str(),
            old["metadata"]["annotations"][OVERRIDE].as_str(),
        ) {
            (Some(v), _) => Some(json!(v)),
            (None, Some(_)) => Some(Value::Null),
            (None, None) => None,
        };
        let run = if self.finalize {
            let mut body = live.clone();
            for key in [
                "resourceVersion",
                "managedFields",
                "uid",
                "creationTimestamp",
            ] {
                body["metadata"].as_object_mut().unwrap().remove(key);
            }
            body["spec"]["finalizers"] = keep("spec");
            if let Some(value) = annotation {
                body["metadata"]["annotations"][OVERRIDE] = value;
            }
            let path = format!(
                "/api/v1/namespaces/{}/finalize{}",
                self.name,
                if dry_run { "?dryRun=All" } else { "" }
            );
            let mut args = vec!["replace", "--raw", &path, "-f", "-", &as_user];
            args.extend(groups.iter().map(String::as_str));
            c.kubectl_in("admin", &args, Some(&body.to_string()))
        } else {
            let mut metadata = json!({"finalizers": keep("metadata")});
            if let Some(value) = annotation {
                metadata["annotations"] = json!({ OVERRIDE: value });
            }
            let patch = json!({ "metadata": metadata }).to_string();
            let mut args = vec!["patch", &self.kind, &self.name];
            args.extend(self.scope());
            args.extend(["--type=merge", "-p", &patch, &as_user]);
            args.extend(groups.iter().map(String::as_str));
            if dry_run {
                args.push("--dry-run=server");
            }
            c.kubectl("admin", &args)
        };
        let warned = run.stderr.contains("Warning:");
        match run.code {
            0 => Ok(Sent {
                allowed: true,
                warned,
            }),
            1 if run.stderr.contains(denial) => Ok(Sent {
                allowed: false,
                warned,
            }),
            _ => Err(format!("exit {}: {}", run.code, run.stderr.trim())),
        }
    }
}

/// What one replayed request came to.
#[derive(Debug, Clone, Copy)]
struct Sent {
    allowed: bool,
    warned: bool,
}

/// Creates each case's object (deleted first where an override is in play)
/// and sends its change, case by case.
fn run_phase(c: &Cluster, cases: &[Case], suffix: &str, denial: &str) -> Vec<Sent> {
    let replays: Vec<Replay> = cases
        .iter()
        .enumerate()
        .map(|(i, case)| Replay::new(case, suffix, i))
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List",
        "items": replays.iter().map(|r| r.old.clone()).collect::<Vec<_>>()});
    c.kubectl_in("admin", &["create", "-f", "-"], Some(&list.to_string()))
        .ok();
    for r in replays.iter().filter(|r| r.delete) {
        if r.kind == "namespaces" {
            // Content held by a finalizer keeps the namespace Terminating,
            // spec.finalizers and all: the namespace controller leaves it.
            c.apply(&configmap(&r.name, "hold", &[HOLD]));
        }
        let mut args = vec!["delete", &r.kind, &r.name, "--wait=false"];
        args.extend(r.scope());
        c.admin(&args).ok();
    }
    let live = c
        .kubectl_in(
            "admin",
            &["get", "-f", "-", "-o", "json"],
            Some(&list.to_string()),
        )
        .ok()
        .json();
    let live = live["items"].as_array().unwrap().clone();
    let mut results = Vec::new();
    let mut failures = Vec::new();
    for r in &replays {
        let live = live
            .iter()
            .find(|o| o["metadata"]["name"] == r.name.as_str())
            .unwrap_or_else(|| panic!("{}: {} was not created", r.case.file, r.name));
        // Nothing took a recorded finalizer away before the request.
        for field in ["metadata", "spec"] {
            let have: BTreeSet<String> = strings(&live[field]["finalizers"]).into_iter().collect();
            for name in strings(&r.case.request["oldObject"][field]["finalizers"]) {
                if !have.contains(&name) && (field == "metadata" || r.kind == "namespaces") {
                    failures.push(format!(
                        "{}: {field}.finalizers lost {name} before the request",
                        r.case.file
                    ));
                }
            }
        }
        assert_eq!(
            live["metadata"]["deletionTimestamp"].is_string(),
            r.delete,
            "{}",
            r.case.file
        );
        match r.send(c, live, denial) {
            Ok(sent) => results.push(sent),
            Err(e) => failures.push(format!("{}: {e}", r.case.file)),
        }
    }
    assert!(failures.is_empty(), "{suffix}:\n{}", failures.join("\n"));
    results
}

/// Every object a phase created, released and deleted (no guard installed).
fn clean_up(c: &Cluster, cases: &[Case], suffix: &str) {
    for (i, case) in cases.iter().enumerate() {
        let r = Replay::new(case, suffix, i);
        let mut args = vec!["patch", &r.kind, &r.name, "--type=merge", "-p", STRIP];
        args.extend(r.scope());
        c.admin(&args);
        if r.kind == "namespaces" {
            c.admin(&[
                "patch",
                "configmap",
                "hold",
                "-n",
                &r.name,
                "--type=merge",
                "-p",
                STRIP,
            ]);
        }
        let mut args = vec![
            "delete",
            &r.kind,
            &r.name,
            "--wait=false",
            "--ignore-not-found",
        ];
        args.extend(r.scope());
        c.admin(&args);
    }
}

/// The custom resources of the case files, and what they need around them.
fn prepare(c: &Cluster, cases: &[&Case]) {
    for (group, plural, kind, version) in [
        ("argoproj.io", "applications", "Application", "v1alpha1"),
        ("cert-manager.io", "certificates", "Certificate", "v1"),
        ("acme.cert-manager.io", "challenges", "Challenge", "v1"),
        ("db.example.com", "databases", "Database", "v1"),
        ("example.com", "widgets", "Widget", "v1"),
        ("legacy.example.com", "widgets", "Widget", "v1alpha1"),
    ] {
        c.apply(&json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
                "versions": [{"name": version, "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
        }));
        wait_until(&format!("{plural}.{group} to be served"), 60, || {
            c.admin(&["get", &format!("{plural}.{group}"), "-A"]).code == 0
        });
    }
    grant(c);
    let namespaces: BTreeSet<&str> = cases
        .iter()
        .filter(|case| case.request["resource"]["resource"] != "namespaces")
        .filter_map(|case| case.request["namespace"].as_str())
        .collect();
    for ns in namespaces {
        c.admin(&["create", "namespace", ns]);
        wait_until(&format!("serviceaccount default in {ns}"), 60, || {
            c.admin(&["get", "serviceaccount", "default", "-n", ns])
                .code
                == 0
        });
    }
}

/// Every member of GROUP may write everything.
fn grant(c: &Cluster) {
    c.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": GROUP},
        "subjects": [{"kind": "Group", "name": GROUP, "apiGroup": "rbac.authorization.k8s.io"}],
        "roleRef": {"kind": "ClusterRole", "name": "cluster-admin", "apiGroup": "rbac.authorization.k8s.io"},
    }));
}

/// A dry-run strip of the probe by someone no rule names: what it prints.
fn probe(c: &Cluster) -> super::harness::Run {
    if c.get(&["configmap", "probe", "-n", PROBE_NS]).is_none() {
        grant(c);
        c.admin(&["create", "namespace", PROBE_NS]);
        c.apply(&configmap(PROBE_NS, "probe", &["probe.example.com/x"]));
    }
    c.kubectl(
        "admin",
        &[
            "patch",
            "configmap",
            "probe",
            "-n",
            PROBE_NS,
            "--type=merge",
            "-p",
            STRIP,
            "--dry-run=server",
            "--as=fg-vap-probe",
            &format!("--as-group={GROUP}"),
        ],
    )
}

/// `finalizer-guard policy export --vap` of a policy file, applied.
fn install_policy(c: &Cluster, policy_file: &Path) {
    let out = std::process::Command::new(super::harness::bin())
        .args(["policy", "export", "--vap"])
        .arg(policy_file)
        .output()
        .unwrap();
    assert!(out.status.success(), "export: {out:?}");
    let yaml = String::from_utf8(out.stdout).unwrap();
    c.kubectl_in("admin", &["apply", "-f", "-"], Some(&yaml))
        .ok();
}

/// The harness's webhook configuration, saved and deleted; put back when
/// dropped, however the scenario ends.
struct WebhookAside<'a> {
    cluster: &'a Cluster,
    saved: Value,
}

impl<'a> WebhookAside<'a> {
    fn new(cluster: &'a Cluster) -> WebhookAside<'a> {
        let mut saved = cluster
            .get(&["validatingwebhookconfiguration", CONFIG])
            .unwrap();
        super::harness::to_create_again(&mut saved);
        cluster
            .admin(&["delete", "validatingwebhookconfiguration", CONFIG])
            .ok();
        WebhookAside { cluster, saved }
    }
}

impl Drop for WebhookAside<'_> {
    fn drop(&mut self) {
        self.cluster.kubectl_in(
            "admin",
            &["create", "-f", "-"],
            Some(&self.saved.to_string()),
        );
    }
}

/// Only the policy: the webhook's configuration aside; the policy taken out
/// when the scenario ends, however it ends, and the configuration put back.
struct OnlyPolicy<'a> {
    cluster: &'a Cluster,
    _aside: WebhookAside<'a>,
}

impl<'a> OnlyPolicy<'a> {
    fn new(cluster: &'a Cluster) -> OnlyPolicy<'a> {
        OnlyPolicy {
            cluster,
            _aside: WebhookAside::new(cluster),
        }
    }
}

impl Drop for OnlyPolicy<'_> {
    fn drop(&mut self) {
        uninstall_policy(self.cluster);
    }
}

/// The backstop: the policy installed, the webhook's configuration failing
/// open; as before when the scenario ends, however it ends.
struct Backstop<'a>(&'a Cluster);

fn failure_policy(c: &Cluster, policy: &str) {
    let patch = json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": policy}]);
    c.admin(&[
        "patch",
        "validatingwebhookconfiguration",
        CONFIG,
        "--type=json",
        "-p",
        &patch.to_string(),
    ])
    .ok();
}

impl<'a> Backstop<'a> {
    fn new(c: &'a Cluster, policy_file: &Path) -> Backstop<'a> {
        install_policy(c, policy_file);
        failure_policy(c, "Ignore");
        Backstop(c)
    }
}

impl Drop for Backstop<'_> {
    fn drop(&mut self) {
        uninstall_policy(self.0);
        failure_policy(self.0, "Fail");
    }
}

fn uninstall_policy(c: &Cluster) {
    c.admin(&[
        "delete",
        "validatingadmissionpolicybinding",
        POLICY,
        "--ignore-not-found",
    ])
    .ok();
    c.admin(&[
        "delete",
        "validatingadmissionpolicy",
        POLICY,
        "--ignore-not-found",
    ])
    .ok();
    wait_until("the policy to be out of force", 30, || {
        let run = probe(c);
        run.code == 0 && !run.stderr.contains("ValidatingAdmissionPolicy")
    });
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn the_policy_decides_every_case_file_as_the_webhook_does() {
    let mut env = env();
    env.cluster.require_release(30, VAP_V1);
    let enforce_file = fixtures().join("policy.yaml");
    let warn_file = fixtures().join("policy-warn.yaml");
    let enforce = finalizer_guard::policy::load(&enforce_file).unwrap();
    let warn = finalizer_guard::policy::load(&warn_file).unwrap();
    let mut excluded = Vec::new();
    let enforce_cases = cases("cases", &enforce, &mut excluded);
    let warn_cases = cases("cases-warn", &warn, &mut excluded);
    let all: Vec<&Case> = enforce_cases.iter().chain(&warn_cases).collect();
    prepare(&env.cluster, &all);

    // Only the webhook, judging Kubernetes' own controllers too.
    env.set_conditions(Conditions::JudgeBuiltins);
    env.set_policy(&std::fs::read_to_string(&enforce_file).unwrap());
    let webhook = run_phase(&env.cluster, &enforce_cases, "wh", &denied());
    env.set_policy(&std::fs::read_to_string(&warn_file).unwrap());
    let webhook_warn = run_phase(&env.cluster, &warn_cases, "whw", &denied());
    env.set_conditions(Conditions::Shipped);

    // Only the policy.
    env.stop();
    let c = &env.cluster;
    let only_policy = OnlyPolicy::new(c);
    install_policy(c, &enforce_file);
    wait_until("the enforcing policy to be in force", 30, || {
        probe(c).stderr.contains(&policy_denial())
    });
    let vap = run_phase(c, &enforce_cases, "vap", &policy_denial());
    install_policy(c, &warn_file);
    wait_until("the warning policy to be in force", 30, || {
        let run = probe(c);
        run.code == 0
            && run
                .stderr
                .contains("Warning: Validation failed for ValidatingAdmissionPolicy")
    });
    let vap_warn = run_phase(c, &warn_cases, "vapw", &policy_denial());
    uninstall_policy(c);

    for (cases, suffix) in [
        (&enforce_cases, "wh"),
        (&warn_cases, "whw"),
        (&enforce_cases, "vap"),
        (&warn_cases, "vapw"),
    ] {
        clean_up(c, cases, suffix);
    }
    drop(only_policy);
    env.start();

    let mut differ = Vec::new();
    let mut equal = 0;
    for (cases, webhook, vap) in [
        (&enforce_cases, &webhook, &vap),
        (&warn_cases, &webhook_warn, &vap_warn),
    ] {
        for ((case, by_webhook), by_policy) in cases.iter().zip(webhook).zip(vap) {
            // In warn mode, what enforce would deny is allowed with a warning, both ways.
            let warns = case.verdict == Verdict::WouldDeny;
            if by_webhook.allowed == case.allowed
                && by_policy.allowed == case.allowed
                && (!warns || (by_webhook.warned && by_policy.warned))
            {
                equal += 1;
            } else {
                differ.push(format!(
                    "{}: the webhook decides {}; with only the webhook {by_webhook:?}, with only the policy {by_policy:?}",
                    case.file, case.verdict
                ));
            }
        }
    }
    println!(
        "{equal} case files replayed: the same decision with only the webhook and with only the policy"
    );
    for e in &excluded {
        println!("  excluded: {e}");
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    assert_eq!(equal, enforce_cases.len() + warn_cases.len());
    assert!(equal >= 65, "only {equal} case files replayed");
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn with_the_webhook_down_the_policy_still_guards() {
    let mut env = env();
    env.cluster.require_release(30, VAP_V1);
    let policy_file = env.work.join("backstop-policy.yaml");
    std::fs::write(&policy_file, env.policy(Policy::default())).unwrap();
    let ns = "e2e-backstop";
    env.cluster.namespace(ns);
    env.cluster
        .apply(&configmap(ns, "guarded", &["example.com/cleanup"]));

    // The backstop: the policy installed, the webhook failing open, and down.
    env.stop();
    let c = &env.cluster;
    let backstop = Backstop::new(c, &policy_file);
    let strip = [
        "patch",
        "configmap",
        "guarded",
        "-n",
        ns,
        "--type=merge",
        "-p",
        STRIP,
    ];
    let dry_run: Vec<&str> = strip.iter().copied().chain(["--dry-run=server"]).collect();
    wait_until("the policy to be in force", 30, || {
        let run = c.kubectl("alice", &dry_run);
        run.code == 1 && run.stderr.contains(&policy_denial())
    });
    let run = c.kubectl("alice", &strip).refused(&policy_denial());
    assert_prints_on_stderr(
        &run,
        &[
            "example.com/cleanup",
            "\"guarded\"",
            "\"alice\"",
            OVERRIDE,
            "node-lost",
        ],
    );
    // An override that is not valid is named as such.
    c.kubectl(
        "alice",
        &["delete", "configmap", "guarded", "-n", ns, "--wait=false"],
    )
    .ok();
    c.kubectl(
        "alice",
        &[
            "annotate",
            "configmap",
            "guarded",
            "-n",
            ns,
            &format!("{OVERRIDE}=node-lost:"),
        ],
    )
    .ok();
    c.kubectl("alice", &strip).refused("DETAIL is empty");
    // A character newer than kube-apiserver's Unicode tables (U+1FA89 HARP,
    // Unicode 16; Go's are 15.0) is no visible character there: refused,
    // where the webhook, on newer tables, takes it.
    let harp = "node-lost: \u{1FA89}";
    let policy = finalizer_guard::policy::load(&policy_file).unwrap();
    let allowed = |value: &str| {
        let review = finalizer_guard::admission::ReviewBuilder::pod_update("alice")
            .finalizers(json!(["example.com/cleanup"]), json!([]))
            .annotate(OVERRIDE, value)
            .to_vec();
        finalizer_guard::admission::review(&policy, &review)
            .unwrap()
            .allowed()
    };
    assert!(allowed(harp), "the webhook takes {harp:?}");
    c.kubectl(
        "alice",
        &[
            "annotate",
            "--overwrite",
            "configmap",
            "guarded",
            "-n",
            ns,
            &format!("{OVERRIDE}={harp}"),
        ],
    )
    .ok();
    c.kubectl("alice", &strip)
        .refused("control or format character");
    // A valid one releases the object, and kube-apiserver's audit log says why.
    c.kubectl(
        "alice",
        &[
            "annotate",
            "--overwrite",
            "configmap",
            "guarded",
            "-n",
            ns,
            &format!("{OVERRIDE}=controller-uninstalled: INC-4711 backstop test"),
        ],
    )
    .ok();
    c.kubectl("alice", &strip).ok();
    wait_until("the released configmap to go", 30, || {
        c.get(&["configmap", "guarded", "-n", ns]).is_none()
    });
    let audit = env.apiserver_audit();
    let event = audit
        .iter()
        .rev()
        .find(|e| {
            e["objectRef"]["name"] == "guarded"
                && e["objectRef"]["namespace"] == ns
                && e["annotations"]["finalizer-guard/decision"] == "override"
        })
        .expect("an audit event with the policy's annotations");
    assert_eq!(
        event["annotations"]["finalizer-guard/override-reason"],
        "controller-uninstalled"
    );
    assert_eq!(
        event["annotations"]["finalizer-guard/removed-finalizers"],
        "example.com/cleanup"
    );

    // Kubernetes' own controllers, decided by the policy's table: a
    // foreground deletion and a namespace deletion complete.
    c.apply(&deployment(ns, "fg", 0));
    delete_in_foreground(&env, "deployment", "fg", ns);
    let doomed = "e2e-backstop-doomed";
    c.namespace(doomed);
    c.apply(&configmap(doomed, "content", &[]));
    c.admin(&["delete", "namespace", doomed, "--timeout=60s"])
        .ok();

    // Back as the other scenarios expect it.
    drop(backstop);
    env.start();
    env.cluster
        .admin(&["delete", "namespace", ns, "--wait=false"])
        .ok();
}

/// The seed's strips through every path, and Kubernetes' own controllers
/// at work: with the policy alone (no webhook configuration at all), then
/// with the backstop, the webhook failing open and down.
#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn with_the_policy_alone_and_as_the_backstop_every_path_is_guarded_and_every_controller_completes()
{
    let mut env = env();
    env.cluster.require_release(30, VAP_V1);
    let policy_file = env.work.join("every-path-policy.yaml");
    std::fs::write(&policy_file, env.policy(Policy::default())).unwrap();
    for backstop in [false, true] {
        env.stop();
        {
            let c = &env.cluster;
            let (mut only_policy, mut with_webhook) = (None, None);
            if backstop {
                with_webhook = Some(Backstop::new(c, &policy_file));
            } else {
                only_policy = Some(OnlyPolicy::new(c));
                install_policy(c, &policy_file);
            }
            wait_until("the policy to be in force", 30, || {
                probe(c).stderr.contains(&policy_denial())
            });
            let tag = if backstop { "backstop" } else { "vap" };
            strips_are_refused_through_every_path(
                &env,
                &format!("e2e-{tag}-paths"),
                &policy_denial(),
            );
            builtin_controllers_complete(&env, tag);
            drop((only_policy, with_webhook));
        }
        env.start();
    }
}

/// A policy of `rules` rules, each one name: all naming the group `g-all`,
/// or each its own user.
fn policy_of(rules: usize, shared_group: bool) -> String {
    let mut yaml = String::from("mode: enforce\nrules:\n");
    for r in 0..rules {
        let who = if shared_group {
            "groups: [g-all]".to_string()
        } else {
            format!("users: [user-{r:04}@example.com]")
        };
        yaml.push_str(&format!(
            "  - name: rule-{r:04}\n    finalizers: [team-{r:04}.example.com/finalizer]\n    {who}\n"
        ));
    }
    yaml
}

/// The most rules of [`policy_of`] the export takes.
fn largest(shared_group: bool) -> usize {
    let exports = |n: usize| {
        finalizer_guard::offline::vap::export(
            &GuardPolicy::from_yaml(&policy_of(n, shared_group)).unwrap(),
        )
        .is_ok()
    };
    let (mut ok, mut refused) = (1, 4096);
    while refused - ok > 1 {
        let mid = (ok + refused) / 2;
        if exports(mid) {
            ok = mid
        } else {
            refused = mid
        }
    }
    ok
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn the_largest_policies_the_export_takes_are_accepted_and_decided() {
    use finalizer_guard::offline::vap::{MAX_EXPRESSION_CODE_POINTS, MAX_FINALIZERS};
    let mut env = env();
    env.cluster.require_release(30, VAP_V1);
    env.stop();
    let c = &env.cluster;
    let only_policy = OnlyPolicy::new(c);
    grant(c);
    let ns = "e2e-vap-limits";
    c.namespace(ns);
    let dir = env.work.join("vap-limits");
    std::fs::create_dir_all(&dir).unwrap();
    let export = |yaml: &str| {
        let file = dir.join("policy.yaml");
        std::fs::write(&file, yaml).unwrap();
        let out = std::process::Command::new(super::harness::bin())
            .args(["policy", "export", "--vap"])
            .arg(&file)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };

    // The size of one expression: the largest policy of one-name rules, each
    // its own user, is accepted; one more character is not, by the export
    // nor by kube-apiserver.
    let n = largest(false);
    let (code, _, stderr) = export(&policy_of(n + 1, false));
    assert_eq!(code, Some(1));
    assert!(stderr.contains("characters of CEL"), "{stderr}");
    let (code, yaml, _) = export(&policy_of(n, false));
    assert_eq!(code, Some(0));
    c.kubectl_in("admin", &["apply", "-f", "-"], Some(&yaml))
        .ok();
    // The same objects, the rules expression grown past the limit by a comment.
    let mut documents: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let variables = documents[0]["spec"]["variables"].as_array_mut().unwrap();
    let rules = variables.iter_mut().find(|v| v["name"] == "rules").unwrap();
    let expression = rules["expression"].as_str().unwrap().to_string();
    let size = expression.chars().count();
    assert!(size <= MAX_EXPRESSION_CODE_POINTS);
    let comment = format!("// {}\n", "x".repeat(MAX_EXPRESSION_CODE_POINTS - size));
    rules["expression"] = json!(format!("{comment}{expression}"));
    let padded: Vec<String> = documents
        .iter()
        .map(|d| serde_yaml_ng::to_string(d).unwrap())
        .collect();
    let padded = padded.join("---\n");
    let run = c.kubectl_in("admin", &["apply", "-f", "-"], Some(&padded));
    assert_eq!(run.code, 1, "exit {}", run.code);
    let why = run
        .stderr
        .rsplit("compilation failed: ")
        .next()
        .unwrap_or("")
        .trim();
    assert!(
        why.contains("expression code point size exceeds limit"),
        "{why}"
    );
    println!(
        "largest policy of one-name rules, one user each: {n} rules ({size} characters of CEL); one character more: {why}"
    );

    // The cost of one expression: the largest policy whose every rule covers
    // one requester (all name its group), and the longest lists judged.
    let n = largest(true);
    let (code, _, stderr) = export(&policy_of(n + 1, true));
    assert_eq!(code, Some(1));
    assert!(stderr.contains("over its limit"), "{stderr}");
    let (_, yaml, _) = export(&policy_of(n, true));
    c.kubectl_in("admin", &["apply", "-f", "-"], Some(&yaml))
        .ok();
    let names = |count: usize, tag: &str| -> Vec<String> {
        (0..count)
            .map(|i| format!("example.com/{tag}-{i:04}"))
            .collect()
    };
    for count in [MAX_FINALIZERS, MAX_FINALIZERS + 1] {
        c.apply(&configmap(
            ns,
            &format!("cm-{count}"),
            &names(count, "f")
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        ));
        c.apply(&json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": format!("{ns}-{count}"), "finalizers": names(count, "m")},
            // kube-apiserver adds `kubernetes` to spec.finalizers.
            "spec": {"finalizers": names(count - 1, "s")}}));
    }
    let group = format!("--as-group={GROUP}");
    let strip = |args: &[&str]| {
        let mut full = args.to_vec();
        full.extend([
            "--dry-run=server",
            "--as=member",
            "--as-group=g-all",
            &group,
        ]);
        let start = std::time::Instant::now();
        let run = c.kubectl("admin", &full);
        (run, start.elapsed())
    };
    wait_until("the largest policy to be in force", 30, || {
        strip(&[
            "patch",
            "configmap",
            &format!("cm-{MAX_FINALIZERS}"),
            "-n",
            ns,
            "--type=merge",
            "-p",
            STRIP,
        ])
        .0
        .stderr
        .contains(&policy_denial())
    });
    let (run, took) = strip(&[
        "patch",
        "configmap",
        &format!("cm-{MAX_FINALIZERS}"),
        "-n",
        ns,
        "--type=merge",
        "-p",
        STRIP,
    ]);
    run.refused(&format!(
        "{}: finalizer-guard denied removing finalizers",
        policy_denial()
    ));
    println!(
        "{n} rules covering the requester, {MAX_FINALIZERS} finalizers removed: decided in {took:?} (kubectl included)"
    );
    // A namespace's both lists through finalize, the most expensive write.
    let ns_max = format!("{ns}-{MAX_FINALIZERS}");
    let mut body = c.get(&["namespace", &ns_max]).unwrap();
    body["spec"]["finalizers"] = json!([]);
    body["metadata"]["finalizers"] = json!([]);
    let path = format!("/api/v1/namespaces/{ns_max}/finalize?dryRun=All");
    let start = std::time::Instant::now();
    let run = c.kubectl_in(
        "admin",
        &[
            "replace",
            "--raw",
            &path,
            "-f",
            "-",
            "--as=member",
            "--as-group=g-all",
            &format!("--as-group={GROUP}"),
        ],
        Some(&body.to_string()),
    );
    let took = start.elapsed();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("denied removing finalizers"), "{run:?}");
    println!(
        "the same through namespaces/finalize, {MAX_FINALIZERS} metadata and {MAX_FINALIZERS} spec finalizers: decided in {took:?}"
    );
    let (run, _) = strip(&[
        "patch",
        "configmap",
        &format!("cm-{}", MAX_FINALIZERS + 1),
        "-n",
        ns,
        "--type=merge",
        "-p",
        STRIP,
    ]);
    run.refused(&format!("more than {MAX_FINALIZERS} finalizers"));

    // Without the bound on list lengths, the same policy and 4 times as many
    // finalizers: over kube-apiserver's cost limit, the write is refused
    // for that, not judged.
    let unbounded = yaml.replace(&format!("> {MAX_FINALIZERS}"), "> 100000");
    assert_ne!(unbounded, yaml);
    c.kubectl_in("admin", &["apply", "-f", "-"], Some(&unbounded))
        .ok();
    c.apply(&configmap(
        ns,
        "cm-4x",
        &names(4 * MAX_FINALIZERS, "f")
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    ));
    wait_until("the unbounded policy to be over its cost limit", 30, || {
        strip(&[
            "patch",
            "configmap",
            "cm-4x",
            "-n",
            ns,
            "--type=merge",
            "-p",
            STRIP,
        ])
        .0
        .stderr
        .contains("cost limit exceeded")
    });

    uninstall_policy(c);
    for count in [MAX_FINALIZERS, MAX_FINALIZERS + 1] {
        c.admin(&[
            "patch",
            "namespace",
            &format!("{ns}-{count}"),
            "--type=merge",
            "-p",
            STRIP,
        ]);
        c.admin(&[
            "delete",
            "namespace",
            &format!("{ns}-{count}"),
            "--wait=false",
        ]);
    }
    for name in [
        format!("cm-{MAX_FINALIZERS}"),
        format!("cm-{}", MAX_FINALIZERS + 1),
        "cm-4x".to_string(),
    ] {
        c.admin(&[
            "patch",
            "configmap",
            &name,
            "-n",
            ns,
            "--type=merge",
            "-p",
            STRIP,
        ]);
    }
    c.admin(&["delete", "namespace", ns, "--wait=false"]);
    drop(only_policy);
    env.start();
}
