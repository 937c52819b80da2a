//! `helm upgrade`: the policy checked before the pods roll, values changed
//! and kept; `helm uninstall` leaving nothing behind.

use super::*;

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
