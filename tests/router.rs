//! The routes without sockets or TLS: requests handed to the router with
//! `tower::ServiceExt::oneshot`, as the server hands it each connection's.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use common::assert::assert_contains_all;
use finalizer_guard::admission::{ReviewBuilder, UID};
use finalizer_guard::policy::Policy;
use finalizer_guard::server::tls::ClientCert;
use finalizer_guard::server::{AppState, Limits, routes};
use finalizer_guard::trail::audit_log::AuditLog;
use finalizer_guard::trail::metrics::Metrics;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use prometheus_client::metrics::counter::Counter;
use serde_json::{Value, json};
use tower::ServiceExt;

/// Audit lines go to a file the test reads back.
type Lines = tempfile::NamedTempFile;

fn lines() -> Lines {
    tempfile::NamedTempFile::new().unwrap()
}

/// The limits every router here serves with.
fn limits() -> Limits {
    Limits {
        max_body_bytes: 1024 * 1024,
        handshake_timeout: Duration::from_secs(5),
        header_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(120),
        body_timeout: Duration::from_secs(5),
        write_timeout: Duration::from_secs(10),
        max_connections: 16,
        max_inflight_body_bytes: 4 * 1024 * 1024,
        max_waiting_frame_bytes: finalizer_guard::server::BODY_WAITING_BYTES,
    }
}

fn state(lines: &Lines) -> Arc<AppState> {
    let limits = limits();
    let audit = AuditLog::to(
        lines.reopen().unwrap(),
        Counter::default(),
        Counter::default(),
    )
    .unwrap();
    Arc::new(AppState::new(
        Policy::embedded_default(),
        limits,
        Metrics::new(),
        audit,
    ))
}

/// What `/metrics` on the admin routes answers.
async fn metrics_of(state: &Arc<AppState>) -> String {
    let (_, body) = call(routes::admin(state.clone()), "GET", "/metrics", vec![]).await;
    String::from_utf8(body).unwrap()
}

async fn call(router: Router, method: &str, uri: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, bytes.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_is_answered_counted_and_audited() {
    let lines = lines();
    let state = state(&lines);
    let strip = ReviewBuilder::pod_update("alice")
        .finalizers(json!(["example.com/cleanup"]), Value::Null)
        .to_vec();
    let (status, body) = call(routes::webhook(state.clone()), "POST", "/validate", strip).await;
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["response"]["uid"], UID);
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 403);

    let (status, metrics) = call(routes::admin(state.clone()), "GET", "/metrics", vec![]).await;
    assert_eq!(status, StatusCode::OK);
    let metrics = String::from_utf8(metrics).unwrap();
    assert_contains_all(
        "the metrics",
        &metrics,
        &[
            r#"finalizer_guard_reviews_total{operation="UPDATE",decision="denied",group="core"} 1"#,
            r#"finalizer_guard_unauthorized_removals_total{decision="denied"} 1"#,
        ],
    );

    state.audit.flush().await;
    let audit = std::fs::read_to_string(lines.path()).unwrap();
    let record: Value = serde_json::from_str(audit.lines().next().unwrap()).unwrap();
    assert_eq!(record["decision"], "denied");
    assert_eq!(record["operation"], "UPDATE");
    assert_eq!(
        record["removedFinalizers"][0]["field"],
        "metadata.finalizers"
    );
}

/// Posts `body` to `/validate` as a connection whose client is `client`.
async fn validate_as(
    state: &Arc<AppState>,
    client: Option<ClientCert>,
    body: Vec<u8>,
) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method("POST")
        .uri("/validate")
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    if let Some(client) = client {
        request.extensions_mut().insert(client);
    }
    let response = routes::webhook(state.clone())
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_record_says_whether_the_caller_was_authenticated() {
    let lines = lines();
    let state = state(&lines);
    // A forged post: team-b's operator "removing" team-a's backup finalizer.
    let forged = ReviewBuilder::pod_update("system:serviceaccount:team-b:db-operator")
        .finalizers(json!(["db.example.com/backup"]), Value::Null)
        .to_vec();
    let mut answers = Vec::new();
    for client in [
        None,
        Some(ClientCert::Unverified),
        Some(ClientCert::Verified),
    ] {
        let (status, answer) = validate_as(&state, client, forged.clone()).await;
        assert_eq!(status, StatusCode::OK);
        answers.push(answer);
    }
    // The answer does not depend on it.
    assert!(answers.iter().all(|a| a == &answers[0]), "{answers:#?}");
    assert_eq!(answers[0]["response"]["allowed"], false);

    state.audit.flush().await;
    let audit = std::fs::read_to_string(lines.path()).unwrap();
    let marks: Vec<Value> = audit
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["authenticated"].clone())
        .collect();
    assert_eq!(marks, [json!(false), json!(false), json!(true)], "{audit}");
}

#[tokio::test]
async fn malformed_bodies_are_400_with_one_line_and_counted() {
    let state = state(&lines());
    let (status, body) = call(
        routes::webhook(state.clone()),
        "POST",
        "/validate",
        b"{\"apiVersion\":\"v1\"".to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let reason = String::from_utf8(body).unwrap();
    assert!(reason.starts_with("body is not JSON"), "{reason}");
    assert_eq!(reason.matches('\n').count(), 1, "{reason:?}");
    let (_, metrics) = call(routes::admin(state), "GET", "/metrics", vec![]).await;
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains(r#"finalizer_guard_rejected_requests_total{code="400"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_oversized_body_is_413() {
    let state = state(&lines());
    let big = vec![b' '; 2 * 1024 * 1024];
    let (status, _) = call(routes::webhook(state), "POST", "/validate", big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn probes_follow_readiness_and_unknown_routes_are_404() {
    let state = state(&lines());
    let router = routes::webhook(state.clone());
    let (status, _) = call(router.clone(), "GET", "/healthz", vec![]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(router.clone(), "GET", "/readyz", vec![]).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "unready until started"
    );
    state.ready.store(true, Ordering::Relaxed);
    let (status, _) = call(router.clone(), "GET", "/readyz", vec![]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(router.clone(), "GET", "/validate", vec![]).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _) = call(router, "GET", "/metrics", vec![]).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "metrics only on the admin port"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_record_names_the_cluster_when_told() {
    let lines = lines();
    let mut named = Arc::into_inner(state(&lines)).unwrap();
    named.cluster_name = Some("prod-eu-1".into());
    let state = Arc::new(named);
    let strip = ReviewBuilder::pod_update("alice")
        .finalizers(json!(["example.com/cleanup"]), Value::Null)
        .to_vec();
    let (status, _) = call(routes::webhook(state.clone()), "POST", "/validate", strip).await;
    assert_eq!(status, StatusCode::OK);
    state.audit.flush().await;
    let audit = std::fs::read_to_string(lines.path()).unwrap();
    let record: Value = serde_json::from_str(audit.lines().next().unwrap()).unwrap();
    assert_eq!(record["cluster"], "prod-eu-1", "{audit}");
    assert_eq!(record["decision"], "denied");
}

/// Audit lines to an output whose writes fail (a closed pipe) while the flag is set.
#[derive(Clone, Default)]
struct Failing(
    Arc<std::sync::atomic::AtomicBool>,
    Arc<std::sync::Mutex<Vec<u8>>>,
);

impl std::io::Write for Failing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.load(Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(32));
        }
        self.1.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Standard output broken: the record already queued is lost and counted,
/// every later review is refused with a 503 and counted as refused only,
/// never as a review decided, `/readyz` names the error; written again,
/// reviews are answered and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_standard_output_refuses_reviews_and_counts_only_those_answered() {
    let out = Failing::default();
    let metrics = Metrics::new();
    let audit = AuditLog::to(
        out.clone(),
        metrics.dropped_in("audit"),
        metrics.audit_refused.clone(),
    )
    .unwrap();
    let state = Arc::new(AppState::new(
        Policy::embedded_default(),
        limits(),
        metrics,
        audit,
    ));
    state.ready.store(true, Ordering::Relaxed);
    let strip = || {
        ReviewBuilder::pod_update("alice")
            .finalizers(json!(["example.com/cleanup"]), Value::Null)
            .to_vec()
    };
    out.0.store(true, Ordering::SeqCst);
    // Its record queued before the failure is known: answered, the record lost.
    let (status, _) = call(routes::webhook(state.clone()), "POST", "/validate", strip()).await;
    assert_eq!(status, StatusCode::OK);
    state.audit.flush().await;
    for _ in 0..3 {
        let (status, body) =
            call(routes::webhook(state.clone()), "POST", "/validate", strip()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let body = String::from_utf8(body).unwrap();
        assert!(
            body.starts_with("audit records cannot be written: Broken pipe"),
            "{body}"
        );
        assert_eq!(body.lines().count(), 1, "{body}");
    }
    let (status, body) = call(routes::admin(state.clone()), "GET", "/readyz", vec![]).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let body = String::from_utf8(body).unwrap();
    assert!(
        body.starts_with("not ready: audit records cannot be written: Broken pipe"),
        "{body}"
    );
    let metrics = metrics_of(&state).await;
    assert_contains_all(
        "the metrics",
        &metrics,
        &[
            r#"finalizer_guard_reviews_total{operation="UPDATE",decision="denied",group="core"} 1"#,
            r#"finalizer_guard_unauthorized_removals_total{decision="denied"} 1"#,
            "\nfinalizer_guard_audit_refused_reviews_total 3\n",
            r#"finalizer_guard_dropped_total{queue="audit"} 1"#,
            // Timed as counted: the refused are not in the histogram.
            "\nfinalizer_guard_review_duration_seconds_count 1\n",
        ],
    );
    // Written again: answered, counted, ready.
    out.0.store(false, Ordering::SeqCst);
    let (status, _) = call(routes::webhook(state.clone()), "POST", "/validate", strip()).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(routes::admin(state.clone()), "GET", "/readyz", vec![]).await;
    assert_eq!(status, StatusCode::OK);
    let metrics = metrics_of(&state).await;
    assert_contains_all(
        "the metrics",
        &metrics,
        &[
            r#"finalizer_guard_reviews_total{operation="UPDATE",decision="denied",group="core"} 2"#,
            "\nfinalizer_guard_review_duration_seconds_count 2\n",
        ],
    );
    state.audit.flush().await;
    assert_eq!(
        String::from_utf8(out.1.lock().unwrap().clone())
            .unwrap()
            .lines()
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_bytes_held_are_on_the_metrics_while_a_body_arrives() {
    let state = state(&lines());
    let at_rest = metrics_of(&state).await;
    assert_contains_all(
        "the metrics at rest",
        &at_rest,
        &[
            "\nfinalizer_guard_request_body_bytes_in_flight 0\n",
            "\nfinalizer_guard_request_body_budget_bytes 4194304\n",
        ],
    );

    // A body that arrives in two pieces: the first is held while the
    // second is awaited, with room for the next frame (64 KiB at most).
    let (mut send, receive) = futures::channel::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(1);
    let request = Request::builder()
        .method("POST")
        .uri("/validate")
        .header("content-type", "application/json")
        .body(Body::from_stream(receive))
        .unwrap();
    let answer = tokio::spawn(routes::webhook(state.clone()).oneshot(request));
    use futures::SinkExt as _;
    send.send(Ok(vec![b' '; 600 * 1024])).await.unwrap();
    let mut held = String::new();
    // Shown in full below when it never comes.
    common::wait::poll_until(Duration::from_secs(30), async || {
        held = metrics_of(&state).await;
        held.contains("\nfinalizer_guard_request_body_bytes_in_flight 679936\n")
    })
    .await;
    assert_contains_all(
        "the metrics while a body arrives",
        &held,
        &["\nfinalizer_guard_request_body_bytes_in_flight 679936\n"],
    );

    send.send(Ok(b"{}".to_vec())).await.unwrap();
    drop(send);
    let response = answer.await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_contains_all(
        "the metrics once it is answered",
        &metrics_of(&state).await,
        &["\nfinalizer_guard_request_body_bytes_in_flight 0\n"],
    );
}

/// Every series `serve` exports has its row in docs/metrics.md's table.
#[test]
fn every_metric_is_in_the_docs() {
    let docs = std::fs::read_to_string(common::repository::path("docs/metrics.md")).unwrap();
    let serve = &docs[docs.find("\n## serve\n").unwrap()..docs.find("\n## watch\n").unwrap()];
    let rows: Vec<&str> = serve.lines().filter(|l| l.starts_with("| `")).collect();
    let exposition = Metrics::new().encode();
    let mut missing = Vec::new();
    for line in exposition.lines() {
        let Some(declared) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = declared.split_once(' ').unwrap();
        let name = if kind == "counter" {
            format!("{name}_total")
        } else {
            name.to_string()
        };
        let documented = rows.iter().any(|row| {
            let first = row.split(" | ").next().unwrap();
            first.contains(&format!("`{name}`")) || first.contains(&format!("`{name}{{"))
        });
        if !documented {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "not in docs/metrics.md's table: {missing:?}"
    );
}
