//! The on-call ClusterRole the chart ships (`manifests/base/oncall.yaml`,
//! installed with the rest of `manifests/`) is all `doctor --cluster`,
//! `unstick` and `approve` need: they run as the user `oncall`, whom
//! `e2e/cluster.sh` gives no group and no binding, bound to that role alone.
//! The two incidents are docs/runbook.md's, with its commands. It reads no
//! Secrets and releases only the types it lists: an object of another type
//! is refused until a ClusterRole labelled to join it grants the type.

use serde_json::{Value, json};

use super::harness::{Cluster, OVERRIDE, Policy, env, wait_until};
use super::unstick::not_ready_node;
use super::{CNI, SEAL, configmap, delete_nowait, finalizers, pod, unavailable_apiservice};
use crate::common::assert::assert_prints;

const USER: &str = "oncall";
const ROLE: &str = "finalizer-guard-oncall";
const BINDING: &str = "e2e-oncall";
/// A ClusterRole of the cluster's own that adds ConfigMaps to the role.
const MORE: &str = "e2e-oncall-configmaps";

/// The binding of `oncall` to the role, removed when the scenario ends.
struct Bound<'a>(&'a Cluster);

impl<'a> Bound<'a> {
    fn new(c: &'a Cluster) -> Bound<'a> {
        c.apply(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": BINDING},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        }));
        Bound(c)
    }
}

impl Drop for Bound<'_> {
    fn drop(&mut self) {
        self.0.admin(&[
            "delete",
            "clusterrolebinding",
            BINDING,
            "--ignore-not-found",
        ]);
        self.0
            .admin(&["delete", "clusterrole", MORE, "--ignore-not-found"]);
    }
}

/// `kubectl auth can-i VERB RESOURCE -A` as `oncall`.
fn can_i(c: &Cluster, verb: &str, resource: &str) -> bool {
    let run = c.kubectl(USER, &["auth", "can-i", verb, resource, "-A"]);
    run.stdout.trim() == "yes"
}

/// Whether a line of a report says the API server refused a read.
fn forbidden(text: &str) -> bool {
    text.contains("forbidden") || text.contains("(403)")
}

#[test]
#[ignore = "needs a cluster (FG_E2E_DIR): see .ci/run"]
fn the_oncall_role_alone_runs_doctor_unstick_and_approve() {
    let mut env = env();
    let c = env.cluster.clone();
    let c = &c;
    assert!(
        c.kubeconfig(USER).is_file(),
        "{} has no user oncall: it was started by an e2e/cluster.sh that made none; start it afresh (down, then up)",
        c.dir.display()
    );
    c.admin(&[
        "delete",
        "clusterrolebinding",
        BINDING,
        "--ignore-not-found",
    ])
    .ok();
    c.admin(&["delete", "clusterrole", MORE, "--ignore-not-found"])
        .ok();
    assert!(
        c.get(&["clusterrole", ROLE]).is_some(),
        "manifests/ installs {ROLE}"
    );
    let (ns, node) = ("e2e-oncall", "oncall-lost-1");
    c.namespace(ns);
    not_ready_node(&env, node);
    for name in ["web-0", "web-1"] {
        c.apply(&pod(ns, name, Some(node), &[CNI]));
        delete_nowait(&env, &["pod", name, "-n", ns]);
    }

    // Without the role, oncall may do nothing of this: the role is what grants it.
    let run = c.finalizer_guard(USER, &["doctor", "--cluster"]);
    assert_ne!(run.code, 0, "{run:#?}");
    assert!(
        forbidden(&format!("{}{}", run.stdout, run.stderr)),
        "{run:#?}"
    );
    let run = c.finalizer_guard(USER, &["unstick", "--node", node]);
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(forbidden(&run.stderr), "{run:#?}");

    let _bound = Bound::new(c);
    wait_until("the binding to take effect", 30, || {
        can_i(c, "patch", "pods")
    });
    // What it does not grant: no Secrets, no patch of the guard's policy or
    // webhook configuration, of workloads or of CRDs.
    for (verb, resource) in [
        ("get", "secrets"),
        ("list", "secrets"),
        ("patch", "secrets"),
        ("patch", "configmaps"),
        ("patch", "deployments.apps"),
        (
            "patch",
            "validatingwebhookconfigurations.admissionregistration.k8s.io",
        ),
        ("patch", "customresourcedefinitions.apiextensions.k8s.io"),
        ("create", "pods"),
        ("update", "configmaps"),
        ("delete", "configmaps"),
        ("impersonate", "users"),
        ("escalate", "clusterroles"),
        ("bind", "clusterroles"),
        ("create", "serviceaccounts/token"),
        ("create", "pods/exec"),
    ] {
        assert!(!can_i(c, verb, resource), "{ROLE} grants {verb} {resource}");
    }

    // doctor --cluster: every type read but Secrets (and custom resources
    // no ClusterRole aggregated to `view` grants), under the cluster's
    // policy; incomplete, so exit 1.
    let run = c.finalizer_guard(USER, &["doctor", "--cluster", "-o", "json"]);
    assert_eq!(run.code, 1, "{run:#?}");
    let report: Value = serde_json::from_str(&run.stdout).expect("a JSON report");
    assert_eq!(
        report["policy"]["name"], "configmap finalizer-guard/finalizer-guard-policy",
        "the policy read through the role: {report:#}"
    );
    let unreadable = report["unreadable"].as_array().cloned().unwrap_or_default();
    let refused: Vec<&str> = unreadable
        .iter()
        .filter(|u| forbidden(&u.to_string()))
        .map(|u| u["type"].as_str().unwrap_or_default())
        .collect();
    assert!(
        refused.iter().any(|t| t.starts_with("secrets ")),
        "Secrets are refused: {unreadable:#?}"
    );
    for t in &refused {
        let group = t.split(' ').next().unwrap().split_once('.').map(|(_, g)| g);
        // Kubernetes' own groups end in k8s.io; those of x-k8s.io are
        // custom resources (Cluster API's, whose CRDs other scenarios apply).
        let builtin = |g: &str| g.ends_with("k8s.io") && !g.ends_with("x-k8s.io");
        assert!(
            t.starts_with("secrets ") || group.is_some_and(|g| !builtin(g) && g.contains('.')),
            "only Secrets and custom resources are refused: {t} ({unreadable:#?})"
        );
    }
    assert!(!forbidden(&run.stderr), "{run:#?}");

    // Incident 1: pods stuck Terminating on a dead node, held by a CNI finalizer.
    let run = c.finalizer_guard(USER, &["unstick", "--node", node]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_prints(
        &run,
        &[
            &format!("pod/web-0 -n {ns}: Terminating for"),
            CNI,
            &format!("owner alive: no: node {node} Ready=Unknown"),
            &format!("may leak:  node {node}"),
        ],
    );
    let run = c.finalizer_guard(
        USER,
        &[
            "unstick",
            "--node",
            node,
            "--reason",
            "node-lost",
            "--detail",
            "INC-4900 oncall-lost-1 powered off, pod IPs released by hand",
            "--force-delete",
        ],
    );
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stdout
            .contains("released 2 of 2 object(s), 0 already gone, 2 force-deleted"),
        "{}",
        run.stdout
    );
    for name in ["web-0", "web-1"] {
        assert!(c.get(&["pod", name, "-n", ns]).is_none(), "{name} is gone");
    }
    let overrides = |records: &[Value]| {
        records
            .iter()
            .filter(|r| {
                r["decision"] == "override"
                    && r["user"] == USER
                    && r["namespace"] == ns
                    && r["dryRun"] != true
            })
            .count()
    };
    let records = env.audit_records_when(|r| overrides(r) >= 2);
    assert_eq!(
        overrides(&records),
        2,
        "each release went through the webhook"
    );

    // Incident 2: a namespace stuck Terminating on an unavailable APIService.
    {
        let api = unavailable_apiservice(&env, "v1alpha1", "oncall.e2e.example.com");
        let stuck = "e2e-oncall-stuck";
        c.namespace(stuck);
        c.admin(&["delete", "namespace", stuck, "--wait=false"])
            .ok();
        wait_until("the namespace to report its discovery failure", 90, || {
            c.get(&["namespace", stuck]).unwrap()["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c["type"] == "NamespaceDeletionDiscoveryFailure" && c["status"] == "True"
                    })
                })
        });
        let target = format!("namespace/{stuck}");
        let run = c.finalizer_guard(USER, &["unstick", &target]);
        assert_eq!(run.code, 0, "{run:#?}");
        assert!(
            run.stdout.contains(&format!(
                "blocked by: APIService {} is not Available",
                api.1
            )),
            "{}",
            run.stdout
        );
        let run = c.finalizer_guard(
            USER,
            &[
                "unstick",
                &target,
                "--orphan-contents",
                "--reason",
                "apiservice-unavailable",
                "--detail",
                "INC-4901 v1alpha1.oncall.e2e.example.com has no backend",
            ],
        );
        assert_eq!(run.code, 0, "{run:#?}");
        assert!(
            run.stdout
                .contains(&format!("{target} released: removed kubernetes")),
            "{}",
            run.stdout
        );
        wait_until("the namespace to be gone", 30, || {
            c.get(&["namespace", stuck]).is_none()
        });
    }

    // The two-person override: oncall approves, someone else releases.
    let policy = env.policy(Policy {
        approval: Some(json!({"users": [USER], "maxAge": "2h"})),
        ..Policy::default()
    });
    env.set_policy(&policy);
    let cleanup = "example.com/cache-cleanup";
    c.apply(&configmap(ns, "cache", &[cleanup]));
    delete_nowait(&env, &["configmap", "cache", "-n", ns]);
    let (reason, detail) = (
        "controller-uninstalled",
        "INC-4902 the cache operator was uninstalled",
    );
    let approve = [
        "approve",
        "configmap/cache",
        "-n",
        ns,
        "--reason",
        reason,
        "--detail",
        detail,
        "--for",
        "30m",
    ];
    // ConfigMaps are no type the role releases (patching one can change the
    // guard's policy): refused, and nothing written.
    let run = c.finalizer_guard(USER, &approve);
    assert_ne!(run.code, 0, "{run:#?}");
    assert!(
        forbidden(&format!("{}{}", run.stdout, run.stderr)),
        "{run:#?}"
    );
    let untouched = c.get(&["configmap", "cache", "-n", ns]).unwrap();
    assert!(
        untouched["metadata"]["annotations"]["finalizer-guard.io/approved-by"].is_null(),
        "{untouched:#}"
    );
    // A ClusterRole labelled to join the on-call role adds the type, as
    // docs/security.md says (the chart's oncallRole.extraReleasableResources
    // writes the same rule into the role's own).
    c.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": MORE, "labels": {"finalizer-guard.io/aggregate-to-oncall": ROLE}},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "patch"]}],
    }));
    wait_until("the aggregated rule to take effect", 30, || {
        can_i(c, "patch", "configmaps")
    });
    let run = c.finalizer_guard(USER, &approve);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stdout
            .contains(&format!("configmap/cache -n {ns} approved until")),
        "{}",
        run.stdout
    );
    let approved = c.get(&["configmap", "cache", "-n", ns]).unwrap();
    let annotations = &approved["metadata"]["annotations"];
    assert_eq!(annotations["finalizer-guard.io/approved-by"], USER);
    assert!(
        annotations[SEAL].is_string(),
        "sealed by the webhook: {approved:#}"
    );
    assert_eq!(annotations[OVERRIDE], format!("{reason}: {detail}"));
    let run = c.finalizer_guard(
        "carol",
        &[
            "unstick",
            "configmap/cache",
            "-n",
            ns,
            "--reason",
            reason,
            "--detail",
            detail,
        ],
    );
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stdout.contains("(approved by oncall)"),
        "{}",
        run.stdout
    );
    wait_until("the ConfigMap to be gone", 30, || {
        c.get(&["configmap", "cache", "-n", ns])
            .is_none_or(|cm| finalizers(&cm).is_empty())
    });

    let default = env.policy(Policy::default());
    env.set_policy(&default);
    c.admin(&["delete", "namespace", ns, "--wait=false"]).ok();
}
