//! What one client may make the server hold is bounded: the answer, the
//! audit record and the warnings of a review whatever it removes; a
//! connection whose client does not read its answers, or sends no request,
//! over HTTP/1.1 or HTTP/2; the series of /metrics whatever the bodies say.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{start_with, strip};
use finalizer_guard::admission::audit::{MAX_AUDITED_FINALIZERS, MAX_AUDITED_GROUPS};
use finalizer_guard::admission::ledger::MAX_LEDGER_ENTRIES;
use finalizer_guard::admission::request::MAX_LIST_NAMES;
use finalizer_guard::admission::{self, ReviewBuilder};
use finalizer_guard::policy::message::{MAX_NAMED_FINALIZERS, MAX_WARNING_CHARS, Thousands};
use finalizer_guard::policy::{Mode, Policy, Verdict};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest body `serve` accepts by default (`--max-body-bytes`).
const MAX_BODY: usize = 8 * 1024 * 1024;

/// How long anything the server should do promptly may take here.
const BOUND: Duration = Duration::from_secs(30);

/// A review of at most `max` bytes by `mallory` stripping as many tiny
/// finalizers as fit, at most `names`; how many.
fn strip_many(builder: ReviewBuilder, max: usize, names: usize) -> (Vec<u8>, usize) {
    let template = builder.finalizers(json!("LIST"), Value::Null).to_vec();
    let template = String::from_utf8(template).unwrap();
    let room = max - (template.len() - "\"LIST\"".len());
    let mut list = String::with_capacity(room);
    list.push('[');
    let mut n = 0usize;
    loop {
        let name = format!("\"f{n:x}\"");
        if n == names || list.len() + name.len() + 2 > room {
            break;
        }
        if n > 0 {
            list.push(',');
        }
        list.push_str(&name);
        n += 1;
    }
    list.push(']');
    let body = template.replacen("\"LIST\"", &list, 1).into_bytes();
    assert!(body.len() <= max);
    (body, n)
}

/// The answer a review gives under `policy`: allowed, and the message or warning.
fn answer(policy: &Policy, body: &[u8]) -> (bool, Value) {
    let reviewed = admission::review(policy, body).expect("answered, not refused");
    let v: Value = serde_json::from_slice(&reviewed.body).unwrap();
    (reviewed.allowed(), v["response"].clone())
}

fn warn_mode() -> Policy {
    let mut policy = Policy::embedded_default();
    policy.mode = Mode::Warn;
    policy
}

#[test]
fn a_review_of_more_finalizers_than_any_object_holds_is_denied_not_refused() {
    // A 400 would be settled by kube-apiserver's failurePolicy (Ignore: the
    // removal goes through unjudged): past the cap the write is denied.
    let (body, n) = strip_many(ReviewBuilder::pod_update("mallory"), MAX_BODY, usize::MAX);
    assert!(n > 900_000, "{n} finalizers");
    let (allowed, response) = answer(&Policy::embedded_default(), &body);
    assert!(!allowed);
    assert_eq!(response["status"]["code"], 403);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "metadata.finalizers holds more than {} names",
            Thousands(MAX_LIST_NAMES)
        )),
        "{message}"
    );
    let reviewed = admission::review(&Policy::embedded_default(), &body).unwrap();
    let record = reviewed.audit_record().expect("a denial is audited");
    assert_eq!(record.decision, Verdict::Denied);
    assert!(reviewed.audit.unwrap().fields().len() < 4096);
    // Warn mode allows it with a warning, as it allows every would-deny.
    let (allowed, response) = answer(&warn_mode(), &body);
    assert!(allowed);
    let warning = response["warnings"][0].as_str().unwrap();
    assert!(warning.contains("(warn mode) would deny"), "{warning}");
    // The most a list may hold is judged.
    let (body, n) = strip_many(
        ReviewBuilder::pod_update("mallory"),
        MAX_BODY,
        MAX_LIST_NAMES,
    );
    assert_eq!(n, MAX_LIST_NAMES);
    let reviewed = admission::review(&Policy::embedded_default(), &body).unwrap();
    assert_eq!(reviewed.verdict(), Verdict::Denied);
    // The new list past the cap, the old one a single name.
    let junk: Vec<String> = (0..=MAX_LIST_NAMES).map(|i| format!("junk{i}")).collect();
    let body = ReviewBuilder::pod_update("mallory")
        .finalizers(json!(["example.com/cleanup"]), json!(junk))
        .to_vec();
    let (allowed, response) = answer(&Policy::embedded_default(), &body);
    assert!(!allowed, "{response}");
    assert_eq!(response["status"]["code"], 403);
    // With escapes, read name by name.
    let escaped: Vec<String> = (0..=MAX_LIST_NAMES).map(|i| format!("f\"{i}")).collect();
    let body = ReviewBuilder::pod_update("mallory")
        .finalizers(json!(escaped), Value::Null)
        .to_vec();
    assert!(!answer(&Policy::embedded_default(), &body).0);
    // groups only the authenticator sets: a longer list is refused.
    let body = ReviewBuilder::pod_update("mallory")
        .groups(&escaped.iter().map(String::as_str).collect::<Vec<_>>())
        .to_vec();
    let error = admission::review(&Policy::embedded_default(), &body)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!(
            "request.userInfo.groups: more than {MAX_LIST_NAMES} names"
        )),
        "{error}"
    );
}

#[test]
fn spec_finalizers_past_the_cap_matter_only_to_a_namespace() {
    let empty: Vec<&str> = vec![""; MAX_LIST_NAMES + 1];
    // A custom resource's spec.finalizers is not judged: nothing removed.
    let body = ReviewBuilder::pod_update("mallory")
        .resource("example.com", "v1", "widgets", "Widget")
        .finalizers(json!(["example.com/a"]), json!(["example.com/a"]))
        .edit_object(|o| o["spec"] = json!({"finalizers": empty}))
        .to_vec();
    for policy in [Policy::embedded_default(), warn_mode()] {
        let reviewed = admission::review(&policy, &body).expect("answered");
        assert!(reviewed.allowed());
        assert_eq!(reviewed.verdict(), Verdict::NothingRemoved);
    }
    // A Namespace's, through namespaces/finalize: denied, would-deny in warn mode.
    let body = ReviewBuilder::pod_update("mallory")
        .resource("", "v1", "namespaces", "Namespace")
        .subresource("finalize")
        .name("team-a")
        .namespace(Some("team-a"))
        .finalizers(json!([]), json!([]))
        .edit_old_object(|o| o["spec"] = json!({"finalizers": ["kubernetes"]}))
        .edit_object(|o| o["spec"] = json!({"finalizers": empty}))
        .to_vec();
    let (allowed, response) = answer(&Policy::embedded_default(), &body);
    assert!(!allowed);
    assert_eq!(response["status"]["code"], 403);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("spec.finalizers holds more than"),
        "{message}"
    );
    let reviewed = admission::review(&warn_mode(), &body).unwrap();
    assert!(reviewed.allowed());
    assert_eq!(reviewed.verdict(), Verdict::WouldDeny);
    assert!(reviewed.audit.is_some());
}

#[test]
fn a_uid_longer_than_a_uid_is_refused() {
    let body = ReviewBuilder::pod_update("mallory")
        .uid(&"u".repeat(129))
        .to_vec();
    let error = admission::review(&Policy::embedded_default(), &body)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("request.uid is longer than 128 bytes"),
        "{error}"
    );
    assert!(error.len() < 200);
    let body = ReviewBuilder::pod_update("mallory")
        .uid(&"u".repeat(128))
        .to_vec();
    assert!(admission::review(&Policy::embedded_default(), &body).is_ok());
}

#[test]
fn strings_from_the_request_are_cut_in_the_answer_and_the_record() {
    let big = "x".repeat(1024 * 1024);
    let groups: Vec<String> = (0..MAX_LIST_NAMES)
        .map(|i| format!("{i}{}", "g".repeat(480)))
        .collect();
    let body = ReviewBuilder::pod_update(&big)
        .finalizers(json!(["example.com/cleanup"]), json!([]))
        .resource(&big, &big, &big, &big)
        .subresource(&big)
        .name(&big)
        .namespace(Some(&big))
        .groups(&groups.iter().map(String::as_str).collect::<Vec<_>>())
        .edit_old_object(|o| o["metadata"]["uid"] = json!(big))
        .to_vec();
    assert!(body.len() > 7 * 1024 * 1024);
    let reviewed = admission::review(&Policy::embedded_default(), &body).unwrap();
    assert_eq!(reviewed.verdict(), Verdict::Denied);
    assert!(reviewed.body.len() < 16 * 1024, "{}", reviewed.body.len());
    let fields = reviewed.audit.as_ref().unwrap().fields().len();
    assert!(fields < 64 * 1024, "{fields}");
    let record = reviewed.audit_record().unwrap();
    assert_eq!(record.groups.len(), MAX_AUDITED_GROUPS);
    assert_eq!(record.groups_omitted, MAX_LIST_NAMES - MAX_AUDITED_GROUPS);
    assert!(record.user.len() <= 512 && record.name.len() <= 512);
    // An override's reason and detail, through an allowed override.
    let detail = "d".repeat(200 * 1024);
    let body = ReviewBuilder::pod_update("mallory")
        .finalizers(json!(["example.com/cleanup"]), json!([]))
        .annotate(
            "finalizer-guard.io/override",
            &format!("node-lost: {detail}"),
        )
        .to_vec();
    let reviewed = admission::review(&Policy::embedded_default(), &body).unwrap();
    assert_eq!(reviewed.verdict(), Verdict::Override);
    assert!(reviewed.body.len() < 16 * 1024, "{}", reviewed.body.len());
    let record = reviewed.audit_record().unwrap();
    assert!(record.override_detail.unwrap().len() <= 512);
}

#[test]
fn an_override_of_an_object_holding_thousands_of_volumes_has_a_bounded_record() {
    // As large as the body limit allows: volumes of 1,000-character names.
    let long = "v".repeat(1000);
    let n = 7_600;
    let volumes: Vec<Value> = (0..n)
        .map(|i| json!({"name": long, "persistentVolumeClaim": {"claimName": format!("c{i}")}}))
        .collect();
    let owners: Vec<Value> = (0..100)
        .map(|i| json!({"kind": long, "name": format!("o{i}")}))
        .collect();
    let body = ReviewBuilder::pod_update("mallory")
        .finalizers(json!(["example.com/cleanup"]), json!([]))
        .annotate("finalizer-guard.io/override", "node-lost: INC-4711 gone")
        .edit_old_object(|o| {
            o["spec"]["volumes"] = json!(volumes);
            o["spec"]["nodeName"] = json!("n".repeat(100_000));
            o["metadata"]["ownerReferences"] = json!(owners);
        })
        .to_vec();
    assert!(
        body.len() > 7 * 1024 * 1024 && body.len() <= MAX_BODY,
        "{}",
        body.len()
    );
    let reviewed = admission::review(&Policy::embedded_default(), &body).unwrap();
    assert_eq!(reviewed.verdict(), Verdict::Override);
    let fields = reviewed.audit.as_ref().unwrap().fields().len();
    assert!(fields < 64 * 1024, "audit record of {fields} bytes");
    assert!(reviewed.body.len() < 16 * 1024, "{}", reviewed.body.len());
    let record = reviewed.audit_record().unwrap();
    let protected = record.protected.clone().unwrap();
    assert_eq!(protected.volumes.len(), MAX_LEDGER_ENTRIES);
    assert_eq!(protected.volumes_omitted, n - MAX_LEDGER_ENTRIES);
    assert!(
        protected.volumes[0].ends_with("... (pvc c0)"),
        "{:?}",
        protected.volumes[0]
    );
    assert_eq!(protected.node.as_ref().unwrap().chars().count(), 512);
    // Owners only when nothing more specific was found.
    assert!(protected.owners.is_empty());
    // The record reads back as the review wrote it.
    assert_eq!(reviewed.ledger, record.protected);
    let answer: Value = serde_json::from_slice(&reviewed.body).unwrap();
    let annotation = answer["response"]["auditAnnotations"]["protected"]
        .as_str()
        .unwrap();
    assert!(annotation.chars().count() <= 256, "{annotation}");
    let summary = protected.summary();
    assert!(
        summary.ends_with(&format!("(pvc c15) and {} more", n - MAX_LEDGER_ENTRIES)),
        "{summary}"
    );
}

#[test]
fn a_review_removing_many_finalizers_has_a_bounded_answer_and_record() {
    let (body, n) = strip_many(
        ReviewBuilder::pod_update("mallory"),
        MAX_BODY,
        MAX_LIST_NAMES,
    );
    assert_eq!(n, MAX_LIST_NAMES);
    let enforce = Policy::embedded_default();
    let reviewed = admission::review(&enforce, &body).unwrap();
    assert_eq!(reviewed.verdict(), Verdict::Denied);
    assert_eq!(reviewed.unauthorized(), n);
    // The message still names the first finalizers, the object, the
    // requester and how to override; the rest are counted.
    let message = reviewed.message.clone().unwrap();
    let more = format!(
        "\"f{:x}\" and {} more from pods \"web-0\" in namespace \"team-a\": requester \"mallory\"",
        MAX_NAMED_FINALIZERS - 1,
        Thousands(n - MAX_NAMED_FINALIZERS)
    );
    assert!(message.contains(&more), "{message}");
    assert!(message.contains("finalizer-guard.io/override"), "{message}");
    assert!(
        reviewed.body.len() < 4096,
        "answer of {} bytes",
        reviewed.body.len()
    );
    let entry = reviewed.audit.as_ref().unwrap();
    assert!(
        entry.fields().len() < 16 * 1024,
        "audit record of {} bytes",
        entry.fields().len()
    );
    let record = reviewed.audit_record().unwrap();
    assert_eq!(record.removed_finalizers.len(), MAX_AUDITED_FINALIZERS);
    assert_eq!(record.removed_finalizers[0].finalizer, "f0");
    assert_eq!(
        record.removed_finalizers_omitted,
        n - MAX_AUDITED_FINALIZERS
    );
    let answer: Value = serde_json::from_slice(&reviewed.body).unwrap();
    let removed = answer["response"]["auditAnnotations"]["removed-finalizers"]
        .as_str()
        .unwrap();
    assert!(
        removed.starts_with("f0,f1,f2,") && removed.ends_with("..."),
        "{removed}"
    );

    // Warn mode: a bounded warning in place of the denial.
    let warn = Policy::from_yaml("mode: warn\n").unwrap();
    let reviewed = admission::review(&warn, &body).unwrap();
    assert_eq!(reviewed.verdict(), Verdict::WouldDeny);
    assert!(reviewed.warnings[0].chars().count() <= MAX_WARNING_CHARS);
    assert!(
        reviewed.body.len() < 4096,
        "answer of {} bytes",
        reviewed.body.len()
    );
    assert!(reviewed.audit.unwrap().fields().len() < 16 * 1024);

    // An override: allowed, with a bounded warning and record.
    let (body, _) = strip_many(
        ReviewBuilder::pod_update("mallory")
            .annotate("finalizer-guard.io/override", "node-lost: INC-4711 gone"),
        MAX_BODY,
        MAX_LIST_NAMES,
    );
    let reviewed = admission::review(&enforce, &body).unwrap();
    assert_eq!(reviewed.verdict(), Verdict::Override);
    assert!(reviewed.warnings[0].chars().count() <= MAX_WARNING_CHARS);
    assert!(
        reviewed.body.len() < 4096,
        "answer of {} bytes",
        reviewed.body.len()
    );
    assert!(reviewed.audit.unwrap().fields().len() < 16 * 1024);
}

/// `GET /metrics` on the admin port, pipelined: answers the client never reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_answers_loses_its_connection() {
    const WRITE_TIMEOUT: Duration = Duration::from_secs(1);
    const REQUESTS: usize = 20_000;
    let server = start_with(None, |config, _| {
        config.limits.write_timeout = WRITE_TIMEOUT;
        config.limits.header_timeout = Duration::from_secs(300);
        config.limits.idle_timeout = Duration::from_secs(300);
    })
    .await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    // A small window: the server's writes stall soon.
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(server.handle.admin_addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let writer = tokio::spawn(async move {
        let request = b"GET /metrics HTTP/1.1\r\nhost: admin\r\n\r\n".repeat(REQUESTS);
        let _ = write.write_all(&request).await;
        write
    });
    // Never read while the server writes: it gives up after the write
    // timeout. This sleep is the client not reading, the thing under test,
    // not a wait for a condition: five write timeouts of it.
    tokio::time::sleep(WRITE_TIMEOUT * 5).await;
    let answers = tokio::time::timeout(BOUND, async {
        let mut seen = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => return seen,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the connection of a client that reads nothing stays open");
    let answered = answers
        .windows(b"HTTP/1.1 200".len())
        .filter(|w| *w == b"HTTP/1.1 200")
        .count();
    assert!(
        answered < REQUESTS,
        "all {REQUESTS} answers were written to a client that read none"
    );
    writer.abort();
    // The server keeps serving.
    assert!(
        server
            .metrics()
            .await
            .contains("finalizer_guard_build_info")
    );
    server.handle.shutdown().await;
}

/// An HTTP/2 connection that made one request and went silent.
async fn idle_h2(server: &common::Running) -> tokio::task::JoinHandle<Instant> {
    let tls =
        tokio_rustls::TlsConnector::from(Arc::new(common::tls_config(&server.ca_pem, &[b"h2"])));
    let tcp = TcpStream::connect(server.handle.addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from(common::SERVICE_NAME).unwrap();
    let io = tls.connect(name, tcp).await.unwrap();
    let (client, connection) = h2::client::handshake(io).await.unwrap();
    let ended = tokio::spawn(async move {
        let _ = connection.await;
        Instant::now()
    });
    let mut client = client.ready().await.unwrap();
    let body = serde_json::to_vec(&strip("alice", Value::Null)).unwrap();
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("https://{}/validate", common::SERVICE_NAME))
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(request, false).unwrap();
    send.send_data(bytes::Bytes::from(body), true).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let mut answer = response.into_body();
    while let Some(chunk) = answer.data().await {
        let chunk = chunk.unwrap();
        let _ = answer.flow_control().release_capacity(chunk.len());
    }
    // Kept, never used again: the connection stays open as far as the client goes.
    tokio::spawn(async move {
        let _client = client;
        std::future::pending::<()>().await;
    });
    ended
}

/// A new HTTP/2 connection's stream bound, as the server's SETTINGS gave
/// it, and the task that keeps the connection open until aborted.
async fn h2_streams(server: &common::Running) -> (usize, tokio::task::JoinHandle<()>) {
    let tls =
        tokio_rustls::TlsConnector::from(Arc::new(common::tls_config(&server.ca_pem, &[b"h2"])));
    let tcp = TcpStream::connect(server.handle.addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from(common::SERVICE_NAME).unwrap();
    let io = tls.connect(name, tcp).await.unwrap();
    let (client, mut connection): (h2::client::SendRequest<bytes::Bytes>, _) =
        h2::client::handshake(io).await.unwrap();
    let mut ping = connection.ping_pong().unwrap();
    let (settled, settings) = tokio::sync::oneshot::channel();
    let open = tokio::spawn(async move {
        let _client = client;
        // Drives the connection until the pong, then reads the server's settings.
        let mut pong = Box::pin(async move { ping.ping(h2::Ping::opaque()).await });
        let mut connection = connection;
        std::future::poll_fn(|cx| {
            let _ = std::pin::Pin::new(&mut connection).poll(cx);
            pong.as_mut().poll(cx).map(|p| p.unwrap())
        })
        .await;
        let _ = settled.send(connection.max_concurrent_send_streams());
        let _ = connection.await;
    });
    let streams = tokio::time::timeout(BOUND, settings)
        .await
        .unwrap()
        .unwrap();
    (streams, open)
}

/// An HTTP/2 client that keeps its receive window at 0 never lets an answer
/// leave: each one stays in memory with its stream, which stays open. So
/// the stream bound is what one connection can make the server hold, and
/// the connection cap multiplies it: 256 connections of hyper's 200
/// streams held 630 MiB of unread answers, of 8 streams 51 MiB
/// (docs/performance.md, "500 writers"). The first few connections get
/// hyper's bounds, which kube-apiserver needs at 500 writers; every one
/// after them, 8 streams; a closed one gives its wide slot to the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_first_http2_connections_may_open_many_streams() {
    let server = start_with(None, |_, _| {}).await;
    let wide = finalizer_guard::server::H2_WIDE.streams as usize;
    let narrow = finalizer_guard::server::H2_NARROW.streams as usize;
    assert_eq!(narrow, 8);
    // HTTP/1.1 connections take no wide slot.
    let mut http1 = Vec::new();
    for _ in 0..finalizer_guard::server::WIDE_CONNECTIONS {
        let tls = tokio_rustls::TlsConnector::from(Arc::new(common::tls_config(
            &server.ca_pem,
            &[b"http/1.1"],
        )));
        let tcp = TcpStream::connect(server.handle.addr).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from(common::SERVICE_NAME).unwrap();
        http1.push(tls.connect(name, tcp).await.unwrap());
    }
    let mut open = Vec::new();
    for n in 0..finalizer_guard::server::WIDE_CONNECTIONS {
        let (streams, connection) = h2_streams(&server).await;
        assert_eq!(streams, wide, "streams of HTTP/2 connection {n}");
        open.push(connection);
    }
    let (streams, _narrow) = h2_streams(&server).await;
    assert_eq!(
        streams, narrow,
        "streams of a connection past the wide ones"
    );
    // One wide connection closes: the next new one takes its slot.
    open.pop().unwrap().abort();
    let deadline = Instant::now() + BOUND;
    loop {
        let (streams, connection) = h2_streams(&server).await;
        if streams == wide {
            break;
        }
        drop(connection);
        assert!(
            Instant::now() < deadline,
            "a closed wide connection's slot is never given back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(http1);
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connections_free_their_slots_within_the_idle_timeout() {
    const CAP: usize = 4;
    const IDLE: Duration = Duration::from_secs(1);
    let server = start_with(None, |config, _| {
        config.limits.max_connections = CAP;
        config.limits.idle_timeout = IDLE;
    })
    .await;
    let mut idle = Vec::new();
    for _ in 0..CAP {
        idle.push(idle_h2(&server).await);
    }
    let since = Instant::now();
    // Every slot is held by an idle client: a new one is served once they
    // have been idle for the timeout.
    let answer = tokio::time::timeout(BOUND, server.review(&strip("alice", Value::Null)))
        .await
        .expect("a new client is never served while idle HTTP/2 clients hold every slot");
    assert_eq!(answer["response"]["allowed"], false);
    let waited = since.elapsed();
    assert!(waited < IDLE * 5, "served after {waited:?}");
    // The idle ones were closed by the server (GOAWAY), not left open.
    for ended in idle {
        let closed = tokio::time::timeout(BOUND, ended)
            .await
            .expect("an idle HTTP/2 connection is never closed")
            .unwrap();
        assert!(closed.duration_since(since) < IDLE * 5);
    }
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_groups_leave_metrics_small() {
    let server = start_with(None, |_, _| {}).await;
    let review = |group: &str| {
        ReviewBuilder::pod_update("alice")
            .resource(group, "v1", "widgets", "Widget")
            .finalizers(json!(["example.com/a"]), Value::Null)
            .to_value()
    };
    let huge = "g".repeat(100 * 1024);
    for i in 0..100 {
        let answer = server.review(&review(&format!("{i}{huge}"))).await;
        assert_eq!(answer["response"]["allowed"], false);
    }
    for i in 0..100 {
        server.review(&review(&format!("g{i}.example.org"))).await;
    }
    server.review(&review("apps")).await;
    let metrics = server.metrics().await;
    assert!(
        metrics.len() < 32 * 1024,
        "/metrics of {} bytes",
        metrics.len()
    );
    let groups: std::collections::BTreeSet<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("finalizer_guard_reviews_total{"))
        .filter_map(|l| l.split("group=\"").nth(1)?.split('"').next())
        .collect();
    assert!(
        groups.contains("other") && groups.contains("apps"),
        "{groups:?}"
    );
    assert!(groups.contains("g0.example.org"), "{groups:?}");
    assert!(!groups.contains("g99.example.org"), "{groups:?}");
    // `core` exists at 0 from start; `apps` is Kubernetes' own.
    assert_eq!(groups.len(), 32 + 3, "{groups:?}");
    server.handle.shutdown().await;
}
