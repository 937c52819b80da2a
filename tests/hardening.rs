//! Hostile and broken clients: the server cuts off the slow ones, refuses the
//! malformed ones with a clear status, never lets a wrong type hide a
//! finalizer removal, drains on SIGTERM, and with `--client-ca` serves only
//! clients holding a certificate from that CA. After each, it keeps serving.
//!
//! Covered elsewhere: a wrong method (`GET /validate`: 405), an unknown path
//! (404) and a 9 MiB body (413) at the default limit, in
//! `tests/server.rs` `bad_input_gets_a_clear_status_and_the_server_keeps_serving`.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use common::wait::wait_until;
use common::{Running, start, start_with, strip, update};
use finalizer_guard::cli::{Cli, Command};
use finalizer_guard::pki::certificates::CertificateAuthority;
use finalizer_guard::server;
use rustls_pki_types::ServerName;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// How long anything the server should do promptly may take here: a hang
/// fails the test instead of stalling it, and a loaded machine has room.
const BOUND: Duration = Duration::from_secs(30);

/// KiB of the in-flight body budget left: what the bodies being read hold
/// is taken from it as their bytes arrive.
fn budget_left(server: &Running) -> usize {
    server.handle.state.body_budget.available_permits()
}

async fn within<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(BOUND, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {BOUND:?}"))
}

fn service_name() -> ServerName<'static> {
    ServerName::try_from(common::SERVICE_NAME).unwrap()
}

fn connector(ca_pem: &[u8], alpn: &[&[u8]]) -> TlsConnector {
    TlsConnector::from(Arc::new(common::tls_config(ca_pem, alpn)))
}

/// A TLS connection to the webhook port, as raw bytes.
async fn tls_connect(server: &Running, alpn: &[&[u8]]) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(server.handle.addr).await.unwrap();
    within(
        "TLS handshake",
        connector(&server.ca_pem, alpn).connect(service_name(), tcp),
    )
    .await
    .unwrap()
}

/// Reads until the server closes the connection; what it sent meanwhile.
async fn until_closed<S: AsyncRead + Unpin>(what: &str, stream: &mut S) -> Vec<u8> {
    within(what, async {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return seen,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
}

/// Waits, in the background, for the server to close a stalled connection:
/// what it sent meanwhile, and how long after `since` it closed.
fn watch_closing<S: AsyncRead + Unpin + Send + 'static>(
    what: &'static str,
    mut stream: S,
    since: Instant,
) -> tokio::task::JoinHandle<(&'static str, Duration, Vec<u8>)> {
    tokio::spawn(async move {
        let sent = until_closed(what, &mut stream).await;
        (what, since.elapsed(), sent)
    })
}

/// The head of an HTTP/1.1 `POST /validate` with a body of `length` bytes.
fn post_head(length: usize) -> String {
    format!(
        "POST /validate HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n",
        common::SERVICE_NAME
    )
}

/// One HTTP/1.1 response with a content-length: status, head (lowercased), body.
async fn read_response<S: AsyncRead + Unpin>(stream: &mut S) -> (u16, String, String) {
    within("an HTTP response", async {
        let mut data = Vec::new();
        let mut buf = [0u8; 8192];
        let end = loop {
            if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            let n = stream.read(&mut buf).await.expect("reading a response");
            assert!(
                n > 0,
                "closed before a response: {}",
                String::from_utf8_lossy(&data)
            );
            data.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&data[..end]).to_lowercase();
        let status = head[9..12].parse().unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0);
        let mut body = data[end..].to_vec();
        while body.len() < length {
            let n = stream.read(&mut buf).await.expect("reading a body");
            assert!(n > 0, "closed inside a response body");
            body.extend_from_slice(&buf[..n]);
        }
        (status, head, String::from_utf8_lossy(&body).into_owned())
    })
    .await
}

/// Sends one review over a kept-alive HTTP/1.1 connection and reads the answer.
async fn exchange<S: AsyncRead + tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
    body: &[u8],
) -> (u16, String, String) {
    stream
        .write_all(post_head(body.len()).as_bytes())
        .await
        .unwrap();
    stream.write_all(body).await.unwrap();
    read_response(stream).await
}

fn seed_strip() -> Vec<u8> {
    serde_json::to_vec(&strip("alice", Value::Null)).unwrap()
}

/// The server still answers a review, correctly.
async fn keeps_serving(server: &Running) {
    let answer = server.review(&strip("alice", Value::Null)).await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
}

/// What a status-4xx answer must be: one line.
fn one_line(text: &str) -> &str {
    assert!(text.ends_with('\n'), "{text:?}");
    assert_eq!(text.trim_end().lines().count(), 1, "{text:?}");
    text.trim_end()
}

// 1. Timeouts.

/// Whether `sent` is whole HTTP/2 frames, all SETTINGS, WINDOW_UPDATE,
/// PING or GOAWAY: no stream was answered.
fn only_h2_control_frames(mut sent: &[u8]) -> bool {
    while !sent.is_empty() {
        if sent.len() < 9 {
            return false;
        }
        let length = usize::from(sent[0]) << 16 | usize::from(sent[1]) << 8 | usize::from(sent[2]);
        if ![0x4, 0x6, 0x7, 0x8].contains(&sent[3]) || sent.len() < 9 + length {
            return false;
        }
        sent = &sent[9 + length..];
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_headers_is_cut_off() {
    let timeout = Duration::from_secs(2);
    let server = start_with(None, |config, _| config.limits.header_timeout = timeout).await;

    // Three ways to stall after the TLS handshake: inside a header line,
    // before the first byte, and inside the HTTP/2 connection preface.
    let mut stalled = Vec::new();
    for (what, alpn, sent) in [
        (
            "a partial header line",
            b"http/1.1".as_slice(),
            b"POST /validate HTTP/1.1\r\nhost: finalizer-gu".as_slice(),
        ),
        ("nothing after the handshake", b"http/1.1", b""),
        ("a partial HTTP/2 preface", b"h2", b"PRI * HTTP/2.0\r\n"),
    ] {
        let since = Instant::now();
        let mut stream = tls_connect(&server, &[alpn]).await;
        stream.write_all(sent).await.unwrap();
        stalled.push(watch_closing(what, stream, since));
    }

    // Meanwhile, everyone else is served.
    keeps_serving(&server).await;

    for closed in stalled {
        let (what, after, sent) = closed.await.unwrap();
        // An HTTP/2 server sends its own preface (SETTINGS) at once, and
        // may say why it closes (GOAWAY): nothing else.
        assert!(
            sent.is_empty() || only_h2_control_frames(&sent),
            "{what}: answered {:?}",
            String::from_utf8_lossy(&sent)
        );
        assert!(
            after >= timeout,
            "{what}: closed after {after:?}, before the header timeout"
        );
    }
    keeps_serving(&server).await;
    server.handle.shutdown().await;
}

/// A kept-alive connection stays open between requests for the idle
/// timeout, not the header timeout: kube-apiserver keeps its idle
/// connections for 90 s, and one closed as it writes its next review to it
/// fails that review (a POST is not retried), which a fail-closed webhook
/// turns into a refused write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_is_served_after_the_header_timeout_until_the_idle_timeout() {
    let header = Duration::from_millis(500);
    let idle = Duration::from_secs(3);
    let server = start_with(None, |config, _| {
        config.limits.header_timeout = header;
        config.limits.idle_timeout = idle;
    })
    .await;
    let mut stream = tls_connect(&server, &[b"http/1.1"]).await;
    let (status, _, _) = exchange(&mut stream, &seed_strip()).await;
    assert_eq!(status, 200);
    // Idle for four header timeouts, then the next review on the same
    // connection.
    tokio::time::sleep(header * 4).await;
    let (status, head, body) = exchange(&mut stream, &seed_strip()).await;
    assert_eq!(status, 200, "{head}{body}");
    assert!(!head.contains("connection: close"), "{head}");
    // Then left idle: closed by the server after the idle timeout.
    let since = Instant::now();
    let sent = until_closed("an idle kept-alive connection", &mut stream).await;
    let after = since.elapsed();
    assert!(sent.is_empty(), "{}", String::from_utf8_lossy(&sent));
    assert!(
        after >= idle,
        "closed after {after:?}, before the idle timeout"
    );
    assert!(
        after < idle + header * 4 + Duration::from_secs(2),
        "closed after {after:?}"
    );
    server.handle.shutdown().await;
}

/// On a kept-alive connection, a next request's headers are timed from
/// their first byte: one that never finishes them is cut off after the
/// header timeout, however long the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_request_that_never_finishes_its_headers_is_cut_off() {
    let header = Duration::from_secs(1);
    let server = start_with(None, |config, _| {
        config.limits.header_timeout = header;
        config.limits.idle_timeout = Duration::from_secs(300);
    })
    .await;
    let mut stream = tls_connect(&server, &[b"http/1.1"]).await;
    let (status, _, _) = exchange(&mut stream, &seed_strip()).await;
    assert_eq!(status, 200);
    tokio::time::sleep(header / 2).await;
    let since = Instant::now();
    stream
        .write_all(b"POST /validate HTTP/1.1\r\nhost: finalizer-gu")
        .await
        .unwrap();
    let closed = watch_closing("a next request's partial header line", stream, since);
    keeps_serving(&server).await;
    let (what, after, sent) = closed.await.unwrap();
    assert!(
        sent.is_empty(),
        "{what}: answered {:?}",
        String::from_utf8_lossy(&sent)
    );
    assert!(
        after >= header,
        "{what}: closed after {after:?}, before the header timeout"
    );
    // Looked at every header timeout: within two of them, and some slack.
    assert!(
        after < header * 2 + Duration::from_secs(2),
        "{what}: closed after {after:?}"
    );
    keeps_serving(&server).await;
    server.handle.shutdown().await;
}

/// Over TLS a connection is served the protocol ALPN chose and no other:
/// what the server knows of it (its idle and connection-cap rules, the
/// HTTP/2 bounds it was given) is what it speaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_served_only_the_protocol_alpn_chose() {
    let server = start(None).await;
    for (what, alpn) in [
        ("HTTP/2 after ALPN http/1.1", b"http/1.1".as_slice()),
        ("HTTP/2 with no ALPN", b"".as_slice()),
    ] {
        let alpn: &[&[u8]] = if alpn.is_empty() { &[] } else { &[alpn] };
        let mut stream = tls_connect(&server, alpn).await;
        // The HTTP/2 preface and an empty SETTINGS frame.
        stream
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
            .await
            .unwrap();
        let sent = until_closed(what, &mut stream).await;
        assert!(
            sent.is_empty() || sent.starts_with(b"HTTP/1.1 "),
            "{what}: served as HTTP/2: {sent:?}"
        );
    }
    let mut stream = tls_connect(&server, &[b"h2"]).await;
    let _ = exchange_head_only(&mut stream).await;
    let sent = until_closed("HTTP/1.1 after ALPN h2", &mut stream).await;
    assert!(
        !sent.starts_with(b"HTTP/1.1"),
        "HTTP/1.1 after ALPN h2: served: {}",
        String::from_utf8_lossy(&sent)
    );
    keeps_serving(&server).await;
    server.handle.shutdown().await;
}

/// Writes an HTTP/1.1 review, not waiting for an answer.
async fn exchange_head_only<S: tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
) -> std::io::Result<()> {
    let body = seed_strip();
    stream.write_all(post_head(body.len()).as_bytes()).await?;
    stream.write_all(&body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_starts_the_tls_handshake_is_cut_off() {
    let timeout = Duration::from_secs(2);
    let server = start_with(None, |config, _| {
        config.limits.handshake_timeout = timeout;
    })
    .await;
    let mut stalled = Vec::new();
    for (what, sent) in [
        ("no TLS at all", [].as_slice()),
        // A handshake record announcing 512 bytes of ClientHello, and one of them.
        (
            "a partial ClientHello",
            [0x16, 0x03, 0x01, 0x02, 0x00, 0x01].as_slice(),
        ),
    ] {
        let since = Instant::now();
        let mut stream = TcpStream::connect(server.handle.addr).await.unwrap();
        stream.write_all(sent).await.unwrap();
        stalled.push(watch_closing(what, stream, since));
    }

    keeps_serving(&server).await;

    for closed in stalled {
        let (what, after, sent) = closed.await.unwrap();
        assert!(sent.is_empty(), "{what}: answered {sent:?}");
        assert!(
            after >= timeout,
            "{what}: closed after {after:?}, before the handshake timeout"
        );
    }
    keeps_serving(&server).await;
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_completes_gets_408_and_the_server_keeps_serving() {
    let server = start_with(None, |config, _| {
        config.limits.body_timeout = Duration::from_secs(2);
    })
    .await;
    let body = seed_strip();
    let mut stream = tls_connect(&server, &[b"http/1.1"]).await;
    stream
        .write_all(post_head(body.len()).as_bytes())
        .await
        .unwrap();
    stream.write_all(&body[..body.len() / 2]).await.unwrap();

    let (status, head, text) = read_response(&mut stream).await;
    assert_eq!(status, 408, "{head}{text}");
    assert_eq!(
        one_line(&text),
        "timed out reading the request body",
        "{text}"
    );
    assert!(head.contains("connection: close"), "{head}");
    assert!(
        until_closed("the connection after a 408", &mut stream)
            .await
            .is_empty()
    );

    keeps_serving(&server).await;
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"finalizer_guard_rejected_requests_total{code="408"} 1"#),
        "{metrics}"
    );
    server.handle.shutdown().await;
}

/// The bodies held in memory at once are capped across connections: a
/// request whose body does not fit waits for room instead of growing the
/// server past its memory limit, then is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_in_flight_share_one_memory_budget() {
    const BUDGET: usize = 64 * 1024;
    let server = start_with(None, |config, _| {
        config.limits.max_body_bytes = BUDGET;
        config.limits.max_inflight_body_bytes = BUDGET;
        // Longer than the bound below: holding budget until timed out would fail it.
        config.limits.body_timeout = Duration::from_secs(30);
    })
    .await;
    let mut padded = seed_strip();
    padded.resize(BUDGET, b' ');
    // Announcing a body costs nothing: a client that sends only headers
    // holds none of the budget, and others are served meanwhile. It asks to
    // be told to go on (`expect: 100-continue`), which the server says once
    // it has taken the head in and waits for the body.
    let mut silent = tls_connect(&server, &[b"http/1.1"]).await;
    let head = post_head(padded.len()).replace("\r\n\r\n", "\r\nexpect: 100-continue\r\n\r\n");
    silent.write_all(head.as_bytes()).await.unwrap();
    let (status, head, _) = read_response(&mut silent).await;
    assert_eq!(status, 100, "{head}");
    assert_eq!(
        budget_left(&server),
        BUDGET / 1024,
        "a body announced and not sent holds budget"
    );
    tokio::time::timeout(Duration::from_secs(10), keeps_serving(&server))
        .await
        .expect("a client announcing a body it does not send held the budget");

    // A takes the whole budget with the bytes it sends: all but the last.
    let mut a = tls_connect(&server, &[b"http/1.1"]).await;
    a.write_all(post_head(padded.len()).as_bytes())
        .await
        .unwrap();
    a.write_all(&padded[..BUDGET - 1]).await.unwrap();
    // A's head is read before B's: its bytes hold the whole budget.
    wait_until("A's body to take the whole budget", BOUND, async || {
        budget_left(&server) == 0
    })
    .await;

    // B's small review waits for room while A holds it.
    let mut b = tls_connect(&server, &[b"http/1.1"]).await;
    let b_body = seed_strip();
    let mut b_answer = tokio::spawn(async move {
        let answer = exchange(&mut b, &b_body).await;
        (answer, Instant::now())
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut b_answer)
            .await
            .is_err(),
        "B was answered while A held the whole body budget"
    );

    // A finishes its body: both are answered.
    let a_complete = Instant::now();
    a.write_all(&padded[BUDGET - 1..]).await.unwrap();
    let (status, head, text) = read_response(&mut a).await;
    assert_eq!(status, 200, "{head}{text}");
    let ((status, head, text), b_answered) = within("B's answer", b_answer).await.unwrap();
    assert_eq!(status, 200, "{head}{text}");
    assert!(
        b_answered >= a_complete,
        "B was answered before A's body was complete"
    );
    assert!(text.contains(r#""allowed":false"#), "{text}");

    keeps_serving(&server).await;
    drop(silent);
    server.handle.shutdown().await;
}

/// A body's first frame is read before its size is known, so it cannot
/// wait for room inside the body budget; such frames are bounded across
/// requests. Past the bound, a body that finds no room is refused at once
/// (503, its connection closed) instead of waiting with its frame in hand:
/// 3,584 HTTP/2 streams each waiting with a 16 KiB frame held 300 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_frames_waiting_for_the_budget_are_bounded_too() {
    const BUDGET: usize = 64 * 1024;
    let review = seed_strip();
    // Room for one review's frame in hand, not two.
    let waiting = review.len().div_ceil(1024) * 1024;
    let server = start_with(None, |config, _| {
        config.limits.max_body_bytes = BUDGET;
        config.limits.max_inflight_body_bytes = BUDGET;
        config.limits.max_waiting_frame_bytes = waiting;
        config.limits.body_timeout = Duration::from_secs(30);
    })
    .await;
    let mut padded = seed_strip();
    padded.resize(BUDGET, b' ');
    // A takes the whole budget with the bytes it sends: all but the last.
    let mut a = tls_connect(&server, &[b"http/1.1"]).await;
    a.write_all(post_head(padded.len()).as_bytes())
        .await
        .unwrap();
    a.write_all(&padded[..BUDGET - 1]).await.unwrap();
    wait_until("A's body to take the whole budget", BOUND, async || {
        budget_left(&server) == 0
    })
    .await;

    // B's review (one frame) waits for room with its frame in hand.
    let mut b = tls_connect(&server, &[b"http/1.1"]).await;
    let b_review = review.clone();
    let mut b_answer = tokio::spawn(async move { exchange(&mut b, &b_review).await });
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut b_answer)
            .await
            .is_err(),
        "B was answered while A held the whole body budget"
    );
    // C's frame does not fit beside B's: refused at once, not at the
    // body timeout.
    let since = Instant::now();
    let mut c = tls_connect(&server, &[b"http/1.1"]).await;
    let (status, head, text) = exchange(&mut c, &review).await;
    assert_eq!(status, 503, "{head}{text}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(text.contains("too many request bodies"), "{text}");
    assert!(
        since.elapsed() < Duration::from_secs(10),
        "refused only after {:?}",
        since.elapsed()
    );

    // A finishes: B is answered.
    a.write_all(&padded[BUDGET - 1..]).await.unwrap();
    assert_eq!(read_response(&mut a).await.0, 200);
    let (status, head, text) = within("B's answer", b_answer).await.unwrap();
    assert_eq!(status, 200, "{head}{text}");
    keeps_serving(&server).await;
    server.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_budget_below_the_body_limit_is_a_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(dir.path());
    config.limits.max_body_bytes = 8 * 1024 * 1024;
    config.limits.max_inflight_body_bytes = 1024 * 1024;
    let Err(e) = server::start(config).await else {
        panic!("started with a body budget smaller than one body");
    };
    let text = e.to_string();
    assert!(text.contains("--max-inflight-body-bytes"), "{text}");
}

// 2. The connection cap.

/// At the connection cap, idle kept-alive connections do not keep a new
/// one out: the one idle the longest is closed to make room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_the_longest_idle_connection_makes_room() {
    const CAP: usize = 8;
    let server = start_with(None, |config, _| {
        config.limits.max_connections = CAP;
        // Idle connections outlive the test unless made to close.
        config.limits.header_timeout = Duration::from_secs(300);
        config.limits.idle_timeout = Duration::from_secs(300);
    })
    .await;
    let body = seed_strip();
    let mut held = Vec::new();
    for _ in 0..CAP {
        let mut stream = tls_connect(&server, &[b"http/1.1"]).await;
        assert_eq!(exchange(&mut stream, &body).await.0, 200);
        held.push(stream);
    }
    // The first one is the idle the longest once the others have been used again.
    for stream in &mut held[1..] {
        assert_eq!(exchange(stream, &body).await.0, 200);
    }

    // One more is served at once...
    let mut stream =
        tokio::time::timeout(Duration::from_secs(5), tls_connect(&server, &[b"http/1.1"]))
            .await
            .expect("a connection beyond the cap waited behind idle ones");
    let (status, _, text) = exchange(&mut stream, &body).await;
    assert_eq!(status, 200);
    assert!(text.contains(r#""allowed":false"#), "{text}");
    // ...in the place of the one idle the longest, which was closed.
    let mut first = held.remove(0);
    until_closed("the longest idle connection", &mut first).await;
    // The others are still served.
    for stream in &mut held {
        assert_eq!(exchange(stream, &body).await.0, 200);
    }
    server.handle.shutdown().await;
}

/// At the connection cap, an HTTP/1.1 connection its client keeps using is
/// not closed under it: kube-apiserver calls a webhook over HTTP/1.1, one
/// connection per call in flight, each reused within milliseconds, and a
/// call written to a connection as it closes fails (a POST is not
/// retried). The one asked to make room answers its next request with
/// `connection: close`; then the new connection is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_a_connection_in_use_closes_after_an_answer_not_under_a_request() {
    const CAP: usize = 2;
    let server = start_with(None, |config, _| {
        config.limits.max_connections = CAP;
        config.limits.header_timeout = Duration::from_secs(300);
        config.limits.idle_timeout = Duration::from_secs(300);
    })
    .await;
    let body = seed_strip();
    let mut held = Vec::new();
    for _ in 0..CAP {
        let mut stream = tls_connect(&server, &[b"http/1.1"]).await;
        assert_eq!(exchange(&mut stream, &body).await.0, 200);
        held.push(stream);
    }
    let tcp = TcpStream::connect(server.handle.addr).await.unwrap();
    let mut waiting =
        tokio::spawn(connector(&server.ca_pem, &[b"http/1.1"]).connect(service_name(), tcp));
    // Both kept in use, as a client's pool is: every request answered,
    // until one answer says the connection closes.
    let deadline = Instant::now() + BOUND;
    let closing = 'used: loop {
        for (i, stream) in held.iter_mut().enumerate() {
            let (status, head, _) = exchange(stream, &body).await;
            assert_eq!(status, 200, "a request on a connection in use");
            if head.contains("connection: close") {
                break 'used i;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no connection was asked to make room"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut closed = held.remove(closing);
    until_closed("the connection that made room", &mut closed).await;
    let mut stream = within("the waiting connection", &mut waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exchange(&mut stream, &body).await.0, 200);
    // The other one was never closed.
    assert_eq!(exchange(&mut held[0], &body).await.0, 200);
    server.handle.shutdown().await;
}

/// At the connection cap, a connection with a request in flight is not
/// closed to make room within the body timeout (the most its request may
/// take to arrive; here longer than the test): a new one waits until one
/// is idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_a_connection_with_a_request_in_flight_is_not_closed_within_the_body_timeout() {
    const CAP: usize = 8;
    let server = start_with(None, |config, _| {
        config.limits.max_connections = CAP;
        config.limits.header_timeout = Duration::from_secs(300);
        config.limits.idle_timeout = Duration::from_secs(300);
        config.limits.body_timeout = Duration::from_secs(300);
    })
    .await;
    let body = seed_strip();
    let full = budget_left(&server);
    // Each sends a request's head and its body but for the last byte, slowly.
    let mut held = Vec::new();
    for _ in 0..CAP {
        let mut stream = tls_connect(&server, &[b"http/1.1"]).await;
        stream
            .write_all(post_head(body.len()).as_bytes())
            .await
            .unwrap();
        stream.write_all(&body[..body.len() - 1]).await.unwrap();
        held.push(stream);
    }
    // Every one is busy once the server reads its body (the bytes sent take
    // their share of the body budget).
    let each = (body.len() - 1).div_ceil(1024);
    wait_until("every held request to be read", BOUND, async || {
        full - budget_left(&server) == CAP * each
    })
    .await;

    // One more: accepted by the kernel, not served while all are busy.
    let tcp = TcpStream::connect(server.handle.addr).await.unwrap();
    let mut waiting =
        tokio::spawn(connector(&server.ca_pem, &[b"http/1.1"]).connect(service_name(), tcp));
    assert!(
        tokio::time::timeout(Duration::from_millis(1500), &mut waiting)
            .await
            .is_err(),
        "a connection beyond the cap of {CAP} was served while every one was busy"
    );

    // One finishes its request: now idle, it makes room for the waiting one.
    let mut done = held.remove(0);
    done.write_all(&body[body.len() - 1..]).await.unwrap();
    assert_eq!(read_response(&mut done).await.0, 200);
    let mut stream = within("the waiting connection", waiting)
        .await
        .unwrap()
        .unwrap();
    let (status, _, text) = exchange(&mut stream, &body).await;
    assert_eq!(status, 200);
    assert!(text.contains(r#""allowed":false"#), "{text}");
    // The busy ones were left alone: each finishes its request.
    for stream in &mut held {
        stream.write_all(&body[body.len() - 1..]).await.unwrap();
        let (status, _, text) = read_response(stream).await;
        assert_eq!(status, 200, "{text}");
    }
    server.handle.shutdown().await;
}

/// Idle plain TCP connections filling the admin port's slots do not keep
/// the kubelet's probes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_starve_the_admin_port() {
    let server = start_with(None, |config, _| {
        config.limits.header_timeout = Duration::from_secs(300);
        config.limits.idle_timeout = Duration::from_secs(300);
    })
    .await;
    let admin = server.handle.admin_addr;
    let mut idle = Vec::new();
    for _ in 0..160 {
        idle.push(TcpStream::connect(admin).await.unwrap());
    }
    for _ in 0..3 {
        let probe = async {
            let mut stream = TcpStream::connect(admin).await.unwrap();
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: probe\r\nconnection: close\r\n\r\n")
                .await
                .unwrap();
            read_response(&mut stream).await.0
        };
        let status = tokio::time::timeout(Duration::from_secs(1), probe)
            .await
            .expect("/healthz not answered within 1s with the admin port full of idle connections");
        assert_eq!(status, 200);
        // The idle connections that were closed come back.
        let mut kept = Vec::new();
        for mut stream in idle.drain(..) {
            let mut byte = [0u8; 1];
            match tokio::time::timeout(Duration::from_millis(1), stream.read(&mut byte)).await {
                Err(_) => kept.push(stream),
                Ok(_) => kept.push(TcpStream::connect(admin).await.unwrap()),
            }
        }
        idle = kept;
    }
    server.handle.shutdown().await;
}

/// How an HTTP/2 client of [`slow_streams`] keeps its connection busy.
#[derive(Clone, Copy)]
enum Slowly {
    /// Each request announces 1 KiB and sends one byte of it: each is
    /// answered 408 at the body timeout.
    TimedOut,
    /// Each request sends one byte of a 2-byte body, then the other this
    /// long after: each is answered in time, and never a 408.
    JustInTime(Duration),
}

/// An HTTP/2 client on the webhook port that always has a slow request in
/// flight: every `every`, it opens a stream and sends a `POST /validate`'s
/// headers and the first byte of its body ([`Slowly`] says what comes
/// next). Once its connection takes no more streams it opens another,
/// keeping the old one and its streams for as long as the server does.
/// Runs until `stop` (at most [`BOUND`], at most 100 connections); `up` is
/// told once its first stream is open. Returns the connections it opened.
async fn slow_streams(
    addr: SocketAddr,
    ca_pem: Vec<u8>,
    (slowly, every): (Slowly, Duration),
    up: tokio::sync::oneshot::Sender<()>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> usize {
    let started = Instant::now();
    let mut up = Some(up);
    let mut connections = Vec::new();
    let mut client: Option<h2::client::SendRequest<bytes::Bytes>> = None;
    // Every stream opened, its body and its answer: dropped, a stream is reset.
    let mut open: Vec<(Instant, bool, h2::SendStream<_>, h2::client::ResponseFuture)> = Vec::new();
    while !*stop.borrow() && started.elapsed() < BOUND && connections.len() < 100 {
        if let Slowly::JustInTime(after) = slowly {
            for (opened, finished, body, _) in &mut open {
                if !*finished && opened.elapsed() >= after {
                    *finished = true;
                    let _ = body.send_data(bytes::Bytes::from_static(b"}"), true);
                }
            }
        }
        let ready = match client.take() {
            Some(taken) => tokio::time::timeout(every, taken.ready()).await.ok(),
            None => None,
        };
        let Some(Ok(mut ready)) = ready else {
            // No more streams on this one: another connection.
            let connected = async {
                let tcp = TcpStream::connect(addr).await.ok()?;
                let tls = connector(&ca_pem, &[b"h2"]);
                let io = tls.connect(service_name(), tcp).await.ok()?;
                h2::client::handshake(io).await.ok()
            };
            if let Ok(Some((new, connection))) = tokio::time::timeout(BOUND, connected).await {
                connections.push(tokio::spawn(connection));
                client = Some(new);
            } else {
                // Refused a connection: tried again at the client's pace.
                tokio::time::sleep(every).await;
            }
            continue;
        };
        let length = match slowly {
            Slowly::TimedOut => 1024,
            Slowly::JustInTime(_) => 2,
        };
        let request = http::Request::post(format!("https://{}/validate", common::SERVICE_NAME))
            .header("content-type", "application/json")
            .header("content-length", length)
            .body(())
            .unwrap();
        if let Ok((answer, mut body)) = ready.send_request(request, false)
            && body
                .send_data(bytes::Bytes::from_static(b"{"), false)
                .is_ok()
        {
            open.push((Instant::now(), false, body, answer));
            client = Some(ready);
            if let Some(up) = up.take() {
                let _ = up.send(());
            }
        }
        // What is held stays bounded: the oldest streams have long been answered.
        if open.len() > 256 {
            open.drain(..128);
        }
        // The client's pace, which is what is under test: not a wait.
        tokio::time::sleep(every).await;
    }
    for connection in &connections {
        connection.abort();
    }
    connections.len()
}

/// At the connection cap, HTTP/2 clients that always keep a slow request in
/// flight, each a new stream opened before the last one's answer, never
/// idle, do not keep a new client out: of those holding every slot, one
/// makes room within about the body timeout. `slowly` says how each
/// request is slow.
async fn slow_streams_do_not_keep_others_out(slowly: Slowly) {
    const CAP: usize = 2;
    let body_timeout = Duration::from_secs(1);
    // How long a new client may wait for a slot: the body timeout, then
    // the close of the one that makes room, with room to spare.
    let fair = Duration::from_secs(10);
    let server = start_with(None, |config, _| {
        config.limits.max_connections = CAP;
        config.limits.body_timeout = body_timeout;
        config.limits.header_timeout = Duration::from_secs(2);
    })
    .await;
    let full = budget_left(&server);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut clients = Vec::new();
    let mut ups = Vec::new();
    for _ in 0..CAP {
        let (up, is_up) = tokio::sync::oneshot::channel();
        ups.push(is_up);
        clients.push(tokio::spawn(slow_streams(
            server.handle.addr,
            server.ca_pem.clone(),
            (slowly, body_timeout / 4),
            up,
            stopped.clone(),
        )));
    }
    for up in ups {
        within("a slow client's first stream", up).await.unwrap();
    }
    // Both hold their slots: the server reads their bodies' first bytes.
    wait_until("the slow streams to be read", BOUND, async || {
        full - budget_left(&server) >= CAP
    })
    .await;

    let body = seed_strip();
    for round in 0..3 {
        // A review, over a new connection, as kube-apiserver sends it.
        let review = async {
            let mut stream = tls_connect(&server, &[b"http/1.1"]).await;
            exchange(&mut stream, &body).await
        };
        let (status, _, text) = tokio::time::timeout(fair, review).await.unwrap_or_else(|_| {
            panic!("round {round}: a review on a new connection was not answered within {fair:?} while {CAP} HTTP/2 clients kept slow streams open")
        });
        assert_eq!(status, 200, "{text}");
        assert!(text.contains(r#""allowed":false"#), "{text}");
        // The kubelet's probe, on the admin port.
        let probe = async {
            let mut stream = TcpStream::connect(server.handle.admin_addr).await.unwrap();
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: probe\r\nconnection: close\r\n\r\n")
                .await
                .unwrap();
            read_response(&mut stream).await.0
        };
        let status = tokio::time::timeout(fair, probe)
            .await
            .unwrap_or_else(|_| panic!("round {round}: /healthz not answered within {fair:?}"));
        assert_eq!(status, 200);
    }
    stop.send(true).unwrap();
    for client in clients {
        within("a slow client to stop", client).await.unwrap();
    }
    keeps_serving(&server).await;
    server.handle.shutdown().await;
}

/// Each slow request is answered 408 at the body timeout, the clients'
/// connections never idle: the one whose request timed out makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_http2_clients_that_always_have_a_slow_stream_do_not_keep_others_out() {
    slow_streams_do_not_keep_others_out(Slowly::TimedOut).await;
}

/// Each slow request finishes just in time, so none times out: the busy
/// connection that has held its slot past the body timeout makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_http2_clients_whose_slow_streams_finish_in_time_do_not_keep_others_out() {
    slow_streams_do_not_keep_others_out(Slowly::JustInTime(Duration::from_millis(600))).await;
}

/// An HTTP/2 request answered 408 at the body timeout ends its connection,
/// as it ends an HTTP/1.1 one: the server sends GOAWAY, and the client's
/// next stream goes on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_timeout_closes_its_http2_connection() {
    let body_timeout = Duration::from_secs(1);
    let server = start_with(None, |config, _| {
        config.limits.body_timeout = body_timeout;
        // Idle, it would be closed after this: not before the test ends.
        config.limits.header_timeout = Duration::from_secs(300);
        config.limits.idle_timeout = Duration::from_secs(300);
    })
    .await;
    let tcp = TcpStream::connect(server.handle.addr).await.unwrap();
    let io = connector(&server.ca_pem, &[b"h2"])
        .connect(service_name(), tcp)
        .await
        .unwrap();
    let (client, connection) = h2::client::handshake(io).await.unwrap();
    let connection = tokio::spawn(connection);
    let request = |length: usize| {
        http::Request::post(format!("https://{}/validate", common::SERVICE_NAME))
            .header("content-length", length)
            .body(())
            .unwrap()
    };
    let mut client = within("a stream", client.ready()).await.unwrap();
    let (answer, mut body) = client.send_request(request(1024), false).unwrap();
    body.send_data(bytes::Bytes::from_static(b"{"), false)
        .unwrap();
    let answer = within("the 408", answer).await.unwrap();
    assert_eq!(answer.status(), 408);
    // The server closes the connection: the client's connection task ends
    // (a GOAWAY, then the close), without a new request being sent on it.
    within("the connection to close", connection)
        .await
        .unwrap()
        .unwrap();
    keeps_serving(&server).await;
    server.handle.shutdown().await;
}

#[test]
fn the_default_limits_fit_several_api_servers() {
    let Command::Serve(args) = Cli::try_parse_from(["finalizer-guard", "serve"])
        .unwrap()
        .command
    else {
        panic!("not serve");
    };
    let limits = args.into_config().limits;
    // Each kube-apiserver replica keeps a pool of connections per webhook.
    assert!(
        limits.max_connections >= 1024,
        "--max-connections defaults to {}",
        limits.max_connections
    );
    assert!(limits.max_body_bytes >= 8 * 1024 * 1024);
    for timeout in [
        limits.handshake_timeout,
        limits.header_timeout,
        limits.body_timeout,
        limits.write_timeout,
    ] {
        // Longer than kube-apiserver's own webhook timeout (at most 30s) is pointless.
        assert!(
            timeout > Duration::ZERO && timeout <= Duration::from_secs(30),
            "{limits:?}"
        );
    }
}

// 3. Garbage where TLS is expected.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_tls_port_is_refused_and_frees_its_connection() {
    // Two slots: a connection that kept its slot would soon stall the rest.
    let server = start_with(None, |config, _| config.limits.max_connections = 2).await;
    let mut noise = Vec::with_capacity(4096);
    let mut x: u32 = 0x9e37_79b9;
    for _ in 0..4096 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        noise.push(x as u8);
    }
    noise[0] = 0x99; // not a TLS record type: refused at once, not after a timeout
    let mut plain = post_head(seed_strip().len()).into_bytes();
    plain.extend(seed_strip());
    let mut nonsense_record = vec![0x16, 0x03, 0x03, 0x00, 0x40];
    nonsense_record.extend([0xff; 0x40]);
    let inputs = [
        ("random bytes", noise),
        ("a plain-HTTP review", plain),
        ("a handshake record of nonsense", nonsense_record),
    ];
    for _ in 0..3 {
        for (what, bytes) in &inputs {
            let mut tcp = TcpStream::connect(server.handle.addr).await.unwrap();
            // The server may hang up before it has all been written.
            let _ = tcp.write_all(bytes).await;
            let answer = until_closed(what, &mut tcp).await;
            assert!(
                answer.is_empty() || answer[0] == 0x15,
                "{what}: answered with something else than a TLS alert: {:?}",
                String::from_utf8_lossy(&answer)
            );
        }
    }
    keeps_serving(&server).await;
    server.handle.shutdown().await;
}

// 4. Wrong method (405) and unknown path (404): tests/server.rs.

// 5. Deeply nested JSON.

/// A change made to a review before it is sent.
type Change = fn(&mut Value);

/// `review` serialized, with its `"PLACEHOLDER"` string replaced by `raw`.
fn with_raw(review: &Value, raw: &[u8]) -> Vec<u8> {
    let text = serde_json::to_vec(review).unwrap();
    let at = text
        .windows(13)
        .position(|w| w == b"\"PLACEHOLDER\"")
        .expect("a placeholder");
    [&text[..at], raw, &text[at + 13..]].concat()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_json_is_refused_or_skipped_never_overflowing_the_stack() {
    let server = start(None).await;
    let deep = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes();
    let placed = |place: Change| {
        let mut review = strip("alice", Value::Null);
        place(&mut review);
        review
    };

    // Not an AdmissionReview at all: a clear 400.
    let response = server.post(deep(100_000)).await;
    assert_eq!(response.status(), 400);
    one_line(&response.text().await.unwrap());

    // Skipped: read past without recursion, whatever the depth; the removal
    // is still judged. 300,000 levels is a body over 256 KiB, decided on the
    // blocking pool.
    let skipped: [(&str, Change, usize); 6] = [
        (
            "request.options",
            |r| r["request"]["options"] = json!("PLACEHOLDER"),
            100_000,
        ),
        (
            "an unknown top-level field",
            |r| r["extra"] = json!("PLACEHOLDER"),
            100_000,
        ),
        (
            "object.data",
            |r| r["request"]["object"]["data"] = json!("PLACEHOLDER"),
            100_000,
        ),
        (
            "oldObject.spec",
            |r| r["request"]["oldObject"]["spec"]["affinity"] = json!("PLACEHOLDER"),
            300_000,
        ),
        (
            "an annotation's value",
            |r| r["request"]["object"]["metadata"]["annotations"] = json!({"a": "PLACEHOLDER"}),
            100_000,
        ),
        (
            "an unknown field of request",
            |r| r["request"]["extra"] = json!("PLACEHOLDER"),
            100_000,
        ),
    ];
    for (what, place, depth) in skipped {
        let response = server.post(with_raw(&placed(place), &deep(depth))).await;
        assert_eq!(response.status(), 200, "{what}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["response"]["allowed"], false, "{what}: {answer}");
    }
    // An override reads oldObject whole for the leak ledger: cut at 128
    // levels there too, and the override still goes through.
    let mut overridden = strip(
        "alice",
        json!({"finalizer-guard.io/override": "node-lost: INC-4711 worker-3 powered off"}),
    );
    overridden["request"]["oldObject"]["status"] = json!("PLACEHOLDER");
    let response = server.post(with_raw(&overridden, &deep(100_000))).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["response"]["allowed"], true, "{answer}");

    keeps_serving(&server).await;
    server.handle.shutdown().await;
}

// 6. Invalid UTF-8.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_in_a_string_the_decision_reads_is_refused() {
    let server = start(None).await;
    let invalid: [&[u8]; 3] = [
        b"\xff\xfe",
        b"\xc0\xaf",     // an overlong '/'
        b"\xed\xa0\x80", // a UTF-16 surrogate
    ];
    let places: [(&str, Change); 4] = [
        ("request.uid", |r| {
            r["request"]["uid"] = json!("PLACEHOLDER")
        }),
        ("the username", |r| {
            r["request"]["userInfo"]["username"] = json!("PLACEHOLDER")
        }),
        ("a removed finalizer", |r| {
            r["request"]["oldObject"]["metadata"]["finalizers"] = json!(["PLACEHOLDER"])
        }),
        ("the override annotation", |r| {
            r["request"]["object"]["metadata"]["annotations"] =
                json!({"finalizer-guard.io/override": "PLACEHOLDER"})
        }),
    ];
    for (what, place) in places {
        for bytes in invalid {
            let mut review = strip("alice", Value::Null);
            place(&mut review);
            let raw = [b"\"node-lost: ", bytes, b"\""].concat();
            let response = server.post(with_raw(&review, &raw)).await;
            assert_eq!(response.status(), 400, "{what} {bytes:?}");
            let text = response.text().await.unwrap();
            let line = one_line(&text);
            assert!(
                line.starts_with("body is not JSON: invalid unicode code point at line 1 column"),
                "{what}: {line}"
            );
        }
    }
    // A string the decision never reads (a ConfigMap's data, a label) is
    // skipped unread, as serde_json skips it: the removal is judged all the same.
    let skipped: [(&str, Change); 2] = [
        ("data", |r| {
            r["request"]["object"]["data"] = json!({"k": "PLACEHOLDER"})
        }),
        ("a label", |r| {
            r["request"]["object"]["metadata"]["labels"] = json!({"app": "PLACEHOLDER"})
        }),
    ];
    for (what, place) in skipped {
        let mut review = strip("alice", Value::Null);
        place(&mut review);
        let response = server.post(with_raw(&review, b"\"\xff\xfe\"")).await;
        assert_eq!(response.status(), 200, "{what}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["response"]["allowed"], false, "{what}: {answer}");
    }

    keeps_serving(&server).await;
    server.handle.shutdown().await;
}

// 7. Wrong JSON types.

/// `kubectl patch ns legacy` through `namespaces/finalize`, emptying `spec.finalizers`.
fn namespace_finalize() -> Value {
    let namespace = |finalizers: Value| {
        json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "legacy", "uid": "4c3e2b1a-0f9e-4d8c-b7a6-5e4d3c2b1a09"},
            "spec": {"finalizers": finalizers},
            "status": {"phase": "Terminating"},
        })
    };
    let mut review = update(
        "alice",
        namespace(json!(["kubernetes"])),
        namespace(json!([])),
    );
    let request = &mut review["request"];
    request["kind"] = json!({"group": "", "version": "v1", "kind": "Namespace"});
    request["resource"] = json!({"group": "", "version": "v1", "resource": "namespaces"});
    request["subResource"] = json!("finalize");
    request["name"] = json!("legacy");
    request["namespace"] = json!("legacy");
    review
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_json_types_are_refused_or_still_denied_never_allowed() {
    let server = start(None).await;
    // Refused with a 400 that names the field.
    let refused: [(&str, Change, &str); 14] = [
        (
            "request.uid",
            |r| r["request"]["uid"] = json!(42),
            "request.uid: invalid type: integer `42`, expected a string",
        ),
        ("request", |r| r["request"] = json!([]), "request"),
        (
            "request.operation",
            |r| r["request"]["operation"] = json!(1),
            "request.operation",
        ),
        (
            "request.dryRun",
            |r| r["request"]["dryRun"] = json!("false"),
            "request.dryRun",
        ),
        (
            "request.userInfo.groups",
            |r| r["request"]["userInfo"]["groups"] = json!("system:masters"),
            "request.userInfo.groups",
        ),
        (
            "request.userInfo.username",
            |r| r["request"]["userInfo"]["username"] = json!(7),
            "request.userInfo.username",
        ),
        (
            "request.object",
            |r| r["request"]["object"] = json!("web-0"),
            "request.object",
        ),
        (
            "request.oldObject.metadata",
            |r| r["request"]["oldObject"]["metadata"] = json!("web-0"),
            "request.oldObject.metadata",
        ),
        (
            "oldObject finalizers as an object",
            |r| {
                r["request"]["oldObject"]["metadata"]["finalizers"] =
                    json!({"0": "example.com/cleanup"})
            },
            "request.oldObject.metadata.finalizers",
        ),
        (
            "oldObject finalizers as a string",
            |r| r["request"]["oldObject"]["metadata"]["finalizers"] = json!("example.com/cleanup"),
            "request.oldObject.metadata.finalizers",
        ),
        // A non-string entry must not make the removal of the others invisible.
        (
            "a number among oldObject's finalizers",
            |r| {
                r["request"]["oldObject"]["metadata"]["finalizers"] =
                    json!(["example.com/cleanup", 7])
            },
            "request.oldObject.metadata.finalizers",
        ),
        (
            "object finalizers as an object",
            |r| r["request"]["object"]["metadata"]["finalizers"] = json!({}),
            "request.object.metadata.finalizers",
        ),
        (
            "a null among object's finalizers",
            |r| r["request"]["object"]["metadata"]["finalizers"] = json!([null]),
            "request.object.metadata.finalizers",
        ),
        (
            "annotations as a list",
            |r| {
                r["request"]["object"]["metadata"]["annotations"] =
                    json!(["finalizer-guard.io/override"])
            },
            "request.object.metadata.annotations",
        ),
    ];
    for (what, change, reason) in refused {
        let mut review = strip("alice", Value::Null);
        change(&mut review);
        let response = server.post(serde_json::to_vec(&review).unwrap()).await;
        assert_eq!(response.status(), 400, "{what}");
        let text = response.text().await.unwrap();
        assert!(one_line(&text).contains(reason), "{what}: {text}");
    }

    // Tolerated, as fields a decision does not need or an override that is
    // simply not there: the removal is still denied.
    let tolerated: [(&str, Change); 4] = [
        ("the override annotation as a number", |r| {
            r["request"]["object"]["metadata"]["annotations"] =
                json!({"finalizer-guard.io/override": 4711})
        }),
        ("the override annotation as an object", |r| {
            r["request"]["object"]["metadata"]["annotations"] =
                json!({"finalizer-guard.io/override": {"node-lost": "INC-4711"}})
        }),
        ("a label as a number", |r| {
            r["request"]["object"]["metadata"]["labels"] = json!({"app": 1})
        }),
        ("a custom resource's spec as a string", |r| {
            r["request"]["object"]["spec"] = json!("opaque")
        }),
    ];
    for (what, change) in tolerated {
        let mut review = strip("alice", Value::Null);
        change(&mut review);
        let answer = server.review(&review).await;
        assert_eq!(answer["response"]["allowed"], false, "{what}: {answer}");
        assert_eq!(answer["response"]["status"]["code"], 403, "{what}");
    }

    // A Namespace's spec.finalizers is judged through namespaces/finalize:
    // there a list of another shape would read as empty, hiding a removal.
    let answer = server.review(&namespace_finalize()).await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let shapes: [(&str, Change, &str); 5] = [
        (
            "oldObject spec.finalizers as a string",
            |r| r["request"]["oldObject"]["spec"]["finalizers"] = json!("kubernetes"),
            "request.oldObject",
        ),
        (
            "a number among oldObject's spec.finalizers",
            |r| r["request"]["oldObject"]["spec"]["finalizers"] = json!(["kubernetes", 7]),
            "request.oldObject",
        ),
        (
            "oldObject spec as a list",
            |r| r["request"]["oldObject"]["spec"] = json!(["kubernetes"]),
            "request.oldObject",
        ),
        (
            "oldObject spec.finalizers as an object",
            |r| r["request"]["oldObject"]["spec"]["finalizers"] = json!({"kubernetes": true}),
            "request.oldObject",
        ),
        (
            "object spec.finalizers as a number",
            |r| r["request"]["object"]["spec"]["finalizers"] = json!(0),
            "request.object",
        ),
    ];
    for (what, change, field) in shapes {
        let mut review = namespace_finalize();
        change(&mut review);
        let response = server.post(serde_json::to_vec(&review).unwrap()).await;
        assert_eq!(response.status(), 400, "{what}");
        let text = response.text().await.unwrap();
        assert_eq!(
            one_line(&text),
            format!(
                "{field}.spec.finalizers is not a list of finalizer names: cannot tell which finalizers it removes"
            ),
            "{what}"
        );
    }
    keeps_serving(&server).await;
    server.handle.shutdown().await;
}

/// An annotation the decision reads, sent twice: neither copy may win. A
/// valid override followed by `null` was once read as the override.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_annotation_sent_twice_is_refused_not_an_override() {
    let server = start(None).await;
    let valid = r#""finalizer-guard.io/override":"node-lost: INC-4711 server-1 powered off""#;
    let review = strip(
        "alice",
        json!({"finalizer-guard.io/override": "node-lost: INC-4711 server-1 powered off"}),
    );
    let text = serde_json::to_string(&review).unwrap();
    assert_eq!(text.matches(valid).count(), 2, "{text}");
    let answer = server.review(&review).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    // The copy in `field` (`object` or `oldObject`) replaced by `twice`.
    let in_field = |field: &str, twice: &str| {
        let at = text.find(&format!(r#""{field}":"#)).unwrap();
        let (before, after) = text.split_at(at);
        format!("{before}{}", after.replacen(valid, twice, 1))
    };
    let approved =
        r#""finalizer-guard.io/approved-by":"sec-lead","finalizer-guard.io/approved-by":null"#;
    for (what, field, twice, key) in [
        (
            "valid, then null",
            "object",
            format!(r#"{valid},"finalizer-guard.io/override":null"#),
            "finalizer-guard.io/override",
        ),
        (
            "null, then valid",
            "object",
            format!(r#""finalizer-guard.io/override":null,{valid}"#),
            "finalizer-guard.io/override",
        ),
        (
            "valid twice",
            "object",
            format!("{valid},{valid}"),
            "finalizer-guard.io/override",
        ),
        (
            "the approval's annotation in oldObject",
            "oldObject",
            format!("{valid},{approved}"),
            "finalizer-guard.io/approved-by",
        ),
    ] {
        let body = in_field(field, &twice);
        assert_ne!(body, text, "{what}");
        let response = server.post(body).await;
        assert_eq!(response.status(), 400, "{what}");
        let reason = response.text().await.unwrap();
        assert_eq!(
            one_line(&reason),
            format!(
                "body is not an AdmissionReview: request.{field}.metadata.annotations: duplicate field `{key}`"
            ),
            "{what}"
        );
    }
    keeps_serving(&server).await;
    server.handle.shutdown().await;
}

// 8. Oversized bodies.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_get_413_however_they_are_sent() {
    const LIMIT: usize = 256 * 1024;
    let server = start_with(None, |config, _| config.limits.max_body_bytes = LIMIT).await;
    // A review padded to exactly the limit is decided; one byte more is not.
    let padded = |size: usize| {
        let mut body = seed_strip();
        body.resize(size, b' ');
        body
    };
    let response = server.post(padded(LIMIT)).await;
    assert_eq!(response.status(), 200);
    let response = server.post(padded(LIMIT + 1)).await;
    assert_eq!(response.status(), 413);
    assert_eq!(
        one_line(&response.text().await.unwrap()),
        format!("request body exceeds {LIMIT} bytes")
    );

    // Chunked, with no length announced.
    let mut stream = tls_connect(&server, &[b"http/1.1"]).await;
    let head = format!(
        "POST /validate HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
        common::SERVICE_NAME
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = [b' '; 16 * 1024];
    for _ in 0..(2 * LIMIT / chunk.len()) {
        stream
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .await
            .unwrap();
        stream.write_all(&chunk).await.unwrap();
        stream.write_all(b"\r\n").await.unwrap();
    }
    stream.write_all(b"0\r\n\r\n").await.unwrap();
    let (status, head, text) = read_response(&mut stream).await;
    assert_eq!(status, 413, "{head}{text}");
    assert!(head.contains("connection: close"), "{head}");

    // Over HTTP/2.
    let h2 = common::client(&server.ca_pem, server.handle.addr, &[b"h2"]);
    let response = h2
        .post(format!("{}/validate", server.url))
        .body(padded(2 * LIMIT))
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status(), 413);

    keeps_serving(&server).await;
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"finalizer_guard_rejected_requests_total{code="413"} 3"#),
        "{metrics}"
    );
    server.handle.shutdown().await;
}

// 9. Graceful shutdown of the real binary.

/// `finalizer-guard serve` as a child process, and where it listens.
#[cfg(unix)]
struct Child {
    process: tokio::process::Child,
    addr: SocketAddr,
    admin: SocketAddr,
    /// Its standard error so far, for failure messages.
    log: Arc<std::sync::Mutex<String>>,
}

#[cfg(unix)]
async fn spawn_serve(args: &[&str]) -> Child {
    spawn_serve_to(args, std::process::Stdio::null()).await
}

/// [`spawn_serve`], its standard output (the audit records) sent to `stdout`.
#[cfg(unix)]
async fn spawn_serve_to(args: &[&str], stdout: std::process::Stdio) -> Child {
    use tokio::io::AsyncBufReadExt;
    // Its callers talk to it with plain reqwest clients too.
    common::install_provider();
    let mut process = tokio::process::Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
        .arg("serve")
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--events=false", "--log-format", "json"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let log = Arc::new(std::sync::Mutex::new(String::new()));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut lines = tokio::io::BufReader::new(process.stderr.take().unwrap()).lines();
    let kept = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            kept.lock().unwrap().push_str(&line);
            kept.lock().unwrap().push('\n');
            let _ = tx.send(line);
        }
    });
    let (addr, admin) = within("the serving log line", async {
        loop {
            let line = rx.recv().await.expect("serve exited before serving");
            if let Some(addresses) = serving_addresses(&line) {
                return addresses;
            }
        }
    })
    .await;
    Child {
        process,
        addr,
        admin,
        log,
    }
}

/// A review whose audit record is about as large as one gets: 128 removed
/// finalizers of 250 characters (each record ~40 KiB), so the pipe and the
/// queue's 16 MiB fill after some hundreds of reviews.
fn large_record_review() -> Vec<u8> {
    let finalizers: Vec<String> = (0..128)
        .map(|i| format!("example.com/{i:03}-{}", "x".repeat(234)))
        .collect();
    serde_json::to_vec(&update(
        "alice",
        common::pod(json!(finalizers), Value::Null),
        common::pod(Value::Null, Value::Null),
    ))
    .unwrap()
}

/// `finalizer_guard_audit_refused_reviews_total` of the `/metrics` at `url`.
async fn audit_refused(url: &str) -> u64 {
    let metrics = reqwest::get(url).await.unwrap().text().await.unwrap();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("finalizer_guard_audit_refused_reviews_total "))
        .unwrap_or_else(|| panic!("{metrics}"))
        .parse()
        .unwrap()
}

/// A log pipeline that stops reading standard output: the audit writer
/// cannot write, its queue fills. Each review is then refused (503, one
/// line) within the audit wait, well under kube-apiserver's 5 s timeout,
/// never allowed without its record and never hanging; 600 at once (more
/// than the runtime's 512 blocking threads) hold no thread: `/healthz`
/// answers throughout and `/readyz` turns 503. Once standard output is read
/// again, reviews are answered and `/readyz` is 200.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdout_nobody_reads_refuses_reviews_in_time_and_turns_unready_until_read() {
    use finalizer_guard::trail::audit_log::AUDIT_WAIT;
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_serve_to(
        &["--dev-cert-dir", dir.path().to_str().unwrap()],
        std::process::Stdio::piped(),
    )
    .await;
    // Held open, never read (until the end).
    let mut stdout = child.process.stdout.take().unwrap();
    let ca = std::fs::read(dir.path().join("ca.crt")).unwrap();
    let client = common::client(&ca, child.addr, &[b"http/1.1"]);
    let url = format!(
        "https://{}:{}/validate",
        common::SERVICE_NAME,
        child.addr.port()
    );
    let admin = |path: &str| format!("http://{}{path}", child.admin);
    assert_eq!(reqwest::get(admin("/readyz")).await.unwrap().status(), 200);
    let body = large_record_review();
    // kube-apiserver's timeoutSeconds in the chart.
    let webhook_timeout = Duration::from_secs(5);
    let post = || {
        let (client, url, body) = (client.clone(), url.clone(), body.clone());
        async move {
            let started = Instant::now();
            let response = client.post(url).body(body).send().await.unwrap();
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            (status, text, started.elapsed())
        }
    };
    // Reviews until the pipe and the queue are full and one finds no room
    // for its record within the audit wait. The writer turns stalled
    // (refusing at once, checked below) STALL after the pipe fills: on a
    // loaded machine the queue may fill more slowly than that. A review
    // refused as stalled then reads one chunk of standard output (the
    // stall ends, the few records written leave as little room) and the
    // reviews go on; the lines read are counted with the rest at the end.
    let no_room = "the audit log is not being written (standard output not read): no room for this review's audit record within 1s; not decided without it";
    let stalled = "the audit log is not being written (standard output not read, or read too slowly): no audit record written for ";
    let mut answered = 0;
    let mut refused_first = 0u64;
    let mut lines_read_early = 0usize;
    let mut chunk = vec![0u8; 1 << 16];
    let mut first = None;
    wait_until(
        "a review refused for want of room for its audit record",
        4 * BOUND,
        async || {
            loop {
                let (status, text, took) = post().await;
                match status {
                    200 => answered += 1,
                    503 if one_line(&text) == no_room => {
                        refused_first += 1;
                        first = Some((text, took));
                        return true;
                    }
                    503 if one_line(&text).starts_with(stalled) => {
                        refused_first += 1;
                        let n = within("standard output, one chunk", stdout.read(&mut chunk))
                            .await
                            .unwrap();
                        assert!(n > 0, "standard output ended");
                        lines_read_early += chunk[..n].iter().filter(|b| **b == b'\n').count();
                        return false;
                    }
                    other => panic!("{other}: {text}"),
                }
                assert!(answered < 5000, "never refused");
            }
        },
    )
    .await;
    let (text, took) = first.expect("refused");
    assert!(answered > 100, "{answered}");
    assert!(took >= AUDIT_WAIT && took < webhook_timeout, "{took:?}");
    assert_eq!(one_line(&text), no_room);
    // 600 at once, each on its own connection (more than the runtime's 512
    // blocking threads): each refused, none hanging, and the probes answer
    // meanwhile. (Small reviews, and a client patient with 600 TLS
    // handshakes on a busy machine: what is timed above is the server's wait.)
    let patient = reqwest::Client::builder()
        .tls_backend_preconfigured(common::tls_config(&ca, &[b"http/1.1"]))
        .resolve(common::SERVICE_NAME, child.addr)
        .timeout(BOUND)
        .build()
        .unwrap();
    let small = seed_strip();
    let many: Vec<_> = (0..600)
        .map(|_| {
            let (client, url, body) = (patient.clone(), url.clone(), small.clone());
            tokio::spawn(async move {
                let response = client.post(url).body(body).send().await.unwrap();
                (response.status().as_u16(), response.text().await.unwrap())
            })
        })
        .collect();
    // The probes answer while the server refuses them: once the first of
    // them is refused (counted), /healthz.
    wait_until("the first of the 600 refused", BOUND, async || {
        audit_refused(&admin("/metrics")).await > refused_first
    })
    .await;
    let health = within("/healthz", reqwest::get(admin("/healthz")))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    // A few small records may still fit in the room the large one did not
    // find: those are queued and answered.
    let mut refused_at_once = 0;
    for review in many {
        match within("a review", review).await.unwrap() {
            (503, _) => refused_at_once += 1,
            (200, _) => answered += 1,
            (status, text) => panic!("{status}: {text}"),
        }
    }
    assert!(refused_at_once > 512, "{refused_at_once}");
    assert_eq!(reqwest::get(admin("/healthz")).await.unwrap().status(), 200);
    wait_until("/readyz turning 503", BOUND, async || {
        reqwest::get(admin("/readyz")).await.unwrap().status() == 503
    })
    .await;
    let readyz = reqwest::get(admin("/readyz"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        readyz.starts_with("not ready: audit records not written for "),
        "{readyz}"
    );
    let refused = audit_refused(&admin("/metrics")).await;
    assert_eq!(refused, refused_first + refused_at_once);
    // Logged, not once per review.
    let logged = child
        .log
        .lock()
        .unwrap()
        .matches("reviews refused: no room for their audit records")
        .count();
    assert!(
        (1..=5).contains(&logged),
        "{logged}:\n{}",
        child.log.lock().unwrap()
    );

    // The pipeline reads again: everything queued is written, reviews are
    // answered, ready again.
    let read = Arc::new(std::sync::atomic::AtomicUsize::new(lines_read_early));
    let reader = tokio::spawn({
        let read = read.clone();
        async move {
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match stdout.read(&mut buf).await {
                    Ok(0) | Err(_) => return read.load(std::sync::atomic::Ordering::SeqCst),
                    Ok(n) => {
                        let lines = buf[..n].iter().filter(|b| **b == b'\n').count();
                        read.fetch_add(lines, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            }
        }
    });
    wait_until("/readyz turning 200", BOUND, async || {
        reqwest::get(admin("/readyz")).await.unwrap().status() == 200
    })
    .await;
    // Every record queued is written (read) before the next review, which
    // then finds room at once.
    wait_until("the queued audit records read", BOUND, async || {
        read.load(std::sync::atomic::Ordering::SeqCst) >= answered
    })
    .await;
    let (status, text, took) = post().await;
    assert_eq!(status, 200, "{text}");
    assert!(took < AUDIT_WAIT, "{took:?}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.process.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let lines = within("the audit records, to the end", reader)
        .await
        .unwrap();
    // Every answered review has its record; no refused one has.
    assert_eq!(lines, answered + 1, "{}", child.log.lock().unwrap());
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_turns_unready_lets_the_request_in_flight_finish_then_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_serve(&[
        "--dev-cert-dir",
        dir.path().to_str().unwrap(),
        "--shutdown-delay",
        "5s",
        "--shutdown-timeout",
        "60s",
        "--body-timeout",
        "60s",
    ])
    .await;
    let ca = std::fs::read(dir.path().join("ca.crt")).unwrap();
    let readyz = format!("http://{}/readyz", child.admin);
    assert_eq!(reqwest::get(&readyz).await.unwrap().status(), 200);

    // A review in flight: headers and half its body sent.
    let body = seed_strip();
    let tcp = TcpStream::connect(child.addr).await.unwrap();
    let mut in_flight = within(
        "TLS handshake",
        connector(&ca, &[b"http/1.1"]).connect(service_name(), tcp),
    )
    .await
    .unwrap();
    in_flight
        .write_all(post_head(body.len()).as_bytes())
        .await
        .unwrap();
    in_flight.write_all(&body[..body.len() / 2]).await.unwrap();

    let pid = child.process.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());

    // Unready at once, on the admin port the kubelet probes.
    wait_until("/readyz turning 503", BOUND, async || {
        let status = reqwest::get(&readyz)
            .await
            .unwrap_or_else(|e| panic!("/readyz during the shutdown delay: {e}"))
            .status();
        assert!(status == 200 || status == 503, "{status}");
        status == 503
    })
    .await;
    // After the delay the webhook port stops taking connections...
    wait_until("the webhook port closing", BOUND, async || {
        TcpStream::connect(child.addr).await.is_err()
    })
    .await;
    assert!(
        child.process.try_wait().unwrap().is_none(),
        "exited with a request in flight:\n{}",
        child.log.lock().unwrap()
    );
    // ... while the request in flight is finished and answered.
    in_flight.write_all(&body[body.len() / 2..]).await.unwrap();
    let (status, _, text) = read_response(&mut in_flight).await;
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["response"]["allowed"], false);

    let exited = within("the process exiting", child.process.wait())
        .await
        .unwrap();
    assert_eq!(
        exited.code(),
        Some(0),
        "{exited}:\n{}",
        child.log.lock().unwrap()
    );
}

/// A standard error whose reader has gone (a log shipper that exited):
/// each log line is lost, never a panic. A review that logs still gets its
/// answer, and SIGTERM still drains and exits 0, audit records written.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standard_error_nobody_reads_any_more_loses_log_lines_not_answers() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    let mut process = tokio::process::Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
        .arg("serve")
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--events=false", "--log-format", "json"])
        .args(["--dev-cert-dir", dir.path().to_str().unwrap()])
        .args(["--shutdown-delay", "1s"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = process.stdout.take().unwrap();
    let records = tokio::spawn(async move {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out).await;
        String::from_utf8(out).unwrap()
    });
    // Read up to the serving line, then close the pipe's reading end.
    let mut lines = tokio::io::BufReader::new(process.stderr.take().unwrap()).lines();
    let (addr, admin): (SocketAddr, SocketAddr) = within("the serving log line", async {
        loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("serve exited before serving");
            if let Some(addresses) = serving_addresses(&line) {
                return addresses;
            }
        }
    })
    .await;
    drop(lines);

    let ca = std::fs::read(dir.path().join("ca.crt")).unwrap();
    let client = common::client(&ca, addr, &[b"http/1.1"]);
    let url = format!("https://{}:{}/validate", common::SERVICE_NAME, addr.port());
    // Each logs (a warning): the first write fails, and every one after.
    for _ in 0..3 {
        let response = within(
            "a review that is not JSON",
            client.post(&url).body("notjson").send(),
        )
        .await
        .unwrap();
        assert_eq!(response.status(), 400);
    }
    let response = client.post(&url).body(seed_strip()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let healthz = reqwest::get(format!("http://{admin}/healthz"))
        .await
        .unwrap();
    assert_eq!(healthz.status(), 200);

    let killed = std::process::Command::new("kill")
        .args(["-TERM", &process.id().unwrap().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let started = Instant::now();
    let exited = within("the process exiting", process.wait()).await.unwrap();
    assert_eq!(exited.code(), Some(0), "{exited}");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "exited before its shutdown delay: {:?}",
        started.elapsed()
    );
    let records = within("the audit records", records).await.unwrap();
    assert_eq!(records.lines().count(), 1, "{records}");
    assert!(records.contains("\"decision\":\"denied\""), "{records}");
}

// 10. Client certificates (mTLS).

fn read(path: impl AsRef<Path>) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_only_its_client_certificates_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    common::certs_with_client(&out);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(out.join("client.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "client.key is readable by others");
    }
    let mut config = common::config(dir.path());
    config.tls = Some((out.join("tls.crt"), out.join("tls.key")));
    config.client_ca = Some(out.join("ca.crt"));
    let handle = server::start(config).await.unwrap();
    let ca = read(out.join("ca.crt"));
    let url = format!("https://{}:{}", common::SERVICE_NAME, handle.addr.port());
    let body = seed_strip();
    let post = |client: reqwest::Client| {
        let (url, body) = (url.clone(), body.clone());
        async move {
            client
                .post(format!("{url}/validate"))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
        }
    };

    // kube-apiserver's certificate, from `certs --client`: answered.
    let (client_crt, client_key) = (read(out.join("client.crt")), read(out.join("client.key")));
    let apiserver = common::client_as(&ca, handle.addr, Some((&client_crt, &client_key)));
    let response = post(apiserver).await.unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["response"]["allowed"], false);

    // Refused at the handshake: no certificate; one from another CA; and
    // one from the right CA that is not for client authentication (the
    // serving certificate itself).
    let other = CertificateAuthority::generate(1)
        .unwrap()
        .issue_client("kube-apiserver", 1)
        .unwrap();
    let (tls_crt, tls_key) = (read(out.join("tls.crt")), read(out.join("tls.key")));
    let refused = [
        ("no certificate", None),
        (
            "another CA's certificate",
            Some((other.cert_pem.as_bytes(), other.key_pem.as_bytes())),
        ),
        (
            "a serving certificate",
            Some((tls_crt.as_slice(), tls_key.as_slice())),
        ),
    ];
    for (what, identity) in refused {
        let client = common::client_as(&ca, handle.addr, identity);
        match post(client.clone()).await {
            Err(e) => assert!(e.is_connect() || e.is_request(), "{what}: {e:?}"),
            Ok(response) => panic!("{what}: served, {}", response.status()),
        }
        assert!(
            client.get(format!("{url}/healthz")).send().await.is_err(),
            "{what}: /healthz on the webhook port"
        );
    }
    // The probes stay on the admin port, where no certificate is asked for.
    for probe in ["healthz", "readyz"] {
        let status = reqwest::get(format!("http://{}/{probe}", handle.admin_addr))
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200, "{probe}");
    }
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_ca_that_cannot_be_read_is_a_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not-pem.crt");
    std::fs::write(&not_pem, "kube-apiserver\n").unwrap();
    let bad_der = dir.path().join("bad-der.crt");
    std::fs::write(
        &bad_der,
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let missing = dir.path().join("missing.crt");
    for (path, why) in [
        (&missing, "No such file"),
        (&not_pem, "no PEM certificate found"),
        (&bad_der, "client CA"),
    ] {
        let mut config = common::config(dir.path());
        config.client_ca = Some(path.clone());
        let error = server::start(config)
            .await
            .err()
            .expect("refused")
            .to_string();
        assert!(
            error.contains(path.to_str().unwrap()) && error.contains(why),
            "{error}"
        );
    }
    // The flag and its environment variable, through the binary.
    let serve = |args: &[&str], env: Option<&Path>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_finalizer-guard"));
        command
            .arg("serve")
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .args(["--events=false", "--dev-cert-dir"])
            .arg(dir.path())
            .args(args);
        if let Some(path) = env {
            command.env("FINALIZER_GUARD_CLIENT_CA", path);
        }
        command.output().unwrap()
    };
    for refused in [
        serve(&["--client-ca", missing.to_str().unwrap()], None),
        serve(&[], Some(&not_pem)),
    ] {
        assert_eq!(refused.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("error: "), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_ca_is_reloaded_while_serving() {
    let first = CertificateAuthority::generate(1)
        .unwrap()
        .issue_client("kube-apiserver", 1)
        .unwrap();
    // The second CA outlives the first by days: the expiry gauge moves.
    let second = CertificateAuthority::generate(5)
        .unwrap()
        .issue_client("kube-apiserver", 1)
        .unwrap();
    let ca_file = std::sync::OnceLock::new();
    let server = start_with(None, |config, dir| {
        let path = dir.join("client-ca.crt");
        std::fs::write(&path, &first.ca_cert_pem).unwrap();
        config.client_ca = Some(path.clone());
        ca_file.set(path).unwrap();
    })
    .await;
    let ca_file = ca_file.into_inner().unwrap();
    let served = |identity: &finalizer_guard::pki::certificates::Bundle| {
        // A new client each time: a new connection, a full handshake.
        let client = common::client_as(
            &server.ca_pem,
            server.handle.addr,
            Some((identity.cert_pem.as_bytes(), identity.key_pem.as_bytes())),
        );
        let url = format!("{}/validate", server.url);
        async move {
            client
                .post(url)
                .body(seed_strip())
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        }
    };
    assert!(served(&first).await);
    assert!(!served(&second).await);
    let client_ca_expiry = |text: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(
                    r#"finalizer_guard_certificate_expiry_timestamp_seconds{kind="client-ca"} "#,
                )
            })
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no client-ca expiry in:\n{text}"))
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let first_expiry = client_ca_expiry(&server.metrics().await);
    assert!(
        (first_expiry - now - 86_400.0).abs() < 3_600.0,
        "{first_expiry}"
    );

    // Replaced whole, as kubelet swaps a Secret volume's contents.
    let replace = |text: &str| {
        let tmp = ca_file.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &ca_file).unwrap();
    };
    replace(&second.ca_cert_pem);
    wait_until("the new client CA in force", BOUND, async || {
        served(&second).await
    })
    .await;
    assert!(!served(&first).await, "the old CA is still trusted");
    let second_expiry = client_ca_expiry(&server.metrics().await);
    assert!(
        (second_expiry - now - 5.0 * 86_400.0).abs() < 3_600.0,
        "{second_expiry}"
    );

    // A broken file is refused; the last good CA stays in force.
    replace("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
    server
        .wait_for_metric(r#"finalizer_guard_reloads_total{kind="client-ca",outcome="failure"} 1"#)
        .await;
    assert!(served(&second).await);
    assert!(!served(&first).await);
    server.handle.shutdown().await;
}

/// The webhook's and the admin port's addresses, from `serve`'s JSON log
/// line that says it serves; None for any other line.
fn serving_addresses(line: &str) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
    let event = serde_json::from_str::<Value>(line).ok()?;
    Some((
        event["addr"].as_str()?.parse().ok()?,
        event["admin_addr"].as_str()?.parse().ok()?,
    ))
}
