//! The commands that talk to a cluster, without one (exit 2, `watch`
//! unready) and with a stand-in API server answering as an empty cluster.

use super::*;

#[test]
fn cluster_commands_exit_2_on_usage_and_connection_errors() {
    // Nothing selected.
    let o = run(&["unstick"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("name objects as TYPE/NAME"), "{o:?}");
    // --reason needs --detail; --force-delete needs --reason.
    assert_eq!(
        run(&["unstick", "pods", "--reason", "node-lost"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        run(&["unstick", "pods", "--force-delete"]).status.code(),
        Some(2)
    );
    // Only a server dry run exists.
    let o = run(&["unstick", "pods", "--dry-run=client"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    // No kubeconfig to read: said, and exit 2.
    let o = bin()
        .args(["unstick", "pods", "--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        stderr(&o).contains("kubeconfig: /nonexistent/kubeconfig"),
        "{o:?}"
    );
    // An API server that does not answer: said, with its address.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let o = bin()
        .args([
            "approve",
            "pod/web-0",
            "--reason",
            "node-lost",
            "--detail",
            "INC-1",
            "--for",
            "1h",
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        stderr(&o).contains("cannot reach the API server: https://127.0.0.1:1/"),
        "{o:?}"
    );
}

#[test]
fn watch_waits_unready_for_an_api_server_it_cannot_reach() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = bin()
        .args(["watch", "--admin-listen", &format!("127.0.0.1:{port}")])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let get = |path: &str| {
        let url = format!("http://127.0.0.1:{port}{path}");
        rt.block_on(async {
            let r = reqwest::Client::new().get(url).send().await.ok()?;
            Some((r.status().as_u16(), r.text().await.unwrap_or_default()))
        })
    };
    // Alive, unready, and saying why, past its first retries.
    let readyz = poll_for(Duration::from_secs(30), Duration::from_millis(100), || {
        assert!(child.try_wait().unwrap().is_none(), "watch exited");
        get("/readyz").filter(|answer| answer.1.contains("cannot reach the API server yet"))
    })
    .expect("/readyz never said why it is not ready within 30 s");
    assert_eq!(readyz.0, 503, "{readyz:?}");
    assert!(readyz.1.contains("https://127.0.0.1:1/"), "{readyz:?}");
    // Still running 2 s on, retrying: the time passing is what is under
    // test (it does not give up and exit), not a wait for a condition.
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(child.try_wait().unwrap().is_none(), "watch exited");
    assert_eq!(get("/healthz"), Some((200, "ok\n".to_string())));
    // SIGTERM while waiting: a clean stop.
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stderr(&o).contains("retry_in"), "{o:?}");
}

#[test]
fn doctor_cluster_exits_2_when_it_cannot_talk_to_a_cluster() {
    let o = bin()
        .args([
            "doctor",
            "--cluster",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        stderr(&o).contains("kubeconfig: /nonexistent/kubeconfig"),
        "{o:?}"
    );
    // A kubeconfig without --cluster is a mistake, not ignored.
    let o = run(&["doctor", "--kubeconfig", "/nonexistent/kubeconfig"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("add --cluster"), "{o:?}");
    // -o json is every report's, the offline one's too.
    let o = run(&["doctor", "-o", "json"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["blocked"], serde_json::json!([]), "{report:#}");
}

/// An API server stand-in: enough of kube-apiserver for `doctor --cluster`
/// and `unstick --node` to read an empty cluster whose installed policy
/// (the ConfigMap) is `mode: warn`. Returns its URL (plain HTTP).
async fn empty_cluster() -> String {
    use axum::extract::Request;
    use axum::http::{Method, StatusCode};

    async fn answer(request: Request) -> (StatusCode, [(&'static str, &'static str); 1], String) {
        let json = |status, body: serde_json::Value| {
            (
                status,
                [("content-type", "application/json")],
                body.to_string(),
            )
        };
        let path = request.uri().path().to_string();
        match (request.method().clone(), path.as_str()) {
            (Method::POST, "/apis/authentication.k8s.io/v1/selfsubjectreviews") => json(
                StatusCode::CREATED,
                serde_json::json!({
                    "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                    "metadata": {},
                    "status": {"userInfo": {"username": "carol", "groups": ["sre-oncall"]}},
                }),
            ),
            // The installed webhook, as manifests/ installs it: its
            // configuration, its Service, the Deployment that Service
            // selects, and the ConfigMap that Deployment mounts.
            (
                Method::GET,
                "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            ) => json(
                StatusCode::OK,
                serde_json::json!({
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingWebhookConfigurationList", "metadata": {},
                    "items": [{
                        "metadata": {"name": "finalizer-guard"},
                        "webhooks": [{
                            "name": "finalizers.finalizer-guard.io",
                            "clientConfig": {"service": {"namespace": "finalizer-guard", "name": "finalizer-guard"}},
                            "sideEffects": "None", "admissionReviewVersions": ["v1"],
                        }],
                    }],
                }),
            ),
            (Method::GET, "/api/v1/namespaces/finalizer-guard/services/finalizer-guard") => json(
                StatusCode::OK,
                serde_json::json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "finalizer-guard", "namespace": "finalizer-guard"},
                    "spec": {"selector": {"app.kubernetes.io/name": "finalizer-guard"}},
                }),
            ),
            (Method::GET, "/apis/apps/v1/namespaces/finalizer-guard/deployments") => json(
                StatusCode::OK,
                serde_json::json!({
                    "apiVersion": "apps/v1", "kind": "DeploymentList", "metadata": {},
                    "items": [{
                        "metadata": {"name": "finalizer-guard", "namespace": "finalizer-guard"},
                        "spec": {
                            "selector": {"matchLabels": {"app.kubernetes.io/name": "finalizer-guard"}},
                            "template": {
                                "metadata": {"labels": {"app.kubernetes.io/name": "finalizer-guard"}},
                                "spec": {
                                    "containers": [{
                                        "name": "finalizer-guard",
                                        "args": ["serve", "--policy", "/etc/finalizer-guard/policy/policy.yaml"],
                                        "volumeMounts": [{"name": "policy", "mountPath": "/etc/finalizer-guard/policy"}],
                                    }],
                                    "volumes": [{"name": "policy", "configMap": {"name": "finalizer-guard-policy"}}],
                                },
                            },
                        },
                    }],
                }),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/finalizer-guard/configmaps/finalizer-guard-policy",
            ) => json(
                StatusCode::OK,
                serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "finalizer-guard-policy", "namespace": "finalizer-guard"},
                    "data": {"policy.yaml": "mode: warn\n"},
                }),
            ),
            // Aggregated discovery: no types served.
            (Method::GET, "/api" | "/apis") => json(
                StatusCode::OK,
                serde_json::json!({
                    "apiVersion": "apidiscovery.k8s.io/v2", "kind": "APIGroupDiscoveryList",
                    "metadata": {}, "items": [],
                }),
            ),
            // Every other list is empty: namespaces, APIServices, pods on a node.
            (Method::GET, _) => json(
                StatusCode::OK,
                serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": []}),
            ),
            _ => json(
                StatusCode::NOT_FOUND,
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
            ),
        }
    }

    let app = axum::Router::new().fallback(answer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_commands_judge_the_clusters_policy_whatever_the_environment_says() {
    let url = empty_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: '{url}'}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
        ),
    )
    .unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap().to_string();
    // What `serve`'s environment would hold: another policy, that blocks
    // Kubernetes' own controllers.
    let (_env_dir, env_policy) = policy_file("mode: enforce\nbuiltinControllers: false\n");
    let (_flag_dir, flag_policy) = policy_file("mode: enforce\n");
    let env_policy = env_policy.to_str().unwrap().to_string();
    let flag_policy = flag_policy.to_str().unwrap().to_string();
    let run = |args: Vec<&str>| {
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        let env_policy = env_policy.clone();
        tokio::task::spawn_blocking(move || {
            bin()
                .args(&args)
                .env("FINALIZER_GUARD_POLICY", &env_policy)
                .output()
                .unwrap()
        })
    };

    // doctor --cluster judges the ConfigMap's policy, and says the environment was not read.
    let o = run(vec![
        "doctor",
        "--cluster",
        "-o",
        "json",
        "--kubeconfig",
        &kubeconfig,
    ])
    .await
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        report["policy"]["name"], "configmap finalizer-guard/finalizer-guard-policy",
        "{report:#}"
    );
    assert_eq!(report["mode"], "warn", "{report:#}");
    assert_eq!(report["complete"], true, "{report:#}");
    assert!(
        stderr(&o).contains("FINALIZER_GUARD_POLICY is set, and doctor --cluster does not read it"),
        "{o:?}"
    );
    // --policy on the command line does replace it.
    let o = run(vec![
        "doctor",
        "--cluster",
        "-o",
        "json",
        "--kubeconfig",
        &kubeconfig,
        "--policy",
        &flag_policy,
    ])
    .await
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["policy"]["name"], flag_policy.as_str(), "{report:#}");
    assert_eq!(report["mode"], "enforce", "{report:#}");
    assert!(!stderr(&o).contains("FINALIZER_GUARD_POLICY"), "{o:?}");

    // unstick explains under the cluster's policy too.
    let o = run(vec![
        "unstick",
        "--node",
        "worker-9",
        "--kubeconfig",
        &kubeconfig,
    ])
    .await
    .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        stdout(&o).contains(
            "as carol under configmap finalizer-guard/finalizer-guard-policy (mode warn):"
        ),
        "{o:?}"
    );
    assert!(stdout(&o).contains("no stuck objects found"), "{o:?}");

    // Every report names the context, the API server and the user, in
    // text and JSON, explaining and releasing (dry run) alike.
    let server = format!("{url}/");
    let line = format!("cluster: context \"x\", API server \"{server}\", as \"carol\"");
    assert!(stdout(&o).contains(&line), "{line}\n{o:?}");
    for args in [
        vec!["doctor", "--cluster"],
        vec!["unstick", "--node", "worker-9"],
        vec![
            "unstick",
            "--node",
            "worker-9",
            "--reason",
            "node-lost",
            "--detail",
            "INC-1",
            "--dry-run",
            "server",
        ],
    ] {
        let with = |more: &[&'static str]| {
            let mut all = args.clone();
            all.extend(["--kubeconfig", kubeconfig.as_str()]);
            all.extend(more);
            all
        };
        let o = run(with(&[])).await.unwrap();
        assert!(stdout(&o).contains(&line), "{args:?}: {line}\n{o:?}");
        let o = run(with(&["-o", "json"])).await.unwrap();
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            report["cluster"],
            serde_json::json!({"context": "x", "server": server}),
            "{args:?}: {report:#}"
        );
        assert_eq!(report["user"]["username"], "carol", "{args:?}: {report:#}");
    }

    // Offline, doctor reads the environment as before: that policy blocks
    // the built-in controllers.
    let o = run(vec!["doctor"]).await.unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stdout(&o).contains("BLOCKED"), "{o:?}");
}
