//! The backstop (the exported ValidatingAdmissionPolicy) guarding while no
//! webhook pod runs, and refusing an export older than the policy.

use super::*;

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
