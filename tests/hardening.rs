//! Hostile and broken clients: the server cuts off the slow ones, refuses the
//! malformed ones with a clear status, and drains on SIGTERM. After each, it
//! keeps serving.
//!
//! Covered elsewhere: a wrong method (`GET /validate`: 405), an unknown path
//! (404) and a 9 MiB body (413) at the default limit, in
//! `tests/server.rs` `bad_input_gets_a_clear_status_and_the_server_keeps_serving`.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use common::{Running, start_with, strip};
use finalizer_guard::cli::{Cli, Command};
use rustls_pki_types::ServerName;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// How long anything the server should do promptly may take here: a hang
/// fails the test instead of stalling it, and a loaded machine has room.
const BOUND: Duration = Duration::from_secs(30);

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
        assert!(
            sent.is_empty(),
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

// 2. The connection cap.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_wait_until_one_closes() {
    const CAP: usize = 8;
    let server = start_with(None, |config, _| {
        config.limits.max_connections = CAP;
        // The held connections must outlive the test, idle or not.
        config.limits.header_timeout = Duration::from_secs(300);
    })
    .await;
    let body = seed_strip();
    let mut held = Vec::new();
    for _ in 0..CAP {
        let mut stream = tls_connect(&server, &[b"http/1.1"]).await;
        assert_eq!(exchange(&mut stream, &body).await.0, 200);
        held.push(stream);
    }

    // One more: the kernel completes its TCP handshake, the server does not take it up.
    let tcp = TcpStream::connect(server.handle.addr).await.unwrap();
    let mut waiting =
        tokio::spawn(connector(&server.ca_pem, &[b"http/1.1"]).connect(service_name(), tcp));
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut waiting)
            .await
            .is_err(),
        "a connection beyond the cap of {CAP} was served"
    );
    // The held ones are served all the while.
    for stream in &mut held {
        assert_eq!(exchange(stream, &body).await.0, 200);
    }
    assert!(!waiting.is_finished(), "served beyond the cap");

    // One closes: the waiting one is taken up and served.
    drop(held.pop());
    let mut stream = within("the waiting connection", waiting)
        .await
        .unwrap()
        .unwrap();
    let (status, _, text) = exchange(&mut stream, &body).await;
    assert_eq!(status, 200);
    assert!(text.contains(r#""allowed":false"#), "{text}");
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
    use tokio::io::AsyncBufReadExt;
    let mut process = tokio::process::Command::new(env!("CARGO_BIN_EXE_finalizer-guard"))
        .arg("serve")
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--events=false", "--log-format", "json"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
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
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if let (Some(addr), Some(admin)) =
                (event["addr"].as_str(), event["admin_addr"].as_str())
            {
                return (addr.parse().unwrap(), admin.parse().unwrap());
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
    within("/readyz turning 503", async {
        loop {
            let status = reqwest::get(&readyz)
                .await
                .unwrap_or_else(|e| panic!("/readyz during the shutdown delay: {e}"))
                .status();
            if status == 503 {
                return;
            }
            assert_eq!(status, 200);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    // After the delay the webhook port stops taking connections...
    within("the webhook port closing", async {
        while TcpStream::connect(child.addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
