//! The server over real TLS, driven by a real HTTP client.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::assert::assert_contains_all;
use common::wait::wait_until;
use common::{pod, start, strip, update};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denies_the_seed_strip_and_allows_it_with_an_override() {
    let server = start(None).await;
    let denied = server.review(&strip("alice", Value::Null)).await;
    let response = &denied["response"];
    assert_eq!(response["uid"], "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4");
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    let message = response["status"]["message"].as_str().unwrap();
    assert_contains_all(
        "the denial's message",
        message,
        &[
            "example.com/cleanup",
            "web-0",
            "alice",
            "finalizer-guard.io/override",
            "node-lost",
        ],
    );

    let overridden = server
        .review(&strip(
            "alice",
            json!({"finalizer-guard.io/override": "node-lost: INC-4711 server-1 powered off"}),
        ))
        .await;
    assert_eq!(overridden["response"]["allowed"], true);
    assert_eq!(
        overridden["response"]["auditAnnotations"]["override-reason"],
        "node-lost"
    );
    assert!(
        !overridden["response"]["warnings"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    let metrics = server.metrics().await;
    assert!(
        metrics.contains(
            r#"finalizer_guard_reviews_total{operation="UPDATE",decision="denied",group="core"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics
            .contains(r#"finalizer_guard_reviews_total{operation="UPDATE",decision="override",group="core"} 1"#),
        "{metrics}"
    );
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speaks_http1_keep_alive_and_http2() {
    let server = start(None).await;
    for _ in 0..3 {
        let response = server
            .post(serde_json::to_vec(&strip("alice", Value::Null)).unwrap())
            .await;
        assert_eq!(response.version(), reqwest::Version::HTTP_11);
        assert_eq!(response.status(), 200);
    }
    let h2 = common::client(&server.ca_pem, server.handle.addr, &[b"h2", b"http/1.1"]);
    let response = h2
        .post(format!("{}/validate", server.url))
        .body(serde_json::to_vec(&strip("alice", Value::Null)).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["response"]["allowed"], false);
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_status_and_the_server_keeps_serving() {
    let server = start(None).await;
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"not json".to_vec(), 400, "not JSON"),
        (b"[]".to_vec(), 400, "not an AdmissionReview"),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            400,
            "no request",
        ),
        (vec![b' '; 9 * 1024 * 1024], 413, "exceeds"),
    ];
    for (body, status, reason) in cases {
        let response = server.post(body).await;
        assert_eq!(response.status().as_u16(), status);
        let text = response.text().await.unwrap();
        assert!(text.contains(reason), "{text}");
        assert_eq!(text.trim_end().lines().count(), 1, "{text}");
    }
    let get = server
        .https
        .get(format!("{}/validate", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 405);
    let missing = server
        .https
        .post(format!("{}/mutate", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    let still = server.review(&strip("alice", Value::Null)).await;
    assert_eq!(still["response"]["allowed"], false);
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"finalizer_guard_rejected_requests_total{code="413"} 1"#),
        "{metrics}"
    );
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decides_a_large_configmap_update() {
    let server = start(None).await;
    let data: serde_json::Map<String, Value> = (0..130)
        .map(|i| (format!("key-{i}"), Value::String("x".repeat(10_000))))
        .collect();
    let configmap = |finalizers: Value| {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "big", "namespace": "team-a", "finalizers": finalizers},
            "data": data,
        })
    };
    let mut review = update(
        "alice",
        configmap(json!(["kubernetes"])),
        configmap(json!([])),
    );
    review["request"]["resource"] = json!({"group": "", "version": "v1", "resource": "configmaps"});
    review["request"]["name"] = json!("big");
    let body = serde_json::to_vec(&review).unwrap();
    assert!(body.len() > 2_600_000, "{}", body.len());
    let response: Value = server.post(body).await.json().await.unwrap();
    assert_eq!(response["response"]["allowed"], false);
    let message = response["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("configmaps \"big\" in namespace \"team-a\""),
        "{message}"
    );
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_on_both_ports_and_unready_while_draining() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.shutdown_delay = Duration::from_millis(800);
    let handle = finalizer_guard::server::start(config).await.unwrap();
    let ca = std::fs::read(handle.dev_ca.as_ref().unwrap()).unwrap();
    let https = common::client(&ca, handle.addr, &[b"http/1.1"]);
    let url = format!("https://{}:{}", common::SERVICE_NAME, handle.addr.port());
    let admin = format!("http://{}", handle.admin_addr);
    for probe in ["healthz", "readyz"] {
        assert_eq!(
            https
                .get(format!("{url}/{probe}"))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
        assert_eq!(
            reqwest::get(format!("{admin}/{probe}"))
                .await
                .unwrap()
                .status(),
            200
        );
    }
    let state = handle.state.clone();
    let draining = tokio::spawn(handle.shutdown());
    wait_until(
        "the server to turn unready",
        Duration::from_secs(5),
        async || !state.ready.load(Ordering::Relaxed),
    )
    .await;
    assert_eq!(
        reqwest::get(format!("{admin}/readyz"))
            .await
            .unwrap()
            .status(),
        503
    );
    // Still answering reviews while endpoints catch up.
    let body = serde_json::to_vec(&strip("alice", Value::Null)).unwrap();
    let response = https
        .post(format!("{url}/validate"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    draining.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_reloads_and_a_bad_policy_keeps_the_good_one() {
    let allow_alice = "rules:\n  - finalizers: [example.com/cleanup]\n    users: [alice]\n";
    let server = start(Some(allow_alice)).await;
    let allowed = server.review(&strip("alice", Value::Null)).await;
    assert_eq!(allowed["response"]["allowed"], true);

    let path = server.dir.path().join("policy.yaml");
    // Replaced whole, as kubelet swaps a ConfigMap volume's contents.
    let write_atomic = |text: &str| {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    };
    write_atomic("rules: []\n");
    wait_until(
        "the new policy to apply",
        Duration::from_secs(5),
        async || server.review(&strip("alice", Value::Null)).await["response"]["allowed"] == false,
    )
    .await;

    // Each bad policy is refused (counted), and the last good one stays.
    write_atomic("rules:\n  - finalizer: [oops]\n");
    server
        .wait_for_metric(r#"finalizer_guard_reloads_total{kind="policy",outcome="failure"} 1"#)
        .await;
    assert_eq!(
        server.review(&strip("alice", Value::Null)).await["response"]["allowed"],
        false
    );
    // A preset the catalog does not have is refused the same way.
    write_atomic("presets: [fluxcd]\n");
    server
        .wait_for_metric(r#"finalizer_guard_reloads_total{kind="policy",outcome="failure"} 2"#)
        .await;
    assert_eq!(
        server.review(&strip("alice", Value::Null)).await["response"]["allowed"],
        false
    );
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"finalizer_guard_reloads_total{kind="policy",outcome="failure"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"finalizer_guard_reloads_total{kind="policy",outcome="success"} 1"#),
        "{metrics}"
    );
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contradicting_override_entry_keeps_the_last_good_policy() {
    let narrowed = "override:\n  finalizers:\n    - finalizers: [example.com/cleanup]\n      reasons: [node-lost]\n";
    let server = start(Some(narrowed)).await;
    let with = |reason: &str| {
        strip(
            "bob",
            json!({"finalizer-guard.io/override": format!("{reason}: INC-1 worker-3")}),
        )
    };
    let allowed = |review: Value| {
        let server = &server;
        async move { server.review(&review).await["response"]["allowed"].clone() }
    };
    assert_eq!(allowed(with("node-lost")).await, true);
    assert_eq!(allowed(with("controller-unavailable")).await, false);

    let path = server.dir.path().join("policy.yaml");
    let write_atomic = |text: &str| {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    };
    // Two entries that both match example.com/cleanup: refused, and the
    // narrowed policy stays (not the default, which takes every reason).
    write_atomic(&format!(
        "{narrowed}    - finalizers: [\"example.com/*\"]\n      never: true\n"
    ));
    server
        .wait_for_metric(r#"finalizer_guard_reloads_total{kind="policy",outcome="failure"} 1"#)
        .await;
    assert_eq!(allowed(with("controller-unavailable")).await, false);
    assert_eq!(allowed(with("node-lost")).await, true);
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_removed_is_silent() {
    let server = start(None).await;
    let review = update(
        "alice",
        pod(json!(["a.example.com/x", "b.example.com/y"]), Value::Null),
        pod(
            json!(["b.example.com/y", "a.example.com/x", "c.example.com/z"]),
            Value::Null,
        ),
    );
    let response = server.review(&review).await;
    assert_eq!(response["response"]["allowed"], true);
    assert!(response["response"].get("auditAnnotations").is_none());
    assert!(response["response"].get("warnings").is_none());
    server.handle.shutdown().await;
}

/// kube-apiserver keeps its HTTP/1.1 connections to a webhook Service in one
/// pool, whichever pod each reached, so a draining server must not close an
/// idle one itself (the client may be writing to it at that moment): while
/// it drains, each answer says `connection: close` and the client closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_draining_http1_answers_close_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.shutdown_delay = Duration::from_millis(1500);
    let handle = finalizer_guard::server::start(config).await.unwrap();
    let ca = std::fs::read(handle.dev_ca.as_ref().unwrap()).unwrap();
    let https = common::client(&ca, handle.addr, &[b"http/1.1"]);
    let url = format!(
        "https://{}:{}/validate",
        common::SERVICE_NAME,
        handle.addr.port()
    );
    let body = serde_json::to_vec(&strip("alice", Value::Null)).unwrap();
    let before = https.post(&url).body(body.clone()).send().await.unwrap();
    assert_eq!(before.status(), 200);
    assert!(before.headers().get("connection").is_none(), "{before:?}");
    let state = handle.state.clone();
    let draining = tokio::spawn(handle.shutdown());
    wait_until(
        "the server to start draining",
        Duration::from_secs(5),
        async || !state.ready.load(Ordering::Relaxed),
    )
    .await;
    for _ in 0..3 {
        let during = https.post(&url).body(body.clone()).send().await.unwrap();
        assert_eq!(during.status(), 200);
        assert_eq!(
            during.headers().get("connection").map(|v| v.as_bytes()),
            Some(&b"close"[..]),
            "{during:?}"
        );
    }
    draining.await.unwrap();
}

/// Sha256 of `bytes`, in lowercase hex, as the info series carries it.
fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_exist_at_0_from_start_and_name_the_policy_in_service() {
    let first = "mode: warn\noverride:\n  reasons: [node-lost, storage-gone]\n";
    let server = start(Some(first)).await;
    let scrape = |accept: Option<&'static str>| {
        let url = format!("{}/metrics", server.admin);
        async move {
            let mut request = reqwest::Client::new().get(url);
            if let Some(accept) = accept {
                request = request.header("accept", accept);
            }
            let response = request.send().await.unwrap();
            let content_type = response.headers()["content-type"]
                .to_str()
                .unwrap()
                .to_string();
            (content_type, response.text().await.unwrap())
        }
    };

    // What Prometheus asks for when told to prefer the classic format, and curl.
    let (content_type, text) = scrape(None).await;
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    assert_contains_all(
        "the metrics",
        &text,
        &[
            r#"finalizer_guard_reviews_total{operation="UPDATE",decision="denied",group="core"} 0"#,
            r#"finalizer_guard_reviews_total{operation="UPDATE",decision="would-deny",group="core"} 0"#,
            r#"finalizer_guard_unauthorized_removals_total{decision="would-deny"} 0"#,
            r#"finalizer_guard_overrides_total{reason="node-lost"} 0"#,
            r#"finalizer_guard_overrides_total{reason="storage-gone"} 0"#,
            r#"finalizer_guard_rejected_requests_total{code="400"} 0"#,
            r#"finalizer_guard_rejected_requests_total{code="413"} 0"#,
            r#"finalizer_guard_reloads_total{kind="policy",outcome="failure"} 0"#,
            r#"finalizer_guard_dropped_total{queue="audit"} 0"#,
            r#"finalizer_guard_events_total{decision="failed"} 0"#,
            r#"finalizer_guard_denials_by_identity_total{class="serviceaccount",decision="denied"} 0"#,
            r#"finalizer_guard_denials_by_identity_total{class="person",decision="would-deny"} 0"#,
            r#"finalizer_guard_denials_by_identity_total{class="node",decision="denied"} 0"#,
            r#"finalizer_guard_denials_by_identity_total{class="builtin",decision="would-deny"} 0"#,
            "# TYPE finalizer_guard_reviews_total counter",
            "# TYPE finalizer_guard_denials_by_identity_total counter",
            r#"finalizer_guard_certificate_expiry_timestamp_seconds{kind="serving"} "#,
        ],
    );
    let serving_expiry = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                r#"finalizer_guard_certificate_expiry_timestamp_seconds{kind="serving"} "#,
            )
        })
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_default();
    assert!(serving_expiry > 1.7e9, "{text}");
    let info = format!(
        r#"finalizer_guard_policy_info{{mode="warn",sha256="{}",source="file"}} 1"#,
        sha256_hex(first.as_bytes())
    );
    assert!(text.contains(&info), "{info} missing:\n{text}");
    assert!(!text.contains("# EOF"), "{text}");

    // Prometheus's own default Accept header: OpenMetrics first.
    let (content_type, text) = scrape(Some(
        "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.1",
    ))
    .await;
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.contains("# TYPE finalizer_guard_reviews counter"),
        "{text}"
    );

    // A reload puts the new policy on record, and the old one off it.
    let second = "mode: enforce\noverride:\n  reasons: [node-lost, volume-detached]\n";
    let path = server.dir.path().join("policy.yaml");
    std::fs::write(path.with_extension("tmp"), second).unwrap();
    std::fs::rename(path.with_extension("tmp"), &path).unwrap();
    let info = format!(
        r#"finalizer_guard_policy_info{{mode="enforce",sha256="{}",source="file"}} 1"#,
        sha256_hex(second.as_bytes())
    );
    let text = server.wait_for_metric(&info).await;
    assert_eq!(
        text.matches("finalizer_guard_policy_info{").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains(r#"finalizer_guard_overrides_total{reason="volume-detached"} 0"#),
        "{text}"
    );
    server.handle.shutdown().await;
}
