//! Answers given before the request body is read reach the client intact,
//! over HTTP/2 as over HTTP/1.1: a 404, 405, 413 or 400 must not turn into a
//! stream reset because the client was still sending its body.

mod common;

use std::time::Duration;

use common::start_with;

/// Requests of each kind, sent this many times.
const ROUNDS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_answers_reach_http2_clients_intact() {
    let server = start_with(None, |config, _| {
        config.limits.max_body_bytes = 4096;
    })
    .await;
    let h2 = reqwest::Client::builder()
        .tls_backend_preconfigured(common::tls_config(&server.ca_pem, &[b"h2"]))
        .resolve(common::SERVICE_NAME, server.handle.addr)
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let small = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec();
    let cases: [(&str, reqwest::Method, &str, Vec<u8>, u16); 5] = [
        (
            "unknown path",
            reqwest::Method::POST,
            "/nope",
            small.clone(),
            404,
        ),
        (
            "wrong method",
            reqwest::Method::GET,
            "/validate",
            small.clone(),
            405,
        ),
        (
            "wrong method, probe",
            reqwest::Method::POST,
            "/healthz",
            small,
            405,
        ),
        (
            "too large",
            reqwest::Method::POST,
            "/validate",
            vec![b'x'; 64 * 1024],
            413,
        ),
        (
            "not JSON",
            reqwest::Method::POST,
            "/validate",
            b"not json".to_vec(),
            400,
        ),
    ];
    for (what, method, path, body, want) in cases {
        let mut got = Vec::new();
        for _ in 0..ROUNDS {
            let sent = h2
                .request(method.clone(), format!("{}{path}", server.url))
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await;
            match sent {
                Ok(response) => {
                    assert_eq!(response.version(), reqwest::Version::HTTP_2);
                    let status = response.status().as_u16();
                    // The answer's body arrives whole too.
                    let text = response.text().await.map_err(|e| format!("body: {e:?}"));
                    got.push(text.map(|_| status));
                }
                Err(e) => got.push(Err(format!("{e:?}"))),
            }
        }
        let wrong: Vec<_> = got.iter().filter(|g| **g != Ok(want)).collect();
        assert!(
            wrong.is_empty(),
            "{what}: {} of {ROUNDS} requests did not get {want}; first: {:?}",
            wrong.len(),
            wrong.first()
        );
    }
    // The server still serves reviews on the same connection.
    let review = serde_json::to_vec(&common::strip("alice", serde_json::Value::Null)).unwrap();
    let response = h2
        .post(format!("{}/validate", server.url))
        .body(review)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    server.handle.shutdown().await;
}

/// The same answers over a bare HTTP/2 client, which sees what reqwest
/// forgives: the client sends its headers, waits for the answer, then sends
/// its body. The stream must end as a finished exchange, never reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_answers_end_their_http2_streams_without_a_reset() {
    let server = start_with(None, |config, _| {
        config.limits.max_body_bytes = 4096;
    })
    .await;
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(common::tls_config(
        &server.ca_pem,
        &[b"h2"],
    )));
    let tcp = tokio::net::TcpStream::connect(server.handle.addr)
        .await
        .unwrap();
    let name = rustls_pki_types::ServerName::try_from(common::SERVICE_NAME).unwrap();
    let io = tls.connect(name, tcp).await.unwrap();
    let (mut client, mut connection) = h2::client::handshake(io).await.unwrap();
    let mut ping = connection.ping_pong().unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let cases: [(&str, http::Method, &str, usize, u16); 3] = [
        ("unknown path", http::Method::POST, "/nope", 64, 404),
        ("wrong method", http::Method::GET, "/validate", 64, 405),
        // Twice the limit: refused from its Content-Length, then read and dropped.
        ("too large", http::Method::POST, "/validate", 8 * 1024, 413),
    ];
    for (what, method, path, size, want) in cases {
        for round in 0..ROUNDS {
            let request = http::Request::builder()
                .method(method.clone())
                .uri(format!("https://{}{path}", common::SERVICE_NAME))
                .header("content-length", size)
                .body(())
                .unwrap();
            client = client.ready().await.unwrap();
            let (response, mut body) = client.send_request(request, false).unwrap();
            let response = response.await.unwrap();
            assert_eq!(response.status().as_u16(), want, "{what}, round {round}");
            // Once the server's pong is back, any reset it sent is here too.
            ping.ping(h2::Ping::opaque()).await.unwrap();
            let reset = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(match body.poll_reset(cx) {
                    std::task::Poll::Ready(reason) => Some(reason),
                    std::task::Poll::Pending => None,
                })
            })
            .await;
            assert!(
                reset.is_none(),
                "{what}, round {round}: the stream was reset ({reset:?})"
            );
            // The body may now be sent whole: the server reads and drops it.
            let mut left = size;
            while left > 0 {
                let chunk = left.min(16 * 1024);
                body.reserve_capacity(chunk);
                let granted = std::future::poll_fn(|cx| body.poll_capacity(cx))
                    .await
                    .unwrap_or_else(|| panic!("{what}, round {round}: the stream was closed"))
                    .unwrap_or_else(|e| panic!("{what}, round {round}: {e}"));
                body.send_data(bytes::Bytes::from(vec![b'x'; granted]), false)
                    .unwrap_or_else(|e| panic!("{what}, round {round}: {e}"));
                left -= granted;
            }
            body.send_data(bytes::Bytes::new(), true)
                .unwrap_or_else(|e| panic!("{what}, round {round}: {e}"));
            let mut answer = response.into_body();
            while let Some(chunk) = answer.data().await {
                let chunk = chunk.unwrap_or_else(|e| panic!("{what}, round {round}: {e}"));
                let _ = answer.flow_control().release_capacity(chunk.len());
            }
        }
    }
    server.handle.shutdown().await;
}
