//! Seed 000: a node dies; its pods stay guarded, and unstick releases
//! them. It kills a node: it runs last.

use super::*;

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
