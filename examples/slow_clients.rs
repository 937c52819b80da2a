//! HTTP/2 clients that always keep a slow request in flight on the webhook
//! port, and probes beside them: whether a fair client still gets a slot
//! (docs/security.md, "Connection slots").
//!
//! ```sh
//! finalizer-guard serve --dev-cert-dir DIR --max-connections 2 --body-timeout 3s &
//! cargo run --release --example slow_clients -- --ca DIR/ca.crt \
//!   --review examples/reviews/pod-strip-finalizers.json --clients 2 --seconds 30
//! ```
//!
//! Each client opens a stream every `--every`: a `POST /validate`'s headers
//! and one byte of a 1 KiB body, the rest never sent (answered 408 at the
//! body timeout); with `--just-in-time D`, one byte of a 2-byte body and
//! the other D later (answered in time). A client whose connection takes
//! no more streams opens another, keeping the old one for as long as the
//! server does. Every `--probe-every`, after `--warmup`, three
//! probes, each on a new connection: `GET /healthz` on the webhook port and
//! on the admin port with the kubelet's 2 s timeout, and a review on the
//! webhook port with kube-apiserver's default webhook timeout, 10 s.
//! Prints one JSON object: each probe's answered (200) and sent, and the
//! longest an answer took; and the connections the slow clients opened.
//!
//! With `--unread-answers N`, each client instead opens one HTTP/2
//! connection with its receive windows at 0, sends up to N whole reviews
//! on it (as many as the server lets it open at once) and never reads an
//! answer, so every answer stays in the server's memory with its stream;
//! every 4 s it opens one more stream and sends no body, so the connection
//! never looks idle. With `--pid`, the output adds the server's peak
//! resident memory (`VmHWM`) at the end (docs/performance.md, "Answers a
//! client does not read"):
//!
//! ```sh
//! finalizer-guard serve --dev-cert-dir DIR --max-connections 256 --events=false &
//! cargo run --release --example slow_clients -- --ca DIR/ca.crt --pid $! \
//!   --review examples/reviews/pod-strip-finalizers.json --clients 256 \
//!   --unread-answers 230 --seconds 20
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// The name the dev certificate is issued for.
const SERVICE_NAME: &str = "finalizer-guard.finalizer-guard.svc";

#[derive(Parser)]
struct Args {
    /// The webhook port.
    #[arg(long, default_value = "127.0.0.1:8443")]
    addr: SocketAddr,
    /// The admin port.
    #[arg(long, default_value = "127.0.0.1:9090")]
    admin: SocketAddr,
    /// The CA that issued the serving certificate (dev mode: DIR/ca.crt).
    #[arg(long)]
    ca: PathBuf,
    /// The AdmissionReview the review probe sends.
    #[arg(long)]
    review: PathBuf,
    /// Slow clients.
    #[arg(long, default_value_t = 2)]
    clients: usize,
    /// How long they run, in seconds (at most 600).
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// How often each opens a stream, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    every: u64,
    /// Finish each body this many milliseconds after its first byte,
    /// rather than never.
    #[arg(long)]
    just_in_time: Option<u64>,
    /// How often the probes run, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    probe_every: u64,
    /// How long the slow clients run before the first probes, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    warmup: u64,
    /// Ask for up to this many answers on one connection and never read
    /// them, rather than keep slow requests in flight.
    #[arg(long)]
    unread_answers: Option<usize>,
    /// The server's process, whose peak resident memory is reported.
    #[arg(long)]
    pid: Option<u32>,
}

fn tls(ca: &[u8], alpn: &[u8]) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca) {
        roots
            .add(cert.expect("a PEM certificate"))
            .expect("a CA certificate");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    config
}

/// One slow client until `until`: the connections it opened (at most
/// 10,000), and no answers. Once a connection takes no more streams it
/// opens another, keeping the old one and its streams for as long as the
/// server does.
async fn slow_client(
    addr: SocketAddr,
    tls: TlsConnector,
    every: Duration,
    just_in_time: Option<Duration>,
    until: Instant,
) -> (usize, usize) {
    let mut connections = Vec::new();
    let mut client: Option<h2::client::SendRequest<Bytes>> = None;
    // Every stream opened, its body and its answer: dropped, a stream is reset.
    let mut open: Vec<(
        Instant,
        bool,
        h2::SendStream<Bytes>,
        h2::client::ResponseFuture,
    )> = Vec::new();
    while Instant::now() < until && connections.len() < 10_000 {
        if let Some(after) = just_in_time {
            for (opened, finished, body, _) in &mut open {
                if !*finished && opened.elapsed() >= after {
                    *finished = true;
                    let _ = body.send_data(Bytes::from_static(b"}"), true);
                }
            }
        }
        let ready = match client.take() {
            Some(taken) => tokio::time::timeout(every, taken.ready()).await.ok(),
            None => None,
        };
        let Some(Ok(mut ready)) = ready else {
            let connected = async {
                let tcp = TcpStream::connect(addr).await.ok()?;
                let name = ServerName::try_from(SERVICE_NAME).ok()?;
                let io = tls.connect(name, tcp).await.ok()?;
                h2::client::handshake(io).await.ok()
            };
            let left = until.saturating_duration_since(Instant::now());
            if let Ok(Some((new, connection))) = tokio::time::timeout(left, connected).await {
                connections.push(tokio::spawn(connection));
                client = Some(new);
            } else {
                tokio::time::sleep(every.min(left)).await;
            }
            continue;
        };
        let length = if just_in_time.is_some() { 2 } else { 1024 };
        let request = http::Request::post(format!("https://{SERVICE_NAME}/validate"))
            .header("content-type", "application/json")
            .header("content-length", length)
            .body(())
            .expect("a request");
        if let Ok((answer, mut body)) = ready.send_request(request, false)
            && body.send_data(Bytes::from_static(b"{"), false).is_ok()
        {
            open.push((Instant::now(), false, body, answer));
            client = Some(ready);
        }
        if open.len() > 256 {
            open.drain(..128);
        }
        tokio::time::sleep(every).await;
    }
    for connection in &connections {
        connection.abort();
    }
    (connections.len(), 0)
}

/// One client that never reads its answers, until `until`: on one HTTP/2
/// connection with its receive windows at 0, up to `answers` streams each
/// sending `review` whole, and one stream without a body every 4 s.
/// Returns the connections opened (0 or 1) and the streams the server
/// answered (their headers came; their bodies never leave the server).
async fn unreading_client(
    addr: SocketAddr,
    tls: TlsConnector,
    review: Bytes,
    answers: usize,
    until: Instant,
) -> (usize, usize) {
    let connected = async {
        let tcp = TcpStream::connect(addr).await.ok()?;
        let name = ServerName::try_from(SERVICE_NAME).ok()?;
        let io = tls.connect(name, tcp).await.ok()?;
        h2::client::Builder::new()
            .initial_window_size(0)
            .handshake::<_, Bytes>(io)
            .await
            .ok()
    };
    let left = until.saturating_duration_since(Instant::now());
    let Ok(Some((mut client, connection))) = tokio::time::timeout(left, connected).await else {
        return (0, 0);
    };
    let connection = tokio::spawn(connection);
    let post = || {
        http::Request::post(format!("https://{SERVICE_NAME}/validate"))
            .header("content-type", "application/json")
            .body(())
            .expect("a request")
    };
    let (mut held, mut kept) = (Vec::new(), Vec::new());
    let mut kept_at = Instant::now();
    while Instant::now() < until {
        let wait = Duration::from_millis(200);
        let Ok(Ok(mut ready)) = tokio::time::timeout(wait, client.clone().ready()).await else {
            tokio::time::sleep(wait).await;
            continue;
        };
        if kept_at.elapsed() >= Duration::from_secs(4) {
            kept_at = Instant::now();
            if let Ok(stream) = ready.send_request(post(), false) {
                kept.push(stream);
            }
        } else if held.len() < answers {
            if let Ok((answer, mut body)) = ready.send_request(post(), false) {
                let _ = body.send_data(review.clone(), true);
                held.push(answer);
            }
        } else {
            tokio::time::sleep(wait).await;
        }
        client = ready;
    }
    let mut answered = 0;
    for answer in held {
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(1), answer).await {
            answered += 1;
        }
    }
    connection.abort();
    (1, answered)
}

/// The peak resident memory of process `pid`, in KiB.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Answered (200) and sent, of one probe, and the longest an answer took.
#[derive(Default, Clone, Copy)]
struct Count {
    answered: usize,
    sent: usize,
    slowest: Duration,
}

impl Count {
    fn add(&mut self, (answered, took): (bool, Duration)) {
        self.sent += 1;
        if answered {
            self.answered += 1;
            self.slowest = self.slowest.max(took);
        }
    }
}

/// Whether a probe was answered 200, and how long it took.
async fn timed(sent: impl Future<Output = reqwest::Result<reqwest::Response>>) -> (bool, Duration) {
    let started = Instant::now();
    let answered = sent.await.is_ok_and(|r| r.status() == 200);
    (answered, started.elapsed())
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    // For the plain-HTTP client too, which takes the process's provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = std::fs::read(&args.ca).expect("the CA file");
    let review = std::fs::read(&args.review).expect("the review file");
    let every = Duration::from_millis(args.every.max(1));
    let started = Instant::now();
    let until = started + Duration::from_secs(args.seconds.min(600));
    let h2 = TlsConnector::from(Arc::new(tls(&ca, b"h2")));
    let clients: Vec<_> = (0..args.clients.min(10_000))
        .map(|_| match args.unread_answers {
            Some(answers) => tokio::spawn(unreading_client(
                args.addr,
                h2.clone(),
                Bytes::from(review.clone()),
                answers,
                until,
            )),
            None => tokio::spawn(slow_client(
                args.addr,
                h2.clone(),
                every,
                args.just_in_time.map(Duration::from_millis),
                until,
            )),
        })
        .collect();
    // Each probe on a new connection, as after its client's were taken.
    let https = reqwest::Client::builder()
        .tls_backend_preconfigured(tls(&ca, b"http/1.1"))
        .resolve(SERVICE_NAME, args.addr)
        .pool_max_idle_per_host(0)
        .build()
        .expect("an HTTPS client");
    let plain = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("an HTTP client");
    let probe = Duration::from_secs(2);
    tokio::time::sleep(Duration::from_millis(args.warmup)).await;
    let (mut webhook, mut reviews, mut admin) =
        (Count::default(), Count::default(), Count::default());
    while Instant::now() + Duration::from_secs(10) <= until {
        let next = Instant::now() + Duration::from_millis(args.probe_every);
        let healthz = https
            .get(format!(
                "https://{SERVICE_NAME}:{}/healthz",
                args.addr.port()
            ))
            .timeout(probe)
            .send();
        let reviewed = https
            .post(format!(
                "https://{SERVICE_NAME}:{}/validate",
                args.addr.port()
            ))
            .header("content-type", "application/json")
            .body(review.clone())
            .timeout(Duration::from_secs(10))
            .send();
        let probed = plain
            .get(format!("http://{}/healthz", args.admin))
            .timeout(probe)
            .send();
        let (healthz, reviewed, probed) =
            tokio::join!(timed(healthz), timed(reviewed), timed(probed));
        webhook.add(healthz);
        reviews.add(reviewed);
        admin.add(probed);
        tokio::time::sleep(next.saturating_duration_since(Instant::now())).await;
    }
    let (mut connections, mut unread) = (0, 0);
    for client in clients {
        let (opened, answered) = client.await.unwrap_or((0, 0));
        connections += opened;
        unread += answered;
    }
    // A high-water mark: what the clients made the server hold at most.
    let peak = args.pid.and_then(peak_kib);
    let count = |c: Count| json!({"answered": c.answered, "sent": c.sent, "slowest_ms": c.slowest.as_millis()});
    println!(
        "{}",
        json!({
            "slow_clients": args.clients,
            "their_connections": connections,
            "unread_answers_held": args.unread_answers.map(|_| unread),
            "server_peak_rss_kib": peak,
            "seconds": started.elapsed().as_secs(),
            "webhook_healthz": count(webhook),
            "review": count(reviews),
            "admin_healthz": count(admin),
        })
    );
}
