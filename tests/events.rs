//! Events through the real kube client, to an API server stand-in that records what it receives.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use finalizer_guard::server::EventsTarget;
use serde_json::{Value, json};

type Received = Arc<Mutex<Vec<(String, Value)>>>;

/// An API server stand-in answering Event creation with `status`.
async fn api_server(status: StatusCode) -> (String, Received) {
    let received: Received = Arc::default();
    let app = Router::new()
        .route(
            "/apis/events.k8s.io/v1/namespaces/{ns}/events",
            post(
                move |State(received): State<Received>,
                      Path(ns): Path<String>,
                      body: axum::body::Bytes| async move {
                    let event: Value = serde_json::from_slice(&body).unwrap();
                    received.lock().unwrap().push((ns, event.clone()));
                    let mut created = event;
                    created["metadata"]["name"] = json!("web.1");
                    (
                        status,
                        [("content-type", "application/json")],
                        serde_json::to_vec(&created).unwrap(),
                    )
                },
            ),
        )
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

async fn webhook(url: &str) -> common::Running {
    let url = url.parse().unwrap();
    common::start_with(None, move |config, _| {
        config.events = EventsTarget::ApiServer(url)
    })
    .await
}

fn dry_run(mut review: Value) -> Value {
    review["request"]["dryRun"] = json!(true);
    review
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denials_and_overrides_reach_the_api_server_and_dry_runs_do_not() {
    let (url, received) = api_server(StatusCode::CREATED).await;
    let server = webhook(&url).await;
    let override_annotation =
        json!({"finalizer-guard.io/override": "node-lost: INC-4711 worker-3 powered off"});
    let denied = server.review(&common::strip("alice", Value::Null)).await;
    assert_eq!(denied["response"]["allowed"], false);
    server
        .review(&common::strip("alice", override_annotation.clone()))
        .await;
    server
        .review(&dry_run(common::strip("alice", Value::Null)))
        .await;
    let gc = "system:serviceaccount:kube-system:generic-garbage-collector";
    let mut authorized = common::strip(gc, Value::Null);
    authorized["request"]["oldObject"]["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
    server.review(&authorized).await;

    for _ in 0..100 {
        if received.lock().unwrap().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let events = received.lock().unwrap().clone();
    assert_eq!(events.len(), 2, "{events:#?}");
    let (ns, first) = &events[0];
    assert_eq!(ns, "team-a");
    assert_eq!(first["apiVersion"], "events.k8s.io/v1");
    assert_eq!(first["reason"], "FinalizerRemovalDenied");
    assert_eq!(first["type"], "Warning");
    assert_eq!(first["regarding"]["kind"], "Pod");
    assert_eq!(first["regarding"]["name"], "web-0");
    assert_eq!(first["reportingController"], "finalizer-guard.io/webhook");
    let (_, second) = &events[1];
    assert_eq!(second["reason"], "FinalizerOverride");
    let note = second["note"].as_str().unwrap();
    assert!(
        note.contains("node-lost: INC-4711") && note.contains("node node-1"),
        "{note}"
    );
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"finalizer_guard_events_total{decision="sent"} 2"#),
        "{metrics}"
    );
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_event_sink_changes_no_decision() {
    let (url, received) = api_server(StatusCode::INTERNAL_SERVER_ERROR).await;
    let server = webhook(&url).await;
    for _ in 0..3 {
        let denied = server.review(&common::strip("alice", Value::Null)).await;
        assert_eq!(denied["response"]["allowed"], false);
        assert_eq!(denied["response"]["status"]["code"], 403);
    }
    let allowed = server
        .review(&common::strip(
            "alice",
            json!({"finalizer-guard.io/override": "node-lost: INC-1"}),
        ))
        .await;
    assert_eq!(allowed["response"]["allowed"], true);
    for _ in 0..100 {
        if server
            .metrics()
            .await
            .contains(r#"finalizer_guard_events_total{decision="failed"} 4"#)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(received.lock().unwrap().len() >= 4);
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"finalizer_guard_events_total{decision="failed"} 4"#),
        "{metrics}"
    );

    // An API server that is not there at all: same decisions.
    let gone = webhook("http://127.0.0.1:9").await;
    let denied = gone.review(&common::strip("alice", Value::Null)).await;
    assert_eq!(denied["response"]["allowed"], false);
    server.handle.shutdown().await;
    gone.handle.shutdown().await;
}
