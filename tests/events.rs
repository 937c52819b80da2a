//! Events through the real kube client, to an API server stand-in that records what it receives.

mod common;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{patch, post};
use finalizer_guard::server::EventsTarget;
use serde_json::{Value, json};

/// One request the stand-in received.
#[derive(Debug, Clone)]
struct Received {
    /// `create`, or `patch NAME`.
    verb: String,
    namespace: String,
    content_type: String,
    body: Value,
}

#[derive(Clone)]
struct StandIn {
    received: Arc<Mutex<Vec<Received>>>,
    create: StatusCode,
    patch: StatusCode,
}

impl StandIn {
    fn answer(
        &self,
        verb: String,
        namespace: String,
        headers: &HeaderMap,
        body: &[u8],
        status: StatusCode,
    ) -> (StatusCode, [(&'static str, &'static str); 1], Vec<u8>) {
        let body: Value = serde_json::from_slice(body).unwrap();
        let content_type = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        self.received.lock().unwrap().push(Received {
            verb,
            namespace,
            content_type,
            body: body.clone(),
        });
        let answer = if status.is_success() {
            let mut event = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "web.1"}});
            event["series"] = body["series"].clone();
            event
        } else {
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status.as_u16(), "message": "stand-in"})
        };
        (
            status,
            [("content-type", "application/json")],
            serde_json::to_vec(&answer).unwrap(),
        )
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// An API server stand-in answering Event creation with `create` and Event
/// updates with `patch`.
async fn api_server(create: StatusCode, patch_status: StatusCode) -> (String, StandIn) {
    let stand_in = StandIn {
        received: Arc::default(),
        create,
        patch: patch_status,
    };
    let app = Router::new()
        .route(
            "/apis/events.k8s.io/v1/namespaces/{ns}/events",
            post(
                |State(s): State<StandIn>,
                 Path(ns): Path<String>,
                 headers: HeaderMap,
                 body: axum::body::Bytes| async move {
                    s.answer("create".into(), ns, &headers, &body, s.create)
                },
            ),
        )
        .route(
            "/apis/events.k8s.io/v1/namespaces/{ns}/events/{name}",
            patch(
                |State(s): State<StandIn>,
                 Path((ns, name)): Path<(String, String)>,
                 headers: HeaderMap,
                 body: axum::body::Bytes| async move {
                    s.answer(format!("patch {name}"), ns, &headers, &body, s.patch)
                },
            ),
        )
        .with_state(stand_in.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, stand_in)
}

/// A webhook writing Events to `url`, called as kube-apiserver calls it
/// with `--client-ca`: with a verified client certificate.
async fn webhook(url: &str) -> common::Running {
    let url = url.parse().unwrap();
    common::start_mtls(move |config, _| config.events = EventsTarget::ApiServer(url)).await
}

fn dry_run(mut review: Value) -> Value {
    review["request"]["dryRun"] = json!(true);
    review
}

/// A review like `review` with request uid `uid`: a separate request.
fn with_uid(mut review: Value, uid: &str) -> Value {
    review["request"]["uid"] = json!(uid);
    review
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denials_and_overrides_reach_the_api_server_and_dry_runs_do_not() {
    let (url, stand_in) = api_server(StatusCode::CREATED, StatusCode::OK).await;
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

    let metrics = server
        .wait_for_metric(r#"finalizer_guard_events_total{decision="sent"} 2"#)
        .await;
    // The drain writes what is queued, in order: after it, an Event the dry
    // run or the authorized removal had caused would be there too.
    server.handle.shutdown().await;
    let events = stand_in.received();
    assert_eq!(
        events.len(),
        2,
        "the denial's and the override's, none owed at the drain: {events:#?}"
    );
    let first = &events[0];
    assert_eq!(first.verb, "create");
    assert_eq!(first.namespace, "team-a");
    assert_eq!(first.body["apiVersion"], "events.k8s.io/v1");
    assert_eq!(first.body["reason"], "FinalizerRemovalDenied");
    assert_eq!(first.body["type"], "Warning");
    assert_eq!(first.body["regarding"]["kind"], "Pod");
    assert_eq!(first.body["regarding"]["name"], "web-0");
    assert_eq!(
        first.body["reportingController"],
        "finalizer-guard.io/webhook"
    );
    assert!(first.body.get("series").is_none(), "{:#}", first.body);
    let second = &events[1];
    assert_eq!(second.body["reason"], "FinalizerOverride");
    let note = second.body["note"].as_str().unwrap();
    assert!(
        note.contains("node-lost: INC-4711") && note.contains("node node-1"),
        "{note}"
    );
    assert!(
        metrics.contains("finalizer_guard_events_total{decision=\"repeated\"} 0\n"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_are_one_event_whose_series_is_written_later_and_at_the_drain() {
    let (url, stand_in) = api_server(StatusCode::CREATED, StatusCode::OK).await;
    let server = webhook(&url).await;
    // A controller retrying the same denied removal: five requests.
    for i in 0..5 {
        let review = with_uid(common::strip("alice", Value::Null), &format!("retry-{i}"));
        let denied = server.review(&review).await;
        assert_eq!(denied["response"]["allowed"], false);
    }
    server
        .wait_for_metric(r#"finalizer_guard_events_total{decision="repeated"} 4"#)
        .await;
    let created = stand_in.received();
    assert_eq!(created.len(), 1, "one Event, not five: {created:#?}");
    assert_eq!(created[0].verb, "create");
    let name = created[0].body["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let note = created[0].body["note"].as_str().unwrap();
    assert!(
        note.ends_with("see finalizer-guard's audit record retry-0"),
        "the first occurrence's note: {note}"
    );

    // The drain writes the repeats counted since: one merge patch of the series.
    server.handle.shutdown().await;
    let received = stand_in.received();
    assert_eq!(received.len(), 2, "{received:#?}");
    let update = &received[1];
    assert_eq!(update.verb, format!("patch {name}"));
    assert_eq!(update.namespace, "team-a");
    assert_eq!(update.content_type, "application/merge-patch+json");
    assert_eq!(update.body["series"]["count"], 5);
    assert!(
        update.body["series"]["lastObservedTime"].is_string(),
        "{:#}",
        update.body
    );
    assert_eq!(
        update.body.as_object().unwrap().len(),
        1,
        "only the series changes: {:#}",
        update.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_gone_from_the_api_server_is_created_again_with_its_series() {
    let (url, stand_in) = api_server(StatusCode::CREATED, StatusCode::NOT_FOUND).await;
    let server = webhook(&url).await;
    for i in 0..3 {
        let review = with_uid(common::strip("alice", Value::Null), &format!("retry-{i}"));
        server.review(&review).await;
    }
    server
        .wait_for_metric(r#"finalizer_guard_events_total{decision="repeated"} 2"#)
        .await;
    server.handle.shutdown().await;
    let received = stand_in.received();
    let verbs: Vec<&str> = received
        .iter()
        .map(|r| r.verb.split(' ').next().unwrap())
        .collect();
    assert_eq!(verbs, ["create", "patch", "create"], "{received:#?}");
    assert_eq!(received[2].body["series"]["count"], 3);
    assert_eq!(
        received[2].body["metadata"]["name"],
        received[0].body["metadata"]["name"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_event_sink_changes_no_decision() {
    let (url, stand_in) = api_server(
        StatusCode::INTERNAL_SERVER_ERROR,
        StatusCode::INTERNAL_SERVER_ERROR,
    )
    .await;
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
    // The denial and the override each fail to be created; the two repeated
    // denials are counted, not written one by one.
    let metrics = server
        .wait_for_metric(r#"finalizer_guard_events_total{decision="failed"} 2"#)
        .await;
    assert!(
        metrics.contains(r#"finalizer_guard_events_total{decision="repeated"} 2"#),
        "{metrics}"
    );
    assert_eq!(stand_in.received().len(), 2);
    // The drain tries once more for the repeats: a create carrying the series.
    server.handle.shutdown().await;
    let received = stand_in.received();
    assert_eq!(received.len(), 3, "{received:#?}");
    assert_eq!(received[2].verb, "create");
    assert_eq!(received[2].body["series"]["count"], 3);

    // An API server that is not there at all: same decisions.
    let gone = webhook("http://127.0.0.1:9").await;
    let denied = gone.review(&common::strip("alice", Value::Null)).await;
    assert_eq!(denied["response"]["allowed"], false);
    gone.handle.shutdown().await;
}

/// What anyone who reaches the webhook port can post: a denial and an
/// override naming an object in a namespace of the caller's choosing.
async fn forged(server: &common::Running) {
    let denied = server.review(&common::strip("alice", Value::Null)).await;
    assert_eq!(denied["response"]["allowed"], false, "answered as usual");
    let overridden = server
        .review(&common::strip(
            "jane.doe@example.com",
            json!({"finalizer-guard.io/override": "controller-uninstalled: backups moved"}),
        ))
        .await;
    assert_eq!(overridden["response"]["allowed"], true, "answered as usual");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_without_a_verified_client_certificate_writes_no_event() {
    let (url, stand_in) = api_server(StatusCode::CREATED, StatusCode::OK).await;
    let api: http::Uri = url.parse().unwrap();
    // No --client-ca: nobody's certificate is verified.
    let server = common::start_with(None, |config, _| {
        config.events = EventsTarget::ApiServer(api.clone())
    })
    .await;
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"finalizer_guard_events_total{decision="unauthenticated"} 0"#),
        "{metrics}"
    );
    forged(&server).await;
    server
        .wait_for_metric(r#"finalizer_guard_events_total{decision="unauthenticated"} 2"#)
        .await;
    server.handle.shutdown().await;
    assert_eq!(stand_in.received().len(), 0, "{:#?}", stand_in.received());

    // The operator says only kube-apiserver reaches the port: written.
    let server = common::start_with(None, |config, _| {
        config.events = EventsTarget::ApiServer(api);
        config.events_unauthenticated = true;
    })
    .await;
    forged(&server).await;
    server
        .wait_for_metric(r#"finalizer_guard_events_total{decision="sent"} 2"#)
        .await;
    server.handle.shutdown().await;
    assert_eq!(stand_in.received().len(), 2);
}
