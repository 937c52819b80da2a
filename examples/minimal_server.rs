//! The floor of the stack, for scripts/load.sh: an axum + rustls server that
//! reads the whole request body and answers a fixed AdmissionReview. Same
//! runtime (tokio multi-thread), TLS (rustls over *ring*, TLS 1.2 and 1.3,
//! ALPN h2 and http/1.1), HTTP (hyper-util auto builder) and router (axum)
//! as `finalizer-guard serve`; no decision, no limits, no logs, no metrics.
//!
//! ```sh
//! cargo run --release --example minimal_server -- 127.0.0.1:8443 tls.crt tls.key [ANSWER.json]
//! ```
//!
//! ANSWER.json, when given, is the body of every answer (scripts/load.sh
//! passes what finalizer-guard answered, so both put the same bytes on the
//! wire); otherwise a short "allowed" review. `echo-uid` instead of a file
//! answers each review "allowed" with its own `request.uid`, which is all
//! kube-apiserver asks of a webhook: the floor scripts/cluster-cost.sh puts
//! beside finalizer-guard.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// What every request gets without ANSWER.json: a v1 response allowing it.
const ALLOWED: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","allowed":true}}"#;

/// What every request is answered with.
#[derive(Clone)]
enum Answer {
    Fixed(Bytes),
    /// "Allowed", with the request's uid.
    EchoUid,
}

/// The one field of a review the floor reads; serde skips the rest unparsed.
#[derive(serde::Deserialize)]
struct Review {
    request: UidOnly,
}

#[derive(serde::Deserialize)]
struct UidOnly {
    uid: String,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, cert, key, answer) = match args.as_slice() {
        [addr, cert, key] => (
            addr,
            cert,
            key,
            Answer::Fixed(Bytes::from_static(ALLOWED.as_bytes())),
        ),
        [addr, cert, key, echo] if echo == "echo-uid" => (addr, cert, key, Answer::EchoUid),
        [addr, cert, key, answer] => (
            addr,
            cert,
            key,
            Answer::Fixed(Bytes::from(
                std::fs::read(answer).expect("ANSWER.json readable"),
            )),
        ),
        _ => {
            eprintln!("usage: minimal_server ADDR TLS_CERT TLS_KEY [ANSWER.json | echo-uid]");
            std::process::exit(2);
        }
    };
    let addr: SocketAddr = addr.parse().expect("ADDR is host:port");
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .expect("TLS_CERT readable")
        .collect::<Result<_, _>>()
        .expect("TLS_CERT is PEM");
    let key = PrivateKeyDer::from_pem_file(key).expect("TLS_KEY is a PEM key");
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("certificate and key match");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));

    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(serve(addr, acceptor, answer));
}

async fn serve(addr: SocketAddr, acceptor: TlsAcceptor, answer: Answer) {
    let listener = TcpListener::bind(addr).await.expect("bind");
    let router = Router::new()
        .route("/validate", post(validate))
        .with_state(answer);
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, router, builder) = (acceptor.clone(), router.clone(), builder.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = TowerToHyperService::new(router);
            let _ = builder
                .serve_connection_with_upgrades(TokioIo::new(tls), service)
                .await;
        });
    }
}

async fn validate(State(answer): State<Answer>, request: Request) -> Response {
    // Read the whole body, as any webhook must, then answer without looking
    // (or looking only for the uid).
    let body = request.into_body().collect().await.map(|c| c.to_bytes());
    let answer = match (answer, body) {
        (_, Err(_)) => Bytes::new(),
        (Answer::Fixed(answer), Ok(_)) => answer,
        (Answer::EchoUid, Ok(body)) => match serde_json::from_slice::<Review>(&body) {
            Ok(review) => Bytes::from(
                serde_json::json!({
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": {"uid": review.request.uid, "allowed": true},
                })
                .to_string(),
            ),
            Err(_) => Bytes::new(),
        },
    };
    let mut response = Response::new(Body::from(answer));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
